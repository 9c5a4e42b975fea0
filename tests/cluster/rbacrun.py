"""Every case of test_rbac.py at once, on the cluster: their namespaces, ServiceAccounts and
grants, one operator each, their jobs as each operator gets ready, the children a repair
job loses, the fake node's Lease; a poller that keeps what each namespace shows; the audit
log of it all. The test decides what is right.

Scenarios (each case's namespace holds one job):
  life    created, failed at its deadline (pods deleted, PodGroup released), deleted by
          its TTL; an out-of-range Service of an earlier job deleted on the way
  leader  the same, the operator electing itself leader through a Lease in its namespace
  repair  running; a pod, a Service and the NetworkPolicy deleted, to be made again
  node    its pods on a fake node (no kubelet) whose kubelet Lease goes stale
  watch   watchNamespaces: an operator with the chart's Roles in two namespaces, a job in
          a third; a namespace editor's jobs
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from tests.cluster import kube
from tests.cluster.objectstream import ObjectStream
from tests.cluster.rbaclib import (
    NODE_LEASE_NAMESPACE,
    SA_NAMESPACE,
    TEST_LABEL,
    Audit,
    ChartRbac,
    Grant,
    Operator,
    Request,
    bound,
    fake_node,
    job,
    kubeconfig,
    leftover_service,
    node_lease,
    on_node,
    pod_group_crd,
    request_as,
    without,
)

RUN = uuid.uuid4().hex[:4]
PREFIX = f"rbac-{RUN}-"
FAKE_NODE = f"srj-rbac-{RUN}"
# Above the kubelets' 10 s between renewals (the real nodes stay healthy), and short.
NODE_LEASE_GRACE = 12
ACTIVE_DEADLINE = 4  # a life job fails (DeadlineExceeded) this long after it starts
TTL = 2  # and is deleted this long after
# Kubernetes' own defaults (15 s, 10 s, 2 s). With a 4 s renew deadline, forty operators
# starting at once on two cores left the leases/patch case's leader no time to send one
# renewal (its reads timed out) before it stopped: no 403 to show (CI, 2026-12-02).
ELECTION = ["--leader-election-lease-duration=15", "--leader-election-renew-deadline=10",
            "--leader-election-retry-period=2"]  # fmt: skip
UNRENEWED: Grant = ("coordination.k8s.io", "leases", "patch")  # a leader's renewal
POD_GROUPS = {"scheduling.x-k8s.io": ("v1alpha1", "Coscheduling"),
              "scheduling.volcano.sh": ("v1beta1", "Volcano")}  # fmt: skip
# Children the repair scenario deletes under a running job; the operator makes them again.
# The NetworkPolicy first: the pod's deletion wakes the job's loop after it.
REPAIRED = {"networkpolicies": "networkpolicy/repair-grpc",
            "services": "service/repair", "pods": "pod/repair-ps-0"}  # fmt: skip
CHART_OPERATOR = f"system:serviceaccount:{kube.RELEASE_NAMESPACE}:syncreplicas-operator"
EDITOR = f"rbac-editor-{RUN}"
TEAM_A, TEAM_B, TEAM_C = (f"{PREFIX}team-{t}" for t in "abc")
MARGIN = 8.0  # seconds past the full-grant cases' ends, for the others' retries
BUDGET = 100.0  # seconds of jobs at most (a loaded machine; a run ends when its cases are done)


@dataclass
class Seen:
    """What the poller saw in one namespace: the last snapshot and everything so far (the
    job's status, conditions and finalizers from every version the watch delivered)."""

    now: dict[str, set[str]] = field(default_factory=dict)  # kind -> names, last snapshot
    bound_pods: set[str] = field(default_factory=set)
    status_seen: bool = False
    finalizers: set[str] = field(default_factory=set)
    conditions: set[tuple[str, str, str]] = field(default_factory=set)
    events: dict[str, str] = field(default_factory=dict)  # reason -> last message
    job_seen: int = 0  # snapshots that showed the job
    job_gone: bool = False


@dataclass
class Case:
    slug: str
    scenario: str  # life | leader | repair | node | watch
    removed: Grant | None = None
    gang: str = "Coscheduling"
    namespace: str = ""
    operator: Operator | None = None
    started: float = 0.0
    created: float | None = None
    repaired_at: str = ""  # when the repair scenario deleted the children (audit time)
    seen: dict[str, Seen] = field(default_factory=dict)  # namespace -> what was seen

    def __post_init__(self) -> None:
        self.namespace = self.namespace or f"{PREFIX}{self.slug}"

    def there(self, namespace: str = "") -> Seen:
        return self.seen.setdefault(namespace or self.namespace, Seen())


# Grants whose loss shows on a job that keeps running: the watches of the children the
# repair scenario deletes, and kopf's patch of the job (its finalizer).
KEEPS_RUNNING: frozenset[Grant] = frozenset({
    ("", "pods", "watch"), ("", "services", "watch"),
    ("networking.k8s.io", "networkpolicies", "watch"),
    ("syncreplicas.io", "syncreplicasjobs", "patch"),
})  # fmt: skip


def case_for(grant: Grant, part: str) -> Case:
    """The case without ``grant`` (of the chart's ``part``: jobs, leader, nodes or
    node_leases), named after it."""
    group, resource, verb = grant
    scenario = {"jobs": "life", "leader": "leader"}.get(part, "node")
    if grant in KEEPS_RUNNING:
        scenario = "repair"
    name = resource.replace("/", "-")
    if group in POD_GROUPS:
        name = f"{POD_GROUPS[group][1].lower()}-{name}"
    if part == "node_leases":
        name = f"node-{name}"
    gang = POD_GROUPS.get(group, ("", "Coscheduling"))[1]
    return Case(f"{name}-{verb}", scenario, grant, gang)


def scenario_job(case: Case) -> dict[str, Any]:
    if case.scenario == "node":
        return job("node", case.namespace, template=on_node(FAKE_NODE))
    if case.scenario == "repair":
        return job("repair", case.namespace)
    # Created, failed at its deadline (pods deleted, PodGroup released), deleted by TTL.
    return job("life", case.namespace, runPolicy={
        "activeDeadlineSeconds": ACTIVE_DEADLINE, "ttlSecondsAfterFinished": TTL,
        "cleanPodPolicy": "All", "schedulingPolicy": {"gangScheduler": case.gang}})  # fmt: skip


def operator_args(chart: ChartRbac, case: Case) -> list[str]:
    """The chart's arguments of the operator, then this case's: no ports, leader election
    only where the case is about it, its namespace only (the watch case: the chart's)."""
    args = [a for a in chart.args if a != "operator"]
    args += ["--metrics-port=0", "--liveness-port=0"]
    if case.scenario != "watch":
        args.append(f"--namespace={case.namespace}")
    if case.scenario == "node":
        args.append(f"--node-lease-grace-seconds={NODE_LEASE_GRACE}")
    if case.scenario == "leader":
        args += ["--leader-elect=on", f"--leader-election-namespace={case.namespace}",
                 f"--leader-election-id={chart.lease_name}", *ELECTION]  # fmt: skip
    else:
        args.append("--leader-elect=off")
    return args


def rbac_for(chart: ChartRbac, case: Case) -> list[dict[str, Any]]:
    """The case's grants: the chart's, less the one removed; the jobs' Role in the case's
    namespace (the watch case: in each namespace the chart renders one for)."""
    sa, name = case.slug, f"{PREFIX}{case.slug}"
    objects: list[dict[str, Any]] = []
    for namespace in chart.namespaces or [case.namespace]:
        objects += bound("Role", "operator", namespace, without(chart.jobs, case.removed), sa)
    if case.scenario == "leader":
        objects += bound("Role", "leader", case.namespace, without(chart.leader, case.removed),
                         sa)  # fmt: skip
    objects += bound("ClusterRole", name, None, without(chart.nodes, case.removed), sa)
    objects += bound("Role", name, NODE_LEASE_NAMESPACE, without(chart.node_leases, case.removed),
                     sa)  # fmt: skip
    return objects


def apply(objects: list[dict[str, Any]]) -> None:
    """Server-side: one request per object (a client-side apply reads each one first)."""
    kube.kubectl("apply", "--server-side", "--field-manager=rbac-test", "-f", "-",
                 input=yaml.safe_dump_all(objects))  # fmt: skip


@dataclass
class Run:
    """Every case at once: namespaces, grants, operators and jobs; a poller that keeps what
    each namespace shows; the audit log of it all."""

    tmp: Path
    cases: list[Case]
    audit: Audit = field(default_factory=Audit)
    editor: dict[str, int | str] = field(default_factory=dict)  # action -> 0 / HTTP status
    edited_children: set[str] = field(default_factory=set)  # namespaces of "edited"'s
    created_crds: list[str] = field(default_factory=list)
    node_created: bool = False
    lease_created: bool = False
    timings: dict[str, float] = field(default_factory=dict)
    jobs: ObjectStream | None = None  # every version of every job (status, finalizers)

    def case(self, slug: str) -> Case:
        return next(c for c in self.cases if c.slug == slug)

    def of(self, scenario: str) -> list[Case]:
        return [c for c in self.cases if c.scenario == scenario]

    # -- before --------------------------------------------------------------------------

    def set_up(self, chart: ChartRbac, watched: ChartRbac) -> None:
        begun = time.monotonic()
        namespaces = [c.namespace for c in self.cases] + [TEAM_B, TEAM_C]
        objects: list[dict[str, Any]] = [
            {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": n, "labels": {TEST_LABEL: "true"}}}
            for n in [SA_NAMESPACE, *namespaces]
        ]  # fmt: skip
        for case in self.cases:
            objects.append({"apiVersion": "v1", "kind": "ServiceAccount",
                            "metadata": {"name": case.slug, "namespace": SA_NAMESPACE}})
            objects += rbac_for(watched if case.scenario == "watch" else chart, case)
            if case.scenario in ("life", "leader"):
                objects.append(leftover_service("life", case.namespace))
        # The editor: Kubernetes' own edit role, in namespace A only.
        objects.append({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "editor", "namespace": TEAM_A},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": EDITOR}]})  # fmt: skip
        # A run just before may still be deleting the audited namespace.
        kube.kubectl("wait", "--for=delete", f"namespace/{SA_NAMESPACE}", "--timeout=120s")
        existing = kube.kubectl("get", "crd", "-o", "name").stdout
        for group, (version, _) in POD_GROUPS.items():
            if f"podgroups.{group}" not in existing:
                objects.append(pod_group_crd(group, version))
                self.created_crds.append(f"podgroups.{group}")
        apply(objects)
        for crd in self.created_crds:
            kube.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
        with ThreadPoolExecutor(8) as pool:
            configs = list(pool.map(
                lambda c: kubeconfig(c.slug, self.tmp / f"{c.slug}.kubeconfig"), self.cases))
        self.audit.read()
        self.jobs = ObjectStream("syncreplicasjobs", self.saw_job)
        for case, config in zip(self.cases, configs, strict=True):
            chart_of = watched if case.scenario == "watch" else chart
            case.operator = Operator(config, self.tmp / f"{case.slug}.log",
                                     operator_args(chart_of, case))  # fmt: skip
            case.operator.start()
            case.started = time.monotonic()
        self.timings["set up"] = time.monotonic() - begun

    # -- while it runs ---------------------------------------------------------------------

    def ready(self, case: Case) -> bool:
        """The operator has listed its jobs (or been refused something): a job created now
        reaches it through the watch, not that first list."""
        mine = self.audit.of(case.slug)
        return (any(r.resource == "syncreplicasjobs" and r.verb == "list" for r in mine)
                or any(r.code == 403 for r in mine)
                or time.monotonic() - case.started > 20)  # fmt: skip

    def create_jobs(self) -> None:
        """The jobs of every case whose operator is ready (the node cases' all at once, with
        the fake node: Kubernetes counts a Node without a kubelet lost after 50 s)."""
        nodes = self.of("node")
        if not self.node_created and all(self.ready(c) for c in nodes):
            node, status = fake_node(FAKE_NODE)
            apply([node])
            kube.kubectl("patch", "node", FAKE_NODE, "--subresource=status", "--type=merge",
                         "-p", json.dumps(status))  # fmt: skip
            self.node_created = True
        due = [c for c in self.cases if c.created is None and self.ready(c)
               and (c.scenario != "node" or self.node_created)]  # fmt: skip
        for case in due:
            case.created = time.monotonic()
            if case.scenario == "watch":
                threading.Thread(target=self.editor_acts_once, daemon=True).start()
        jobs = [scenario_job(c) for c in due if c.scenario != "watch"]
        if jobs:
            apply(jobs)

    def editor_acts_once(self) -> None:
        try:
            self.editor_acts()
        except Exception as error:  # the test reads it (a thread's exception goes nowhere)
            self.editor["error"] = repr(error)

    def editor_acts(self) -> None:
        """What the namespace editor may do, and may not (kubectl as that user, and one
        PATCH sent as is: `kubectl patch` would read the job first)."""
        def as_editor(action: str, *args: str, input: str | None = None) -> None:
            done = kube.kubectl("--as", EDITOR, *args, check=False, input=input)
            self.editor[action] = done.stderr if done.returncode else 0

        as_editor("create in A", "create", "-f", "-", input=yaml.safe_dump(job(
            "edited", TEAM_A, workers=1, elasticPolicy={"minWorkers": 0, "maxWorkers": 2})))
        as_editor("scale in A", "scale", "srj/edited", "--replicas=2", "-n", TEAM_A)
        apply([job("theirs", TEAM_C), job("outside", TEAM_B)])
        as_editor("create in B", "create", "-f", "-", input=yaml.safe_dump(job("mine", TEAM_B)))
        as_editor("scale in B", "scale", "srj/outside", "--replicas=2", "-n", TEAM_B)
        path = f"/apis/syncreplicas.io/v1alpha1/namespaces/{TEAM_B}/syncreplicasjobs/outside"
        self.editor["patch in B"] = request_as(EDITOR, "PATCH", path,
                                               {"spec": {"runPolicy": {"suspend": True}}})
        self.editor["done"] = 0

    def snapshot(self) -> None:
        kinds = ["syncreplicasjobs", "pods", "services", "networkpolicies",
                 "poddisruptionbudgets", *(f"podgroups.{g}" for g in POD_GROUPS)]  # fmt: skip
        items = kube.kubectl_json("get", ",".join(kinds), "-A")["items"]
        items += kube.kubectl_json("get", "events", "-A", "--field-selector",
                                   "involvedObject.kind=SyncReplicasJob")["items"]  # fmt: skip
        now: dict[str, dict[str, set[str]]] = {}
        for obj in items:
            meta = obj["metadata"]
            namespace = meta.get("namespace", "")
            if not namespace.startswith(PREFIX):
                continue
            seen = self.seen(namespace)
            if obj["kind"] == "Event":
                seen.events[obj.get("reason", "")] = obj.get("message", "")
                continue
            now.setdefault(namespace, {}).setdefault(obj["kind"], set()).add(meta["name"])
            if obj["kind"] == "SyncReplicasJob":
                seen.job_seen += 1
            elif obj["kind"] == "Pod" and obj["spec"].get("nodeName") == FAKE_NODE:
                seen.bound_pods.add(meta["name"])
        for case in self.cases:
            for namespace, seen in case.seen.items():
                before = seen.now.get("SyncReplicasJob")
                seen.now = now.get(namespace, {})
                seen.job_gone |= bool(before) and not seen.now.get("SyncReplicasJob")

    def saw_job(self, event: str, obj: dict[str, Any]) -> None:
        """Every version of every job (the job stream's thread): its status, conditions,
        finalizers and deletion, however briefly it lived."""
        meta = obj.get("metadata") or {}
        if not meta.get("namespace", "").startswith(PREFIX):
            return
        seen = self.seen(meta["namespace"])
        seen.job_gone |= event == "DELETED"
        status = obj.get("status") or {}
        seen.status_seen |= bool(status)
        seen.finalizers |= set(meta.get("finalizers") or [])
        seen.conditions |= {(c["type"], c["status"], c.get("reason", ""))
                            for c in status.get("conditions", [])}  # fmt: skip

    def seen(self, namespace: str) -> Seen:
        case = next((c for c in self.cases if c.namespace == namespace), self.case("watch"))
        return case.there(namespace)

    def poll(self) -> None:
        """Create the jobs as their operators get ready, break the repair jobs' children
        and age the fake node's Lease when due, until the full-grant cases are done (and a
        margin for the others' retries) or the budget is spent."""
        begun = time.monotonic()
        deadline = begun + BUDGET
        while time.monotonic() < deadline:
            self.audit.read()
            self.create_jobs()
            self.snapshot()
            self.break_repair_jobs()
            self.renew_node_lease()
            if deadline - time.monotonic() > MARGIN and self.baselines_done():
                self.timings["full grants done"] = time.monotonic() - begun
                deadline = time.monotonic() + MARGIN
            time.sleep(0.5)
        self.timings["jobs"] = time.monotonic() - begun

    def break_repair_jobs(self) -> None:
        """Delete a pod, a Service and the NetworkPolicy of each repair job, once it has
        them all."""
        for case in self.of("repair"):
            have = case.there().now
            if case.repaired_at or not ({"repair-ps-0", "repair-chief-0"} <= have.get("Pod", set())
                                        and "repair" in have.get("Service", set())
                                        and have.get("NetworkPolicy")):  # fmt: skip
                continue
            case.repaired_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            kube.kubectl("delete", *REPAIRED.values(), "-n", case.namespace, "--wait=false")

    def renew_node_lease(self) -> None:
        """The fake node's kubelet Lease, renewed once its pods are on it, then never."""
        nodes = self.of("node")
        if self.lease_created or any(c.created is None for c in nodes):
            return
        if all(len(c.there().bound_pods) >= 2 for c in nodes) or \
                time.monotonic() - max(c.created or 0 for c in nodes) > 15:  # fmt: skip
            apply([node_lease(FAKE_NODE)])
            self.lease_created = True

    def baselines_done(self) -> bool:
        """Whether every full-grant case is through its scenario, and the leader that cannot
        renew has stopped; when each got there is kept in ``timings`` (seconds from the
        first job)."""
        repair = self.case("full-repair")
        mine = self.audit.of(repair.slug)
        watch = self.case("watch")
        done = {
            "full-life": self.case("full-life").there().job_gone,
            "full-leader": self.case("full-leader").there().job_gone,
            "full-node": "NodeLost" in self.case("full-node").there().events,
            "full-repair": bool(repair.repaired_at) and all(
                created(mine, r, since=repair.repaired_at) for r in REPAIRED),
            "watch": "done" in self.editor and len(watch.there(TEAM_A).now.get("Pod", ())) == 4
            and bool(watch.there(TEAM_C).now.get("Pod")),
            # A leader that cannot renew stops past its renew deadline: wait for its exit.
            "unrenewed": all(c.operator is not None and c.operator.exit_code() is not None
                             for c in self.of("leader") if c.removed == UNRENEWED),
        }  # fmt: skip
        first = min((c.created for c in self.cases if c.created is not None), default=0.0)
        for name, ok in done.items():
            if ok:
                self.timings.setdefault(name, time.monotonic() - first)
        return all(done.values())

    # -- after ---------------------------------------------------------------------------

    def stop(self) -> None:
        begun = time.monotonic()
        found = kube.kubectl_json("get", "pods,services,networkpolicies,poddisruptionbudgets",
                                  "-A", "-l", "syncreplicas.io/job-name=edited")  # fmt: skip
        self.edited_children = {o["metadata"]["namespace"] for o in found["items"]}
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda c: c.operator.stop() if c.operator else None, self.cases))
        if self.jobs is not None:
            self.jobs.stop()
        self.audit.read()
        self.timings["stop"] = time.monotonic() - begun

    def tear_down(self) -> None:
        if self.jobs is not None:
            self.jobs.stop()
        for case in self.cases:
            if case.operator is not None:
                case.operator.stop()
        namespaces = [c.namespace for c in self.cases] + [TEAM_B, TEAM_C]
        for case in self.of("node"):  # no kubelet will confirm that their containers ended
            kube.kubectl("delete", "pods", "--all", "-n", case.namespace, "--force",
                         "--grace-period=0", "--wait=false", check=False)  # fmt: skip
        with ThreadPoolExecutor(4) as pool:  # kubectl deletes them one by one
            list(pool.map(lambda some: kube.kubectl("delete", "namespace", *some,
                                                    "--wait=false", check=False),
                          [[SA_NAMESPACE, *namespaces][i::4] for i in range(4)]))  # fmt: skip
        # No operator of theirs is left to release the jobs' finalizers.
        found = kube.kubectl_json("get", "syncreplicasjobs", "-A")["items"]
        mine = [(j["metadata"]["namespace"], j["metadata"]["name"]) for j in found
                if j["metadata"]["namespace"].startswith(PREFIX)]  # fmt: skip
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda nj: kube.kubectl(
                "patch", "srj", nj[1], "-n", nj[0], "--type=merge",
                "-p", '{"metadata":{"finalizers":null}}', check=False), mine))  # fmt: skip
        kube.kubectl("delete", "node", FAKE_NODE, "--wait=false", check=False)
        # One request per kind (kubectl would delete them one by one).
        selector = f"labelSelector={TEST_LABEL}%3Dtrue"
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        leases = "/apis/coordination.k8s.io/v1"
        for collection in (f"{rbac}/clusterroles", f"{rbac}/clusterrolebindings",
                           f"{rbac}/namespaces/{NODE_LEASE_NAMESPACE}/roles",
                           f"{rbac}/namespaces/{NODE_LEASE_NAMESPACE}/rolebindings",
                           f"{leases}/namespaces/{NODE_LEASE_NAMESPACE}/leases"):  # fmt: skip
            kube.kubectl("delete", "--raw", f"{collection}?{selector}", check=False)
        if self.created_crds:
            kube.kubectl("delete", "crd", *self.created_crds, "--wait=false", check=False)


def created(requests: list[Request], resource: str, since: str = "") -> int:
    """How many ``resource`` the requests created (201), from ``since`` on (the audit log's
    time format: RFC 3339, UTC, microseconds)."""
    return sum(1 for r in requests if r.resource == resource and r.verb == "create"
               and r.code == 201 and r.time >= since)  # fmt: skip
