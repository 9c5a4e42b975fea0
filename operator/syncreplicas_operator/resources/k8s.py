"""Write to the Kubernetes API: create and delete children, patch job status, post Events.

The only module that changes the cluster. Idempotency is explicit: creating an object that
already exists (409; the job's own, or one going) and deleting one that is already gone
(404) both count as done, because children have deterministic names and a repeated plan
must be harmless. A name taken by someone else's object is refused, and said.

It talks JSON through the ``kubernetes`` client's configuration, authentication and
connection pool (in-cluster service account or kubeconfig), but not through its generated
models: the planner already builds plain dicts, and the models' response validation would
only add cost and reject objects the API server accepts. kopf keeps its own API access for
watching; this module is not allowed to import kopf (the import contracts say so).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config

from ..core import kueue, naming
from ..core.timefmt import format_time

# kind -> (API path prefix, plural)
_PATHS: dict[str, tuple[str, str]] = {
    "Pod": ("/api/v1", "pods"),
    "Service": ("/api/v1", "services"),
    "Event": ("/api/v1", "events"),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies"),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets"),
    naming.KIND: (f"/apis/{naming.API_VERSION}", naming.PLURAL),
    kueue.WORKLOAD_KIND: (f"/apis/{kueue.API_VERSION}", kueue.WORKLOAD_PLURAL),
}
# Kinds whose API group varies (the same kind from different schedulers).
_BY_API_VERSION: frozenset[str] = frozenset({naming.POD_GROUP_KIND})
_PLURALS: dict[str, str] = {naming.POD_GROUP_KIND: naming.POD_GROUP_PLURAL}
# How long an answer of API discovery is trusted (a scheduler may be installed later).
DISCOVERY_SECONDS = 60.0

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


class ApiError(RuntimeError):
    """A request the API answered with an unexpected status. ``message`` is the API
    server's own (its Status object's), or the start of the body."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        self.status = status
        self.message = status_message(body)
        super().__init__(f"{method} {path}: HTTP {status}: {self.message}")


def namespace_gone(error: ApiError, namespace: str) -> bool:
    """The answer says the namespace itself is gone (and with it everything in it)."""
    return error.status == 404 and f'namespaces "{namespace}" not found' in error.message


class CreateRefused(ApiError):
    """The API server refused to create a child (admission, quota, validation): a
    lasting answer about that object, not a passing fault."""

    def __init__(self, kind: str, name: str, error: ApiError) -> None:
        self.kind, self.name = kind, name
        RuntimeError.__init__(self, f"create {kind} {name}: HTTP {error.status}: {error.message}")
        self.status, self.message = error.status, error.message


# Children whose 409 is checked for whose the object is: the kinds the operator may list.
OWNER_CHECKED: frozenset[str] = frozenset({"Pod", "Service", "NetworkPolicy"})

# Answers to a create that say "not this object" (forbidden by admission or RBAC,
# invalid, quota exceeded), as opposed to the server being unavailable.
REFUSALS: frozenset[int] = frozenset({400, 403, 422})


def status_message(body: str) -> str:
    """The ``message`` of a Kubernetes Status body; else the body's first 300 characters."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body[:300]
    message = parsed.get("message") if isinstance(parsed, dict) else None
    return str(message) if message else body[:300]


def load_api_client(connections: int = 32) -> client.ApiClient:
    """An API client for the service account when in a pod, else for the kubeconfig."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)
    # Every job's daemon writes from its own thread: keep their connections alive.
    configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration)


def collection_path(kind: str, namespace: str, api_version: str = "") -> str:
    """The namespaced collection of ``kind`` (``api_version`` for kinds of several groups)."""
    if kind in _BY_API_VERSION:
        if not api_version:
            raise ValueError(f"a {kind} needs its apiVersion")
        return f"/apis/{api_version}/namespaces/{namespace}/{_PLURALS[kind]}"
    prefix, plural = _PATHS[kind]
    return f"{prefix}/namespaces/{namespace}/{plural}"


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference of ``obj`` that is its controller, if any."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), None)


def request(api_client: client.ApiClient, method: str, path: str, body: Any = None,
            content_type: str = JSON, ok: tuple[int, ...] = (),
            timeout: float = 30.0) -> tuple[int, Any]:  # fmt: skip
    """One HTTP request: (status, JSON body) for 2xx, (status, None) for a status in ``ok``,
    else ApiError."""
    params = api_client.param_serialize(
        method=method,
        resource_path=path,
        header_params={"Accept": JSON, "Content-Type": content_type},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api_client.call_api(*params, _request_timeout=timeout)
    raw = response.read()
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw or "")
    if 200 <= response.status < 300:
        return response.status, json.loads(text) if text else None
    if response.status in ok:
        return response.status, None
    raise ApiError(method, path, response.status, text)


