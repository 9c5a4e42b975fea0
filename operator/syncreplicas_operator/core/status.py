"""Read pods into facts and write those facts as job status: conditions, phase, counts.

Pure: raw Pod dicts (as the API returns them) in, small frozen records and status dicts
out; the caller passes the clock. A condition keeps its ``lastTransitionTime`` until its
status really flips, so recomputing the status of an unchanged job yields an identical
dict and the operator writes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from . import exitcodes, naming

# Pod phases (core/v1 PodStatus.phase).
POD_PENDING = "Pending"
POD_RUNNING = "Running"
POD_SUCCEEDED = "Succeeded"
POD_FAILED = "Failed"
POD_UNKNOWN = "Unknown"

# Pod status reasons the kubelet gives a pod it stopped for the node's sake, not the
# container's: node-pressure eviction, a critical pod's admission, graceful node shutdown.
DISRUPTION_REASONS = ("Evicted", "Preempting", "Terminated", "NodeLost")
# The pod condition Kubernetes adds before it deletes a pod on purpose (preemption, API
# eviction, taint eviction, pod GC, kubelet termination).
CONDITION_DISRUPTION_TARGET = "DisruptionTarget"
# The condition Kueue's TAS node controller adds when it fails a pod its ungater pinned to
# a node that failed since (the pod never ran: Kueue moves the assignment to another node).
CONDITION_TERMINATED_BY_KUEUE = "TerminatedByKueue"

# The runtime's termination message (docs/contract.md): its exit line
# (``syncreplicas: CONFIG (64): <reason>``), then ``key=value`` lines. The runtime writes it
# with ``syncreplicas_runtime.foundation.exitcodes.termination_message``; a unit test checks
# that this side reads what that side writes.
EXIT_LINE: Final = re.compile(r"syncreplicas: [A-Z]+ \(-?\d+\): (?P<reason>.*)")
FACT_LINE: Final = re.compile(r"(?P<key>[A-Za-z][A-Za-z0-9]*)=(?P<value>\S*)")
# The runtime's progress lines (``12:00:00 syncreplicas worker-0: ...``), in a log tail: no
# reason for an exit (a container killed while training, say by the OOM killer, ends on one).
PROGRESS_LINE: Final = re.compile(r"\d\d:\d\d:\d\d syncreplicas [\w-]+: .*")
GLOBAL_STEP_KEY: Final = "globalStep"
# The last line of a container whose replica restarted warm: the pod's warm restarts.
PROCESS_RESTARTS_KEY: Final = "processRestarts"
# The chief's exports at exit 0 (``<kind>Path`` and ``<kind>Step``): its final SavedModel
# and its best one (spec.training.export.best), as the job's status names them.
EXPORT_KINDS: Final = ("export", "bestExport")
# Reasons go into condition messages and Events, which are for people: one line, bounded.
REASON_MAX_CHARS: Final = 200


@dataclass(frozen=True)
class TerminationMessage:
    """What a replica's container left in ``state.terminated.message``."""

    # The runtime's one-line reason (its exit line without the code, which the exit code
    # says), else the last line of the text (the log tail Kubernetes falls back to when the
    # process wrote nothing: a traceback's last line) that is not one of the runtime's
    # progress lines; "" when there is none.
    reason: str = ""
    # ``globalStep=N``: the last global step the replica saw (the chief's final step on
    # exit 0); None when the message does not say.
    global_step: int | None = None
    # ``processRestarts=N``: the pod's warm restarts when its container ended (0: none said).
    process_restarts: int = 0
    # ``exportPath=...`` and ``exportStep=N`` (and ``bestExport...``): kind -> (path, step).
    exports: tuple[tuple[str, str, int], ...] = ()


