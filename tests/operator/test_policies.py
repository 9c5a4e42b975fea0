"""The operator against kmock: restart policies, chief restarts, progress and metrics.

One operator serves all these tests (see ``shared_cluster``); each has its own namespace.
"""

from __future__ import annotations

import asyncio
import collections
import re
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web
from kmockharness import Cluster, job_manifest
from syncreplicas_operator.core import naming

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]


def created(cluster: Cluster, namespace: str, kind: str = "pods") -> collections.Counter[str]:
    """Successful creations per name."""
    return collections.Counter(
        str((req.data or {}).get("metadata", {}).get("name"))
        for req in cluster.writes(f"/namespaces/{namespace}/{kind}", "POST")
        if req.status and 200 <= req.status[0] < 300
    )


def deletions(cluster: Cluster, namespace: str) -> list[str]:
    return [
        req.path.rsplit("/", 1)[-1]
        for req in cluster.writes(f"/namespaces/{namespace}/pods/", "DELETE")
    ]


async def metric(cluster: Cluster, name: str) -> float:
    text = await cluster.operators[0].metrics_text()
    match = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


async def started(cluster: Cluster, namespace: str, name: str, pods: int, **spec: object) -> None:
    await cluster.create_job(job_manifest(name, namespace, **spec))
    await cluster.wait_for(lambda: len(cluster.pod_names(namespace, name)) == pods, what="pods")
    await cluster.run_pods(namespace, name, pod_ip="127.0.0.1")
    await cluster.wait_for(
        lambda: cluster.status(namespace, name).get("ready") == f"{pods}/{pods}", what="ready"
    )


async def test_retryable_exit_recreates_the_replica(shared_cluster: Cluster) -> None:
    c, ns = shared_cluster, "exitcode-retry"
    await started(c, ns, "rj", 4, runPolicy={"restartPolicy": "ExitCode"})
    await c.set_pod(ns, "rj-worker-1", "Failed", exit_code=75)
    await c.wait_for(lambda: created(c, ns)["rj-worker-1"] == 2, what="worker re-created")
    assert deletions(c, ns) == ["rj-worker-1"]
    await c.wait_for(
        lambda: c.status(ns, "rj").get("replicaStatuses", {}).get("worker", {}).get("restarts") == 1
    )
    assert naming.REASON_REPLICA_RESTARTED in c.event_reasons(ns)
    assert c.status(ns, "rj")["phase"] != naming.PHASE_FAILED


async def test_non_retryable_exit_fails_the_job(shared_cluster: Cluster) -> None:
    c, ns = shared_cluster, "exitcode-fatal"
    await started(c, ns, "fj", 4, runPolicy={"restartPolicy": "ExitCode"})
    await c.set_pod(ns, "fj-worker-0", "Failed", exit_code=64)
    await c.wait_for(lambda: c.status(ns, "fj").get("phase") == naming.PHASE_FAILED)
    failed = c.condition(ns, "fj", naming.CONDITION_FAILED)
    assert failed is not None and failed["reason"] == naming.REASON_NON_RETRYABLE_EXIT
    assert "CONFIG (64)" in failed["message"]
    # cleanPodPolicy Running: the PS does not outlive the job.
    await c.wait_for(lambda: "fj-ps-0" not in c.pod_names(ns, "fj"), what="PS deleted")
    assert max(created(c, ns).values()) == 1


async def test_chief_restart_resets_sync_state(shared_cluster: Cluster) -> None:
    c, ns = shared_cluster, "chief-reset"
    before = await metric(c, "syncreplicas_operator_chief_cleanups_total")
    await started(c, ns, "cr", 4)
    await c.set_pod(ns, "cr-chief-0", "Running", restart_count=1, last_exit_code=137)
    await c.wait_for(lambda: c.status(ns, "cr").get("chiefRestarts") == 1, what="chiefRestarts")
    cleanup = c.status(ns, "cr")["lastCleanup"]
    assert cleanup["policy"] == "ResetSyncState" and "137" in cleanup["reason"]
    reasons = c.event_reasons(ns)
    assert naming.REASON_CHIEF_RESTARTED in reasons and naming.REASON_CHIEF_CLEANUP in reasons
    assert await metric(c, "syncreplicas_operator_chief_cleanups_total") == before + 1
    assert deletions(c, ns) == []  # the runtime cleans up; no pod is touched


async def test_chief_restart_restarts_the_job_ps_first(shared_cluster: Cluster) -> None:
    c, ns = shared_cluster, "chief-restart-job"
    before = await metric(c, "syncreplicas_operator_job_restarts_total")
    await started(c, ns, "rs", 4, chiefRestartPolicy="RestartJob")
    await c.set_pod(ns, "rs-chief-0", "Running", restart_count=1, last_exit_code=1)
    await c.wait_for(lambda: created(c, ns)["rs-ps-0"] == 2, what="PS re-created")
    assert sorted(deletions(c, ns)) == ["rs-ps-0", "rs-worker-0", "rs-worker-1"]
    assert deletions(c, ns)[-1] == "rs-ps-0"  # workers go first
    assert created(c, ns)["rs-worker-0"] == 1  # workers wait for the new PS to run
    await c.set_pod(ns, "rs-ps-0", "Running")
    await c.wait_for(
        lambda: created(c, ns)["rs-worker-0"] == 2 and created(c, ns)["rs-worker-1"] == 2,
        what="workers re-created",
    )
    assert created(c, ns)["rs-chief-0"] == 1
    assert await metric(c, "syncreplicas_operator_job_restarts_total") == before + 1
    assert naming.REASON_JOB_RESTART in c.event_reasons(ns)


