"""Watch the cluster's Nodes and the kubelets' Leases (``kube-node-lease``), and say when
the set of lost nodes changes (the rules: ``core/nodes.py``).

Read-only: list, then watch from the list's resourceVersion, again after any error or
the end of a watch. Each kind has its own thread (the kubernetes client blocks); a third
looks at the Leases' ages every second, since a Lease going stale is no API event. Not
kopf: kopf would watch the Leases only in the namespaces the operator serves, or in every
namespace; this needs exactly one.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from kubernetes import client

from ..core import naming
from ..core.nodes import NodeFacts, NodeHealth, assess, lease_renew_time, node_facts

log = logging.getLogger("syncreplicas.operator")

NODES_PATH: Final = "/api/v1/nodes"
LEASES_PATH: Final = f"/apis/coordination.k8s.io/v1/namespaces/{naming.NODE_LEASE_NAMESPACE}/leases"
# A watch ends after this long (the API server's own limit is near it); then list again.
WATCH_SECONDS: Final = 300
RETRY_SECONDS: Final = 1.0
SWEEP_SECONDS: Final = 1.0


class NodeWatch:
    """What the operator knows of the nodes, kept current by its threads.

    ``on_change`` is called (from a watch thread) whenever the set of lost nodes changes.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        lease_grace: float,
        on_change: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = api_client
        self.lease_grace = lease_grace
        self.on_change = on_change
        self.clock = clock
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeFacts] = {}
        self._renewed: dict[str, str] = {}  # node -> its Lease's renewTime as last seen
        self._lease_seen: dict[str, float] = {}  # node -> when that renewTime was seen
        self._listed_at: float | None = None
        self._lost: frozenset[str] = frozenset()
        self._stop = threading.Event()

    def start(self) -> None:
        for target, name in (
            (lambda: self._follow(NODES_PATH, self._nodes_listed, self._node_event), "nodes"),
            (lambda: self._follow(LEASES_PATH, self._leases_listed, self._lease_event), "leases"),
            (self._sweep, "node-sweep"),
        ):
            threading.Thread(target=target, name=f"watch-{name}", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def health(self) -> NodeHealth:
        """The verdict on every node, now."""
        with self._lock:
            return assess(
                dict(self._nodes),
                dict(self._lease_seen),
                self.clock(),
                self.lease_grace,
                self._listed_at,
            )

    # -- state --------------------------------------------------------------------------

    def _nodes_listed(self, items: list[Mapping[str, Any]]) -> None:
        with self._lock:
            self._nodes = {f.name: f for f in map(node_facts, items) if f.name}
            if self._listed_at is None:
                self._listed_at = self.clock()

    def _node_event(self, kind: str, node: Mapping[str, Any]) -> None:
        facts = node_facts(node)
        with self._lock:
            if kind == "DELETED":
                self._nodes.pop(facts.name, None)
                self._renewed.pop(facts.name, None)
                self._lease_seen.pop(facts.name, None)
            else:
                self._nodes[facts.name] = facts

    def _leases_listed(self, items: list[Mapping[str, Any]]) -> None:
        for lease in items:
            self._lease_event("ADDED", lease)

    def _lease_event(self, kind: str, lease: Mapping[str, Any]) -> None:
        name = str((lease.get("metadata") or {}).get("name") or "")
        renewed = lease_renew_time(lease)
        with self._lock:
            if kind == "DELETED":
                self._renewed.pop(name, None)
                self._lease_seen.pop(name, None)
            elif renewed and self._renewed.get(name) != renewed:
                # Aged from when this operator saw it renewed, on its own clock.
                self._renewed[name] = renewed
                self._lease_seen[name] = self.clock()

    def _changed(self) -> None:
        """Tell the jobs when the set of lost nodes changed."""
        health = self.health()
        lost = frozenset(health.lost)
        with self._lock:
            changed, self._lost = lost != self._lost, lost
        if changed:
            if lost:
                log.warning("nodes lost: %s", ", ".join(f"{n} ({health.lost[n]})" for n in lost))
            self.on_change()

    def _sweep(self) -> None:
        while not self._stop.wait(SWEEP_SECONDS):
            self._changed()

    # -- list and watch -----------------------------------------------------------------

    def _follow(
        self,
        path: str,
        listed: Callable[[list[Mapping[str, Any]]], None],
        event: Callable[[str, Mapping[str, Any]], None],
    ) -> None:
        while not self._stop.is_set():
            try:
                body = self._get(path)
                listed(list(body.get("items") or []))
                self._changed()
                version = str((body.get("metadata") or {}).get("resourceVersion") or "")
                for kind, obj in self._watch(path, version):
                    if kind == "ERROR":
                        break  # e.g. 410 Gone: the version is too old, list again
                    if kind != "BOOKMARK":
                        event(kind, obj)
                        self._changed()
            except Exception as exc:  # any failure: list again shortly
                log.warning("watching %s: %s", path, exc)
                self._stop.wait(RETRY_SECONDS)

    def _request(self, path: str, timeout: float) -> Any:
        params = self.client.param_serialize(
            method="GET",
            resource_path=path,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = self.client.call_api(*params, _request_timeout=timeout)
        if not 200 <= response.status < 300:
            raise RuntimeError(f"GET {path}: HTTP {response.status}: {response.read()[:300]!r}")
        return response

    def _get(self, path: str) -> dict[str, Any]:
        return dict(json.loads(self._request(path, 30).read() or b"{}"))

    def _watch(self, path: str, version: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        query = f"?watch=true&allowWatchBookmarks=true&timeoutSeconds={WATCH_SECONDS}"
        if version:
            query += f"&resourceVersion={version}"
        response = self._request(path + query, WATCH_SECONDS + 30)
        buffer = b""
        for chunk in response.response.stream(4096, decode_content=True):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    event = json.loads(line)
                    yield str(event.get("type") or ""), event.get("object") or {}
            if self._stop.is_set():
                return
