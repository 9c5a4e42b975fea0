"""Warm spare pods on the operator's side: how a spare is built and seen, when the plan hands
a replica to one (and to which), how many it keeps, and what apply does with a spare that
refuses."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from syncreplicas_operator.controller.apply import apply_plan
from syncreplicas_operator.controller.expectations import Expectations
from syncreplicas_operator.core import naming, spares
from syncreplicas_operator.core.actions import AssignSpare, CreateChild, DeletePod
from syncreplicas_operator.core.nodes import NodeHealth
from syncreplicas_operator.core.plan import pipeline
from syncreplicas_operator.core.plan.children import reconcile_children
from syncreplicas_operator.core.plan.context import Plan
from syncreplicas_operator.core.plan.spares import keep_spares
from syncreplicas_operator.core.spares import ObservedSpare
from syncreplicas_operator.core.status import observe_pod

from tests.support.jobs import planner_job
from tests.support.plans import T0, context, pods_of


class RecordingApi:
    """The writes apply makes, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def delete_many(self, kind: str, namespace: str, names: list[str],
                    grace_period_seconds: int | None = None) -> int:  # fmt: skip
        self.calls.append(("delete_many", kind, namespace, names, grace_period_seconds))
        return len(names)

    def patch_pod(self, namespace: str, name: str, patch: Any) -> bool:
        self.calls.append(("patch_pod", namespace, name, patch))
        return True

    def post_event(self, namespace: str, job: Any, event_type: str, reason: str,
                   message: str) -> None:  # fmt: skip
        self.calls.append(("post_event", event_type, reason, message))


class RecordingCounters:
    def count(self, name: str, amount: int = 1, labels: Any = None) -> None:
        pass

    def observe(self, name: str, value: float, labels: Any) -> None:
        pass

JOB = planner_job(runPolicy={"spares": 2})


def spare(name: str = "j-spare-0", **changes: Any) -> ObservedSpare:
    fields: dict[str, Any] = {
        "uid": f"u-{name}",
        "phase": "Running",
        "ready": True,
        "pod_ip": "10.0.0.9",
        "node_name": "n1",
        "token": "t" * 64,
        "shape": spares.shape(JOB, naming.WORKER, default_image="img"),
        **changes,
    }
    return ObservedSpare(name=name, **fields)


def without(pods: list[Any], name: str) -> list[Any]:
    return [p for p in pods if p.name != name]


# --- the spare pod ------------------------------------------------------------------------


def test_a_spare_is_a_worker_pod_without_an_identity_in_spare_mode() -> None:
    pod = spares.build_spare(JOB, 3, "secret", default_image="img")
    meta = pod["metadata"]
    assert meta["name"] == "j-spare-3"
    assert meta["labels"][naming.LABEL_SPARE] == "true"
    assert naming.LABEL_REPLICA_TYPE not in meta["labels"]  # no Service selects it
    assert naming.LABEL_PUBLISHED not in meta["labels"]
    assert naming.ANNOTATION_INCARNATION not in meta["annotations"]
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[naming.ENV_SPARE_TOKEN] == "secret"
    assert env[naming.ENV_SPARE_STATE] == spares.SPARE_STATE
    assert env[naming.ENV_METRICS_PORT] == str(JOB.spec.metrics.port)
    assert not set(env) & {naming.ENV_TF_CONFIG, naming.ENV_JOB, naming.ENV_INCARNATION}
    worker = pipeline.manifests.build_pod(JOB, naming.WORKER, 0, default_image="img")
    assert pod["spec"]["restartPolicy"] == worker["spec"]["restartPolicy"]
    assert container["image"] == worker["spec"]["containers"][0]["image"]
    assert container["readinessProbe"] == worker["spec"]["containers"][0]["readinessProbe"]
    # Seen as a spare, never as a replica; its secret and shape read back.
    raw = {**pod, "status": {"phase": "Running", "podIP": "10.1.1.1",
                             "containerStatuses": [{"name": "syncreplicas", "ready": True}]}}
    seen = spares.observe_spare(raw)
    assert seen is not None and seen.ready and seen.token == "secret"
    assert seen.shape == spares.shape(JOB, naming.WORKER, default_image="img")
    assert observe_pod(raw) is None


