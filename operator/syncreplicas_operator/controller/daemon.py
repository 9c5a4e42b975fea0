"""One loop per SyncReplicasJob: wait for a change, plan, apply, and again.

Pod and job events wake the loop (``wake``), deadlines wake it (the plan says when),
nothing polls the API. Children come from kopf's in-memory indexes; each loop lists its
job's pods and Services once when it starts (a child's first watch event can still be in
flight then), and its PodDisruptionBudget (not watched) whenever it does not know it
(``listing``), so an operator restart never re-creates a child. Writes go through
``resources.k8s`` in a worker thread. The status this loop last wrote is its base for the
next pass (its own write's watch event may lag). A write the API refuses becomes one
Warning Event and a retry, not a crash. An update of the job that the CRD's rules would
refuse is not applied (one Warning Event); the loop goes on with the job it accepted.

No kopf here: ``handlers`` passes kopf's objects in and turns :class:`InvalidJob` into
kopf's PermanentError.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from ..core import managed, naming
from ..core.actions import WARNING, CreateChild, DeletePodGroup, PatchStatus
from ..core.kueue import ObservedWorkload, waiting_in
from ..core.plan.pipeline import plan_job
from ..core.plan.result import counts_only
from ..core.recovery import SeenPod
from ..core.spares import ObservedSpare
from ..core.spec import Job, Problem, SpecError, immutable_changes, parse_job
from ..core.status import ObservedPod, phase_of, set_condition
from ..core.straggler import Scrape, drop_fractions
from ..core.timefmt import format_time
from ..resources import k8s
from ..resources.metrics import OperatorMetrics
from ..resources.nodewatch import NodeWatch
from . import elsewhere, listing, queueing, replicametrics
from .apply import apply_plan
from .expectations import Expectations
from .invalid import plan_invalid_job, refused_update_message
from .replicametrics import ReplicaReads
from .settings import SETTINGS

log = logging.getLogger("syncreplicas.operator")

# Coalesce a burst of events (a thousand pods starting) into one planning pass.
DEBOUNCE_SECONDS: Final = 0.05
# Plan at least this often even when nothing happens (a safety net, no API calls).
IDLE_SECONDS: Final = 60.0
# After a write the API refused (quota, admission, invalid template): plan again this late.
WRITE_RETRY_SECONDS: Final = 10.0
STATUS_BATCH_SECONDS: Final = 5.0
# While the watch has not confirmed what was just created or deleted: check again this soon.
EXPECTATION_RECHECK_SECONDS: Final = 1.0
# The straggler window: drop fractions over this many replica scrapes (the oldest to now).
GRADIENT_WINDOW_SCRAPES: Final = 5

JobKey = tuple[str, str]  # (namespace, name)


class InvalidJob(Exception):
    """The job's spec does not parse; it has been marked Failed and is not retried."""


class StopFlag(Protocol):
    """kopf's DaemonStopped: true once the daemon must stop."""

    def __bool__(self) -> bool: ...

    async def wait(self) -> Any: ...


@dataclass(frozen=True)
class ChildIndexes:
    """kopf's indexes of every job's children, keyed by (namespace, job)."""

    pods: Mapping[Any, Iterable[ObservedPod]]
    services: Mapping[Any, Iterable[str]]
    policies: Mapping[Any, Iterable[str]]
    spares: Mapping[Any, Iterable[ObservedSpare]] = field(default_factory=dict)
    # Kueue's Workloads of the jobs (only with --kueue on).
    workloads: Mapping[Any, Iterable[ObservedWorkload]] = field(default_factory=dict)


