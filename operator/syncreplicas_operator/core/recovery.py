"""Replica failures and the recovery each one starts: ``status.lastRecovery``.

Pure: pods and metrics readings in, a status record out; the caller passes the time. A
failure is what the operator sees happen to a pod (an exit it handles, a pod someone else
deleted, a container the kubelet restarted in place, a straggler it evicted). The recovery
it starts ends when the replica is back (its pod running and ready) and the global step
moves again; ``stepsLost`` is how far the global step went back in between (the chief
resuming from a checkpoint after a PS loss), 0 when it never went back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from . import naming
from .status import ObservedPod, exit_summary

# What started a recovery; also the ``cause`` label of the operator's recoveries counter,
# so a small fixed set.
CAUSE_EXITED: Final = "Exited"
CAUSE_EVICTED: Final = "Evicted"  # the pod failed without a container exit (node pressure)
CAUSE_DELETED: Final = "Deleted"  # deleted or replaced by someone other than the operator
CAUSE_CONTAINER_RESTARTED: Final = "ContainerRestarted"  # the kubelet restarted it in place
CAUSE_STRAGGLER_EVICTED: Final = "StragglerEvicted"  # runPolicy.stragglerPolicy
CAUSE_NODE_LOST: Final = "NodeLost"  # its node was lost: force-deleted and re-created
CAUSES: Final = (
    CAUSE_EXITED,
    CAUSE_EVICTED,
    CAUSE_DELETED,
    CAUSE_CONTAINER_RESTARTED,
    CAUSE_STRAGGLER_EVICTED,
    CAUSE_NODE_LOST,
)


@dataclass(frozen=True)
class Failure:
    replica: str  # naming.replica_key: "worker-1"
    cause: str  # one of CAUSES
    detail: str  # for people: "exited with KILLED (137)"


@dataclass(frozen=True)
class SeenPod:
    """A pod as the operator left it after a pass, to notice what happens to it next."""

    replica: str
    uid: str  # "" for a pod just created (its uid is not known yet)
    restart_count: int


def exit_failure(pod: ObservedPod, code: int) -> Failure:
    """The failure of a pod the operator replaces after its container exited."""
    replica = naming.replica_key(pod.replica_type, pod.index)
    if pod.disruption:
        detail = f"{pod.name} stopped by the cluster ({pod.disruption})"
        return Failure(replica, CAUSE_EVICTED, detail)
    if code == -1:
        return Failure(replica, CAUSE_EVICTED, f"pod {pod.name} failed without an exit code")
    detail = f"{pod.name} exited with {exit_summary(code, pod.exit_reason)}"
    return Failure(replica, CAUSE_EXITED, detail)


def remember(pods: Iterable[ObservedPod]) -> dict[str, SeenPod]:
    """What to compare the next pass's pods with: every pod not on its way out."""
    return {
        p.name: SeenPod(naming.replica_key(p.replica_type, p.index), p.uid, p.restart_count)
        for p in pods
        if not p.deleting
    }


def detect_failures(
    seen: Mapping[str, SeenPod] | None, pods: Iterable[ObservedPod]
) -> list[Failure]:
    """Failures since the last pass that the pods show and the operator did not cause.

    ``seen`` is :func:`remember` of the last pass (pods the operator deleted are not in it);
    None when there was no last pass (the operator just started): nothing to compare.
    """
    if seen is None:
        return []
    current = {p.name: p for p in pods}
    failures = []
    for name, before in sorted(seen.items()):
        pod = current.get(name)
        if pod is not None and pod.deleting and pod.disruption:
            detail = f"{name} stopped by the cluster ({pod.disruption})"
            failures.append(Failure(before.replica, CAUSE_EVICTED, detail))
        elif pod is None or pod.deleting:
            failures.append(Failure(before.replica, CAUSE_DELETED, f"pod {name} was deleted"))
        elif before.uid and pod.uid and pod.uid != before.uid:
            failures.append(Failure(before.replica, CAUSE_DELETED, f"pod {name} was replaced"))
        elif pod.restart_count > before.restart_count:
            code = pod.last_exit_code
            how = ""
            if code is not None:
                how = f" after exiting with {exit_summary(code, pod.last_exit_reason)}"
            failures.append(
                Failure(before.replica, CAUSE_CONTAINER_RESTARTED, f"{name} restarted{how}")
            )
    return failures