def test_the_shape_tells_roles_a_spare_may_become() -> None:
    assert spares.shape(JOB, naming.PS) == spares.shape(JOB, naming.WORKER)
    # The chief's checkpoint emptyDir is the operator's: every spare has it, so a spare
    # may become the chief, and it keeps writing checkpoints there.
    chief = planner_job(runPolicy={"spares": 1}, training={"checkpointDir": "/ckpt"})
    assert spares.shape(chief, naming.CHIEF) == spares.shape(chief, naming.WORKER)
    pod = spares.build_spare(chief, 0, "s")
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "syncreplicas-checkpoints", "mountPath": "/ckpt"} in mounts
    # A chief that stops for good on failure (chiefRestartPolicy Fail: restartPolicy Never)
    # is not: its pod's restart policy differs.
    fail = planner_job(chiefRestartPolicy="Fail")
    assert spares.shape(fail, naming.CHIEF) != spares.shape(fail, naming.WORKER)
    # A role's own template (more memory) makes another shape.
    big = planner_job(ps={"template": {"spec": {"containers": [
        {"name": "syncreplicas", "resources": {"limits": {"memory": "4Gi"}}}]}}})
    assert spares.shape(big, naming.PS) != spares.shape(big, naming.WORKER)


def test_the_assignment_is_the_replicas_own_variables_and_nothing_else() -> None:
    env = spares.assignment_env(JOB, naming.PS, 0, 1234)
    pod = pipeline.manifests.build_pod(JOB, naming.PS, 0, incarnation=1234)
    want = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env[naming.ENV_TF_CONFIG] == want[naming.ENV_TF_CONFIG]
    assert json.loads(env[naming.ENV_TF_CONFIG])["task"] == {"type": "ps", "index": 0}
    assert env[naming.ENV_INCARNATION] == "1234"
    assert env[naming.ENV_WARM_RESTARTS] == "OnFailure"
    assert all(k == "TF_CONFIG" or k.startswith("SYNCREPLICAS_") for k in env)
    patch = spares.takeover_patch(JOB, naming.PS, 0, 1234)
    labels = patch["metadata"]["labels"]
    assert labels[naming.LABEL_REPLICA_TYPE] == "ps" and labels[naming.LABEL_SPARE] is None
    assert labels[naming.LABEL_PUBLISHED] == "true"  # the replica's Service selects it
    assert patch["metadata"]["annotations"][naming.ANNOTATION_INCARNATION] == "1234"


# --- the plan -----------------------------------------------------------------------------


def test_a_replica_whose_pod_is_gone_goes_to_a_ready_spare_not_a_new_pod() -> None:
    pods = without(pods_of(JOB), "j-ps-0")
    ctx = context(JOB, pods, spares=(spare("j-spare-0"), spare("j-spare-1")))
    reconcile_children(ctx)
    assigns = [a for a in ctx.actions if isinstance(a, AssignSpare)]
    assert [(a.spare, a.replica) for a in assigns] == [("j-spare-0", "ps-0")]
    assert not [a for a in ctx.actions if isinstance(a, CreateChild) and a.kind == "Pod"]
    assign = assigns[0]
    assert (assign.address, assign.port, assign.token) == ("10.0.0.9", 9090, "t" * 64)
    incarnation = int(dict(assign.env)[naming.ENV_INCARNATION])
    assert incarnation >= int(pipeline.children.new_incarnation(ctx))
    holder = ctx.holder(naming.PS, 0)
    assert holder is not None and holder.name == "j-spare-0" and holder.incarnation == incarnation
    assert "j-spare-0" not in ctx.spares


@pytest.mark.parametrize(
    ("phase", "taken"),
    [
        ("Running", False),  # still terminating: its process may still run
        ("Failed", True),  # its container has exited (SIGTERM: 143): the spare takes over
        ("Succeeded", True),
    ],
)
def test_a_pod_being_deleted_hands_its_replica_to_a_spare_once_it_has_stopped(
    phase: str, taken: bool
) -> None:
    pods = [replace(p, deleting=True, phase=phase, published=False) if p.name == "j-ps-0"
            else p for p in pods_of(JOB)]  # fmt: skip
    ctx = context(JOB, pods, spares=(spare("j-spare-0"),))
    reconcile_children(ctx)
    assigns = [(a.spare, a.replica) for a in ctx.actions if isinstance(a, AssignSpare)]
    assert assigns == ([("j-spare-0", "ps-0")] if taken else [])
    # Never a new pod over the old one (the same name) while its object is there.
    assert not [a for a in ctx.actions if isinstance(a, CreateChild) and a.kind == "Pod"]
    holder = ctx.holder(naming.PS, 0)
    assert holder is not None and holder.name == ("j-spare-0" if taken else "j-ps-0")


def test_a_stopped_pod_without_a_spare_waits_for_its_object_to_go() -> None:
    pods = [replace(p, deleting=True, phase="Failed") if p.name == "j-ps-0" else p
            for p in pods_of(JOB)]  # fmt: skip
    ctx = context(JOB, pods)
    reconcile_children(ctx)
    assert not [a for a in ctx.actions if isinstance(a, CreateChild | AssignSpare)]