@dataclass
class JobState:
    """In-memory state of one job's loop; nothing here is needed after a restart."""

    wake: asyncio.Event = field(default_factory=asyncio.Event)
    expectations: Expectations = field(default_factory=Expectations)
    next_step_read: float = 0.0  # monotonic time the chief's metrics are next due
    # Recovery and stragglers: when the replicas' gradient counters are next due, the
    # last scrapes of them (the straggler window) and the pods as the last pass left them.
    next_gradients_read: float = 0.0
    # The replicas' reads under way: in the background, so that replicas that do not answer
    # (a partitioned node's: each read waits out its timeout) never hold a pass up.
    replica_reads: asyncio.Task[ReplicaReads] | None = None
    gradient_window: collections.deque[Scrape] = field(
        default_factory=lambda: collections.deque(maxlen=GRADIENT_WINDOW_SCRAPES)
    )
    seen_pods: Mapping[str, SeenPod] | None = None
    # The first pass after (re)start lists the children once: kopf may start the daemon
    # before every child's watch event has reached the indexes.
    listed: bool = False
    # The status as this loop last wrote it. Only the operator writes status, and the
    # watch event of its own write can arrive after the next pass has started: planning
    # from a stale status would flip conditions (and write, and emit Events) twice.
    status: dict[str, Any] | None = None
    status_written: float = 0.0  # monotonic time of the last status write
    last_error: str = ""  # the last failed write reported as an Event (reported once)
    # Whether the job's PodGroup exists, as this loop last listed, created (True) or
    # deleted (False) it; None: not known, listed in the next pass where the API serves
    # PodGroups (nothing watches them: their API may not even exist).
    pod_group: bool | None = None
    # The job as this loop last accepted it. An update the API server's rules refuse (an
    # immutable field, workers without elasticPolicy, workers out of its bounds) can still
    # reach the operator when those rules are not installed (an old CRD, kmock): it is not
    # applied, as the API server would not have; the loop goes on with this job. Lost on
    # a restart (the first spec seen is accepted).
    job: Job | None = None
    refused: str = ""  # the last refused update reported as an Event (reported once)
    # Whether the job's PodDisruptionBudget exists, as this loop last listed or created it
    # (None: not known; listed in the next pass).
    disruption_budget: bool | None = None
    # The kinds of those two whose list the API refused: created without a look.
    unlisted: set[str] = field(default_factory=set)
    announced: bool = False  # a job another controller runs: its Event was posted
    warned: str = ""  # and why its Workload is not written, as last posted


STATES: dict[JobKey, JobState] = {}
_API: k8s.Api | None = None
_METRICS: OperatorMetrics | None = None
_NODES: NodeWatch | None = None


def api() -> k8s.Api:
    """The process's one API client, made on first use (after kopf has started)."""
    global _API
    if _API is None:
        _API = k8s.Api()
    return _API


def metrics() -> OperatorMetrics:
    """The process's operator metrics, in the default registry."""
    global _METRICS
    if _METRICS is None:
        _METRICS = OperatorMetrics()
    return _METRICS


def start_node_watch() -> None:
    """Watch the nodes (when node-loss handling is on); a change in the set of lost nodes
    wakes every job's loop. Call from the event loop."""
    global _NODES
    if not SETTINGS.node_loss_handling or _NODES is not None:
        return
    loop = asyncio.get_running_loop()

    def wake_all() -> None:
        for state in STATES.values():
            state.wake.set()

    _NODES = NodeWatch(
        api().client, SETTINGS.node_lease_grace, lambda: loop.call_soon_threadsafe(wake_all)
    )
    _NODES.start()


def wake(namespace: str | None, job: str | None, resource: str = "") -> None:
    """Make the job's loop plan again soon (after the debounce); ``resource``: the watch
    event's, counted."""
    if resource:
        metrics().watch_events.labels(resource=resource).inc()
    state = STATES.get((namespace or "", job or ""))
    if state is not None:
        state.wake.set()


