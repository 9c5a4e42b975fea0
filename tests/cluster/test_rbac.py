"""The chart's RBAC on the real API server: every grant is needed, and enough.

For every (API group, resource, verb) the chart grants the operator, a real operator
(`syncreplicas operator` on this host, under a ServiceAccount of its own) runs with exactly
that grant taken out of the rules as the chart renders them, in a namespace of its own,
while a small job goes through the part of its life that needs the grant. The API server's
audit log shows its 403 for exactly that grant, and the job shows what a user would see.
Operators with every grant take their jobs through the same lives without one refusal.
All of them run at once, each watching only its namespace. The chart's own operator, which
watches every namespace, is kept out of these namespaces by an admission policy that
refuses its writes there (it goes on serving every other namespace).

watchNamespaces on the cluster: an operator with the chart's Roles in two namespaces leaves
a job in a third alone and says so once; a namespace editor (Kubernetes' `edit` role, into
which the chart aggregates its user roles) creates and scales jobs in their namespace, is
refused in another, and gets children in their namespace only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from tests.cluster import kube
from tests.cluster.rbaclib import KEPT_OUT, TEST_LABEL, Grant, Request, chart_rbac, keep_out
from tests.cluster.rbacrun import (
    CHART_OPERATOR,
    PREFIX,
    REPAIRED,
    RUN,
    TEAM_A,
    TEAM_B,
    TEAM_C,
    Case,
    Run,
    Seen,
    apply,
    case_for,
    created,
)

# An operator per grant of the chart (some forty) starts at once on this host, beside
# PodGroup CRDs made for the run and an admission policy that keeps the chart's operator
# out of their namespaces: with the cluster to itself. (Beside another pytest worker's
# tests, 2026-11-28, the gang-scheduled cases events/create and pods/create failed their
# jobs with GangSchedulerMissing: their operators found no PodGroup API served yet.)
pytestmark = pytest.mark.exclusive

# --- what each case shows -------------------------------------------------------------------

WRITES = {"create", "update", "patch", "delete", "deletecollection"}
KINDS = {"pod": "Pod", "service": "Service", "networkpolicy": "NetworkPolicy"}


@dataclass(frozen=True)
class Outcome:
    """One case after the run: its requests as the API server recorded them, what its
    namespace showed, its operator's log and exit code."""

    case: Case
    requests: list[Request]
    log: str
    exit_code: int | None

    @property
    def refused(self) -> set[Grant]:
        return {r.grant for r in self.requests if r.code in (401, 403)}

    @property
    def seen(self) -> Seen:
        return self.case.there()

    def created(self, resource: str, since: str = "") -> int:
        return created(self.requests, resource, since)

    def event(self, reason: str, *words: str) -> None:
        message = self.seen.events.get(reason, "")
        assert message and all(w in message for w in words), (reason, words, self.seen.events)


def left_alone(o: Outcome) -> None:
    """The job as its user created it: no status, no Event, nothing written."""
    assert o.seen.job_seen and o.seen.now.get("SyncReplicasJob"), o.seen
    assert not o.seen.status_seen and not o.seen.events and not o.seen.finalizers, o.seen
    assert not [r for r in o.requests if r.verb in WRITES and r.code < 400]


def failed_create(kind: str) -> Callable[[Outcome], None]:
    def check(o: Outcome) -> None:
        o.event("FailedCreate", f"create {kind} ", "HTTP 403")
        assert ("ReplicaFailure", "True", "FailedCreate") in o.seen.conditions
        assert o.created("pods") == 0
    return check


def write_failed(method: str, path: str) -> Callable[[Outcome], None]:
    def check(o: Outcome) -> None:
        o.event("WriteFailed", f"{method} /", path, "HTTP 403")
    return check


def not_repaired(resource: str) -> Callable[[Outcome], None]:
    """A child deleted under the running job is not made again (the baseline's is)."""
    def check(o: Outcome) -> None:
        assert o.case.repaired_at, "the repair job never had all its children"
        assert o.created(resource, since=o.case.repaired_at) == 0
        kind, name = REPAIRED[resource].split("/")
        assert name not in o.seen.now.get(KINDS[kind], set())
    return check


def node_not_lost(o: Outcome) -> None:
    """The fake node's kubelet stopped renewing, unnoticed: its pods stay on it."""
    assert "NodeLost" not in o.seen.events
    assert o.seen.bound_pods == {"node-ps-0", "node-chief-0"} <= o.seen.now.get("Pod", set())
    assert o.created("pods") == 2


