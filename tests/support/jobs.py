"""Job settings for tests: a base dict with changes reaching into nested objects, and the
parsed job the planner tests start from."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the runtime's tests use this module without the operator's
    from syncreplicas_operator.core.spec import Job


def with_changes(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy of ``base`` with ``changes``; ``training__maxSteps=5`` sets a nested key."""
    job = copy.deepcopy(base)
    for key, value in changes.items():
        *path, last = key.split("__")
        node = job
        for p in path:
            node = node.setdefault(p, {})
        node[last] = value
    return job


def planner_job(replicas_to_aggregate: int = 2, **spec: Any) -> Job:
    """A parsed job ``j`` in namespace ``ns`` (1 PS, 2 workers, no stall timeout) with
    ``spec``'s top-level fields changed: what the planner's table tests start from."""
    from syncreplicas_operator.core import naming
    from syncreplicas_operator.core.spec import parse_job

    body: dict[str, Any] = {
        "replicasToAggregate": replicas_to_aggregate,
        "workers": 2,
        "parameterServers": 1,
        "model": {"entrypoint": "m.n:build"},
        "stallTimeoutSeconds": 0,
    }
    body.update(spec)
    return parse_job(
        {
            "apiVersion": naming.API_VERSION,
            "kind": naming.KIND,
            "metadata": {"name": "j", "namespace": "ns", "uid": "uid-1", "generation": 1},
            "spec": body,
        }
    )
