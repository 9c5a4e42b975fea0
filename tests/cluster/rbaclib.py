"""Helpers of the RBAC tests (test_rbac.py, rbacrun.py): the chart's rules as rendered, and
with one grant taken out; `syncreplicas operator` on this host under a ServiceAccount of its
own; its requests as the API server's audit log recorded them (it records every
ServiceAccount of ``SA_NAMESPACE``: hack/cluster/clusterlib/controlplane.py, AUDIT_POLICY);
a user's request by impersonation; the objects the scenarios need. Nothing here decides
what is right.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.cluster import kube
from tests.support.groups import stop_group

sys.path.insert(0, str(kube.REPO / "tests" / "chart"))
from chartlib import by_kind, is_user_role, render

SA_NAMESPACE = "syncreplicas-rbac"
AUDIT_LOG = kube.AUDIT_LOG
SYNCREPLICAS = kube.REPO / ".venv" / "bin" / "syncreplicas"
# Every object this module makes outside the tests' own namespaces carries it.
TEST_LABEL = kube.RBAC_TEST_LABEL
NODE_LEASE_NAMESPACE = "kube-node-lease"

Grant = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)
Rule = dict[str, Any]


def user(service_account: str) -> str:
    return f"system:serviceaccount:{SA_NAMESPACE}:{service_account}"


# --- the chart's rules ----------------------------------------------------------------------


@dataclass(frozen=True)
class ChartRbac:
    """The operator's rules as the chart renders them, by where they apply, and the
    operator's arguments."""

    jobs: list[Rule]  # the ClusterRole; with watchNamespaces, the Role of each namespace
    namespaces: list[str]  # where those Roles are (none: the ClusterRole)
    leader: list[Rule]  # leader election's Role (the release namespace)
    nodes: list[Rule]  # node-loss handling's ClusterRole
    node_leases: list[Rule]  # node-loss handling's Role in kube-node-lease
    args: list[str]

    @property
    def lease_name(self) -> str:
        return str(next(r["resourceNames"][0] for r in self.leader if r.get("resourceNames")))

    def grants(self) -> dict[Grant, str]:
        """Every grant, and which of the four it belongs to."""
        found: dict[Grant, str] = {}
        for part in ("jobs", "leader", "nodes", "node_leases"):
            for grant in grants_of(getattr(self, part)):
                assert grant not in found, f"{grant} granted twice"
                found[grant] = part
        return found


def chart_rbac(sets: list[str] | None = None) -> ChartRbac:
    objects = [o for o in render(sets=sets) if not is_user_role(o)]
    roles = {o["metadata"]["name"]: o for o in by_kind(objects, "ClusterRole")
             + by_kind(objects, "Role")}  # fmt: skip
    (deployment,) = by_kind(objects, "Deployment")
    name = deployment["metadata"]["name"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    jobs = [o for o in by_kind(objects, "ClusterRole") + by_kind(objects, "Role")
            if o["metadata"]["name"] == name]  # fmt: skip
    return ChartRbac(
        jobs=jobs[0]["rules"],
        namespaces=[o["metadata"]["namespace"] for o in jobs if o["kind"] == "Role"],
        leader=roles[f"{name}-leader-election"]["rules"],
        nodes=roles[f"{name}-nodes"]["rules"],
        node_leases=roles[f"{name}-node-leases"]["rules"],
        args=list(container["args"]),
    )


def grants_of(rules: Iterable[Rule]) -> set[Grant]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}  # fmt: skip


def without(rules: list[Rule], grant: Grant | None) -> list[Rule]:
    """``rules`` with exactly ``grant`` taken out (each rule split per group and resource,
    its resourceNames kept)."""
    out: list[Rule] = []
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                verbs = [v for v in rule["verbs"] if (group, resource, v) != grant]
                if verbs:
                    out.append({**rule, "apiGroups": [group], "resources": [resource],
                                "verbs": verbs})  # fmt: skip
    return out