def node_lost_by_listing(resource: str) -> Callable[[Outcome], None]:
    """Still noticed: the operator lists again every second instead of watching."""
    def check(o: Outcome) -> None:
        assert "NodeLost" in o.seen.events
        lists = [r for r in o.requests if r.resource == resource and r.verb == "list"]
        assert len(lists) >= 10, len(lists)
    return check


def never_leads(o: Outcome) -> None:
    left_alone(o)
    assert " leads " not in o.log


def loses_the_lease(o: Outcome) -> None:
    assert " leads " in o.log and "lost the lease" in o.log and o.exit_code == 3, o.exit_code


def unfinalized(o: Outcome) -> None:
    """Handled, but kopf cannot put its finalizer on the job (kept all along)."""
    assert o.created("pods") >= 2 and o.seen.job_seen >= 3, o.seen
    assert "syncreplicas.io/finalizer" not in o.seen.finalizers


def no_events(o: Outcome) -> None:
    # Events are best effort: the status is written all the same.
    assert not o.seen.events and o.created("pods") == 2 and o.seen.status_seen, o.seen


def budget_created_unlisted(o: Outcome) -> None:
    """The job lives its life; its budget is created without a look first (a loop that
    starts again, after a restart or a leader's handover, creates it again: a 409)."""
    assert "PodDisruptionBudget exists is not known" in o.log, o.log[-3000:]
    assert o.created("poddisruptionbudgets") == 1 and o.created("pods") == 2, o.seen
    o.event("TTLExpired")


def pod_group_created_unlisted(o: Outcome) -> None:
    """As for the budget: the PodGroup created without a look (a loop that starts again
    creates it again: a 409), the job's life unchanged."""
    assert "PodGroup exists is not known" in o.log, o.log[-3000:]
    assert o.created("podgroups") == 1 and o.created("pods") == 2, o.seen
    o.event("TTLExpired")


def job_outlives_ttl(o: Outcome) -> None:
    write_failed("DELETE", "/syncreplicasjobs/life")(o)
    o.event("TTLExpired")
    assert o.seen.now.get("SyncReplicasJob") == {"life"}


def status_never_written(o: Outcome) -> None:
    write_failed("PATCH", "/syncreplicasjobs/life/status")(o)
    assert not o.seen.status_seen and o.created("pods") == 2


def pods_not_cleaned_up(o: Outcome) -> None:
    write_failed("DELETE", "/pods/life-")(o)
    assert "CleanedUp" not in o.seen.events


def leftover_kept(o: Outcome) -> None:
    write_failed("DELETE", "/services/life-worker-7")(o)
    assert "life-worker-7" in o.seen.now.get("Service", set())