async def run_job(
    stopped: StopFlag,
    body: Mapping[str, Any],
    namespace: str,
    name: str,
    indexes: ChildIndexes,
) -> None:
    """Plan and apply until the job is deleted or kopf stops the daemon."""
    key = (namespace, name)
    state = STATES.setdefault(key, JobState())
    stopping = asyncio.ensure_future(stopped.wait())
    keep_phase = False
    try:
        while not stopped and not body.get("metadata", {}).get("deletionTimestamp"):
            state.wake.clear()
            try:
                delay = await reconcile(body, state, indexes)
            except InvalidJob:
                keep_phase = True  # an invalid job stays counted as Failed
                raise
            if delay is None:
                return  # the job is gone or was deleted by its TTL
            # Sleep until a child or the job changes, a deadline is due, or kopf stops us.
            waking = asyncio.ensure_future(state.wake.wait())
            await asyncio.wait(
                {waking, stopping}, timeout=max(0.05, delay), return_when="FIRST_COMPLETED"
            )
            waking.cancel()
            await asyncio.sleep(DEBOUNCE_SECONDS)
    finally:
        stopping.cancel()
        if state.replica_reads is not None:
            state.replica_reads.cancel()
        STATES.pop(key, None)
        if not keep_phase:
            metrics().set_phase(namespace, name, None)


async def reconcile(
    body: Mapping[str, Any], state: JobState, indexes: ChildIndexes
) -> float | None:
    """One pass; returns how long to wait before the next one (None: stop)."""
    started = time.monotonic()
    raw = dict(body)
    namespace = raw["metadata"]["namespace"]
    name = raw["metadata"]["name"]
    current_status = (
        dict(state.status) if state.status is not None else dict(raw.get("status") or {})
    )
    try:
        job = parse_job(raw, default_namespace=namespace)
        refused = immutable_changes(state.job.spec, job.spec) if state.job is not None else []
    except SpecError as exc:
        if state.job is None:
            await report_invalid(raw, current_status, exc)
            raise InvalidJob(f"invalid spec: {exc}") from exc
        refused = list(exc.problems)  # an update of a job that runs: not applied
    if refused and state.job is not None:
        job = state.job
        await report_refused(raw, state, refused)
    else:
        state.job, state.refused = job, ""

    key = (namespace, name)
    if not managed.runs_here(job):  # another controller's (core/managed.py)
        try:
            state.warned = await elsewhere.run_pass(
                api(), metrics(), raw, job, indexes.workloads.get(key, ()), state.expectations,
                announce=not state.announced, warned=state.warned)  # fmt: skip
        except k8s.ApiError as exc:
            await report_write_failure(raw, state, exc)
            return WRITE_RETRY_SECONDS
        state.announced = True
        return None
    pods = list(indexes.pods.get(key, ()))
    services = set(indexes.services.get(key, ()))
    waiting = list(indexes.spares.get(key, ()))
    if not state.listed:
        pods, services, waiting = await listing.list_children(
            api(), namespace, name, pods, services, waiting)
        state.listed = True
    if state.disruption_budget is None:
        state.disruption_budget = await listing.child_exists(
            api(), naming.DISRUPTION_BUDGET_KIND, namespace, name,
            naming.disruption_budget_name(name), state.unlisted)  # fmt: skip
    observed = state.expectations.observe(
        name, pods, services, bool(indexes.policies.get(key)), waiting
    )
    try:
        pod_group_api = await listing.served(api(), job)
        if state.pod_group is None and pod_group_api:
            state.pod_group = await listing.pod_group_exists(api(), job, state.unlisted)
        queueing_fields = await queueing.observe(
            api(), SETTINGS.kueue, job, indexes.workloads.get(key, ())
        )
    except k8s.ApiError as exc:
        await report_write_failure(raw, state, exc)
        return WRITE_RETRY_SECONDS
    progress = await read_progress(job, state, pods)
    fractions, warm_reads = await read_replicas(job, state, pods)
    observed = replace(
        observed,
        global_step=progress.global_step,
        pod_group=state.pod_group,
        pod_group_api=pod_group_api,
        restored_step=progress.restored_step,
        replicas_to_aggregate=progress.replicas_to_aggregate,
        live_replicas=progress.live_replicas,
        drop_fractions=fractions,
        warm_reads=warm_reads,
        seen_pods=state.seen_pods,
        disruption_budget=state.disruption_budget,
        nodes=_NODES.health() if _NODES is not None else None,
        **queueing_fields,
    )
    now = datetime.now(UTC)
    # Planning a large job builds thousands of pod bodies: keep it off the event loop.
    plan = await asyncio.to_thread(functools.partial(
        plan_job, job, observed, current_status, now, default_image=SETTINGS.image,
        metrics_from=SETTINGS.metrics_from, entropy=secrets.token_hex(16),
        spare_refill_delay=SETTINGS.spare_refill_delay))  # fmt: skip
    if plan.actions:
        summary = collections.Counter(
            f"create {a.kind}" if isinstance(a, CreateChild) else type(a).__name__
            for a in plan.actions
        )
        log.info(
            "%s/%s: observed %d pods, %d services; %s",
            namespace,
            name,
            len(observed.pods),
            len(observed.services),
            ", ".join(f"{n} {k}" for k, n in sorted(summary.items())),
        )
    # A write that only recounts replicas waits STATUS_BATCH_SECONDS after the last one (at
    # 1000 pods turning Running, one write per batch instead of one per pod event).
    batch = state.status_written + STATUS_BATCH_SECONDS - time.monotonic()
    last = plan.actions[-1] if plan.actions else None
    deferred = batch > 0 and isinstance(last, PatchStatus) and counts_only(
        last.patch, current_status)
    if deferred:
        plan = replace(plan, actions=plan.actions[:-1], status=current_status)
    elif isinstance(last, PatchStatus):
        state.status_written = time.monotonic()
    try:
        gone = await asyncio.to_thread(apply_plan, api(), metrics(), raw, plan, state.expectations)
    except k8s.ApiError as exc:
        if k8s.namespace_gone(exc, namespace):
            # Deleted with its namespace, its deletion not (yet) seen: nothing to act on.
            log.info("%s/%s: its namespace is gone; its loop ends", namespace, name)
            return None
        await report_write_failure(raw, state, exc)
        return WRITE_RETRY_SECONDS
    state.status = plan.status
    state.seen_pods = plan.seen_pods
    state.last_error = ""
    for action in plan.actions:
        if isinstance(action, CreateChild) and action.kind == naming.POD_GROUP_KIND:
            state.pod_group = True
        elif isinstance(action, CreateChild) and action.kind == naming.DISRUPTION_BUDGET_KIND:
            state.disruption_budget = True
        elif isinstance(action, DeletePodGroup):
            state.pod_group = False
    metrics().reconcile_seconds.observe(time.monotonic() - started)
    if gone:
        return None
    waiting = waiting_in(job, plan.status.get("conditions") or [])
    metrics().set_phase(namespace, name, plan.status.get("phase"), waiting)
    delays = [IDLE_SECONDS]
    if job.spec.metrics.port > 0:
        # Come back for a read only when there is something to read: a running chief for
        # the steps, a running chief or worker for the gradients (a pod that starts running
        # wakes this loop). Else a job whose replicas never run (or a job without metrics)
        # would be planned again at once, forever.
        if replicametrics.running_chief(pods) is not None:
            delays.append(max(0.0, state.next_step_read - time.monotonic()))
        if replicametrics.gradient_sources(pods):
            delays.append(max(0.0, state.next_gradients_read - time.monotonic()))
    if plan.requeue_after is not None:
        delays.append(plan.requeue_after + 0.05)
    if state.expectations.pending:
        delays.append(EXPECTATION_RECHECK_SECONDS)
    if deferred:
        delays.append(batch)
    return min(delays)


