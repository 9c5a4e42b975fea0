"""Where a replica's pod may run and how soon it leaves a failed node: tolerations,
default spreading, and nodes to avoid. Pure; edits the pod spec ``build_pod`` builds.

- Tolerations: ``node.kubernetes.io/unreachable`` and ``not-ready`` (NoExecute) for
  :data:`TOLERATION_SECONDS` instead of the 300 s Kubernetes adds by default, so that even
  without the operator's own node handling a lost node's pods are evicted in half a minute.
  A toleration the template sets for either key is kept instead.
- Spreading (``kubernetes.io/hostname``, ``ScheduleAnyway``): the job's pods spread over
  nodes, and the parameter servers on different nodes (a preferred pod anti-affinity),
  where nodes allow; a one-node
  cluster still schedules everything. One node lost then costs one PS at most. A template
  that sets its own ``topologySpreadConstraints`` or pod (anti-)affinity keeps them and
  gets none of these.
- Nodes to avoid: a pod created while the operator holds nodes lost is kept off them
  (a required node affinity on ``metadata.name``), since the scheduler learns of a lost
  node only once Kubernetes marks it not ready, up to a minute later.

The template is free-form in the CRD: a field that is not of a Pod's shape (tolerations
that are not a list of objects, an affinity that is not an object) is left as written,
and the API server refuses the pod naming it (the job's condition says so).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

from . import naming

TOLERATION_SECONDS: Final = 30
TOLERATED_TAINTS: Final = (naming.TAINT_UNREACHABLE, naming.TAINT_NOT_READY)
NO_EXECUTE: Final = "NoExecute"

Manifest = dict[str, Any]


def _objects(value: Any) -> bool:
    """Whether ``value`` is a list of objects, as a Pod's lists are."""
    return isinstance(value, list) and all(isinstance(item, dict) for item in value)


def _object(parent: Manifest | None, key: str) -> Manifest | None:
    """``parent[key]`` when it is an object, {} when it is absent, None when it is not an
    object (or ``parent`` is None)."""
    if parent is None:
        return None
    value = parent.get(key)
    if value is None:
        return {}
    return value if isinstance(value, dict) else None


def add_tolerations(pod_spec: Manifest) -> None:
    """Short NoExecute tolerations of an unreachable / not-ready node, unless the template
    tolerates that taint itself."""
    given = pod_spec.get("tolerations")
    if given and not _objects(given):
        return
    tolerations: list[Manifest] = list(given or [])
    own = {t.get("key") for t in tolerations if t.get("effect") in (None, "", NO_EXECUTE)}
    for key in TOLERATED_TAINTS:
        if key not in own:
            tolerations.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": NO_EXECUTE,
                    "tolerationSeconds": TOLERATION_SECONDS,
                }
            )
    pod_spec["tolerations"] = tolerations


def add_spreading(pod_spec: Manifest, job: str, replica_type: str) -> None:
    """Default topology spread over nodes, unless the template places its pods itself."""
    affinity = pod_spec.get("affinity") or {}
    if not isinstance(affinity, dict) or pod_spec.get("topologySpreadConstraints") or any(
        affinity.get(kind) for kind in ("podAffinity", "podAntiAffinity")
    ):
        return
    pod_spec["topologySpreadConstraints"] = [_spread(naming.job_labels(job))]
    if replica_type == naming.PS:
        # The API server refuses two spread constraints of one topologyKey and
        # whenUnsatisfiable: the parameter servers keep apart by a preferred anti-affinity.
        ps = {**naming.job_labels(job), naming.LABEL_REPLICA_TYPE: naming.PS}
        pod_spec["affinity"] = {**affinity, "podAntiAffinity": _apart(ps)}


def _apart(labels: dict[str, str]) -> Manifest:
    return {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "podAffinityTerm": {
                    "labelSelector": {"matchLabels": labels},
                    "topologyKey": naming.LABEL_HOSTNAME,
                },
            }
        ]
    }


def _spread(labels: dict[str, str]) -> Manifest:
    return {
        "maxSkew": 1,
        "topologyKey": naming.LABEL_HOSTNAME,
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": labels},
    }


def avoid_nodes(pod_spec: Manifest, nodes: Collection[str]) -> None:
    """Keep the pod off ``nodes``: ``metadata.name NotIn`` field requirements in every
    required node selector term (terms are ORed: each must exclude them). One requirement
    per node: the API server allows a field requirement a single value."""
    if not nodes:
        return
    affinity = _object(pod_spec, "affinity")
    node_affinity = _object(affinity, "nodeAffinity")
    required = _object(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
    terms = (required or {}).get("nodeSelectorTerms") or [{}]
    if required is None or not _objects(terms) or not all(
        _objects(t.get("matchFields") or []) for t in terms
    ):
        return
    assert affinity is not None and node_affinity is not None
    requirements = [{"key": "metadata.name", "operator": "NotIn", "values": [n]}
                    for n in sorted(nodes)]  # fmt: skip
    required["nodeSelectorTerms"] = [
        {**term, "matchFields": [*(term.get("matchFields") or []), *requirements]}
        for term in terms
    ]
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    affinity["nodeAffinity"] = node_affinity
    pod_spec["affinity"] = affinity
