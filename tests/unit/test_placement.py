"""core/placement.py through build_pod: short tolerations of a failed node, default
spreading over nodes, a template's own settings winning, lost nodes avoided."""

from __future__ import annotations

from typing import Any

import pytest
from syncreplicas_operator.core import manifests, naming, placement
from syncreplicas_operator.core.spec import parse_job

OURS = [
    {"key": naming.TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": placement.TOLERATION_SECONDS},
    {"key": naming.TAINT_NOT_READY, "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": placement.TOLERATION_SECONDS},
]  # fmt: skip


def pod(replica_type: str = "worker", template_spec: dict[str, Any] | None = None) -> Any:
    spec: dict[str, Any] = {
        "replicasToAggregate": 2,
        "workers": 2,
        "parameterServers": 2,
        "model": {"entrypoint": "m.n:build"},
    }
    if template_spec is not None:
        spec["template"] = {"spec": {"containers": [{"name": "syncreplicas"}], **template_spec}}
    job = parse_job(
        {"apiVersion": naming.API_VERSION, "kind": naming.KIND,
         "metadata": {"name": "j", "namespace": "ns"}, "spec": spec}
    )  # fmt: skip
    return manifests.build_pod(job, replica_type, 0)["spec"]


def spread(labels: dict[str, str]) -> dict[str, Any]:
    return {
        "maxSkew": 1,
        "topologyKey": naming.LABEL_HOSTNAME,
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": labels},
    }


JOB = {naming.LABEL_JOB_NAME: "j"}
PS = {**JOB, naming.LABEL_REPLICA_TYPE: "ps"}
ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}


@pytest.mark.parametrize(
    ("template", "tolerations"),
    [
        (None, OURS),
        # A template's own toleration of a taint wins; the other is still added.
        (
            {"tolerations": [{"key": naming.TAINT_UNREACHABLE, "operator": "Exists",
                              "effect": "NoExecute", "tolerationSeconds": 600}]},
            [{"key": naming.TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute",
              "tolerationSeconds": 600}, OURS[1]],
        ),
        # A toleration of the same key without an effect covers NoExecute too.
        (
            {"tolerations": [{"key": naming.TAINT_NOT_READY, "operator": "Exists"}]},
            [{"key": naming.TAINT_NOT_READY, "operator": "Exists"}, OURS[0]],
        ),
        # Other tolerations are kept, ours added.
        (
            {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]},
            [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}, *OURS],
        ),
    ],
)  # fmt: skip
def test_tolerations(template: dict[str, Any] | None, tolerations: list[dict[str, Any]]) -> None:
    assert pod(template_spec=template)["tolerations"] == tolerations


@pytest.mark.parametrize(
    ("replica_type", "template", "constraints", "affinity"),
    [
        ("ps", None, [spread(JOB)], {"podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
                "labelSelector": {"matchLabels": PS}, "topologyKey": naming.LABEL_HOSTNAME}}]}}),
        ("worker", None, [spread(JOB)], None),
        ("chief", None, [spread(JOB)], None),
        # The template's own placement wins: nothing of ours is added.
        (
            "ps",
            {"topologySpreadConstraints": [{"maxSkew": 2, "topologyKey": "zone",
                                            "whenUnsatisfiable": "DoNotSchedule"}]},
            [{"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
            None,
        ),
        (
            "ps",
            {"affinity": ANTI},
            None,
            ANTI,
        ),
        # A node affinity alone places on nodes, not among pods: spreading still applies.
        (
            "worker",
            {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}},
            [spread(JOB)],
            {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        ),
    ],
)  # fmt: skip
def test_spreading(
    replica_type: str,
    template: dict[str, Any] | None,
    constraints: list[dict[str, Any]] | None,
    affinity: dict[str, Any] | None,
) -> None:
    spec = pod(replica_type, template)
    assert spec.get("topologySpreadConstraints") == constraints
    assert spec.get("affinity") == affinity


# One requirement per node: the API server allows a field requirement one value.
NOT_A = {"key": "metadata.name", "operator": "NotIn", "values": ["a"]}
NOT_B = {"key": "metadata.name", "operator": "NotIn", "values": ["b"]}


@pytest.mark.parametrize(
    ("pod_spec", "terms"),
    [
        ({}, [{"matchFields": [NOT_A, NOT_B]}]),
        # Terms are ORed: every one of them must exclude the lost nodes.
        (
            {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In",
                                      "values": ["a", "c"]}]},
                ]}}}},
            [
                {"matchExpressions": [{"key": "gpu", "operator": "Exists"}],
                 "matchFields": [NOT_A, NOT_B]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "c"]},
                                 NOT_A, NOT_B]},
            ],
        ),
    ],
)  # fmt: skip
def test_avoid_nodes(pod_spec: dict[str, Any], terms: list[dict[str, Any]]) -> None:
    placement.avoid_nodes(pod_spec, {"b", "a"})
    required = pod_spec["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert required["nodeSelectorTerms"] == terms


def test_no_node_to_avoid_changes_nothing() -> None:
    pod_spec: dict[str, Any] = {}
    placement.avoid_nodes(pod_spec, [])
    assert pod_spec == {}


def test_the_disruption_budget_moves_one_replica_at_a_time() -> None:
    job = parse_job(
        {"apiVersion": naming.API_VERSION, "kind": naming.KIND,
         "metadata": {"name": "j", "namespace": "ns", "uid": "u1"},
         "spec": {"replicasToAggregate": 1, "workers": 1, "model": {"entrypoint": "m.n:b"}}}
    )  # fmt: skip
    budget = manifests.build_disruption_budget(job)
    assert budget["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": JOB},
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }
    assert budget["metadata"]["ownerReferences"][0]["uid"] == "u1"


@pytest.mark.parametrize("template_spec", [
    {"tolerations": "none"},
    {"tolerations": ["none"]},
    {"affinity": "none"},
    {"affinity": {"nodeAffinity": "none"}},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": "none"}]}}}},
])  # fmt: skip
def test_a_field_not_of_a_pods_shape_is_left_for_the_api_server_to_refuse(
        template_spec: dict[str, Any]) -> None:  # fmt: skip
    """The template is free-form in the CRD: what is not of a Pod's shape stays as written
    (the API server then refuses the pod, naming it), and building the pod does not fail
    (a fuzzed manifest with tolerations "none" once stopped the operator's pass there)."""
    (field, given), = template_spec.items()
    built = pod("worker", template_spec)
    assert built[field] == given
    spec: dict[str, Any] = {"replicasToAggregate": 2, "workers": 2, "parameterServers": 1,
                            "model": {"entrypoint": "m.n:build"},
                            "template": {"spec": {"containers": [{"name": "syncreplicas"}],
                                                  **template_spec}}}  # fmt: skip
    job = parse_job({"apiVersion": naming.API_VERSION, "kind": naming.KIND,
                     "metadata": {"name": "j", "namespace": "ns"}, "spec": spec})  # fmt: skip
    pod_spec = manifests.build_pod(job, "worker", 0)["spec"]
    placement.avoid_nodes(pod_spec, {"lost-node"})
    assert pod_spec[field] == given