@pytest.mark.parametrize(
    ("why", "changes"),
    [
        ("not ready", {"ready": False}),
        ("going", {"deleting": True}),
        ("no address yet", {"pod_ip": ""}),
        ("built for another spec", {"shape": "0" * 16}),
        ("on a lost node", {"node_name": "gone"}),
    ],
)
def test_a_spare_that_cannot_serve_is_passed_over(why: str, changes: dict[str, Any]) -> None:
    nodes = NodeHealth(lost={"gone": "NotReady"})
    pods = without(pods_of(JOB), "j-worker-1")
    ctx = context(JOB, pods, spares=(spare(**changes),), nodes=nodes)
    reconcile_children(ctx)
    assert not [a for a in ctx.actions if isinstance(a, AssignSpare)], why
    created = [a.name for a in ctx.actions if isinstance(a, CreateChild) and a.kind == "Pod"]
    assert created == ["j-worker-1"]


def test_no_spare_under_a_restart_job_round() -> None:
    pods = without(pods_of(JOB), "j-ps-0")
    status = {"restartJob": {"round": 1}}
    ctx = context(JOB, pods, status=status, spares=(spare(),))
    reconcile_children(ctx)
    assert not [a for a in ctx.actions if isinstance(a, AssignSpare)]


def test_a_spare_held_replica_counts_as_there() -> None:
    pods = without(pods_of(JOB), "j-ps-0")
    held = pods_of(JOB)[0]
    pods.append(replace(held, name="j-spare-0"))
    ctx = context(JOB, pods)
    reconcile_children(ctx)
    assert not [a for a in ctx.actions if isinstance(a, CreateChild) and a.kind == "Pod"]
    assert ctx.holder(naming.PS, 0) is not None


def test_spares_are_started_once_every_replica_runs() -> None:
    ctx = context(JOB, pods_of(JOB), spares=(spare("j-spare-1"),), entropy="e")
    keep_spares(ctx)
    created = [a for a in ctx.actions if isinstance(a, CreateChild)]
    assert [a.name for a in created] == ["j-spare-0"]
    env = {e["name"]: e["value"] for e in created[0].body["spec"]["containers"][0]["env"]}
    assert env[naming.ENV_SPARE_TOKEN] == spares.token_for("e", "j-spare-0")
    assert ctx.status["spares"] == {"active": 1, "ready": 1}
    # Not while a replica still waits for its pod, or for its pod to run: replicas first.
    ctx = context(JOB, without(pods_of(JOB), "j-worker-0"))
    keep_spares(ctx)
    assert not ctx.actions
    pending = [replace(p, phase="Pending") if p.name == "j-ps-0" else p for p in pods_of(JOB)]
    ctx = context(JOB, pending)
    keep_spares(ctx)
    assert not ctx.actions


def test_the_spare_behind_a_takeover_starts_after_the_refill_delay() -> None:
    # ps-0 held by spare 0, which took it over 4 s ago (its incarnation: the operator's
    # clock then, in ms); spares: 2, so two are missing.
    took_over = int(T0.timestamp() * 1000) - 4000
    pods = without(pods_of(JOB), "j-ps-0")
    pods.append(replace(pods_of(JOB)[0], name="j-spare-0", incarnation=took_over))
    ctx = context(JOB, pods, spare_refill_delay=10.0)
    keep_spares(ctx)
    assert not [a for a in ctx.actions if isinstance(a, CreateChild)]
    assert ctx.requeue == [pytest.approx(6.0)]  # the pass comes back when the delay is over
    for now, delay in ((T0 + timedelta(seconds=6.5), 10.0), (T0, 0.0)):
        ctx = context(JOB, pods, now=now, spare_refill_delay=delay)
        keep_spares(ctx)
        created = [a.name for a in ctx.actions if isinstance(a, CreateChild)]
        assert created == ["j-spare-1", "j-spare-2"], (now, delay)
    # A pod that took its replica over long ago, or a job without takeovers: no wait.
    old = [replace(p, incarnation=took_over - 60_000) if p.name == "j-spare-0" else p
           for p in pods]  # fmt: skip
    for observed in (old, pods_of(JOB)):
        ctx = context(JOB, observed, spare_refill_delay=10.0)
        keep_spares(ctx)
        assert [a for a in ctx.actions if isinstance(a, CreateChild)] and not ctx.requeue


def test_a_spare_name_a_replica_kept_is_not_reused() -> None:
    pods = without(pods_of(JOB), "j-ps-0")
    pods.append(replace(pods_of(JOB)[0], name="j-spare-0"))
    ctx = context(JOB, pods)
    keep_spares(ctx)
    assert [a.name for a in ctx.actions if isinstance(a, CreateChild)] == [
        "j-spare-1", "j-spare-2"]