def bound(kind: str, name: str, namespace: str | None, rules: list[Rule],
          service_account: str) -> list[dict[str, Any]]:  # fmt: skip
    """A (Cluster)Role of ``rules`` and its binding to ``service_account``."""
    meta: dict[str, Any] = {"name": name, "labels": {TEST_LABEL: "true"}}
    if namespace:
        meta["namespace"] = namespace
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
            "rules": rules}  # fmt: skip
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": f"{kind}Binding", "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": service_account,
                      "namespace": SA_NAMESPACE}],
    }  # fmt: skip
    return [role, binding]


# --- the operator process -------------------------------------------------------------------


def kubeconfig(service_account: str, path: Path) -> Path:
    """A kubeconfig of the cluster's API server holding a token of ``service_account``."""
    token = kube.kubectl("create", "token", service_account, "-n", SA_NAMESPACE,
                         "--duration=1h").stdout.strip()  # fmt: skip
    admin = json.loads(kube.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
    cluster = admin["clusters"][0]
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "rbac",
        "clusters": [{"name": "rbac", "cluster": cluster["cluster"]}],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{"name": "rbac", "context": {"cluster": "rbac", "user": service_account}}],
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@dataclass
class Operator:
    """One `syncreplicas operator` on this host (own process group, stopped by its pid)."""

    kubeconfig: Path
    log: Path
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("POD_NAME", "POD_NAMESPACE")}
        env["KUBECONFIG"] = str(self.kubeconfig)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(SYNCREPLICAS), "operator", *self.args], env=env, stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, timeout=15)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


# --- the audit log ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One request as the API server recorded it (its final stage)."""

    user: str
    verb: str
    group: str
    resource: str  # with its subresource: syncreplicasjobs/status
    namespace: str
    name: str
    code: int
    time: str

    @property
    def grant(self) -> Grant:
        return (self.group, self.resource, self.verb)


@dataclass
class Audit:
    """The audit log read from a byte offset on, the audited ServiceAccounts' requests."""

    offset: int = field(default_factory=lambda: AUDIT_LOG.stat().st_size)
    requests: list[Request] = field(default_factory=list)

    def read(self) -> list[Request]:
        """Read what was added since the last call; every request so far."""
        if AUDIT_LOG.stat().st_size < self.offset:
            self.offset = 0  # rotated (--audit-log-maxsize)
        with AUDIT_LOG.open("rb") as log:
            log.seek(self.offset)
            data = log.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].splitlines():
            event = json.loads(line)
            if event.get("stage") != "ResponseComplete":
                continue  # a watch also has ResponseStarted; every request ends once
            ref = event.get("objectRef") or {}
            if not ref.get("resource"):
                continue  # discovery (/api, /apis/...): no RBAC resource
            sub = ref.get("subresource")
            self.requests.append(Request(
                user=event["user"].get("username", ""), verb=event["verb"],
                group=ref.get("apiGroup", ""),
                resource=ref["resource"] + (f"/{sub}" if sub else ""),
                namespace=ref.get("namespace", ""), name=ref.get("name", ""),
                code=int((event.get("responseStatus") or {}).get("code", 0)),
                time=event["stageTimestamp"],
            ))  # fmt: skip
        return self.requests

    def of(self, service_account: str) -> list[Request]:
        who = user(service_account)
        return [r for r in self.requests if r.user == who]


# --- a user's request, as the API server sees it --------------------------------------------


def request_as(who: str, method: str, path: str, body: Any = None) -> int:
    """One request to the API server in ``who``'s name (impersonated by the cluster's admin,
    as `kubectl --as` does); its HTTP status. Unlike `kubectl patch`, which reads the object
    first, this sends the PATCH itself."""
    from kubernetes import config

    api = config.new_client_from_config(config_file=str(kube.KUBECONFIG))
    try:
        api.set_default_header("Impersonate-User", who)
        content = "application/merge-patch+json" if method == "PATCH" else "application/json"
        params = api.param_serialize(method=method, resource_path=path, body=body,
                                     header_params={"Content-Type": content,
                                                    "Accept": "application/json"},
                                     auth_settings=["BearerToken"])  # fmt: skip
        return int(api.call_api(*params, _request_timeout=30).status)
    finally:
        api.close()