@pytest_asyncio.fixture(loop_scope="session")
async def chief_metrics() -> AsyncIterator[tuple[int, list[int]]]:
    """A chief's /metrics on 127.0.0.1 (the runtime's format); the test sets the step."""
    step = [42]

    async def serve(_: web.Request) -> web.Response:
        body = (
            "# HELP syncreplicas_global_step Global step.\n"
            "# TYPE syncreplicas_global_step gauge\n"
            f"syncreplicas_global_step {step[0]}.0\n"
        )
        return web.Response(text=body, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield port, step
    finally:
        await runner.cleanup()


async def test_global_step_and_stall(
    shared_cluster: Cluster, chief_metrics: tuple[int, list[int]]
) -> None:
    c, ns = shared_cluster, "progress"
    port, step = chief_metrics
    await started(c, ns, "gs", 4, metrics={"port": port}, stallTimeoutSeconds=2)
    await c.wait_for(lambda: c.status(ns, "gs").get("globalStep") == 42, what="globalStep")
    await c.wait_for(
        lambda: (c.condition(ns, "gs", naming.CONDITION_STALLED) or {}).get("status") == "True",
        what="Stalled",
    )
    assert "global step 42" in c.condition(ns, "gs", naming.CONDITION_STALLED)["message"]
    step[0] = 43
    await c.wait_for(
        lambda: (c.condition(ns, "gs", naming.CONDITION_STALLED) or {}).get("status") == "False",
        what="not Stalled",
    )
    assert c.status(ns, "gs")["globalStep"] == 43


async def test_operator_metrics_use_the_design_names(shared_cluster: Cluster) -> None:
    text = await shared_cluster.operators[0].metrics_text()
    for name in (
        'syncreplicas_operator_jobs{phase="Running"}',
        "syncreplicas_operator_reconcile_seconds_bucket",
        "syncreplicas_operator_pods_created_total",
        "syncreplicas_operator_chief_cleanups_total",
        "syncreplicas_operator_job_restarts_total",
    ):
        assert name in text, name
    assert await metric(shared_cluster, "syncreplicas_operator_pods_created_total") > 0


async def test_a_refused_write_is_reported_and_retried(shared_cluster: Cluster) -> None:
    c, ns = shared_cluster, "refused"
    # The API refuses pod creation in this namespace (think quota or an admission webhook).
    # kmock keeps the objects it refuses, so the retry finds them there.
    c.server[f"post /api/v1/namespaces/{ns}/pods"] << 403
    await c.create_job(job_manifest("wf", ns))
    failed = naming.REASON_FAILED_CREATE
    await c.wait_for(lambda: failed in c.event_reasons(ns), what="FailedCreate event")
    event = next(e for e in c.objects("v1/events", ns) if e["reason"] == failed)
    assert event["type"] == "Warning" and "403" in event["message"]
    assert event["message"].startswith("create Pod wf-"), event["message"]  # which pod
    # The daemon survived and plans again from what the API shows.
    await c.wait_for(lambda: c.status(ns, "wf").get("phase") == naming.PHASE_CREATED)
    # Said once per refusal, not once per retry. (A pass that plans before the watch shows
    # every refused pod that kmock kept tries one again: its refusal, of another pod, is
    # news, and said too.)
    said = [e["message"] for e in c.objects("v1/events", ns) if e["reason"] == failed]
    assert len(said) == len(set(said)), said
    # The refusal was in the status too (a condition is never added just to say False),
    # and is resolved now that every replica has its pod.
    refusal = c.condition(ns, "wf", naming.CONDITION_REPLICA_FAILURE)
    assert refusal is not None and refusal["status"] == "False", refusal
    assert refusal["reason"] == naming.REASON_PODS_CREATED


@pytest.mark.parametrize("metrics_port", [9090, 0])
async def test_a_job_whose_chief_never_runs_is_not_planned_over_and_over(
    cluster: Cluster, metrics_port: int
) -> None:
    """Pods that stay Pending (unschedulable, an image still pulling), or metrics off: the
    job is planned when something changes or a periodic pass is due, not in a loop."""
    c, ns = cluster, "pending"
    op = await c.start_operator()
    await c.create_job(job_manifest("idle", ns, metrics={"port": metrics_port}))
    await c.wait_for(lambda: len(c.pod_names(ns, "idle")) == 4, what="pods created")

    async def passes() -> float:
        text = await op.metrics_text()
        found = re.search(r"^syncreplicas_operator_reconcile_seconds_count (\S+)$", text, re.M)
        return float(found[1]) if found else 0.0

    await asyncio.sleep(2)  # the creation's passes (the watch shows each new pod)
    before = await passes()
    await asyncio.sleep(4)
    assert await passes() - before <= 2, "the job was planned again and again"