# (API group, resource, verb) -> what breaks without it, and how the test sees it.
EXPECTED: dict[Grant, tuple[str, Callable[[Outcome], None]]] = {
    ("syncreplicas.io", "syncreplicasjobs", "list"): ("the job is never handled", left_alone),
    ("syncreplicas.io", "syncreplicasjobs", "watch"):
        ("a job created after the start is never handled", left_alone),
    ("syncreplicas.io", "syncreplicasjobs", "patch"):
        ("kopf's finalizer never on the job", unfinalized),
    ("syncreplicas.io", "syncreplicasjobs", "delete"):
        ("the job outlives its TTL; WriteFailed Event", job_outlives_ttl),
    ("syncreplicas.io", "syncreplicasjobs/status", "patch"):
        ("no status ever; WriteFailed Event", status_never_written),
    ("", "pods", "list"): ("the job is never handled (kopf's pod index)", left_alone),
    ("", "pods", "watch"): ("a deleted pod is not replaced", not_repaired("pods")),
    ("", "pods", "create"): ("no pods; FailedCreate, ReplicaFailure", failed_create("Pod")),
    ("", "pods", "delete"):
        ("pods outlive the failed job (cleanPodPolicy); WriteFailed", pods_not_cleaned_up),
    ("", "services", "list"): ("the job is never handled (kopf's Service index)", left_alone),
    ("", "services", "watch"): ("a deleted Service is not replaced", not_repaired("services")),
    ("", "services", "create"):
        ("no Services, no pods; FailedCreate, ReplicaFailure", failed_create("Service")),
    ("", "services", "delete"): ("an out-of-range Service stays; WriteFailed", leftover_kept),
    ("networking.k8s.io", "networkpolicies", "list"):
        ("the job is never handled (kopf's NetworkPolicy index)", left_alone),
    ("networking.k8s.io", "networkpolicies", "watch"):
        ("a deleted NetworkPolicy is not replaced", not_repaired("networkpolicies")),
    ("networking.k8s.io", "networkpolicies", "create"):
        ("no NetworkPolicy, no pods; FailedCreate", failed_create("NetworkPolicy")),
    ("scheduling.x-k8s.io", "podgroups", "list"):
        ("the PodGroup created without a look (again, answering 409, after a restart)",
         pod_group_created_unlisted),
    ("scheduling.x-k8s.io", "podgroups", "create"):
        ("no PodGroup, no pods; FailedCreate", failed_create("PodGroup")),
    ("scheduling.x-k8s.io", "podgroups", "delete"):
        ("the PodGroup is not released; WriteFailed", write_failed("DELETE", "/podgroups/life")),
    ("scheduling.volcano.sh", "podgroups", "list"):
        ("the PodGroup created without a look (again, answering 409, after a restart)",
         pod_group_created_unlisted),
    ("scheduling.volcano.sh", "podgroups", "create"):
        ("no PodGroup, no pods; FailedCreate", failed_create("PodGroup")),
    ("scheduling.volcano.sh", "podgroups", "delete"):
        ("the PodGroup is not released; WriteFailed", write_failed("DELETE", "/podgroups/life")),
    ("policy", "poddisruptionbudgets", "list"):
        ("the budget created without a look (again, answering 409, after a restart)",
         budget_created_unlisted),
    ("policy", "poddisruptionbudgets", "create"):
        ("no budget, no pods; FailedCreate", failed_create("PodDisruptionBudget")),
    ("", "events", "create"): ("no Event on the job (its status is still written)", no_events),
    ("coordination.k8s.io", "leases", "create"):
        ("never leads (no Lease yet): the job is never handled", never_leads),
    ("coordination.k8s.io", "leases", "get"):
        ("never leads: the job is never handled", never_leads),
    ("coordination.k8s.io", "leases", "patch"):
        ("leads, cannot renew, stops (exit 3) past the renew deadline", loses_the_lease),
    ("", "nodes", "list"): ("a lost node goes unnoticed", node_not_lost),
    ("", "nodes", "watch"): ("Nodes listed every second", node_lost_by_listing("nodes")),
    # The kubelets' Leases, in kube-node-lease (leader election's Lease is read by get).
    ("coordination.k8s.io", "leases", "list"):
        ("a node whose kubelet stops is not noticed", node_not_lost),
    ("coordination.k8s.io", "leases", "watch"):
        ("kubelet Leases listed every second", node_lost_by_listing("leases")),
}


# --- the run ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chart_operator_kept_out(cluster_up: None) -> Iterator[None]:
    """The chart's operator refused every write in this module's namespaces (it watches
    every namespace and would act on these jobs too), while it goes on serving every other
    namespace: other tests may be using it meanwhile."""
    try:
        apply(keep_out(f"syncreplicas-rbac-test-{RUN}", CHART_OPERATOR))
        probe = f"{PREFIX}probe"
        apply([{"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": probe, "labels": {TEST_LABEL: "true"}}}])  # fmt: skip

        def refused() -> bool:
            said = kube.kubectl("--as", CHART_OPERATOR, "create", "service", "clusterip", "x",
                                "--clusterip=None", "-n", probe, "--dry-run=server",
                                check=False)  # fmt: skip
            return KEPT_OUT in said.stderr

        kube.eventually("the admission policy in force", refused, 30, interval=0.5)
        kube.kubectl("delete", "namespace", probe, "--wait=false")
        yield
    finally:
        kube.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
                     "-l", f"{TEST_LABEL}=true", check=False)  # fmt: skip