# --- the objects of the scenarios -------------------------------------------------------------


def now_text(micro: bool = False) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S" + (".000000Z" if micro else "Z"), time.gmtime())


def job(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    """A job of one PS and a chief whose pods never run: no node has the label asked for."""
    body = {"replicasToAggregate": 1, "workers": 0, "parameterServers": 1,
            "model": {"entrypoint": "syncreplicas_runtime.models.linear:build"},
            "template": {"spec": {"nodeSelector": {TEST_LABEL: "nowhere"},
                                  "containers": [{"name": "syncreplicas"}]}}}  # fmt: skip
    body.update(spec)
    return {"apiVersion": "syncreplicas.io/v1alpha1", "kind": "SyncReplicasJob",
            "metadata": {"name": name, "namespace": namespace}, "spec": body}  # fmt: skip


def leftover_service(job_name: str, namespace: str) -> dict[str, Any]:
    """A Service of an earlier job of that name with more workers: out of range."""
    labels = {"syncreplicas.io/job-name": job_name, "syncreplicas.io/replica-type": "worker",
              "syncreplicas.io/replica-index": "7"}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"{job_name}-worker-7", "namespace": namespace,
                         "labels": labels},
            "spec": {"clusterIP": "None", "ports": [{"name": "tf", "port": 2222}]}}  # fmt: skip


def fake_node(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Node no kubelet runs, tainted so that nothing but the tests' pods lands there, and
    the Ready status its kubelet would write."""
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {TEST_LABEL: "true",
                                                  "kubernetes.io/hostname": name}},
            "spec": {"taints": [{"key": TEST_LABEL, "value": "true", "effect": "NoSchedule"}]}}
    now = now_text()
    status = {"status": {
        "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
        "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "no kubelet: a test's node", "lastHeartbeatTime": now,
                        "lastTransitionTime": now}]}}  # fmt: skip
    return node, status


def on_node(name: str) -> dict[str, Any]:
    """A pod template for that node only."""
    return {"spec": {
        "nodeSelector": {"kubernetes.io/hostname": name},
        "tolerations": [{"key": TEST_LABEL, "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                         "effect": "NoSchedule"}],
        "containers": [{"name": "syncreplicas"}]}}  # fmt: skip


def node_lease(name: str) -> dict[str, Any]:
    """A node's kubelet Lease, renewed now (and, by nobody, ever again)."""
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": NODE_LEASE_NAMESPACE,
                         "labels": {TEST_LABEL: "true"}},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                     "renewTime": now_text(micro=True)}}  # fmt: skip


def pod_group_crd(group: str, version: str) -> dict[str, Any]:
    """The PodGroup API of a gang scheduler that is not installed (its pods stay Pending)."""
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"podgroups.{group}", "labels": {TEST_LABEL: "true"}},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": "PodGroup", "plural": "podgroups",
                               "singular": "podgroup", "listKind": "PodGroupList"},
                     "versions": [{"name": version, "served": True, "storage": True,
                                   "schema": schema}]}}  # fmt: skip


def keep_out(name: str, user: str) -> list[dict[str, Any]]:
    """An admission policy refusing every write of ``user`` in the namespaces labelled
    TEST_LABEL (reads stay allowed)."""
    meta = {"name": name, "labels": {TEST_LABEL: "true"}}
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": meta,
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"],
                "resources": ["*/*"]}]},
            "matchConditions": [{"name": "that-user",
                                 "expression": f"request.userInfo.username == {user!r}"}],
            "validations": [{"expression": "false", "message": KEPT_OUT}],
        },
    }  # fmt: skip
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": meta,
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {TEST_LABEL: "true"}}}},
    }  # fmt: skip
    return [policy, binding]


KEPT_OUT = "kept out of the RBAC tests' namespaces"