def test_spares_that_cannot_serve_or_are_too_many_go() -> None:
    nodes = NodeHealth(lost={"gone": "NotReady"})
    waiting = (
        spare("j-spare-0", phase="Failed"),
        spare("j-spare-1", node_name="gone"),
        spare("j-spare-2", shape="0" * 16),
        spare("j-spare-3"),
        spare("j-spare-4"),
        spare("j-spare-5"),
    )
    ctx = context(JOB, pods_of(JOB), spares=waiting, nodes=nodes)
    keep_spares(ctx)
    deleted = {a.name: a.grace_period_seconds for a in ctx.actions if isinstance(a, DeletePod)}
    assert deleted == {"j-spare-0": None, "j-spare-1": 0, "j-spare-2": None, "j-spare-5": None}
    assert not [a for a in ctx.actions if isinstance(a, CreateChild)]


def test_a_finished_or_suspended_job_keeps_no_spare() -> None:
    suspended = planner_job(runPolicy={"spares": 2, "suspend": True})
    plan = pipeline.plan_job(suspended, context(suspended, pods_of(suspended),
                                                spares=(spare(),)).observed, {}, pipeline_now())
    assert "j-spare-0" in [a.name for a in plan.actions if isinstance(a, DeletePod)]
    done = {"conditions": [{"type": "Succeeded", "status": "True", "reason": "r",
                            "message": "", "lastTransitionTime": "t"}]}
    plan = pipeline.plan_job(JOB, context(JOB, [], spares=(spare(),)).observed, done,
                             pipeline_now())
    assert [a.name for a in plan.actions if isinstance(a, DeletePod)] == ["j-spare-0"]


def pipeline_now() -> Any:
    from tests.support.plans import T0

    return T0


def test_without_spares_the_plan_writes_nothing_about_them() -> None:
    job = planner_job()
    plan = pipeline.plan_job(job, context(job, pods_of(job)).observed, {}, pipeline_now())
    assert "spares" not in plan.status
    assert not [a for a in plan.actions if isinstance(a, AssignSpare)]


# --- apply --------------------------------------------------------------------------------

JOB_BODY = {"metadata": {"namespace": "ns", "name": "j", "uid": "uid-1"}}


def assign_plan() -> Plan:
    pods = without(pods_of(JOB), "j-ps-0")
    ctx = context(JOB, pods, spares=(spare(),))
    reconcile_children(ctx)
    actions = tuple(a for a in ctx.actions if isinstance(a, AssignSpare))
    return Plan(actions=actions, status={})


def test_apply_posts_the_assignment_then_relabels_the_spare() -> None:
    api, calls = RecordingApi(), []

    def took(address: str, port: int, token: str, env: dict[str, str]) -> str:
        calls.append((address, port, token, env[naming.ENV_INCARNATION]))
        return ""

    expectations = Expectations()
    apply_plan(api, RecordingCounters(), JOB_BODY, assign_plan(), expectations,  # type: ignore[arg-type]
               assign=took)
    assert calls and calls[0][:3] == ("10.0.0.9", 9090, "t" * 64)
    patches = [c for c in api.calls if c[0] == "patch_pod"]
    assert patches and patches[0][2] == "j-spare-0"
    assert "j-spare-0" in expectations.assigned
    assert any(c[0] == "post_event" and naming.REASON_SPARE_ASSIGNED in c for c in api.calls)
    # Until the watch shows the relabelled pod, the spare is seen as that replica.
    observed = expectations.observe("j", without(pods_of(JOB), "j-ps-0"), set(), True,
                                    [spare()])  # fmt: skip
    assert not observed.spares
    held = [p for p in observed.pods if p.name == "j-spare-0"]
    assert held and (held[0].replica_type, held[0].index) == ("ps", 0)


def test_a_spare_that_refuses_is_deleted_and_says_why() -> None:
    api = RecordingApi()
    expectations = Expectations()
    apply_plan(api, RecordingCounters(), JOB_BODY, assign_plan(), expectations,  # type: ignore[arg-type]
               assign=lambda *_: "HTTP 401: wrong token")  # fmt: skip
    assert ("delete_many", "Pod", "ns", ["j-spare-0"], 0) in api.calls
    assert not [c for c in api.calls if c[0] == "patch_pod"]
    events = [c for c in api.calls if c[0] == "post_event"]
    assert events and naming.REASON_SPARE_FAILED in events[0] and "401" in str(events[0])
    assert not expectations.assigned
