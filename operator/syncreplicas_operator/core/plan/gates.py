"""TopologyGated: the job's pods that Kueue's topology gate holds (TAS, ``core/kueuetas.py``).

Kueue's ungater lifts the gate ``kueue.x-k8s.io/topology`` from a pod within a second or
two of its creation when a node of its pod set's topology assignment has room, a replaced
replica's pod too. One still gated :data:`GATED_REPORT_SECONDS` after its creation waits
for room there (its domain's nodes are full, or lost and not yet replaced in the
assignment by Kueue): the condition says which replicas wait and for which Workload, with
a Warning Event when it turns true and a Normal one when every pod is past the gate again.
"""

from __future__ import annotations

from typing import Final

from .. import kueuetas, naming
from ..actions import NORMAL, WARNING
from ..status import POD_PENDING, ObservedPod
from ..timefmt import parse_time
from .context import PlanContext

GATED_REPORT_SECONDS: Final = 30.0


def report_gated(ctx: PlanContext) -> bool:
    """TopologyGated from the pods still at Kueue's topology gate."""
    waiting: list[tuple[ObservedPod, float]] = []
    for pod in sorted(ctx.observed.pods, key=lambda p: p.name):
        created = parse_time(pod.created)
        gated = kueuetas.GATE in pod.scheduling_gates and pod.phase == POD_PENDING
        if not gated or pod.deleting or created is None:
            continue
        age = (ctx.now - created).total_seconds()
        if age >= GATED_REPORT_SECONDS:
            waiting.append((pod, age))
        else:
            ctx.requeue.append(GATED_REPORT_SECONDS - age)
    if waiting:
        workload = ctx.observed.workload
        named = f"Workload {workload.name}" if workload is not None else "its Workload"
        replicas = ", ".join(f"{naming.replica_key(p.replica_type, p.index)} ({int(age)}s)"
                             for p, age in waiting)  # fmt: skip
        message = (f"held by Kueue's scheduling gate {kueuetas.GATE}: {replicas}; Kueue lifts "
                   f"it once a node of the pod set's topology assignment in {named} has room "
                   "(kubectl describe workload)")  # fmt: skip
        if ctx.condition(naming.CONDITION_TOPOLOGY_GATED, True,
                         naming.REASON_WAITING_FOR_TOPOLOGY, message):  # fmt: skip
            ctx.event(WARNING, naming.REASON_WAITING_FOR_TOPOLOGY, message)
        return False
    said = "every pod is past Kueue's topology gate"
    if ctx.condition(naming.CONDITION_TOPOLOGY_GATED, False, naming.REASON_UNGATED, said):
        ctx.event(NORMAL, naming.REASON_UNGATED, said)
    return False