async def read_progress(
    job: Job, state: JobState, pods: Iterable[ObservedPod]
) -> replicametrics.Progress:
    """The chief's steps and the coordinator's R, at most once per scrape interval (all
    None between reads)."""
    port = job.spec.metrics.port
    if port <= 0 or time.monotonic() < state.next_step_read:
        return replicametrics.Progress()
    pods = list(pods)
    if replicametrics.running_chief(pods) is None:
        return replicametrics.Progress()
    state.next_step_read = time.monotonic() + SETTINGS.scrape_interval
    return await replicametrics.read_progress(pods, port, SETTINGS.scrape_timeout)


async def read_replicas(
    job: Job, state: JobState, pods: Sequence[ObservedPod]
) -> tuple[dict[str, float] | None, dict[str, tuple[str, int]] | None]:
    """Each replica's share of gradients dropped as stale over the window, and every
    replica's warm restarts, in the pass after a read of every replica ends (None in the
    others). The reads run in the background, started at most once per replica scrape
    interval; their end wakes the loop."""
    port = job.spec.metrics.port
    if port <= 0:
        return None, None
    found: tuple[dict[str, float] | None, dict[str, tuple[str, int]] | None] = (None, None)
    task = state.replica_reads
    if task is not None and task.done():
        state.replica_reads = None
        if not task.cancelled() and task.exception() is None:
            scrape, warm = task.result()
            state.gradient_window.append(scrape)
            found = drop_fractions(list(state.gradient_window), replicametrics.holders(pods)), warm
    if state.replica_reads is None and time.monotonic() >= state.next_gradients_read:
        state.next_gradients_read = time.monotonic() + SETTINGS.replica_scrape_interval
        state.replica_reads = asyncio.ensure_future(replicametrics.read_gradients(
            list(pods), port, SETTINGS.scrape_timeout, SETTINGS.scrape_concurrency))
        state.replica_reads.add_done_callback(lambda _: state.wake.set())
    return found


