"""Kueue's topology-aware scheduling on the operator's side: a role's topology annotations
become its pod set's topologyRequest; a pod set admitted with a topology assignment gets
its pods gated, labelled and annotated for Kueue's ungater; a pod set without one does not;
conflicting annotations hold the job saying which."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from syncreplicas_operator.core import kueue, kueuetas
from syncreplicas_operator.core.actions import CreateChild
from syncreplicas_operator.core.kueue import ObservedWorkload
from syncreplicas_operator.core.plan import pipeline
from syncreplicas_operator.core.plan.queue import admit

from tests.support.jobs import planner_job
from tests.support.plans import T0, condition, context

RACK = "syncreplicas.io/rack"


def queued(**spec: Any) -> Any:
    return replace(planner_job(**spec), labels={kueue.QUEUE_NAME_LABEL: "lq"})


def worker_annotations(**annotations: str) -> dict[str, Any]:
    return {"worker": {"template": {"metadata": {"annotations": annotations}}}}


TAS_JOB = queued(**worker_annotations(**{kueuetas.REQUIRED: RACK,
                                         kueuetas.GROUP_NAME: "together"}))  # fmt: skip


def tas_admission(job: Any, tas_roles: tuple[str, ...]) -> ObservedWorkload:
    sets = kueue.pod_sets(job, default_image="img")
    assignments = []
    for s in sets:
        one: dict[str, Any] = {"name": s["name"], "count": s["count"],
                               "flavors": {"cpu": "tas", "memory": "tas"}}  # fmt: skip
        if s["name"] in tas_roles:
            one["topologyAssignment"] = {"levels": ["kubernetes.io/hostname"], "slices": [
                {"domainCount": 1, "podCounts": {"universal": s["count"]},
                 "valuesPerLevel": [{"universal": "node-1"}]}]}  # fmt: skip
        assignments.append(one)
    conditions = tuple({"type": t, "status": "True", "reason": "r", "message": ""}
                       for t in ("QuotaReserved", "Admitted"))  # fmt: skip
    return ObservedWorkload(
        name=kueue.workload_name(job), uid="w", resource_version="1", generation=1,
        templates=kueue.templates_hash(sets), counts=kueue.counts(job),
        conditions=conditions,
        admission={"clusterQueue": "tas", "podSetAssignments": assignments},
    )  # fmt: skip


def created_pods(job: Any, wl: ObservedWorkload) -> dict[str, dict[str, Any]]:
    observed = context(job, [], workload=wl, kueue=True, kueue_served=True).observed
    plan = pipeline.plan_job(job, observed, {}, T0, default_image="img")
    return {a.body["metadata"]["name"]: a.body for a in plan.actions
            if isinstance(a, CreateChild) and a.kind == "Pod"}  # fmt: skip


def test_the_annotations_become_the_pod_sets_topology_request() -> None:
    sets = {s["name"]: s for s in kueue.pod_sets(TAS_JOB, default_image="img")}
    assert sets["worker"]["topologyRequest"] == {"required": RACK, "podSetGroupName": "together"}
    assert "topologyRequest" not in sets["ps"] and "topologyRequest" not in sets["chief"]
    preferred = queued(**worker_annotations(**{kueuetas.PREFERRED: RACK}))
    (worker,) = [s for s in kueue.pod_sets(preferred, default_image="img")
                 if s["name"] == "worker"]  # fmt: skip
    assert worker["topologyRequest"] == {"preferred": RACK}


def test_parameter_servers_and_workers_asked_into_one_group_share_it() -> None:
    asked = {"metadata": {"annotations": {kueuetas.REQUIRED: RACK,
                                          kueuetas.GROUP_NAME: "ps-and-workers"}}}  # fmt: skip
    job = queued(ps={"template": asked}, worker={"template": asked})
    sets = {s["name"]: s for s in kueue.pod_sets(job, default_image="img")}
    want = {"required": RACK, "podSetGroupName": "ps-and-workers"}
    assert sets["ps"]["topologyRequest"] == want and sets["worker"]["topologyRequest"] == want
    assert "topologyRequest" not in sets["chief"]


def test_asking_for_a_topology_changes_the_templates_hash_and_asking_none_does_not() -> None:
    plain = queued()
    before = kueue.templates_hash(kueue.pod_sets(plain, default_image="img"))
    sets = kueue.pod_sets(plain, default_image="img")
    assert kueue.templates_hash(sets) == before
    assert kueue.templates_hash(kueue.pod_sets(TAS_JOB, default_image="img")) != before


def test_admitted_by_tas_the_roles_pods_are_gated_labelled_and_annotated() -> None:
    wl = tas_admission(TAS_JOB, ("worker",))
    pods = created_pods(TAS_JOB, wl)
    workers = [p for n, p in pods.items() if "-worker-" in n]
    others = [p for n, p in pods.items() if "-worker-" not in n]
    assert len(workers) == 2 and len(others) == 2
    for pod in workers:
        assert pod["spec"]["schedulingGates"] == [{"name": kueuetas.GATE}]
        assert pod["metadata"]["labels"][kueuetas.PODSET_LABEL] == "worker"
        annotations = pod["metadata"]["annotations"]
        assert annotations[kueuetas.WORKLOAD_ANNOTATION] == wl.name
        assert annotations[kueuetas.REQUIRED] == RACK  # Kueue counts it as a TAS pod
    for pod in others:
        assert "schedulingGates" not in pod["spec"]
        assert kueuetas.PODSET_LABEL not in pod["metadata"]["labels"]


def test_a_role_admitted_by_tas_without_asking_is_gated_too() -> None:
    # A TAS-only ClusterQueue assigns every pod set a topology (unconstrained by default).
    wl = tas_admission(TAS_JOB, ("ps", "chief", "worker"))
    for name, pod in created_pods(TAS_JOB, wl).items():
        assert pod["spec"]["schedulingGates"] == [{"name": kueuetas.GATE}], name
        assert pod["metadata"]["labels"][kueuetas.PODSET_LABEL] in ("ps", "chief", "worker")
        # Marked as Kueue's job framework marks it: else Kueue's ungater never counts it.
        asked = "-worker-" in name
        assert (kueuetas.UNCONSTRAINED in pod["metadata"]["annotations"]) is not asked, name


def test_a_users_own_scheduling_gate_is_kept_beside_kueues() -> None:
    job = queued(worker={"template": {
        "metadata": {"annotations": {kueuetas.REQUIRED: RACK}},
        "spec": {"schedulingGates": [{"name": "example.com/mine"}]}}})  # fmt: skip
    pods = created_pods(job, tas_admission(job, ("worker",)))
    gates = [g["name"] for n, p in pods.items() if "-worker-" in n
             for g in p["spec"]["schedulingGates"]]  # fmt: skip
    assert gates == ["example.com/mine", kueuetas.GATE] * 2


def test_conflicting_annotations_hold_the_job_naming_the_field() -> None:
    job = queued(**worker_annotations(**{kueuetas.REQUIRED: RACK, kueuetas.PREFERRED: RACK}))
    ctx = context(job, [], workload=None, kueue=True, kueue_served=True)
    assert admit(ctx) is True
    assert not [a for a in ctx.actions if isinstance(a, CreateChild)]
    assert condition(ctx, "Suspended") == ("True", kueue.REASON_QUEUED)
    (suspended,) = [c for c in ctx.status["conditions"] if c["type"] == "Suspended"]
    assert suspended["message"].startswith("spec.worker.template.metadata.annotations")
    assert kueuetas.PREFERRED in suspended["message"]
    assert ("Warning", kueue.REASON_QUEUED) in [(a.type, a.reason) for a in ctx.actions
                                                 if hasattr(a, "reason")]  # fmt: skip