@dataclass(frozen=True)
class Progress:
    """What the operator knows about training in this pass."""

    global_step: int | None  # the latest known (status.globalStep)
    # The chief's restored step, only when it changed since the last read: the chief
    # joined a sync epoch again, resuming from this step.
    rejoined_from: int | None
    ready: frozenset[str]  # replica keys whose pod is Running and ready


@dataclass(frozen=True)
class RecoveryUpdate:
    record: dict[str, Any] | None  # the new status.lastRecovery (None: never any)
    started: tuple[Failure, ...] = ()
    ended: bool = False


def in_progress(record: Mapping[str, Any] | None) -> bool:
    return bool(record) and "recoveredAt" not in (record or {})


def track_recovery(
    record: Mapping[str, Any] | None,
    failures: Sequence[Failure],
    progress: Progress,
    now: str,
) -> RecoveryUpdate:
    """The next ``status.lastRecovery`` from the last one, this pass's failures and progress.

    A failure of the replica already recovering continues that recovery; another replica's
    failure starts a new record, keeping the step before the first failure (the steps
    both failures cost).
    """
    rec = dict(record) if record else None
    started: list[Failure] = []
    for failure in failures:
        if in_progress(rec) and rec is not None and rec["replica"] == failure.replica:
            continue
        before = progress.global_step
        if in_progress(rec) and rec is not None:
            before = rec.get("globalStepBefore")
        rec = {
            "replica": failure.replica,
            "cause": failure.cause,
            "message": failure.detail,
            "startedAt": now,
        }
        if before is not None:
            rec["globalStepBefore"] = before
        started.append(failure)
    if rec is None or not in_progress(rec):
        return RecoveryUpdate(rec, tuple(started))
    before = rec.get("globalStepBefore")
    if before is not None:
        for step in (progress.global_step, progress.rejoined_from):
            if step is not None and step < before:
                rec["resumedFrom"] = min(int(rec.get("resumedFrom", step)), step)
    low = rec.get("resumedFrom", before)
    advancing = low is None or (progress.global_step is not None and progress.global_step > low)
    if rec["replica"] in progress.ready and advancing and not started:
        rec["recoveredAt"] = now
        if before is not None:
            rec["stepsLost"] = before - int(rec.get("resumedFrom", before))
        return RecoveryUpdate(rec, tuple(started), ended=True)
    return RecoveryUpdate(rec, tuple(started))


def end_without_replica(record: Mapping[str, Any], why: str, now: str) -> dict[str, Any]:
    """A recovery whose replica will not come back (a resize removed it): over now, the
    message saying why, no steps counted as lost to it."""
    return {**record, "message": f"{record['message']}; {why}", "recoveredAt": now}


def recovered_message(record: Mapping[str, Any], seconds: float | None) -> str:
    """The Event of a finished recovery."""
    took = f" in {seconds:.0f}s" if seconds is not None else ""
    lost = record.get("stepsLost")
    steps = f"; {lost} global step(s) lost" if lost is not None else ""
    return f"{record['replica']} is back and training{took} ({record['message']}){steps}"


def degraded_message(aggregating: int, wanted: int, lost: Sequence[str], live: int | None) -> str:
    """``aggregating 2 of 3 gradients per update (replica worker-1 lost)``."""
    if lost:
        noun = "replica" if len(lost) == 1 else "replicas"
        why = f"{noun} {', '.join(lost)} lost"
    elif live is not None:
        why = f"{live} replica(s) pushing gradients"
    else:
        why = "replicas lost"
    return f"aggregating {aggregating} of {wanted} gradients per update ({why})"
