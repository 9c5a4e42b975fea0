"""Reads of the cluster's API through one HTTP client: what the tests poll.

One job: GET a path of the API server (an object, a list, a pod's /metrics through the
API server's proxy) with the kubeconfig of `make cluster`, over one pooled connection per
thread, and hand back the parsed JSON or the text. A `kubectl get` process costs the
machine about 0.1-0.2 s of CPU (a Go binary's start, its kubeconfig, its discovery cache)
and the tests poll every second or two for an hour; what the test is about, what a user
types (apply, scale, describe, logs, --as), stays kubectl (kube.py).

    object_path("get", "srj", "x", "-n", "ns")  -> the same path `kubectl get` reads, or
                                                   None for what it cannot say (kubectl then)
"""

from __future__ import annotations

import json
import ssl
import threading
import urllib.parse
from pathlib import Path
from typing import Any

import urllib3
import yaml

# kind as kubectl takes it (plural, singular, short) -> (API prefix, plural, namespaced)
KINDS: dict[str, tuple[str, str, bool]] = {}
for _names, _prefix, _plural, _namespaced in (
    (("pod", "pods", "po"), "/api/v1", "pods", True),
    (("node", "nodes", "no"), "/api/v1", "nodes", False),
    (("service", "services", "svc"), "/api/v1", "services", True),
    (("event", "events", "ev"), "/api/v1", "events", True),
    (("namespace", "namespaces", "ns"), "/api/v1", "namespaces", False),
    (("srj", "syncreplicasjob", "syncreplicasjobs"), "/apis/syncreplicas.io/v1alpha1",
     "syncreplicasjobs", True),
    (("deployment", "deployments", "deploy"), "/apis/apps/v1", "deployments", True),
    (("lease", "leases"), "/apis/coordination.k8s.io/v1", "leases", True),
    (("networkpolicy", "networkpolicies", "netpol"), "/apis/networking.k8s.io/v1",
     "networkpolicies", True),
    (("endpointslices", "endpointslice"), "/apis/discovery.k8s.io/v1", "endpointslices", True),
):  # fmt: skip
    for _name in _names:
        KINDS[_name] = (_prefix, _plural, _namespaced)


def object_path(*args: str) -> str | None:
    """The API path of `kubectl get KIND [NAME] [-n NS] [-l SELECTOR]` (None: any other
    form, which kubectl itself then runs)."""
    if len(args) < 2 or args[0] != "get" or args[1] not in KINDS:
        return None
    prefix, plural, namespaced = KINDS[args[1]]
    name, namespace, selector = "", "", ""
    rest = list(args[2:])
    while rest:
        item = rest.pop(0)
        if item in ("-n", "--namespace") and rest:
            namespace = rest.pop(0)
        elif item in ("-l", "--selector") and rest:
            selector = rest.pop(0)
        elif not item.startswith("-") and not name:
            name = item
        else:
            return None  # -A, -o, --field-selector, several names: kubectl's own
    if namespaced and not namespace:
        return None  # kubectl's context namespace: let kubectl say which
    path = prefix + (f"/namespaces/{namespace}" if namespaced else "") + f"/{plural}"
    if name:
        return None if selector else f"{path}/{name}"
    return path + (f"?labelSelector={urllib.parse.quote(selector)}" if selector else "")


class Client:
    """HTTPS to the API server as the kubeconfig's user (client certificate), pooled."""

    def __init__(self, kubeconfig: Path) -> None:
        # The kubeconfig's modification time: `make cluster` writes a new one with new
        # certificates when it makes the cluster again.
        self.stamp = kubeconfig.stat().st_mtime_ns
        config = yaml.safe_load(kubeconfig.read_text())
        context = {c["name"]: c["context"] for c in config["contexts"]}[config["current-context"]]
        cluster = {c["name"]: c["cluster"] for c in config["clusters"]}[context["cluster"]]
        user = {u["name"]: u["user"] for u in config["users"]}[context["user"]]
        self.server = cluster["server"].rstrip("/")
        tls = ssl.create_default_context(cafile=_path(kubeconfig, cluster,
                                                      "certificate-authority"))  # fmt: skip
        tls.load_cert_chain(_path(kubeconfig, user, "client-certificate"),
                            _path(kubeconfig, user, "client-key"))  # fmt: skip
        self.pool = urllib3.PoolManager(ssl_context=tls, maxsize=4, retries=False)

    def get(self, path: str, timeout: float) -> tuple[int, bytes]:
        response = self.pool.request("GET", self.server + path, timeout=timeout)
        return response.status, response.data


def _path(kubeconfig: Path, section: dict[str, Any], key: str) -> str:
    if f"{key}-data" in section:
        raise ValueError(f"{kubeconfig}: inline {key}-data is not read here")
    found = Path(section[key])
    return str(found if found.is_absolute() else kubeconfig.parent / found)


_clients: dict[tuple[int, Path], Client] = {}
_lock = threading.Lock()


def client(kubeconfig: Path) -> Client:
    """This thread's client for ``kubeconfig`` (made again when the cluster was)."""
    key = (threading.get_ident(), kubeconfig)
    stamp = kubeconfig.stat().st_mtime_ns
    with _lock:
        found = _clients.get(key)
        if found is None or found.stamp != stamp:
            found = Client(kubeconfig)
            _clients[key] = found
    return found


def get_text(kubeconfig: Path, path: str, timeout: float = 10) -> str:
    """The body of a GET of ``path``; AssertionError naming the path on any other status."""
    try:
        status, body = client(kubeconfig).get(path, timeout)
    except urllib3.exceptions.HTTPError as error:
        raise AssertionError(f"GET {path}: {error}") from error
    if status != 200:
        raise AssertionError(f"GET {path}: HTTP {status}: {body[:300].decode(errors='replace')}")
    return body.decode()


def get_json(kubeconfig: Path, path: str, timeout: float = 10) -> Any:
    return json.loads(get_text(kubeconfig, path, timeout))
