"""Harness: the real operator (``syncreplicas operator`` in a subprocess) against kmock.

kmock keeps objects in memory and streams watch events; it does not run pods. The
``Cluster`` helper plays the kubelet's part: tests move pods through their phases by
patching ``pods/<name>/status`` over HTTP, as a kubelet would, so the operator sees real
watch events. Objects the tests post carry what a real API server fills in (uid,
resourceVersion, creationTimestamp, generation), because kmock does not.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import kmock
from syncreplicas_operator.core import naming

JOBS = f"{naming.GROUP}/{naming.VERSION}/{naming.PLURAL}"
RESOURCES: dict[str, dict[str, Any]] = {
    # Discovery only: kopf waits to see these before it starts watching (it never lists
    # them with scanning disabled, which is as well: kmock cannot list namespaces).
    "v1/namespaces": {"kind": "Namespace", "namespaced": False},
    "apiextensions.k8s.io/v1/customresourcedefinitions": {
        "kind": "CustomResourceDefinition",
        "namespaced": False,
    },
    "v1/pods": {"kind": "Pod", "namespaced": True, "subresources": {"status"}},
    "v1/services": {"kind": "Service", "namespaced": True},
    "v1/events": {"kind": "Event", "namespaced": True},
    "networking.k8s.io/v1/networkpolicies": {"kind": "NetworkPolicy", "namespaced": True},
    "policy/v1/poddisruptionbudgets": {"kind": "PodDisruptionBudget", "namespaced": True},
    # Node-loss handling reads the Nodes and the kubelets' Leases (kube-node-lease).
    "v1/nodes": {"kind": "Node", "namespaced": False},
    "coordination.k8s.io/v1/leases": {"kind": "Lease", "namespaced": True},
    # scheduler-plugins' PodGroups are served (Volcano's are not: the missing-API case).
    f"{naming.COSCHEDULING_API_VERSION}/{naming.POD_GROUP_PLURAL}": {
        "kind": naming.POD_GROUP_KIND,
        "namespaced": True,
    },
    # Kueue's API (the operator's --kueue on): the tests play Kueue's part.
    "kueue.x-k8s.io/v1beta2/workloads": {
        "kind": "Workload",
        "namespaced": True,
        "subresources": {"status"},
    },
    "kueue.x-k8s.io/v1beta2/resourceflavors": {"kind": "ResourceFlavor", "namespaced": False},
    "kueue.x-k8s.io/v1beta2/workloadpriorityclasses": {
        "kind": "WorkloadPriorityClass",
        "namespaced": False,
    },
    JOBS: {
        "kind": naming.KIND,
        "namespaced": True,
        "singular": naming.SINGULAR,
        "shortnames": {naming.SHORT_NAME},
        "subresources": {"status"},
    },
}
VERBS = {"get", "list", "watch", "create", "update", "patch", "delete"}
_versions = itertools.count(1000)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job_manifest(name: str, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "replicasToAggregate": 2,
        "workers": 2,
        "parameterServers": 1,
        "model": {"entrypoint": "syncreplicas_runtime.models.linear:build"},
    }
    body.update(spec)
    return {
        "apiVersion": naming.API_VERSION,
        "kind": naming.KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


@dataclass(frozen=True)
class Logged:
    """One request as the API server saw it (for counting writes)."""

    method: str
    path: str
    data: Any
    status: list[int]  # the response's status once sent (empty: none, e.g. cancelled)


class RecordingEmulator(kmock.KubernetesEmulator):
    """kmock's emulator with a flat request log, server-filled metadata (uid,
    resourceVersion, creationTimestamp) and a match history of in-flight requests.

    kmock matches each request by re-filtering every request it has ever served against
    every reaction (its DSL views are sequences of past requests): each request costs
    O(history), and a thousand children took minutes. Matching needs only the requests
    still being handled, so the history is cut down to those before each request (a watch
    stream drops out once it has been streaming for a while: it matched long ago). The
    full log is kept here as plain records.
    """

    STREAM_MATCHED_AFTER = 2.0  # seconds

    def __init__(self) -> None:
        super().__init__()
        self.log: list[Logged] = []
        self._inflight: dict[int, tuple[Any, float]] = {}

    async def _handle(self, request: Any) -> Any:
        now = time.monotonic()
        if request.method.value.upper() == "POST" and isinstance(request.data, dict):
            # What the real API server fills in and kmock does not. kopf keys its per-object
            # memory by uid: without one, a pod and a service would share (and clobber) it.
            meta = request.data.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("resourceVersion", str(next(_versions)))
            meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        entry = Logged(str(request.method.value).upper(), request.url.path, request.data, [])
        self.log.append(entry)
        self._inflight[id(request)] = (request, now)
        self._requests[:] = [
            req
            for req, since in self._inflight.values()
            if req.params.get("watch") != "true" or now - since < self.STREAM_MATCHED_AFTER
        ]
        try:
            response = await super()._handle(request)
            entry.status.append(int(response.status))
            return response
        except kmock.KubernetesError as exc:
            entry.status.append(exc.status)
            raise
        finally:
            self._inflight.pop(id(request), None)


# Run before the operator: SIGKILL when the process that started it dies (a test or bench
# killed mid-run), which its own session would otherwise outlive (prctl PR_SET_PDEATHSIG,
# kept across exec); then exec the rest of the command line. Not a preexec_fn: that is not
# safe in a process with threads.
DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys; ctypes.CDLL(None).prctl(1, signal.SIGKILL); "
    "os.getppid() == 1 and sys.exit(1); os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


class Operator:
    """One ``syncreplicas operator`` process (own process group, always killed; killed
    with the process that started it too)."""

    def __init__(
        self,
        kubeconfig: Path,
        log: Path,
        scrape_interval: float = 0.3,
        replica_scrape_interval: float = 0.5,
        extra_args: tuple[str, ...] = (),
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.liveness_port = free_port()
        self.metrics_port = free_port()
        self.log = log
        env = {**os.environ, **(extra_env or {}), "KUBECONFIG": str(kubeconfig)}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                DIE_WITH_PARENT,
                "-m",
                "syncreplicas_operator.cli",
                "operator",
                "--liveness-port",
                str(self.liveness_port),
                "--metrics-port",
                str(self.metrics_port),
                "--scrape-interval",
                str(scrape_interval),
                "--replica-scrape-interval",
                str(replica_scrape_interval),
                *(["--verbose"] if os.environ.get("SYNCREPLICAS_TEST_VERBOSE") else []),
                *extra_args,
            ],
            env=env,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    async def wait_live(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.liveness_port}/healthz"
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise AssertionError(f"operator exited: {self.log.read_text()[-3000:]}")
                try:
                    async with session.get(url) as resp:
                        if resp.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.2)
        raise AssertionError(f"operator not live in {timeout}s: {self.log.read_text()[-3000:]}")

    async def metrics_text(self) -> str:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{self.metrics_port}/metrics") as resp,
        ):
            return await resp.text()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)


class Cluster:
    """kmock as the API server, plus the kubelet's part and the assertions' views."""

    def __init__(self, server: RecordingEmulator, tmp_path: Path) -> None:
        self.server = server
        self.tmp_path = tmp_path
        self.url = str(server.url).rstrip("/")
        self.kubeconfig = tmp_path / "kubeconfig"
        self.kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: kmock\n"
            f"clusters: [{{name: kmock, cluster: {{server: '{self.url}'}}}}]\n"
            "users: [{name: tester, user: {token: test-token}}]\n"
            "contexts: [{name: kmock, context: {cluster: kmock, user: tester}}]\n"
        )
        self.operators: list[Operator] = []
        self.session = aiohttp.ClientSession()

    # -- the operator -----------------------------------------------------------------

    async def start_operator(self, *args: str, env: dict[str, str] | None = None) -> Operator:
        """Start ``syncreplicas operator`` (``args``: extra options; ``env``: more of its
        environment) and wait until live."""
        log = self.tmp_path / f"operator-{len(self.operators)}.log"
        op = Operator(self.kubeconfig, log, extra_args=args, extra_env=env)
        self.operators.append(op)
        await op.wait_live()
        return op

    def logs(self) -> str:
        return "\n".join(op.log.read_text()[-4000:] for op in self.operators if op.log.exists())

    # -- writing, as users and kubelets do --------------------------------------------

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
        async with self.session.request(
            method, self.url + path, json=body, headers=headers
        ) as resp:
            return resp.status, await resp.json(content_type=None)

    async def create_job(self, manifest: dict[str, Any]) -> dict[str, Any]:
        meta = manifest["metadata"]
        meta.update(
            uid=str(uuid.uuid4()),
            resourceVersion=str(next(_versions)),
            creationTimestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            generation=1,
        )
        status, body = await self.request(
            "POST",
            f"/apis/{naming.API_VERSION}/namespaces/{meta['namespace']}/{naming.PLURAL}",
            manifest,
        )
        assert status in (200, 201), body
        return manifest

    async def patch_job(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        status, body = await self.request(
            "PATCH",
            f"/apis/{naming.API_VERSION}/namespaces/{namespace}/{naming.PLURAL}/{name}",
            patch,
        )
        assert status == 200, body

    async def delete(self, path: str) -> None:
        status, body = await self.request("DELETE", path)
        assert status in (200, 404), body

    async def set_pod(
        self,
        namespace: str,
        name: str,
        phase: str,
        *,
        exit_code: int | None = None,
        restart_count: int = 0,
        last_exit_code: int | None = None,
        pod_ip: str = "10.0.0.1",
        uid: str | None = None,
        reason: str | None = None,
        message: str | None = None,
        conditions: list[dict[str, Any]] | None = None,
        termination_message: str | None = None,
        last_termination_message: str | None = None,
    ) -> None:
        """Report a pod's state as a kubelet would (a realistic ``status``).

        ``termination_message``: what the runtime container left in its termination-log
        file, reported in ``state.terminated.message`` of a finished pod (and
        ``last_termination_message`` in ``lastState`` after an in-place restart)."""
        if phase == "Running":
            state: dict[str, Any] = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
        elif phase in ("Succeeded", "Failed"):
            state = {
                "terminated": {
                    "exitCode": exit_code if exit_code is not None else 0,
                    "reason": "Completed" if exit_code == 0 else "Error",
                    "startedAt": "2026-01-01T00:00:00Z",
                    "finishedAt": "2026-01-01T00:01:00Z",
                    "containerID": "containerd://" + uuid.uuid4().hex,
                }
            }
            if termination_message is not None:
                state["terminated"]["message"] = termination_message
        else:
            state = {"waiting": {"reason": "ContainerCreating"}}
        container: dict[str, Any] = {
            "name": naming.CONTAINER_NAME,
            "image": "ghcr.io/syncreplicas/syncreplicas-runtime:0.1.0",
            "imageID": "ghcr.io/syncreplicas/syncreplicas-runtime@sha256:" + "0" * 64,
            "containerID": "containerd://" + uuid.uuid4().hex,
            "ready": phase == "Running",
            "started": phase == "Running",
            "restartCount": restart_count,
            "state": state,
        }
        if last_exit_code is not None:
            container["lastState"] = {"terminated": {"exitCode": last_exit_code}}
            if last_termination_message is not None:
                container["lastState"]["terminated"]["message"] = last_termination_message
        patch: dict[str, Any] = {
            "status": {"phase": phase, "podIP": pod_ip, "containerStatuses": [container]}
        }
        extra = {"reason": reason, "message": message, "conditions": conditions}
        patch["status"].update({k: v for k, v in extra.items() if v is not None})
        if uid is not None:
            patch["metadata"] = {"uid": uid}
        status, body = await self.request(
            "PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status", patch
        )
        assert status == 200, body

    async def run_pods(self, namespace: str, job: str, **kwargs: Any) -> None:
        """Every current pod of the job Running (what a healthy kubelet reports)."""
        for pod in self.objects("v1/pods", namespace, job):
            if (pod.get("status") or {}).get("phase") != "Running":
                await self.set_pod(namespace, pod["metadata"]["name"], "Running", **kwargs)

    # -- reading, for assertions ------------------------------------------------------

    def objects(
        self, resource: str, namespace: str, job: str | None = None
    ) -> list[dict[str, Any]]:
        res = kmock.resource(resource)
        out = []
        for (r, ns, _), obj in self.server.objects.items():
            if r != res or ns != namespace or obj.deleted:
                continue
            raw = obj.raw
            labels = (raw.get("metadata") or {}).get("labels") or {}
            if job is None or labels.get(naming.LABEL_JOB_NAME) == job:
                out.append(raw)
        return out

    def pod_names(self, namespace: str, job: str) -> set[str]:
        return {p["metadata"]["name"] for p in self.objects("v1/pods", namespace, job)}

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        for (r, ns, n), obj in self.server.objects.items():
            if r == kmock.resource(JOBS) and ns == namespace and n == name and not obj.deleted:
                return obj.raw
        return None

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        job = self.job(namespace, name)
        return dict((job or {}).get("status") or {})

    def condition(self, namespace: str, name: str, ctype: str) -> dict[str, Any] | None:
        for cond in self.status(namespace, name).get("conditions") or []:
            if cond.get("type") == ctype:
                return dict(cond)
        return None

    def event_reasons(self, namespace: str) -> list[str]:
        return [e.get("reason", "") for e in self.objects("v1/events", namespace)]

    def writes(self, path_part: str = "", method: str = "") -> Iterator[Logged]:
        """Write requests received (optionally: whose path contains a part, one method)."""
        for req in list(self.server.log):
            is_write = req.method in ("POST", "PATCH", "PUT", "DELETE")
            if is_write and path_part in req.path and (not method or req.method == method):
                yield req

    async def wait_for(
        self, check: Callable[[], Any], timeout: float = 30.0, what: str = ""
    ) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            await asyncio.sleep(0.05)
        requests = "\n".join(f"{r.method} {r.path}" for r in self.server.log[-40:])
        raise AssertionError(
            f"timed out waiting for {what or check}\n--- logs ---\n{self.logs()}"
            f"\n--- last API requests ---\n{requests}"
        )

    async def close(self) -> None:
        for op in self.operators:
            op.kill()
        await self.session.close()
