"""kopf wiring: every decorator of the operator, each a few lines that hand off.

The only module that imports kopf (an import contract says so). Three indexes keep the
children of every job in memory (pods, Services, NetworkPolicies), so planning needs no
list call; kopf fills them before handlers run. One daemon per SyncReplicasJob runs
``daemon.run_job``.
"""

from __future__ import annotations

import argparse
import os
import signal
from typing import Any

import kopf

from ..core import kueue, naming
from ..core.kueue import ObservedWorkload, observe_workload
from ..core.spares import ObservedSpare, observe_spare
from ..core.status import ObservedPod, job_name_of, observe_pod
from . import daemon, election, lateapi
from . import settings as operator_settings

JOBS = (naming.GROUP, naming.VERSION, naming.PLURAL)
CHILD_LABELS = {naming.LABEL_JOB_NAME: kopf.PRESENT}

# `syncreplicas operator` (cli's lazily loaded subcommand): add_arguments(parser), main(args).
add_arguments = operator_settings.add_arguments


def main(args: argparse.Namespace) -> int:
    """Run the operator until interrupted."""
    operator_settings.configure(args)
    if operator_settings.SETTINGS.kueue:
        watch_workloads()
    metrics = daemon.metrics()  # register the metric families before the first scrape
    operator_settings.serve_metrics(args)
    elector = None
    if args.leader_elect == "on":
        # The gauge goes to 1 once kopf runs (startup below), to 0 as soon as leading ends.
        elector = election.elector(args, lambda leads: leads or metrics.leader.set(0))
        health = election.FollowerHealth(args.liveness_port) if args.liveness_port \
            else None  # fmt: skip
        # A follower stops at SIGTERM (a rolling update, a drain). As a container's PID 1
        # its default action is ignored: it would go on waiting, take the Lease when the
        # leader goes and act on the old settings until its grace period's SIGKILL.
        stop = elector.stop
        previous = signal.signal(signal.SIGTERM, lambda *_: stop())
        try:
            if not elector.acquire():
                return 0
        finally:
            signal.signal(signal.SIGTERM, previous)
            if health is not None:
                health.close()
    namespaces = list(args.namespace)
    if operator_settings.SETTINGS.kueue:
        # Kueue installed after this start would stay unwatched (lateapi.py says why). The
        # stop is a SIGTERM to this process: kopf's own graceful stop. (A stop_flag would
        # leave kopf's loop waiting at its end on a thread blocked on the flag.)
        lateapi.stop_when_served(daemon.api(), kueue.API_VERSION, kueue.WORKLOAD_PLURAL,
                                 lambda: os.kill(os.getpid(), signal.SIGTERM))  # fmt: skip
    try:
        kopf.run(
            standalone=True,
            clusterwide=not namespaces,
            namespaces=namespaces,
            liveness_endpoint=operator_settings.liveness_endpoint(args),
        )
    finally:
        if elector is not None:
            elector.release()  # kopf has stopped: a follower may act at once
    return 0


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # The resources are known at start; watching namespaces and CRDs needs more RBAC. With
    # --kueue on, CRDs are watched: Kueue installed after the operator (its Workloads' CRD
    # created later) is noticed and its Workloads watched from then on.
    settings.scanning.disabled = not operator_settings.SETTINGS.kueue
    # Our own Events say what happened; kopf's per-handler log Events would double them.
    settings.posting.enabled = False
    settings.persistence.finalizer = f"{naming.GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=naming.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=naming.GROUP)
    settings.watching.server_timeout = 300


@kopf.on.startup()
async def watch_nodes(**_: Any) -> None:
    daemon.start_node_watch()


# syncreplicas_operator_leader: 1 while this replica's handlers may run (from kopf's start to
# its stop), so that the gauge says which replica acts, not only which holds the Lease.
@kopf.on.startup()
def acting(**_: Any) -> None:
    daemon.metrics().leader.set(1)


@kopf.on.cleanup()
def stopping(**_: Any) -> None:
    daemon.metrics().leader.set(0)


