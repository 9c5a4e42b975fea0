"""Warm restarts that no container restart shows: counted from what the replicas say.

A replica restarted inside its container (``runPolicy.warmRestarts``; the runtime's
``launch/restartrules.py``) leaves the kubelet's ``restartCount`` where it was. The pod's count is
known three ways: its replica's ``syncreplicas_process_restarts`` gauge (read with the
gradient counters), the ``processRestarts=N`` line its container leaves as it ends, and
``status.warmRestarts``, where the operator keeps the highest count seen per pod (a read
may miss a pass, and the replica says nothing while it restarts). Each is the pod's own,
for its uid: a new pod of the same name starts from zero.

:func:`fold` adds the count into each pod's ``restart_count``, once, before planning, so
that everything that counts restarts (replicaStatuses, backoffLimit, the chief's restart,
recoveries) counts these too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from .status import ObservedPod

# Pod name -> (uid, count) as the replicas said it this pass.
WarmReads = Mapping[str, tuple[str, int]]


def known(stored: Sequence[Mapping[str, Any]] | None) -> dict[str, tuple[str, int]]:
    """``status.warmRestarts`` as pod name -> (uid, count); malformed entries skipped."""
    out: dict[str, tuple[str, int]] = {}
    for entry in stored or ():
        pod, uid, count = entry.get("pod"), entry.get("uid"), entry.get("count")
        if isinstance(pod, str) and isinstance(uid, str) and isinstance(count, int):
            out[pod] = (uid, count)
    return out


def fold(
    pods: Iterable[ObservedPod],
    stored: Sequence[Mapping[str, Any]] | None,
    read: WarmReads | None,
) -> tuple[tuple[ObservedPod, ...], list[dict[str, Any]]]:
    """The pods with their warm restarts counted in, and the new ``status.warmRestarts``
    (sorted by pod; only pods with a uid and a count above zero)."""
    sources = (known(stored), dict(read or {}))
    out: list[ObservedPod] = []
    kept: list[dict[str, Any]] = []
    for pod in pods:
        counts = [pod.warm_restarts]
        if pod.uid:
            counts += [count for uid, count in (s.get(pod.name, ("", 0)) for s in sources)
                       if uid == pod.uid]  # fmt: skip
        warm = max(counts)
        if warm > 0 and pod.uid:
            kept.append({"pod": pod.name, "uid": pod.uid, "count": warm})
            pod = replace(pod, restart_count=pod.restart_count + warm, warm_restarts=warm)
        out.append(pod)
    return tuple(out), sorted(kept, key=lambda e: str(e["pod"]))