def parse_termination_message(message: object) -> TerminationMessage:
    """Read a container's termination message; anything unexpected is just not used."""
    lines = [ln.strip() for ln in str(message or "").splitlines() if ln.strip()]
    facts: dict[str, str] = {}
    reasons: list[str] = []
    others: list[str] = []
    for line in lines:
        if fact := FACT_LINE.fullmatch(line):
            facts[fact["key"]] = fact["value"]
        elif exit_line := EXIT_LINE.fullmatch(line):
            reasons.append(exit_line["reason"])
        elif not PROGRESS_LINE.fullmatch(line):
            others.append(line)
    step = facts.get(GLOBAL_STEP_KEY, "")
    restarts = facts.get(PROCESS_RESTARTS_KEY, "")
    reason = (reasons or others or [""])[-1]
    return TerminationMessage(
        reason=reason.strip()[:REASON_MAX_CHARS],
        global_step=int(step) if step.isdigit() else None,
        process_restarts=int(restarts) if restarts.isdigit() else 0,
        exports=tuple(
            (kind, facts[f"{kind}Path"], int(facts[f"{kind}Step"]))
            for kind in EXPORT_KINDS
            if facts.get(f"{kind}Path", "").startswith("/")
            and facts.get(f"{kind}Step", "").isdigit()
        ),
    )


@dataclass(frozen=True)
class ObservedPod:
    """What the planner needs to know about one replica's pod."""

    name: str
    replica_type: str
    index: int
    uid: str = ""
    phase: str = POD_PENDING
    # Restarts in place: the kubelet's container restarts (restartPolicy OnFailure pods)
    # plus the replica's warm restarts inside its container (``warm_restarts``, which the
    # planner adds from what the replica says: core/warm.py).
    restart_count: int = 0
    warm_restarts: int = 0
    # Exit code of the main container when it has terminated for good (pod Failed/Succeeded).
    exit_code: int | None = None
    # Exit code of the previous run of the main container (after an in-place restart).
    last_exit_code: int | None = None
    ready: bool = False
    deleting: bool = False
    pod_ip: str = ""
    # Why the cluster stopped this pod, when it says so (eviction, preemption, node
    # shutdown): such an exit is not the replica's failure. "" when it was not disrupted.
    disruption: str = ""
    # metadata.deletionTimestamp: when a pod being deleted should be gone ("" if not).
    deletion_timestamp: str = ""
    # The runtime's one-line reason from the main container's termination message: of its
    # current exit (state.terminated), and of the run before an in-place restart
    # (lastState.terminated). "" when it left none.
    exit_reason: str = ""
    last_exit_reason: str = ""
    # globalStep from the termination message of its current exit (the chief's final step
    # on exit 0), None when it says none.
    exit_step: int | None = None
    # The chief's exports its exit named (TerminationMessage.exports).
    exports: tuple[tuple[str, str, int], ...] = ()
    # spec.nodeName: the node it was scheduled to ("" while unscheduled).
    node_name: str = ""
    # It carries the label its Service selects on (naming.LABEL_PUBLISHED).
    published: bool = True
    # Its syncreplicas.io/incarnation annotation (0 when it has none).
    incarnation: int = 0
    # spec.schedulingGates' names (Kueue's topology gate while TAS holds it) and
    # metadata.creationTimestamp ("" if not known).
    scheduling_gates: tuple[str, ...] = ()
    created: str = ""

    @property
    def fenced(self) -> bool:
        """It stood down for a newer incarnation of its replica (exit FENCED)."""
        return self.exit_code == exitcodes.FENCED

    @property
    def active(self) -> bool:
        """Pending or running, and not on its way out."""
        return not self.deleting and self.phase in (POD_PENDING, POD_RUNNING, POD_UNKNOWN)

    @property
    def finished(self) -> bool:
        return self.phase in (POD_SUCCEEDED, POD_FAILED)


def exit_summary(code: int, reason: str = "") -> str:
    """``CONFIG (64): bad configuration: ...``: an exit code with the runtime's reason."""
    return f"{exitcodes.describe(code)}: {reason}" if reason else exitcodes.describe(code)