# Indexers run on every watch event of a child (but its deletion: kopf drops the object
# from its indexes then) and only index; the event handlers below wake the owning job's
# loop. kopf calls a resource's indexers, stores what they return, and only then calls its
# event handlers: a loop woken for an event plans from indexes that hold it (a wake from an
# indexer could beat the store, and a pass planned from the old state would not be woken
# again). Every handler here is a coroutine: kopf runs it in its event loop, where the
# loops' wake-ups live (kopf runs other functions in threads, where setting an asyncio
# Event is not safe).


@kopf.index("v1", "pods", labels=CHILD_LABELS)
async def pods_by_job(namespace: str, body: kopf.Body, **_: Any) -> dict[Any, ObservedPod] | None:
    pod = observe_pod(body)
    return {(namespace, job_name_of(body)): pod} if pod is not None else None


# Spares by the label they lose when they take a replica over: kopf keeps an object's last
# value while its indexer returns None, and drops it once the filter stops matching.
@kopf.index("v1", "pods", labels={**CHILD_LABELS, naming.LABEL_SPARE: "true"})
async def spares_by_job(
    namespace: str, body: kopf.Body, **_: Any
) -> dict[Any, ObservedSpare] | None:
    spare = observe_spare(body)
    return {(namespace, job_name_of(body)): spare} if spare is not None else None


@kopf.index("v1", "services", labels=CHILD_LABELS)
async def services_by_job(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Any, str]:
    return {(namespace, job_name_of(body)): name}


@kopf.index("networking.k8s.io", "v1", "networkpolicies", labels=CHILD_LABELS)
async def policies_by_job(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Any, str]:
    return {(namespace, job_name_of(body)): name}


@kopf.on.event("v1", "pods", labels=CHILD_LABELS)
async def pod_changed(namespace: str, body: kopf.Body, **_: Any) -> None:
    daemon.wake(namespace, job_name_of(body), "pods")


@kopf.on.event("v1", "services", labels=CHILD_LABELS)
async def service_changed(namespace: str, body: kopf.Body, **_: Any) -> None:
    daemon.wake(namespace, job_name_of(body), "services")


# A policy deleted under a running job is created again at once: its pods' gRPC port must
# not stay open.
@kopf.on.event("networking.k8s.io", "v1", "networkpolicies", labels=CHILD_LABELS)
async def policy_changed(namespace: str, body: kopf.Body, **_: Any) -> None:
    daemon.wake(namespace, job_name_of(body), "networkpolicies")


def watch_workloads() -> None:
    """Index Kueue's Workloads of the jobs (--kueue on only: without it the operator neither
    needs Kueue's API nor the RBAC to watch it)."""

    async def workloads_by_job(
        namespace: str, body: kopf.Body, **_: Any
    ) -> dict[Any, ObservedWorkload]:
        return {(namespace, job_name_of(body)): observe_workload(body)}

    async def workload_changed(namespace: str, body: kopf.Body, **_: Any) -> None:
        daemon.wake(namespace, job_name_of(body), kueue.WORKLOAD_PLURAL)

    kopf.index(kueue.GROUP, kueue.VERSION, kueue.WORKLOAD_PLURAL, labels=CHILD_LABELS,
               id="workloads_by_job")(workloads_by_job)  # fmt: skip
    kopf.on.event(kueue.GROUP, kueue.VERSION, kueue.WORKLOAD_PLURAL, labels=CHILD_LABELS,
                  id="workload_changed")(workload_changed)  # fmt: skip


@kopf.on.event(*JOBS)
async def job_changed(namespace: str, name: str, **_: Any) -> None:
    daemon.wake(namespace, name, naming.PLURAL)


@kopf.daemon(*JOBS, cancellation_timeout=10.0, backoff=5.0)
async def run_job(
    stopped: kopf.DaemonStopped,
    body: kopf.Body,
    name: str,
    namespace: str,
    pods_by_job: kopf.Index[Any, ObservedPod],
    services_by_job: kopf.Index[Any, str],
    policies_by_job: kopf.Index[Any, str],
    spares_by_job: kopf.Index[Any, ObservedSpare],
    **kwargs: Any,
) -> None:
    indexes = daemon.ChildIndexes(pods_by_job, services_by_job, policies_by_job, spares_by_job,
                                  kwargs.get("workloads_by_job", {}))  # fmt: skip
    try:
        await daemon.run_job(stopped, body, namespace, name, indexes)
    except daemon.InvalidJob as exc:
        raise kopf.PermanentError(str(exc)) from exc