class Api:
    """Idempotent writes; every method is blocking (call from a worker thread).

    ``requests`` counts the HTTP requests made, for the benchmarks and the logs.
    """

    def __init__(self, api_client: client.ApiClient | None = None, parallelism: int = 16) -> None:
        self.client = api_client if api_client is not None else load_api_client(2 * parallelism)
        # One pool for every job's batches: at most ``parallelism`` batch requests in flight
        # however many jobs reconcile at once.
        self.pool = ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix="k8s")
        self.requests = 0
        self._lock = threading.Lock()
        self._discovered: dict[tuple[str, str], tuple[bool, float]] = {}

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = JSON,
        ok: tuple[int, ...] = (),
    ) -> tuple[int, Any]:
        with self._lock:
            self.requests += 1
        return request(self.client, method, path, body, content_type, ok)

    # -- children ---------------------------------------------------------------------

    def create(self, namespace: str, body: Mapping[str, Any]) -> bool:
        """Create ``body`` (its ``kind`` picks the endpoint); False if it already existed.
        One that exists and belongs to someone else (another owner, or none) is refused
        (CreateRefused): a job's child cannot be a user's object of the same name."""
        kind, name = str(body["kind"]), str(body["metadata"]["name"])
        path = collection_path(kind, namespace, str(body.get("apiVersion", "")))
        try:
            status, _ = self._call("POST", path, dict(body), ok=(409,))
        except ApiError as exc:
            if exc.status in REFUSALS:
                raise CreateRefused(kind, name, exc) from exc
            raise
        if status == 409:
            self._check_owner(path, kind, name, body)
        return status != 409

    def _check_owner(self, path: str, kind: str, name: str, body: Mapping[str, Any]) -> None:
        """The object of ``body``'s name that exists: this job's, going, or gone since is
        fine, and so is an earlier job's of the same name (the garbage collector removes
        it: its owner is gone); another's (a user's Service named like the job) raises
        CreateRefused."""
        owner = controller_of(body)
        if owner is None or kind not in OWNER_CHECKED:
            return  # nothing to compare with, or no grant to read it
        # A list of the one name: the operator's role lists its children, never gets them.
        _, found = self._call("GET", f"{path}?fieldSelector=metadata.name%3D{name}")
        items = [i for i in (found or {}).get("items") or []
                 if (i.get("metadata") or {}).get("name") == name]  # fmt: skip
        if not items:
            return
        meta = items[0]["metadata"]
        refs = meta.get("ownerReferences") or []
        # The job's own, or an earlier job's of its name (same kind and name, any uid).
        job = (owner["kind"], owner["name"])
        going = bool(meta.get("deletionTimestamp"))
        if going or any((r.get("kind"), r.get("name")) == job for r in refs):
            return
        theirs = controller_of(items[0]) or (refs[0] if refs else None)
        whose = f"it belongs to {theirs['kind']} {theirs['name']}" if theirs else "it has no owner"
        message = (
            f'{kind} "{name}" already exists and is not this job\'s ({whose}): '
            "delete or rename it, or give the job another name"
        )
        status = json.dumps({"kind": "Status", "code": 409, "message": message})
        raise CreateRefused(kind, name, ApiError("POST", path, 409, status))

    def delete(
        self,
        kind: str,
        namespace: str,
        name: str,
        *,
        api_version: str = "",
        grace_period_seconds: int | None = None,
    ) -> bool:
        """Delete one object (dependents by the garbage collector); False if already gone.

        ``grace_period_seconds=0`` removes a pod from the API without waiting for its
        kubelet (a lost node's pods)."""
        options: dict[str, Any] = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "propagationPolicy": "Background",
        }
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        status, _ = self._call(
            "DELETE",
            f"{collection_path(kind, namespace, api_version)}/{name}",
            options,
            ok=(404,),
        )
        return status != 404

    def serves(self, api_version: str, plural: str, fresh: bool = False) -> bool:
        """Whether the API server serves ``plural`` in ``api_version`` (API discovery;
        answers are kept for DISCOVERY_SECONDS unless ``fresh``). An error other than 404
        raises ApiError: an unreachable server is no proof that an API is missing."""
        key = (api_version, plural)
        known = self._discovered.get(key)
        if known is not None and time.monotonic() < known[1] and not fresh:
            return known[0]
        status, body = self._call("GET", f"/apis/{api_version}", ok=(404,))
        names = {str(r.get("name")) for r in (body or {}).get("resources") or []}
        served = status != 404 and plural in names
        self._discovered[key] = (served, time.monotonic() + DISCOVERY_SECONDS)
        return served

    def create_many(self, namespace: str, bodies: list[Mapping[str, Any]]) -> int:
        """Create in parallel (bounded); returns how many were new."""
        if len(bodies) <= 1:
            return sum(self.create(namespace, b) for b in bodies)
        return sum(self.pool.map(lambda b: self.create(namespace, b), bodies))

    def delete_many(
        self,
        kind: str,
        namespace: str,
        names: list[str],
        grace_period_seconds: int | None = None,
    ) -> int:
        """Delete in parallel (bounded); returns how many still existed."""

        def one(name: str) -> bool:
            return self.delete(kind, namespace, name, grace_period_seconds=grace_period_seconds)

        if len(names) <= 1:
            return sum(one(n) for n in names)
        return sum(self.pool.map(one, names))

    def patch_pods(self, namespace: str, patches: list[tuple[str, Mapping[str, Any]]]) -> int:
        """Merge-patch pods in parallel (bounded): (name, patch) each; how many still
        existed."""
        if len(patches) <= 1:
            return sum(self.patch_pod(namespace, n, p) for n, p in patches)
        return sum(self.pool.map(lambda np: self.patch_pod(namespace, *np), patches))

    def list_children(
        self, kind: str, namespace: str, job: str, api_version: str = ""
    ) -> list[dict[str, Any]]:
        """The job's children of one kind (by label; filtered again here, so a server that
        ignores the selector still gives the right answer); ``api_version`` for a kind of
        several groups (a PodGroup)."""
        selector = naming.job_selector(job)
        path = collection_path(kind, namespace, api_version)
        _, body = self._call("GET", f"{path}?labelSelector={selector}")
        items = (body or {}).get("items") or []
        return [
            item
            for item in items
            if ((item.get("metadata") or {}).get("labels") or {}).get(naming.LABEL_JOB_NAME) == job
        ]

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        """Merge-patch a pod (its metadata: a spare taking a replica over); False if the
        pod is gone."""
        status, _ = self._call(
            "PATCH",
            f"{collection_path('Pod', namespace)}/{name}",
            dict(patch),
            content_type=MERGE_PATCH,
            ok=(404,),
        )
        return status != 404

    def patch(
        self, kind: str, namespace: str, name: str, patch: Mapping[str, Any], status: bool = False
    ) -> bool:
        """Merge-patch an object (``status``: its status subresource); False if it is gone
        or the patch's resourceVersion is no longer current (409)."""
        path = f"{collection_path(kind, namespace)}/{name}" + ("/status" if status else "")
        code, _ = self._call("PATCH", path, dict(patch), content_type=MERGE_PATCH, ok=(404, 409))
        return code not in (404, 409)

    def read_cluster_object(
        self, api_version: str, plural: str, name: str
    ) -> dict[str, Any] | None:
        """A cluster-scoped object (None: not found)."""
        code, body = self._call("GET", f"/apis/{api_version}/{plural}/{name}", ok=(404,))
        return dict(body) if code != 404 and body else None

    # -- the job ----------------------------------------------------------------------

    def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        """Merge-patch the job's status subresource; False if the job is gone."""
        status, _ = self._call(
            "PATCH",
            f"{collection_path(naming.KIND, namespace)}/{name}/status",
            {"status": dict(patch)},
            content_type=MERGE_PATCH,
            ok=(404,),
        )
        return status != 404

    def delete_job(self, namespace: str, name: str) -> bool:
        return self.delete(naming.KIND, namespace, name)

    def post_event(
        self,
        namespace: str,
        job: Mapping[str, Any],
        event_type: str,
        reason: str,
        message: str,
        now: datetime | None = None,
    ) -> None:
        """A core/v1 Event about the job, as ``kubectl describe srj`` shows them."""
        moment = format_time(now or datetime.now(UTC))
        meta = job.get("metadata") or {}
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta.get('name')}.{uuid.uuid4().hex[:16]}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": naming.API_VERSION,
                "kind": naming.KIND,
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": meta.get("uid"),
            },
            "type": event_type,
            "reason": reason,
            # The API server rejects messages over 1 kB.
            "message": message[:1000],
            "firstTimestamp": moment,
            "lastTimestamp": moment,
            "count": 1,
            "source": {"component": "syncreplicas-operator"},
            "reportingComponent": "syncreplicas-operator",
        }
        self._call("POST", collection_path("Event", namespace), body, ok=(409,))
