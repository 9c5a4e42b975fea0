"""The operator's replicas as the chart renders them: two by default, one acting through a
Lease in the release namespace (and only there), spread over nodes, evicted one at a time,
rolled one at a time; a single replica without election when asked; bad timings refused."""

from __future__ import annotations

from typing import Any

import pytest
from chartlib import NAMESPACE, by_kind, helm_template, one, operator_objects, render


def deployment(sets: list[str] | None = None) -> dict[str, Any]:
    return one(render(sets=sets), "Deployment")


def args_of(dep: dict[str, Any]) -> list[str]:
    return list(dep["spec"]["template"]["spec"]["containers"][0]["args"])


def leader_roles(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in operator_objects(objects) if o["kind"] in ("Role", "RoleBinding")
            and o["metadata"]["name"].endswith("-leader-election")]  # fmt: skip


def test_two_replicas_elect_a_leader_by_default() -> None:
    objects = render()
    dep = one(objects, "Deployment")
    name = dep["metadata"]["name"]
    assert dep["spec"]["replicas"] == 2
    # Rolled one at a time, a new follower up before an old replica stops.
    assert dep["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    args = args_of(dep)
    for arg in ("--leader-elect=on", f"--leader-election-namespace={NAMESPACE}",
                f"--leader-election-id={name}", "--leader-election-lease-duration=15",
                "--leader-election-renew-deadline=10", "--leader-election-retry-period=2"):
        assert arg in args, args
    container = dep["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("valueFrom") for e in container["env"]}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # Spread over nodes, preferred: one node still runs both.
    anti = dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == dep["spec"]["selector"][
        "matchLabels"]
    # Evicted one at a time.
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["metadata"]["namespace"] == NAMESPACE
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": dep["spec"]["selector"]}


def test_the_lease_is_granted_in_the_release_namespace_only_by_name() -> None:
    objects = render(sets=["watchNamespace=team-a"])
    role, binding = leader_roles(objects)
    assert role["kind"] == "Role" and binding["kind"] == "RoleBinding"
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NAMESPACE
    name = one(objects, "Deployment")["metadata"]["name"]
    # Creating cannot be narrowed to a name; everything else is.
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "resourceNames": [name], "verbs": ["get", "patch"]},
    ]  # fmt: skip
    sa = one(objects, "ServiceAccount")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_one_replica_without_election_as_before() -> None:
    sets = ["operator.replicas=1", "operator.leaderElection.enabled=false"]
    objects = render(sets=sets)
    dep = one(objects, "Deployment")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    assert "--leader-elect=off" in args_of(dep)
    assert not [a for a in args_of(dep) if a.startswith("--leader-election-")]
    assert not leader_roles(objects) and not by_kind(objects, "PodDisruptionBudget")
    assert "affinity" not in dep["spec"]["template"]["spec"]
    # One replica with election: no budget (it would only block drains), no spreading.
    objects = render(sets=["operator.replicas=1"])
    assert not by_kind(objects, "PodDisruptionBudget") and leader_roles(objects)
    # A user's own affinity replaces the default spreading.
    dep = deployment(sets=["affinity.nodeAffinity.foo=bar"])
    assert dep["spec"]["template"]["spec"]["affinity"] == {"nodeAffinity": {"foo": "bar"}}


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["operator.leaderElection.enabled=false"], "needs operator.leaderElection.enabled"),
        (["operator.leaderElection.renewDeadline=15"], "renewDeadline < leaseDuration"),
        (["operator.leaderElection.retryPeriod=10"], "retryPeriod < renewDeadline"),
        (["operator.replicas=0"], "replicas"),
    ],
    ids=["several-without-election", "renew-not-below-lease", "retry-not-below-renew", "zero"],
)
def test_unsafe_settings_are_refused(sets: list[str], message: str) -> None:
    proc = helm_template(sets=sets, check=False)
    assert proc.returncode != 0, f"rendered {sets}"
    assert message in proc.stderr, proc.stderr
