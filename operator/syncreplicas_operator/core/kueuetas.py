"""Kueue's topology-aware scheduling (TAS) for a queued job's pods. PURE.

A role's template asks for a topology with Kueue's annotations (the same as on the pod
templates of Kueue's built-in kinds): ``kueue.x-k8s.io/podset-required-topology`` or
``-preferred-topology`` (a node label, a level of the ClusterQueue flavor's Topology: all
the role's pods in one domain of that level), or ``-unconstrained-topology``; and
``kueue.x-k8s.io/podset-group-name`` puts roles with the same value in one domain together
(say the parameter servers with the workers). :func:`topology_request` turns those into
the Workload pod set's ``topologyRequest``, as Kueue's job framework does.

Admitted by a TAS flavor, a pod set's assignment names the domains (nodes) its pods go to.
As Kueue's job framework does for its kinds, the operator then creates the role's pods
with the scheduling gate ``kueue.x-k8s.io/topology``, the label ``kueue.x-k8s.io/podset``
and the annotation ``kueue.x-k8s.io/workload`` (:func:`gated_template`); Kueue's ungater
removes the gate and pins each pod to a node of its assignment that still has room, a
replaced replica's pod too (it takes the place its lost pod held).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

GROUP: Final = "kueue.x-k8s.io"
REQUIRED: Final = f"{GROUP}/podset-required-topology"
PREFERRED: Final = f"{GROUP}/podset-preferred-topology"
UNCONSTRAINED: Final = f"{GROUP}/podset-unconstrained-topology"
GROUP_NAME: Final = f"{GROUP}/podset-group-name"
# On the pods of a pod set admitted by TAS (Kueue's apis/kueue/v1beta2/topology_types.go,
# pkg/constants).
GATE: Final = f"{GROUP}/topology"
WORKLOAD_ANNOTATION: Final = f"{GROUP}/workload"
PODSET_LABEL: Final = f"{GROUP}/podset"

REQUESTS: Final = (REQUIRED, PREFERRED, UNCONSTRAINED)


def topology_request(annotations: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pod set's ``topologyRequest`` from its template's annotations; None: it asks
    for none. Several of required, preferred and unconstrained: Kueue refuses the Workload
    (:func:`conflict` says so first)."""
    request: dict[str, Any] = {}
    if annotations.get(REQUIRED):
        request["required"] = str(annotations[REQUIRED])
    if annotations.get(PREFERRED):
        request["preferred"] = str(annotations[PREFERRED])
    if str(annotations.get(UNCONSTRAINED, "")).lower() == "true":
        request["unconstrained"] = True
    if not request:
        return None
    if annotations.get(GROUP_NAME):
        request["podSetGroupName"] = str(annotations[GROUP_NAME])
    return request


def conflict(role: str, annotations: Mapping[str, Any]) -> str | None:
    """Why the role's topology annotations cannot make one request, or None."""
    asked = [key for key in REQUESTS if key in annotations]
    if len(asked) > 1:
        return (f"spec.{role}.template.metadata.annotations: at most one of "
                f"{', '.join(asked)} (Kueue takes one topology request per role)")  # fmt: skip
    return None


def assigned_by_tas(assignment: Mapping[str, Any]) -> bool:
    """Whether Kueue admitted this pod set with a topology assignment."""
    return bool(assignment.get("topologyAssignment"))


def gated_template(workload: str, role: str, asked: bool) -> dict[str, Any]:
    """What a role's pod template gets once its pod set is admitted by TAS: merged over the
    template (podtemplate.merge_templates). A role that ``asked`` for no topology (a
    TAS-only queue assigns it one) is marked unconstrained, as Kueue's job framework does:
    Kueue's ungater counts only pods with a topology annotation as its own, and waits for
    every pod it ungated to be seen so."""
    annotations = {WORKLOAD_ANNOTATION: workload}
    if not asked:
        annotations[UNCONSTRAINED] = "true"
    return {
        "metadata": {"labels": {PODSET_LABEL: role}, "annotations": annotations},
        "spec": {"schedulingGates": [{"name": GATE}]},
    }
