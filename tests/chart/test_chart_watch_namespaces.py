"""watchNamespaces as the chart renders it: by default a ClusterRole; with the list, the
operator's Role and RoleBinding in each watched namespace and nothing cluster-wide for
jobs, `--namespace` per entry, the PodMonitor on the same namespaces; the deprecated
watchNamespace merged into the list; the leader Lease and node-loss handling's grants
unchanged."""

from __future__ import annotations

from typing import Any

import pytest
from chartlib import (
    CHART,
    MONITORING_API,
    NAMESPACE,
    by_kind,
    helm_template,
    one,
    operator_objects,
    render,
    run,
    tool,
)

TEAMS = "watchNamespaces={team-a,team-b}"
# Leader election's and node-loss handling's objects: the same whatever is watched.
OTHER_RBAC = ("-leader-election", "-nodes", "-node-leases")


def job_rbac(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The operator's own (Cluster)Roles and bindings for jobs and their children."""
    return [o for o in operator_objects(objects)
            if o["kind"] in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
            and not o["metadata"]["name"].endswith(OTHER_RBAC)]  # fmt: skip


def other_rbac(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in operator_objects(objects) if o["metadata"]["name"].endswith(OTHER_RBAC)]


def args_of(objects: list[dict[str, Any]]) -> list[str]:
    return list(one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"])


def watched(objects: list[dict[str, Any]]) -> list[str]:
    return [a.split("=", 1)[1] for a in args_of(objects) if a.startswith("--namespace")]


def test_by_default_every_namespace_through_a_cluster_role() -> None:
    objects = render()
    rbac = job_rbac(objects)
    role, binding = one(rbac, "ClusterRole"), one(rbac, "ClusterRoleBinding")
    assert not by_kind(rbac, "Role") and not by_kind(rbac, "RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": role["metadata"]["name"]}
    sa = one(objects, "ServiceAccount")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
    assert watched(objects) == []


def test_a_role_and_binding_in_each_watched_namespace_and_nothing_cluster_wide() -> None:
    objects = render(sets=[TEAMS], api_versions=[MONITORING_API])
    rbac = job_rbac(objects)
    assert not by_kind(rbac, "ClusterRole") and not by_kind(rbac, "ClusterRoleBinding")
    roles, bindings = by_kind(rbac, "Role"), by_kind(rbac, "RoleBinding")
    assert [r["metadata"]["namespace"] for r in roles] == ["team-a", "team-b"]
    assert [b["metadata"]["namespace"] for b in bindings] == ["team-a", "team-b"]
    # Each Role grants what the cluster-wide ClusterRole does, no more.
    cluster_role = one(job_rbac(render()), "ClusterRole")
    for role, binding in zip(roles, bindings, strict=True):
        assert role["rules"] == cluster_role["rules"]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": role["metadata"]["name"]}  # fmt: skip
        # The operator itself lives in the release namespace.
        sa = one(objects, "ServiceAccount")["metadata"]["name"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}
        ]
    assert watched(objects) == ["team-a", "team-b"]
    pm = one(objects, "PodMonitor")
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    # The leader Lease (release namespace) and the node grants are as without the list.
    assert other_rbac(objects) == other_rbac(render(api_versions=[MONITORING_API]))


def test_podmonitor_namespaces_win_over_the_watched_ones() -> None:
    sets = [TEAMS, "monitoring.podMonitor.namespaces={team-a}"]
    pm = one(render(sets=sets, api_versions=[MONITORING_API]), "PodMonitor")
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}


@pytest.mark.parametrize(
    ("sets", "namespaces"),
    [
        (["watchNamespace=team-c"], ["team-c"]),
        ([TEAMS, "watchNamespace=team-c"], ["team-a", "team-b", "team-c"]),
        ([TEAMS, "watchNamespace=team-a"], ["team-a", "team-b"]),
        ([TEAMS, "watchNamespace="], ["team-a", "team-b"]),
    ],
    ids=["alone", "added", "already-listed", "empty"],
)
def test_the_deprecated_watch_namespace_joins_the_list(
    sets: list[str], namespaces: list[str]
) -> None:
    objects = render(sets=sets, api_versions=[MONITORING_API])
    assert watched(objects) == namespaces
    rbac = job_rbac(objects)
    assert [r["metadata"]["namespace"] for r in by_kind(rbac, "Role")] == namespaces
    assert [b["metadata"]["namespace"] for b in by_kind(rbac, "RoleBinding")] == namespaces
    assert not by_kind(rbac, "ClusterRole")
    assert one(objects, "PodMonitor")["spec"]["namespaceSelector"] == {"matchNames": namespaces}


def test_the_operator_accepts_a_namespace_per_entry() -> None:
    from syncreplicas_operator import cli

    argv = args_of(render(sets=[TEAMS]))
    assert cli.build_parser(argv).parse_args(argv).namespace == ["team-a", "team-b"]


@pytest.mark.parametrize(
    ("value", "field"),
    [("watchNamespaces={Team_A}", "/watchNamespaces/0"),
     ("watchNamespaces={team-a,team-a}", "/watchNamespaces"),
     ("watchNamespaces=team-a", "/watchNamespaces")],
    ids=["not-dns-1123", "duplicate", "not-a-list"],
)  # fmt: skip
def test_the_schema_checks_each_namespace(value: str, field: str) -> None:
    proc = helm_template(sets=[value], check=False)
    assert proc.returncode != 0 and "schema" in proc.stderr and field in proc.stderr, proc.stderr


def test_notes_name_the_watched_namespaces_and_the_deprecation() -> None:
    def notes(*sets: str) -> str:
        args = [tool("helm"), "install", "srj", str(CHART), "--dry-run=client",
                "--namespace", NAMESPACE]  # fmt: skip
        for s in sets:
            args += ["--set", s]
        return run(args).stdout.split("NOTES:", 1)[1]

    listed = notes(TEAMS)
    assert 'namespace(s) "team-a", "team-b" only' in listed and "deprecated" not in listed
    assert "kubectl -n team-a apply -f -" in listed
    alias = notes("watchNamespace=team-c")
    assert 'namespace(s) "team-c" only' in alias
    assert "watchNamespace is deprecated: set watchNamespaces" in alias
    assert "every namespace" in notes()
