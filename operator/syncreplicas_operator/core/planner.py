"""Plan one reconciliation of a SyncReplicasJob: observed children in, actions and status out.

Pure: no clock, no API, no kopf. The caller passes ``now`` and what it observed; the result
says what to create, delete, patch and report. Reconciliation is level-based: the plan
depends only on the desired state and the observed one, so running it twice on the same
input, or after an operator restart, never duplicates a child (names are deterministic).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Final

from . import exitcodes, manifests, naming, recovery, straggler
from .actions import (
    CHIEF_CLEANUPS,
    JOB_RESTARTS,
    NORMAL,
    PODS_CREATED,
    RECOVERIES,
    STRAGGLER_EVICTIONS,
    WARNING,
    Action,
    CountMetric,
    CreateChild,
    DeleteJob,
    DeletePod,
    DeletePodGroup,
    DeleteService,
    EmitEvent,
    PatchStatus,
)
from .enums import ChiefRestartPolicy, CleanPodPolicy
from .policy import ReplicaExitDecision, decide_replica_exit, job_failure_reason
from .recovery import Failure, SeenPod
from .spec import Job, StragglerPolicy
from .status import (
    POD_FAILED,
    POD_RUNNING,
    ObservedPod,
    condition_is_true,
    exit_summary,
    find_condition,
    is_stalled,
    phase_of,
    ready_replicas,
    replica_statuses,
    set_condition,
    total_restarts,
)
from .timefmt import format_time, parse_time


@dataclass(frozen=True)
class Observed:
    """The job's children as last seen (plus what the caller knows is in flight)."""

    pods: tuple[ObservedPod, ...] = ()
    services: frozenset[str] = frozenset()
    network_policy: bool = False
    # The chief's syncreplicas_global_step from its /metrics, None when not read this time.
    global_step: int | None = None
    # --- recovery and stragglers (each None when not read this pass) ---
    # The chief's syncreplicas_restored_step (read with the global step).
    restored_step: int | None = None
    # The coordinator's (PS 0) syncreplicas_replicas_to_aggregate and _live_replicas.
    replicas_to_aggregate: int | None = None
    live_replicas: int | None = None
    # Replica key -> share of its gradients dropped as stale over the last window.
    drop_fractions: Mapping[str, float] | None = None
    # Plan.seen_pods of the last pass (None: this operator process has planned no pass yet).
    seen_pods: Mapping[str, SeenPod] | None = None
    # Whether the job's PodGroup exists (None: not known, e.g. after an operator restart;
    # creating or deleting it again is harmless).
    pod_group: bool | None = None
    # Whether the API server serves the PodGroup API the job's gang scheduler reads.
    pod_group_api: bool = True


# A pod still terminating this long after its deletionTimestamp (the end of its grace
# period) has a kubelet that will never confirm: its node is lost. It is deleted at once.
FORCE_DELETE_AFTER_SECONDS: Final = 60.0


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    status: dict[str, Any]
    # Plan again after this many seconds even if nothing changes (deadlines, TTL, stall).
    requeue_after: float | None = None
    # The pods as this pass leaves them, for the next pass's Observed.seen_pods.
    seen_pods: Mapping[str, SeenPod] = field(default_factory=dict)


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """JSON merge patch (RFC 7386) turning ``old`` into ``new``.

    The API server merges nested objects key by key, so a key that ``new`` drops from a
    nested object (``lastRecovery.recoveredAt`` when a new recovery starts) is set to null
    at its own level; sending the nested object whole would keep the old keys. Lists
    replace wholesale.
    """
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if before == value:
            continue
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            patch[key] = status_patch(before, value)
        else:
            patch[key] = value
    patch.update({k: None for k in old if k not in new})
    return patch