@pytest.fixture(scope="module")
def run(chart_operator_kept_out: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    chart = chart_rbac()
    cases = [case_for(grant, part) for grant, part in sorted(chart.grants().items())
             if grant not in ELSEWHERE]  # fmt: skip
    cases += [Case("full-life", "life", gang="Volcano"), Case("full-leader", "leader"),
              Case("full-repair", "repair"), Case("full-node", "node"),
              Case("watch", "watch", namespace=TEAM_A)]  # fmt: skip
    the_run = Run(tmp_path_factory.mktemp("rbac"), cases)
    try:
        the_run.set_up(chart, chart_rbac(sets=[f"watchNamespaces={{{TEAM_A},{TEAM_C}}}"]))
        the_run.poll()
        the_run.stop()
        print("rbac run:", {k: round(v, 1) for k, v in the_run.timings.items()})
        yield the_run
    finally:
        the_run.tear_down()


def outcome(run: Run, slug: str) -> Outcome:
    case = run.case(slug)
    assert case.operator is not None
    return Outcome(case, run.audit.of(slug), case.operator.text(), case.operator.exit_code())


# --- every grant is needed ------------------------------------------------------------------


# Grants whose loss the scenarios here cannot show, each with the test that uses it under
# the chart's RBAC (and what breaks without it).
ELSEWHERE: dict[Grant, str] = {
    ("", "pods", "patch"): "tests/cluster/test_spares.py: a spare is relabelled as the replica "
                           "it takes over (without it: SpareFailed, the replica gets a new pod)",
}


def test_every_grant_of_the_chart_has_its_case() -> None:
    assert set(EXPECTED) | set(ELSEWHERE) == set(chart_rbac().grants())
    assert not set(EXPECTED) & set(ELSEWHERE)


@pytest.mark.parametrize("grant", sorted(EXPECTED), ids=lambda g: "/".join(g).lstrip("/"))
def test_without_a_grant_the_operator_is_refused_it_and_the_job_shows_it(
    run: Run, grant: Grant
) -> None:
    case = next(c for c in run.cases if c.removed == grant)
    found = outcome(run, case.slug)
    what, check = EXPECTED[grant]
    # The API server refused exactly that verb, and nothing else.
    assert found.refused == {grant}, (found.refused, found.log[-3000:])
    try:
        check(found)
    except AssertionError as error:
        raise AssertionError(f"without {grant}, expected: {what}\n{found.seen}\n"
                             f"{found.log[-3000:]}") from error  # fmt: skip


# --- the chart's grants are enough ----------------------------------------------------------

BASELINES = ("full-life", "full-leader", "full-repair", "full-node", "watch")


@pytest.mark.parametrize("slug", BASELINES)
def test_with_every_grant_no_request_is_refused(run: Run, slug: str) -> None:
    found = outcome(run, slug)
    assert found.requests, "nothing recorded: is the audit policy in force?"
    refused = [r for r in found.requests if r.code in (401, 403)]
    assert not refused, refused


def test_with_every_grant_each_job_lives_its_whole_life(run: Run) -> None:
    for slug in ("full-life", "full-leader"):
        found = outcome(run, slug)
        assert found.seen.job_gone, found.seen
        for reason in ("JobCreated", "DeadlineExceeded", "CleanedUp", "TTLExpired"):
            found.event(reason)
        mine = found.requests
        for resource in ("podgroups", "networkpolicies", "poddisruptionbudgets"):
            assert created(mine, resource) == 1, resource
        assert 200 in [r.code for r in mine if r.resource == "podgroups" and r.verb == "delete"]
        assert ("life-worker-7", 200) in [(r.name, r.code) for r in mine
                                          if r.resource == "services" and r.verb == "delete"]
    assert " leads " in outcome(run, "full-leader").log
    repair = outcome(run, "full-repair")
    assert "syncreplicas.io/finalizer" in repair.seen.finalizers
    for resource in REPAIRED:
        assert created(repair.requests, resource, since=repair.case.repaired_at) == 1, resource
    node = outcome(run, "full-node")
    node.event("NodeLost", "kubelet Lease not renewed", "node-ps-0", "node-chief-0")
    # Listed once, then watched (without the watch: every second).
    for resource in ("nodes", "leases"):
        assert len([r for r in node.requests if r.resource == resource
                    and r.verb == "list"]) == 1, resource  # fmt: skip


# --- watchNamespaces ------------------------------------------------------------------------


def test_a_job_outside_the_watched_namespaces_is_left_alone(run: Run) -> None:
    found = outcome(run, "watch")
    outside, theirs = found.case.there(TEAM_B), found.case.there(TEAM_C)
    assert outside.now.get("SyncReplicasJob") == {"outside"}
    assert outside.now.keys() == {"SyncReplicasJob"} and not outside.status_seen
    assert not outside.events and not outside.finalizers, outside
    assert theirs.now.get("Pod") == {"theirs-ps-0", "theirs-chief-0"}, theirs
    # Not a single request there, and the operator says once whose jobs it acts on.
    assert not [r for r in found.requests if r.namespace == TEAM_B]
    said = [line for line in found.log.splitlines() if "left alone" in line]
    assert len(said) == 1 and f"namespace(s) {TEAM_A}, {TEAM_C} only" in said[0], said


def test_a_namespace_editor_runs_jobs_there_and_nowhere_else(run: Run) -> None:
    editor = run.editor
    assert editor["create in A"] == 0 and editor["scale in A"] == 0, editor
    for action in ("create in B", "scale in B"):
        assert "(Forbidden)" in str(editor[action]), editor
    assert editor["patch in B"] == 403, editor
    edited: Seen = run.case("watch").there(TEAM_A)
    assert edited.now.get("Pod") == {"edited-ps-0", "edited-chief-0", "edited-worker-0",
                                     "edited-worker-1"}, edited  # fmt: skip
    # Its children, wherever they are: in the editor's namespace only.
    assert run.edited_children == {TEAM_A}