def _main_container(statuses: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    for container_status in statuses:
        if container_status.get("name") == naming.CONTAINER_NAME:
            return container_status
    return statuses[0] if statuses else {}


def disruption_of(pod_status: Mapping[str, Any]) -> str:
    """The cluster's own reason for stopping a pod, from its status; "" if none.

    A ``DisruptionTarget`` condition (preemption, API-initiated eviction, taint eviction,
    kubelet termination) or a pod reason such as ``Evicted``: "<reason>: <message>".
    """
    for cond in pod_status.get("conditions") or []:
        kind = cond.get("type")
        if kind in (CONDITION_DISRUPTION_TARGET, CONDITION_TERMINATED_BY_KUEUE) and cond.get(
                "status") == "True":  # fmt: skip
            return _say(str(cond.get("reason") or kind), cond.get("message"))
    reason = str(pod_status.get("reason") or "")
    if reason in DISRUPTION_REASONS:
        return _say(reason, pod_status.get("message"))
    return ""


def _say(reason: str, message: object) -> str:
    text = f"{reason}: {message}" if message else reason
    # Condition messages and Events are for people: the first line, bounded.
    return text.splitlines()[0][:REASON_MAX_CHARS] if text else reason


def observe_pod(pod: Mapping[str, Any]) -> ObservedPod | None:
    """Facts about one pod, or None when it is not a replica of a SyncReplicasJob.

    The replica type and index come from the labels, falling back to the deterministic
    name, so an edited label cannot make the operator lose track of a pod.
    """
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    name = str(meta.get("name") or "")
    job = labels.get(naming.LABEL_JOB_NAME)
    if not job or not name:
        return None
    replica_type = labels.get(naming.LABEL_REPLICA_TYPE)
    raw_index = str(labels.get(naming.LABEL_REPLICA_INDEX, ""))
    if replica_type in naming.REPLICA_TYPES and raw_index.isdigit():
        index = int(raw_index)
    else:
        parsed = naming.parse_replica_name(str(job), name)
        if parsed is None:
            return None
        replica_type, index = parsed
    pod_status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    main = _main_container(pod_status.get("containerStatuses") or [])
    state = main.get("state") or {}
    last = main.get("lastState") or {}
    phase = str(pod_status.get("phase") or POD_PENDING)
    exit_code: int | None = None
    terminated = state.get("terminated")
    if terminated is not None and phase in (POD_SUCCEEDED, POD_FAILED):
        exit_code = int(terminated.get("exitCode", 0))
    elif phase == POD_FAILED:
        exit_code = -1  # failed without a container exit (evicted, lost node)
    last_terminated = last.get("terminated")
    message = parse_termination_message((terminated or {}).get("message"))
    last_message = parse_termination_message((last_terminated or {}).get("message"))
    return ObservedPod(
        name=name,
        replica_type=str(replica_type),
        index=index,
        uid=str(meta.get("uid") or ""),
        phase=phase,
        restart_count=int(main.get("restartCount") or 0),
        exit_code=exit_code,
        last_exit_code=int(last_terminated.get("exitCode", 0)) if last_terminated else None,
        ready=bool(main.get("ready")) and phase == POD_RUNNING,
        deleting=bool(meta.get("deletionTimestamp")),
        pod_ip=str(pod_status.get("podIP") or ""),
        disruption=disruption_of(pod_status),
        deletion_timestamp=str(meta.get("deletionTimestamp") or ""),
        exit_reason=message.reason,
        last_exit_reason=last_message.reason,
        exit_step=message.global_step,
        exports=message.exports,
        warm_restarts=max(message.process_restarts, last_message.process_restarts),
        node_name=str(spec.get("nodeName") or ""),
        incarnation=_incarnation(meta.get("annotations") or {}),
        published=labels.get(naming.LABEL_PUBLISHED) == naming.PUBLISHED,
        scheduling_gates=tuple(str(g.get("name") or "") for g in spec.get("schedulingGates", [])),
        created=str(meta.get("creationTimestamp") or ""),
    )


def _incarnation(annotations: Mapping[str, Any]) -> int:
    raw = str(annotations.get(naming.ANNOTATION_INCARNATION) or "")
    return int(raw) if raw.isdigit() else 0


def job_name_of(pod: Mapping[str, Any]) -> str | None:
    """The job a child belongs to, from its label."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    job = labels.get(naming.LABEL_JOB_NAME)
    return str(job) if job else None


def replica_statuses(
    pods: Iterable[ObservedPod], recreations: Mapping[str, int]
) -> dict[str, dict[str, int]]:
    """``{ps|chief|worker: {active, ready, succeeded, failed, restarts}}``.

    ``restarts`` counts the live pods' in-place container restarts plus ``recreations``:
    restarts no live pod shows any more (a pod the operator replaced counts one, a deleted
    pod hands over its restart count), kept in status because a new pod starts from zero.
    """
    out = {
        t: {
            "active": 0,
            "ready": 0,
            "succeeded": 0,
            "failed": 0,
            "restarts": int(recreations.get(t, 0)),
        }
        for t in naming.REPLICA_TYPES
    }
    for pod in pods:
        counts = out.setdefault(
            pod.replica_type, {"active": 0, "ready": 0, "succeeded": 0, "failed": 0, "restarts": 0}
        )
        counts["restarts"] += pod.restart_count
        if pod.active:
            counts["active"] += 1
            counts["ready"] += int(pod.ready)
        elif pod.phase == POD_SUCCEEDED:
            counts["succeeded"] += 1
        elif pod.phase == POD_FAILED and not (pod.disruption or pod.fenced):
            # A pod the cluster stopped, or one that stood down for a newer incarnation
            # of its replica, did not fail.
            counts["failed"] += 1
    return out


def observed_workers(pods: Iterable[ObservedPod]) -> int:
    """Worker pods that exist and are not being deleted: ``status.workers``, which the
    scale subresource reports and the Resizing condition compares with spec.workers."""
    return sum(1 for p in pods if p.replica_type == naming.WORKER and not p.deleting)


def total_restarts(statuses: Mapping[str, Mapping[str, int]]) -> int:
    """Restarts the job has spent against ``backoffLimit``."""
    return sum(int(s.get("restarts", 0)) for s in statuses.values())


def ready_replicas(pods: Iterable[ObservedPod], expected: int) -> str:
    """``"n/m"`` for the printer column: ready pods out of the replicas the spec asks for."""
    return f"{sum(1 for p in pods if p.ready and not p.deleting)}/{expected}"


def find_condition(
    conditions: Sequence[Mapping[str, Any]], condition_type: str
) -> Mapping[str, Any] | None:
    for cond in conditions:
        if cond.get("type") == condition_type:
            return cond
    return None


def condition_is_true(conditions: Sequence[Mapping[str, Any]], condition_type: str) -> bool:
    cond = find_condition(conditions, condition_type)
    return cond is not None and cond.get("status") == "True"


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    condition_type: str,
    status: bool,
    reason: str,
    message: str,
    now: str,
) -> list[dict[str, Any]]:
    """A new condition list with ``condition_type`` set; others untouched, order stable.

    ``lastTransitionTime`` moves only when the status flips; reason and message follow the
    latest call. A condition that was never true is not added just to say False.
    """
    value = "True" if status else "False"
    out: list[dict[str, Any]] = []
    found = False
    for cond in conditions:
        if cond.get("type") != condition_type:
            out.append(dict(cond))
            continue
        found = True
        same = cond.get("status") == value
        out.append(
            {
                "type": condition_type,
                "status": value,
                "reason": reason,
                "message": message,
                "lastTransitionTime": cond.get("lastTransitionTime", now) if same else now,
            }
        )
    if not found and status:
        out.append(
            {
                "type": condition_type,
                "status": value,
                "reason": reason,
                "message": message,
                "lastTransitionTime": now,
            }
        )
    return out


def phase_of(conditions: Sequence[Mapping[str, Any]]) -> str:
    """The one-word phase: the most decisive true condition.

    Finished beats suspended beats restarting beats running beats created, as a user would
    read them: a finished job is finished even if a pod still shows Running.
    """
    for condition_type, phase in (
        (naming.CONDITION_FAILED, naming.PHASE_FAILED),
        (naming.CONDITION_SUCCEEDED, naming.PHASE_SUCCEEDED),
        (naming.CONDITION_SUSPENDED, naming.PHASE_SUSPENDED),
        (naming.CONDITION_RESTARTING, naming.PHASE_RESTARTING),
        (naming.CONDITION_RUNNING, naming.PHASE_RUNNING),
        (naming.CONDITION_CREATED, naming.PHASE_CREATED),
    ):
        if condition_is_true(conditions, condition_type):
            return phase
    return naming.PHASE_PENDING


def is_stalled(
    pods_running: bool,
    last_progress_seconds: float | None,
    now_seconds: float,
    stall_timeout_seconds: float,
) -> bool:
    """True when the global step has not advanced for ``stall_timeout_seconds`` while the
    job's pods run. ``last_progress_seconds`` is when the step last changed (or when the
    pods started running, before any step was read); a timeout of 0 disables the check.
    """
    if stall_timeout_seconds <= 0 or not pods_running or last_progress_seconds is None:
        return False
    return now_seconds - last_progress_seconds >= stall_timeout_seconds