class _Planner:
    """One planning pass; collects actions and edits a private copy of the status."""

    def __init__(
        self,
        job: Job,
        observed: Observed,
        status: Mapping[str, Any],
        now: datetime,
        default_image: str,
    ) -> None:
        self.job = job
        self.default_image = default_image
        self.spec = job.spec
        self.observed = observed
        self.old_status = status
        self.status: dict[str, Any] = copy.deepcopy(dict(status))
        self.now = now
        self.timestamp = format_time(now)
        self.actions: list[Action] = []
        self.requeue: list[float] = []
        self.pods = {p.name: p for p in observed.pods}
        self.resumed = False
        self.recreations: dict[str, int] = {
            replica_type: int(count)
            for replica_type, count in (self.status.get("recreations") or {}).items()
        }
        # Failures seen this pass, each the start of a recovery (status.lastRecovery).
        self.failures: list[Failure] = recovery.detect_failures(
            observed.seen_pods, observed.pods
        )

    # -- helpers ----------------------------------------------------------------------

    @property
    def conditions(self) -> list[dict[str, Any]]:
        return list(self.status.get("conditions") or [])

    def condition(self, condition_type: str, value: bool, reason: str, message: str) -> bool:
        """Set a condition; True when its status flipped (worth an Event)."""
        before = condition_is_true(self.conditions, condition_type)
        existed = find_condition(self.conditions, condition_type) is not None
        self.status["conditions"] = set_condition(
            self.conditions, condition_type, value, reason, message, self.timestamp
        )
        return before != value and (value or existed)

    def event(self, event_type: str, reason: str, message: str) -> None:
        self.actions.append(EmitEvent(event_type, reason, message))

    def live_pods(self) -> list[ObservedPod]:
        return [p for p in self.pods.values() if not p.deleting]

    def restarts_so_far(self) -> int:
        return total_restarts(replica_statuses(self.live_pods(), self.recreations))

    def delete_pods(self, pods: Iterable[ObservedPod]) -> int:
        deleted = 0
        for pod in pods:
            if not pod.deleting:
                self.actions.append(DeletePod(pod.name))
                self.pods[pod.name] = replace(pod, deleting=True)
                # Its in-place restarts still count against backoffLimit once it is gone.
                if pod.restart_count:
                    self.carry_restarts(pod.replica_type, pod.restart_count)
                deleted += 1
        return deleted

    def carry_restarts(self, replica_type: str, count: int) -> None:
        """Keep restarts in status (``recreations``) that no live pod's count shows."""
        self.recreations[replica_type] = self.recreations.get(replica_type, 0) + count

    def finished(self) -> bool:
        return condition_is_true(self.conditions, naming.CONDITION_SUCCEEDED) or (
            condition_is_true(self.conditions, naming.CONDITION_FAILED)
        )

    # -- the pass ---------------------------------------------------------------------

    def run(self) -> Plan:
        self.force_delete_stuck()
        if self.finished():
            self.after_finish()
        elif self.spec.run_policy.suspend:
            self.suspend()
        else:
            self.resume_if_suspended()
            self.reconcile()
        return self.result()

    def result(self) -> Plan:
        live = [p for p in self.pods.values() if not p.deleting]
        self.status["replicaStatuses"] = replica_statuses(live, self.recreations)
        self.status["ready"] = ready_replicas(live, sum(self.spec.replica_counts().values()))
        if self.recreations:
            self.status["recreations"] = dict(self.recreations)
        self.status["phase"] = phase_of(self.conditions)
        if self.job.generation is not None:
            self.status["observedGeneration"] = self.job.generation
        patch = status_patch(self.old_status, self.status)
        actions = list(self.actions)
        if patch and not any(isinstance(a, DeleteJob) for a in actions):
            # Children first, status after: a crash in between repeats the same plan.
            actions.append(PatchStatus(patch))
        return Plan(
            actions=tuple(actions),
            status=self.status,
            requeue_after=min(self.requeue) if self.requeue else None,
            seen_pods=recovery.remember(self.pods.values()),
        )

    def after_finish(self) -> None:
        ttl = self.spec.run_policy.ttl_seconds_after_finished
        completed = parse_time(self.status.get("completionTime"))
        if ttl is not None and completed is not None:
            remaining = (completed - self.now).total_seconds() + ttl
            if remaining <= 0:
                self.event(
                    NORMAL, naming.REASON_TTL_EXPIRED, f"deleting the job {ttl}s after it finished"
                )
                self.actions.append(DeleteJob(naming.REASON_TTL_EXPIRED))
                return
            self.requeue.append(remaining)
        self.clean_up_pods()
        self.release_pod_group()

    def release_pod_group(self) -> None:
        """Delete the PodGroup of a job that runs no more (it may hold queue capacity)."""
        api_version = manifests.pod_group_api_version(self.spec)
        if api_version is None or self.observed.pod_group is False:
            return
        if self.observed.pod_group_api:
            self.actions.append(DeletePodGroup(naming.pod_group_name(self.job.name), api_version))

    def force_delete_stuck(self) -> None:
        """Delete at once the pods whose kubelet never confirmed their deletion."""
        forced: list[str] = []
        for pod in sorted(self.observed.pods, key=lambda p: p.name):
            due = parse_time(pod.deletion_timestamp) if pod.deleting else None
            if due is None:
                continue
            overdue = (self.now - due).total_seconds()
            if overdue < FORCE_DELETE_AFTER_SECONDS:
                self.requeue.append(FORCE_DELETE_AFTER_SECONDS - overdue)
                continue
            self.actions.append(DeletePod(pod.name, grace_period_seconds=0))
            forced.append(f"{pod.name} ({int(overdue)}s)")
        if forced:
            self.event(
                WARNING,
                naming.REASON_FORCE_DELETED,
                "deleted with gracePeriodSeconds 0, still terminating past the end of their "
                f"grace period (their node is likely lost): {', '.join(forced)}",
            )

    def clean_up_pods(self) -> None:
        """Stop the pods ``cleanPodPolicy`` says must not outlive a finished job."""
        policy = self.spec.run_policy.clean_pod_policy
        if policy == CleanPodPolicy.NONE:
            return
        doomed = [p for p in self.live_pods() if policy == CleanPodPolicy.ALL or p.active]
        if self.delete_pods(doomed):
            names = ", ".join(sorted(p.name for p in doomed)[:5])
            more = f" and {len(doomed) - 5} more" if len(doomed) > 5 else ""
            self.event(
                NORMAL,
                naming.REASON_CLEANED_UP,
                f"deleted {len(doomed)} pod(s) (cleanPodPolicy {policy}): {names}{more}",
            )

    def finish(self, succeeded: bool, reason: str, message: str) -> None:
        condition_type = naming.CONDITION_SUCCEEDED if succeeded else naming.CONDITION_FAILED
        self.condition(condition_type, True, reason, message)
        for other in (
            naming.CONDITION_RUNNING,
            naming.CONDITION_RESTARTING,
            naming.CONDITION_STALLED,
            naming.CONDITION_DEGRADED,
            naming.CONDITION_STRAGGLER_DETECTED,
        ):
            self.condition(other, False, reason, message)
        self.status["completionTime"] = self.timestamp
        self.status.pop("restartJob", None)
        self.event(NORMAL if succeeded else WARNING, reason, message)
        self.after_finish()

    def fail(self, reason: str, message: str) -> None:
        self.finish(False, reason, message)

    def suspend(self) -> None:
        deleted = self.delete_pods(self.live_pods())
        self.release_pod_group()
        if self.condition(
            naming.CONDITION_SUSPENDED, True, naming.REASON_SUSPENDED, "runPolicy.suspend is true"
        ):
            self.event(NORMAL, naming.REASON_SUSPENDED, f"job suspended: deleted {deleted} pod(s)")
        for other in (
            naming.CONDITION_RUNNING,
            naming.CONDITION_RESTARTING,
            naming.CONDITION_STALLED,
        ):
            self.condition(other, False, naming.REASON_SUSPENDED, "the job is suspended")
        # The deadline counts running time only: it starts again on resume.
        self.status.pop("startTime", None)
        self.status.pop("restartJob", None)
        # The chief is gone on purpose: its replacement on resume is not a chief restart.
        self.status.pop("chief", None)

    def resume_if_suspended(self) -> None:
        if self.condition(
            naming.CONDITION_SUSPENDED, False, naming.REASON_RESUMED, "runPolicy.suspend is false"
        ):
            self.event(NORMAL, naming.REASON_RESUMED, "job resumed: creating its pods again")
            self.resumed = True

    def reconcile(self) -> None:
        self.status.setdefault("startTime", self.timestamp)
        if self.deadline_exceeded():
            return
        if self.gang_scheduler_missing():
            return
        if self.handle_exits():
            return
        if self.handle_chief_restart():
            return
        self.create_and_prune()
        self.report_progress()
        self.report_recovery()

    def deadline_exceeded(self) -> bool:
        deadline = self.spec.run_policy.active_deadline_seconds
        started = parse_time(self.status.get("startTime"))
        if deadline is None or started is None:
            return False
        remaining = deadline - (self.now - started).total_seconds()
        if remaining > 0:
            self.requeue.append(remaining)
            return False
        self.fail(
            naming.REASON_DEADLINE_EXCEEDED,
            f"the job ran longer than runPolicy.activeDeadlineSeconds ({deadline}s)",
        )
        return True

    def gang_scheduler_missing(self) -> bool:
        """Fail a job whose gang scheduler is not installed (its pods would never schedule).

        Only before its pods exist: pods a scheduler already placed run on without it."""
        policy = self.spec.run_policy.scheduling_policy
        created = condition_is_true(self.conditions, naming.CONDITION_CREATED)
        if policy is None or self.observed.pod_group_api or created:
            return False
        self.fail(
            naming.REASON_GANG_SCHEDULER_MISSING,
            f"runPolicy.schedulingPolicy.gangScheduler is {policy.gang_scheduler}, but the API "
            f"server does not serve {manifests.pod_group_api_version(self.spec)} "
            f"{naming.POD_GROUP_PLURAL}: install the scheduler (or remove schedulingPolicy) "
            "and create the job again",
        )
        return True

    def handle_exits(self) -> bool:
        """Apply decide_replica_exit to every pod that has stopped; True if the job ended."""
        policy = self.spec.run_policy
        restarted: list[str] = []
        for pod in sorted(self.live_pods(), key=_creation_order):
            if not pod.finished or pod.exit_code is None:
                continue
            spent = self.restarts_so_far()
            disrupted = bool(pod.disruption)
            decision = decide_replica_exit(
                policy, pod.replica_type, pod.exit_code, spent, disrupted=disrupted
            )
            code = exitcodes.describe(pod.exit_code)
            # A disrupted pod's code is the kill's (137, 143 or none): its cause says more.
            why = _disrupted(pod) if disrupted else exit_summary(pod.exit_code, pod.exit_reason)
            if decision is ReplicaExitDecision.SUCCEED_JOB:
                step = self.final_step(pod)
                at = f" at global step {step}" if step is not None else ""
                self.finish(True, naming.REASON_SUCCEEDED, f"the chief finished training{at}")
                return True
            if decision is ReplicaExitDecision.FAIL_JOB:
                said = f": {pod.exit_reason}" if pod.exit_reason else ""
                self.fail(
                    job_failure_reason(policy, pod.exit_code),
                    f"{pod.name} exited with {code} (restartPolicy {policy.restart_policy}, "
                    f"{spent} of backoffLimit {policy.backoff_limit} restarts used){said}",
                )
                return True
            if decision is ReplicaExitDecision.RESTART:
                self.delete_pods([pod])
                self.failures.append(recovery.exit_failure(pod, pod.exit_code))
                if not disrupted:
                    self.carry_restarts(pod.replica_type, 1)
                restarted.append(f"{pod.name} ({why})")
                if pod.replica_type == naming.CHIEF:
                    # Counted here, not again when the deleted pod is seen going.
                    self.status.pop("chief", None)
                    # The replacement is a new chief: count it once, here.
                    self.chief_restarted(f"{pod.name} stopped ({why}) and is being replaced")
                    if self.finished():
                        return True
        # In-place restarts by the kubelet spend the same budget.
        spent = self.restarts_so_far()
        if spent > policy.backoff_limit:
            last = self.last_failure()
            self.fail(
                naming.REASON_BACKOFF_LIMIT_EXCEEDED,
                f"replicas restarted {spent} times, more than runPolicy.backoffLimit "
                f"({policy.backoff_limit})" + (f"; last: {last}" if last else ""),
            )
            return True
        acted = bool(restarted)
        # Pods the cluster is deleting on purpose (preemption, eviction, taint): replaced
        # once gone. Named here, as they go, because a vanished pod tells no cause.
        restarted += [
            f"{p.name} ({_disrupted(p)})"
            for p in sorted(self.observed.pods, key=_creation_order)
            if p.deleting and p.disruption and p.replica_type != naming.CHIEF
        ]
        if restarted:
            message = "restarting " + ", ".join(restarted)
            current = find_condition(self.conditions, naming.CONDITION_RESTARTING) or {}
            news = current.get("status") != "True" or current.get("message") != message
            self.condition(
                naming.CONDITION_RESTARTING, True, naming.REASON_REPLICA_RESTARTED, message
            )
            if acted or news:
                self.event(WARNING, naming.REASON_REPLICA_RESTARTED, message)
        return False

    def final_step(self, chief: ObservedPod) -> int | None:
        """The job's final global step, into status: the highest of the step read last
        (status), the one read this pass and the chief's own word as it exited (its
        termination message), which a job that ends between two reads of the chief's
        metrics would otherwise miss."""
        known = self.status.get("globalStep")
        candidates = [
            s for s in (known, self.observed.global_step, chief.exit_step) if s is not None
        ]
        if not candidates:
            return None
        step = max(int(s) for s in candidates)
        if step != known:
            self.status["globalStep"] = step
            self.status["lastProgressTime"] = self.timestamp
        return step

    def last_failure(self) -> str:
        """The latest replica failure in words, for the message of a job that restarts ran
        out: one seen this pass, else an in-place restart the pods still show."""
        if self.failures:
            return self.failures[-1].detail
        for pod in sorted(self.live_pods(), key=_creation_order):
            if pod.restart_count and pod.last_exit_code is not None:
                summary = exit_summary(pod.last_exit_code, pod.last_exit_reason)
                return f"{pod.name} restarted after exiting with {summary}"
        return ""

    def handle_chief_restart(self) -> bool:
        """Notice a chief that restarted behind the operator's back; True if the job ended."""
        previous = self.status.get("chief") or {}
        chief = self.pods.get(naming.replica_name(self.job.name, naming.CHIEF, 0))
        why = ""
        if chief is None or chief.deleting:
            if previous and chief is None:
                why = "the chief pod disappeared and is being replaced"
            elif previous and chief is not None:
                cause = f" ({chief.disruption})" if chief.disruption else ""
                why = f"the chief pod is being deleted{cause} and will be replaced"
            self.status.pop("chief", None)
        else:
            if previous.get("uid") and chief.uid and previous["uid"] != chief.uid:
                why = f"the chief pod was replaced (uid {chief.uid})"
            elif chief.restart_count > int(previous.get("restartCount", chief.restart_count)):
                last = chief.last_exit_code
                code = ""
                if last is not None:
                    code = f" after exiting with {exit_summary(last, chief.last_exit_reason)}"
                why = f"the chief container restarted{code} (restart {chief.restart_count})"
            if previous or chief.phase == POD_RUNNING:
                # Remember the chief once it runs (its identity rides along with the
                # Running transition's status write instead of costing one of its own).
                self.status["chief"] = {"uid": chief.uid, "restartCount": chief.restart_count}
        if why:
            self.chief_restarted(why)
        return self.finished()

    def chief_restarted(self, why: str) -> None:
        policy = self.spec.chief_restart_policy
        count = int(self.status.get("chiefRestarts", 0)) + 1
        self.status["chiefRestarts"] = count
        self.status["lastCleanup"] = {
            "time": self.timestamp,
            "policy": str(policy),
            "reason": why,
        }
        self.actions.append(CountMetric(CHIEF_CLEANUPS))
        self.event(WARNING, naming.REASON_CHIEF_RESTARTED, f"{why}; chiefRestartPolicy {policy}")
        if policy == ChiefRestartPolicy.FAIL:
            self.fail(naming.REASON_CHIEF_RESTARTED, f"{why} and chiefRestartPolicy is Fail")
        elif policy == ChiefRestartPolicy.RESTART_JOB:
            # Workers first, then parameter servers: no worker ever sees a half-reset PS.
            order = {naming.WORKER: 0, naming.PS: 1}
            doomed = sorted(
                (p for p in self.live_pods() if p.replica_type in order),
                key=lambda p: (order[p.replica_type], p.index),
            )
            deleted = self.delete_pods(doomed)
            self.status["restartJob"] = {"round": count, "since": self.timestamp}
            self.actions.append(CountMetric(JOB_RESTARTS))
            self.event(
                NORMAL,
                naming.REASON_JOB_RESTART,
                f"restarting the job: deleted {deleted} PS and worker pod(s); parameter servers "
                "come back first, then workers, and the chief restores its checkpoint",
            )
            self.condition(naming.CONDITION_RESTARTING, True, naming.REASON_JOB_RESTART, why)
        else:
            self.event(
                NORMAL,
                naming.REASON_CHIEF_CLEANUP,
                "the runtime resets the sync state (token queue, accumulators) as the chief "
                "restores its checkpoint",
            )

    def create_and_prune(self) -> None:
        job, spec = self.job, self.spec
        counts = spec.replica_counts()
        restarting_job = bool(self.status.get("restartJob"))
        ps_up = all(
            (p := self.pods.get(naming.replica_name(job.name, naming.PS, i))) is not None
            and not p.deleting
            and p.phase == POD_RUNNING
            for i in range(counts[naming.PS])
        )
        # The PodGroup first (the gang scheduler holds the pods until their group exists),
        # the NetworkPolicy next (no pod is ever reachable unprotected), then every Service
        # (peers resolve each other while starting), then pods: PS, chief, workers.
        gang = spec.run_policy.scheduling_policy is not None and self.observed.pod_group_api
        if gang and self.observed.pod_group is not True:
            self.actions.append(CreateChild(manifests.build_pod_group(job)))
        if not self.observed.network_policy:
            self.actions.append(CreateChild(manifests.build_network_policy(job)))
        created_services = 0
        for replica_type, count in counts.items():
            for index in range(count):
                if naming.replica_name(job.name, replica_type, index) in self.observed.services:
                    continue
                service_body = manifests.build_service(job, replica_type, index)
                self.actions.append(CreateChild(service_body))
                created_services += 1
        created_pods = 0
        # Pods of a job whose replicas all existed, gone without the operator restarting
        # them (no restart, resume or RestartJob round explains it): deleted by someone.
        was_created = condition_is_true(
            self.old_status.get("conditions") or [], naming.CONDITION_CREATED
        )
        unexplained = was_created and not (
            self.resumed
            or restarting_job
            or condition_is_true(self.conditions, naming.CONDITION_RESTARTING)
        )
        replaced: list[str] = []
        cluster: dict[str, list[str]] | None = None
        for replica_type, count in counts.items():
            for index in range(count):
                name = naming.replica_name(job.name, replica_type, index)
                if name in self.pods:
                    continue  # present, or still terminating: never create over it
                if restarting_job and replica_type == naming.WORKER and not ps_up:
                    continue  # RestartJob: workers wait for the new parameter servers
                annotations = {}
                if restarting_job and replica_type != naming.CHIEF:
                    restart_round = str(self.status["restartJob"].get("round", ""))
                    annotations[naming.ANNOTATION_RESTART_ROUND] = restart_round
                if cluster is None:
                    cluster = manifests.job_cluster(job)
                pod = manifests.build_pod(
                    job,
                    replica_type,
                    index,
                    default_image=self.default_image,
                    annotations=annotations,
                    cluster=cluster,
                )
                self.actions.append(CreateChild(pod))
                self.pods[name] = ObservedPod(name=name, replica_type=replica_type, index=index)
                created_pods += 1
                if unexplained:
                    replaced.append(name)
        if created_pods:
            self.actions.append(CountMetric(PODS_CREATED, created_pods))
        if replaced:
            message = f"replacing {', '.join(replaced)}: deleted while the job ran"
            self.condition(
                naming.CONDITION_RESTARTING, True, naming.REASON_REPLICA_RESTARTED, message
            )
            self.event(WARNING, naming.REASON_REPLICA_RESTARTED, message)
        # Children beyond the spec's counts (or of unknown types) go.
        extra = [p for p in self.live_pods() if p.index >= counts.get(p.replica_type, 0)]
        self.delete_pods(extra)
        for service in sorted(self.observed.services):
            parsed = naming.parse_replica_name(job.name, service)
            if parsed is not None and parsed[1] >= counts.get(parsed[0], 0):
                self.actions.append(DeleteService(service))
        if extra:
            self.event(
                NORMAL,
                naming.REASON_CHILD_DELETED,
                "deleted out-of-range pod(s): " + ", ".join(sorted(p.name for p in extra)),
            )
        created = f"created {created_pods} pod(s) and {created_services} service(s)"
        all_there = all(
            naming.replica_name(job.name, t, i) in self.pods
            for t, c in counts.items()
            for i in range(c)
        )
        flipped = all_there and self.condition(
            naming.CONDITION_CREATED,
            True,
            naming.REASON_CREATED,
            f"{sum(counts.values())} replicas created: {counts[naming.PS]} PS, 1 chief, "
            f"{counts[naming.WORKER]} worker(s)",
        )
        # One Event per pass: the first pass's creations are the job's creation.
        if flipped:
            self.event(NORMAL, naming.REASON_CREATED, f"all replicas created: {created}")
        elif created_pods or created_services:
            self.event(NORMAL, naming.REASON_CHILD_CREATED, created)
        if restarting_job and all_there and ps_up:
            self.status.pop("restartJob", None)

    def report_progress(self) -> None:
        """Running, Restarting, Degraded and Stalled from the pods and the global step."""
        spec = self.spec
        live = self.live_pods()
        running = [p for p in live if p.phase == POD_RUNNING]
        by_type = {t: [p for p in running if p.replica_type == t] for t in naming.REPLICA_TYPES}
        chief_running = bool(by_type[naming.CHIEF])
        ps_running = len(by_type[naming.PS]) == spec.parameter_servers
        replicas_running = len(by_type[naming.CHIEF]) + len(by_type[naming.WORKER])
        needed = min(spec.replicas_to_aggregate, spec.total_replicas)
        lost = [p.name for p in live if p.replica_type == naming.WORKER and p.phase == POD_FAILED]
        is_running = chief_running and ps_running
        if is_running and self.condition(
            naming.CONDITION_RUNNING,
            True,
            naming.REASON_RUNNING,
            f"chief and {spec.parameter_servers} PS running, {replicas_running} of "
            f"{spec.total_replicas} replicas running",
        ):
            self.event(NORMAL, naming.REASON_RUNNING, "the chief and every PS are running")
        all_running = len(running) == sum(spec.replica_counts().values()) - len(lost)
        if all_running and not self.status.get("restartJob"):
            self.condition(
                naming.CONDITION_RESTARTING,
                False,
                naming.REASON_RUNNING,
                "every replica is running",
            )
        self.report_degraded(lost)
        self.track_step(is_running)
        stalled_why = ""
        left = spec.total_replicas - len(lost)
        if lost and left < needed:
            stalled_why = (
                f"only {left} replica(s) left, fewer than the {needed} gradients each step "
                "waits for: training cannot advance"
            )
        elif is_running:
            last = parse_time(self.status.get("lastProgressTime"))
            timeout = spec.stall_timeout_seconds
            if last is not None and timeout > 0:
                idle = (self.now - last).total_seconds()
                if is_stalled(True, last.timestamp(), self.now.timestamp(), timeout):
                    step = self.status.get("globalStep")
                    stalled_why = f"global step {step} has not advanced for {int(idle)}s"
                else:
                    self.requeue.append(timeout - idle)
        if stalled_why:
            if self.condition(naming.CONDITION_STALLED, True, naming.REASON_STALLED, stalled_why):
                self.event(WARNING, naming.REASON_STALLED, stalled_why)
        else:
            self.condition(
                naming.CONDITION_STALLED, False, naming.REASON_PROGRESSING, "training is advancing"
            )

    def track_step(self, is_running: bool) -> None:
        step = self.observed.global_step
        if step is not None and step != self.status.get("globalStep"):
            self.status["globalStep"] = step
            self.status["lastProgressTime"] = self.timestamp
        elif is_running and "lastProgressTime" not in self.status:
            # The stall clock starts when the job starts running.
            self.status["lastProgressTime"] = self.timestamp

    # -- recovery and stragglers --------------------------------------------------------

    def report_degraded(self, lost: list[str]) -> None:
        """Degraded while updates aggregate fewer than R gradients (the coordinator's R, as
        last read) or while workers are lost for good; an Event on every change."""
        spec = self.spec
        observed = self.observed
        previous = self.status.get("replicasToAggregate")
        if observed.replicas_to_aggregate is not None:
            self.status["replicasToAggregate"] = observed.replicas_to_aggregate
        if observed.live_replicas is not None:
            self.status["liveReplicas"] = observed.live_replicas
        aggregating = self.status.get("replicasToAggregate")
        wanted = spec.replicas_to_aggregate
        if aggregating is not None and aggregating < wanted:
            reason = naming.REASON_AGGREGATING_FEWER
            message = recovery.degraded_message(
                aggregating, wanted, self.replicas_down(), self.status.get("liveReplicas")
            )
        elif lost:
            left = spec.total_replicas - len(lost)
            reason = naming.REASON_DEGRADED
            message = (
                f"lost {len(lost)} worker(s) ({self.lost_workers(lost)}); {left} of "
                f"{spec.total_replicas} replicas left for replicasToAggregate {wanted}"
            )
        else:
            reason, message = naming.REASON_PROGRESSING, ""
        was = condition_is_true(self.conditions, naming.CONDITION_DEGRADED)
        if message:
            flipped = self.condition(naming.CONDITION_DEGRADED, True, reason, message)
            r_changed = previous is not None and previous != aggregating
            if flipped or (was and r_changed):
                self.event(WARNING, naming.REASON_JOB_DEGRADED, f"Degraded: {message}")
            return
        whole = f"aggregating {aggregating} of {wanted} gradients per update"
        if aggregating is None:
            whole = "no replica lost"
        if self.condition(naming.CONDITION_DEGRADED, False, reason, whole):
            self.event(NORMAL, naming.REASON_RECOVERED, f"Recovered: {whole}")

    def lost_workers(self, lost: list[str]) -> str:
        """The lost workers with how each exited (the runtime's reason: a bad model or
        configuration shows here, not only in the pod's log); five at most."""
        said = []
        for name in sorted(lost)[:5]:
            pod = self.pods.get(name)
            code = pod.exit_code if pod is not None else None
            if pod is None or code is None:
                said.append(name)
            else:
                said.append(f"{name}: {exit_summary(code, pod.exit_reason)}")
        more = f" and {len(lost) - 5} more" if len(lost) > 5 else ""
        return "; ".join(said) + more

    def replicas_down(self) -> list[str]:
        """Chief and workers whose pod is not running and ready (by replica key)."""
        ready = self.ready_replicas()
        return [
            naming.replica_key(t, i)
            for t in (naming.CHIEF, naming.WORKER)
            for i in range(self.spec.replica_count(t))
            if naming.replica_key(t, i) not in ready
        ]

    def ready_replicas(self) -> frozenset[str]:
        return frozenset(
            naming.replica_key(p.replica_type, p.index)
            for p in self.live_pods()
            if p.ready and p.phase == POD_RUNNING
        )

    def report_recovery(self) -> None:
        """status.lastRecovery from this pass's failures, then stragglers."""
        observed = self.observed
        rejoined = None
        if observed.restored_step is not None:
            known = self.status.get("restoredStep")
            if known is not None and known != observed.restored_step:
                rejoined = observed.restored_step
            self.status["restoredStep"] = observed.restored_step
        progress = recovery.Progress(
            global_step=self.status.get("globalStep"),
            rejoined_from=rejoined,
            ready=self.ready_replicas(),
        )
        self.track_recovery(progress)
        self.report_straggler()

    def track_recovery(self, progress: recovery.Progress) -> None:
        update = recovery.track_recovery(
            self.status.get("lastRecovery"), self.failures, progress, self.timestamp
        )
        if update.record is not None:
            self.status["lastRecovery"] = update.record
        for failure in update.started:
            self.actions.append(CountMetric(RECOVERIES, labels=(("cause", failure.cause),)))
        if update.ended and update.record is not None:
            started = parse_time(update.record.get("startedAt"))
            took = (self.now - started).total_seconds() if started else None
            self.event(
                NORMAL,
                naming.REASON_REPLICA_RECOVERED,
                recovery.recovered_message(update.record, took),
            )

    def report_straggler(self) -> None:
        """StragglerDetected, and under runPolicy.stragglerPolicy the eviction."""
        policy = self.spec.run_policy.straggler_policy
        threshold = (
            policy.min_drop_fraction if policy else straggler.DEFAULT_MIN_DROP_FRACTION
        )
        ready = self.ready_replicas()
        recovering = recovery.in_progress(self.status.get("lastRecovery"))

        def evictable(replica: str) -> bool:
            # Never the chief (it writes the checkpoints) and one eviction at a time: the
            # last failure's replica must be back and training first.
            return replica.startswith(f"{naming.WORKER}-") and replica in ready and not recovering

        decision = straggler.decide_straggler(
            self.status.get("straggler"),
            self.observed.drop_fractions,
            threshold,
            policy.evict_after_seconds if policy else None,
            self.now,
            evictable,
        )
        if decision.state is None:
            self.status.pop("straggler", None)
        else:
            self.status["straggler"] = decision.state
        if decision.evict_in is not None:
            self.requeue.append(decision.evict_in)
        if decision.detected is not None and decision.state is not None:
            message = straggler.straggler_message(decision.state, threshold)
            self.condition(
                naming.CONDITION_STRAGGLER_DETECTED,
                True,
                naming.REASON_STRAGGLER_DETECTED,
                message,
            )
            self.event(WARNING, naming.REASON_STRAGGLER_DETECTED, f"straggler {message}")
        elif decision.state is not None:
            # Same straggler, the latest fraction (the transition time stays).
            self.condition(
                naming.CONDITION_STRAGGLER_DETECTED,
                True,
                naming.REASON_STRAGGLER_DETECTED,
                straggler.straggler_message(decision.state, threshold),
            )
        if decision.evict is not None:
            self.evict_straggler(decision.evict, policy)
        elif decision.cleared is not None and decision.state is None:
            message = f"{decision.cleared} is no longer a straggler"
            self.condition(
                naming.CONDITION_STRAGGLER_DETECTED,
                False,
                naming.REASON_STRAGGLER_CLEARED,
                message,
            )
            self.event(NORMAL, naming.REASON_STRAGGLER_CLEARED, message)

    def evict_straggler(
        self, replica: str, policy: StragglerPolicy | None
    ) -> None:
        index = int(replica.rsplit("-", 1)[1])
        pod = self.pods.get(naming.replica_name(self.job.name, naming.WORKER, index))
        if pod is None or policy is None:
            return
        self.delete_pods([pod])
        message = (
            f"deleted {pod.name}: its gradients were dropped as stale above "
            f"{100 * policy.min_drop_fraction:.0f}% for {policy.evict_after_seconds}s "
            "(runPolicy.stragglerPolicy); the scheduler places its replacement"
        )
        self.failures = [
            Failure(replica, recovery.CAUSE_STRAGGLER_EVICTED, f"{pod.name} evicted as a straggler")
        ]
        self.track_recovery(
            recovery.Progress(self.status.get("globalStep"), None, self.ready_replicas())
        )
        self.actions.append(CountMetric(STRAGGLER_EVICTIONS))
        self.condition(
            naming.CONDITION_STRAGGLER_DETECTED, False, naming.REASON_STRAGGLER_EVICTED, message
        )
        self.event(WARNING, naming.REASON_STRAGGLER_EVICTED, message)


def _disrupted(pod: ObservedPod) -> str:
    return f"{pod.disruption}; not counted against backoffLimit"


def _creation_order(pod: ObservedPod) -> tuple[int, int]:
    # The chief's verdict first: a chief that finished makes every other exit moot.
    order = {naming.CHIEF: 0, naming.PS: 1, naming.WORKER: 2}
    return order.get(pod.replica_type, 3), pod.index


def plan_job(
    job: Job,
    observed: Observed,
    status: Mapping[str, Any],
    now: datetime,
    *,
    default_image: str = manifests.DEFAULT_IMAGE,
) -> Plan:
    """The actions that move the job's children towards its spec, and its new status.

    ``status`` is the job's current ``.status`` (possibly empty); ``now`` is aware;
    ``default_image`` runs pods whose spec and template name no image.
    """
    return _Planner(job, observed, status, now, default_image).run()
