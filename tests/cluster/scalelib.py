"""A job on the kubemark hollow nodes and the operator's requests for it, as the audit log
recorded them: shared by tests/cluster/test_scale_hollow.py and bench/scale.py."""

from __future__ import annotations

import collections
import json
from typing import Any

from tests.cluster import kube

HOLLOW = kube.node.hollow.LABEL  # the hollow nodes' label and NoSchedule taint key


def hollow_job(name: str, namespace: str, workers: int,
               max_workers: int | None = None, spares: int = 0) -> dict[str, Any]:  # fmt: skip
    """A job whose pods go to the hollow nodes (their toleration and selector); elastic up
    to ``max_workers`` when given; with ``spares`` (a headless Service per replica)."""
    spec: dict[str, Any] = {
        "workers": workers, "replicasToAggregate": 1, "parameterServers": 1,
        "model": {"entrypoint": "syncreplicas_runtime.models.linear:build"},
        "template": {"spec": {
            "nodeSelector": {HOLLOW: "true"},
            "tolerations": [{"key": HOLLOW, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "syncreplicas"}]}},
    }  # fmt: skip
    if max_workers is not None:
        spec["elasticPolicy"] = {"minWorkers": 1, "maxWorkers": max_workers}
    if spares:
        spec["runPolicy"] = {"spares": spares}
    return {"apiVersion": "syncreplicas.io/v1alpha1", "kind": "SyncReplicasJob",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}  # fmt: skip


def operator_requests(offset: int, namespace: str) -> list[dict[str, Any]]:
    """The operator's requests in ``namespace`` (not its leader Lease) in the audit log from
    byte ``offset`` on."""
    out = []
    with kube.AUDIT_LOG.open("rb") as log:
        log.seek(offset)
        for line in log:
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if (event.get("stage") == "ResponseComplete" and ref.get("namespace") == namespace
                    and event["user"].get("username") == kube.OPERATOR_USER):  # fmt: skip
                out.append(event)
    return out


Failed = tuple[str, str, int]  # "verb resource", the object's name, the response code


def tally(events: list[dict[str, Any]]) -> tuple[collections.Counter[str], list[Failed]]:
    """The requests by ``"verb resource[/subresource]"``, and the failed ones (409, 429,
    5xx) as (that, the object's name, the code)."""
    by: collections.Counter[str] = collections.Counter()
    failed: list[Failed] = []
    for event in events:
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "?") + (f"/{ref['subresource']}"
                                               if ref.get("subresource") else "")
        what = f"{event['verb']} {resource}"
        by[what] += 1
        code = int((event.get("responseStatus") or {}).get("code", 0))
        if code in (409, 429) or code >= 500:
            failed.append((what, str(ref.get("name", "")), code))
    return by, failed