async def report_write_failure(raw: Mapping[str, Any], state: JobState, exc: k8s.ApiError) -> None:
    """The API refused a write: say so once as a Warning Event, then plan afresh later.

    Part of the plan may have been applied: forget what this loop believed it had done
    and start again from what the API shows (a create that did land answers 409: done).
    """
    state.expectations.forget_created()
    state.status = None
    # Part of the plan may have deleted pods: not failures to report next pass.
    state.seen_pods = None
    state.pod_group = None
    state.disruption_budget = None
    meta = raw["metadata"]
    log.warning("%s/%s: %s", meta["namespace"], meta["name"], exc)
    message = str(exc)
    if message == state.last_error:
        return
    state.last_error = message
    refused = isinstance(exc, k8s.CreateRefused)
    reason = naming.REASON_FAILED_CREATE if refused else naming.REASON_WRITE_FAILED
    with contextlib.suppress(k8s.ApiError):
        await asyncio.to_thread(api().post_event, meta["namespace"], raw, WARNING, reason, message)
    if refused:
        # Also in the status (kubectl get -o yaml, describe): the job waits on this.
        conditions = set_condition(
            (raw.get("status") or {}).get("conditions") or [],
            naming.CONDITION_REPLICA_FAILURE, True, reason, message,
            format_time(datetime.now(UTC)),
        )  # fmt: skip
        with contextlib.suppress(k8s.ApiError):
            await asyncio.to_thread(
                api().patch_status, meta["namespace"], meta["name"],
                {"conditions": conditions, "phase": phase_of(conditions)},
            )  # fmt: skip


async def report_refused(raw: Mapping[str, Any], state: JobState, problems: list[Problem]) -> None:
    """An update not applied: one Warning Event naming the fields (once per update)."""
    message = refused_update_message(problems)
    if message == state.refused:
        return
    state.refused = message
    meta = raw["metadata"]
    log.warning("%s/%s: %s", meta["namespace"], meta["name"], message)
    with contextlib.suppress(k8s.ApiError):
        await asyncio.to_thread(api().post_event, meta["namespace"], raw, WARNING,
                                naming.REASON_SPEC_CHANGE_REFUSED, message)  # fmt: skip


async def report_invalid(
    raw: Mapping[str, Any], current: Mapping[str, Any], exc: SpecError
) -> None:
    """Mark a job whose spec cannot run as Failed, naming every bad field."""
    plan = plan_invalid_job(current, exc, format_time(datetime.now(UTC)))
    if plan is None:
        return  # already reported (e.g. before an operator restart)
    meta = raw["metadata"]
    client = api()
    await asyncio.to_thread(client.patch_status, meta["namespace"], meta["name"], plan.status_patch)
    await asyncio.to_thread(client.post_event, meta["namespace"], raw, WARNING,
                            naming.REASON_INVALID_SPEC, plan.message)  # fmt: skip
    metrics().set_phase(meta["namespace"], meta["name"], naming.PHASE_FAILED)
