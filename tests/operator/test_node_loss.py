"""The operator against kmock: lost nodes. The replicas of a node that is gone, not Ready,
silent (its kubelet's Lease not renewed) or out of service are force-deleted and
re-created at once with a newer incarnation, off that node, named in a NodeLost Event,
not counted against backoffLimit; with --node-loss-handling off nothing is done.

Each test runs its own operator (a short Lease grace) against its own API server: Nodes
are cluster-wide.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kmockharness import Cluster, job_manifest
from syncreplicas_operator.core import naming

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]

# --node-lease-grace-seconds. Wide enough that a healthy node's renewals, every 0.3 s, are
# never 5 s late under the suite's load (a CI run's test process, niced beside the cluster
# lane, once went 2 s without renewing n1, and at 1.5 s n1 was taken for lost too).
GRACE = 5.0
NODES = "/api/v1/nodes"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{naming.NODE_LEASE_NAMESPACE}/leases"
# The replicas put on the node that will be lost; the others run on n1.
ON_N2 = ("nl-ps-0", "nl-worker-1")


def meta(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "uid": str(uuid.uuid4()), "resourceVersion": "1", **extra}


async def add_node(c: Cluster, name: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta(name, labels={naming.LABEL_HOSTNAME: name}),
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    status, answer = await c.request("POST", NODES, body)
    assert status in (200, 201), answer


async def renew(c: Cluster, name: str) -> None:
    """What a kubelet does every 10 s: create or renew its Lease."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    spec = {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now}
    status, _ = await c.request("PATCH", f"{LEASES}/{name}", {"spec": spec})
    if status == 404:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta(name, namespace=naming.NODE_LEASE_NAMESPACE),
            "spec": spec,
        }
        status, answer = await c.request("POST", LEASES, body)
        assert status in (200, 201), answer


@contextlib.asynccontextmanager
async def kubelets(c: Cluster, names: set[str]) -> AsyncIterator[set[str]]:
    """Renew the Leases of ``names`` every 0.3 s; remove a name to silence its kubelet."""

    async def loop() -> None:
        while True:
            for name in sorted(names):
                await renew(c, name)
            await asyncio.sleep(0.3)

    task = asyncio.ensure_future(loop())
    try:
        yield names
    finally:
        task.cancel()


def force_deleted(c: Cluster, ns: str) -> set[str]:
    return {
        r.path.rsplit("/", 1)[-1]
        for r in c.writes(f"/namespaces/{ns}/pods/", "DELETE")
        if (r.data or {}).get("gracePeriodSeconds") == 0
    }


def pod_posts(c: Cluster, ns: str) -> list[dict[str, Any]]:
    return [
        r.data
        for r in c.writes(f"/namespaces/{ns}/pods", "POST")
        if r.status and 200 <= r.status[0] < 300
    ]


def incarnations(c: Cluster, ns: str, name: str) -> list[int]:
    return [
        int(p["metadata"]["annotations"][naming.ANNOTATION_INCARNATION])
        for p in pod_posts(c, ns)
        if p["metadata"]["name"] == name
    ]


def node_lost_events(c: Cluster, ns: str) -> list[str]:
    return [
        str(e["message"])
        for e in c.objects("v1/events", ns)
        if e.get("reason") == naming.REASON_NODE_LOST
    ]


async def running_on_two_nodes(c: Cluster, ns: str) -> None:
    """Job nl (1 PS, chief, 2 workers; backoffLimit 0) running, ON_N2 on n2."""
    run_policy = {"restartPolicy": "ExitCode", "backoffLimit": 0}
    await c.create_job(job_manifest("nl", ns, runPolicy=run_policy))
    await c.wait_for(lambda: len(c.pod_names(ns, "nl")) == 4, what="pods")
    for name in sorted(c.pod_names(ns, "nl")):
        node = "n2" if name in ON_N2 else "n1"
        status, body = await c.request(
            "PATCH", f"/api/v1/namespaces/{ns}/pods/{name}", {"spec": {"nodeName": node}}
        )
        assert status == 200, body
    await c.run_pods(ns, "nl")
    await c.wait_for(lambda: c.status(ns, "nl").get("ready") == "4/4", what="4 ready")


async def lose_n2(c: Cluster, how: str, beating: set[str]) -> None:
    if how == "lease":
        beating.discard("n2")
    elif how == "ready":
        cond = [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]
        status, body = await c.request("PATCH", f"{NODES}/n2", {"status": {"conditions": cond}})
        assert status == 200, body
    elif how == "deleted":
        await c.delete(f"{NODES}/n2")
    elif how == "out-of-service":
        taint = {"key": naming.TAINT_OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute"}
        status, body = await c.request("PATCH", f"{NODES}/n2", {"spec": {"taints": [taint]}})
        assert status == 200, body


@pytest.mark.parametrize("how", ["lease", "ready", "deleted", "out-of-service"])
async def test_the_replicas_of_a_lost_node_are_replaced_at_once(cluster: Cluster, how: str) -> None:
    c, ns = cluster, "lost"
    for node in ("n1", "n2"):
        await add_node(c, node)
    async with kubelets(c, {"n1", "n2"}) as beating:
        await c.start_operator("--node-lease-grace-seconds", str(GRACE))
        await running_on_two_nodes(c, ns)
        before = {name: incarnations(c, ns, name)[0] for name in ON_N2}
        await asyncio.sleep(GRACE + 0.5)  # longer than the grace: healthy nodes lose nothing
        assert not force_deleted(c, ns)
        started = time.monotonic()
        await lose_n2(c, how, beating)
        await c.wait_for(lambda: force_deleted(c, ns) == set(ON_N2), what="force-deleted")
        for name in ON_N2:
            await c.wait_for(lambda n=name: len(incarnations(c, ns, n)) == 2, what="re-created")
        took = time.monotonic() - started
        # At once: seconds, where Kubernetes alone waits 50 s and then the pods' 300 s.
        assert took < (GRACE + 6.5 if how == "lease" else 8.0), took
        messages = node_lost_events(c, ns)
        assert len(messages) == 1, (messages, c.logs())
        (message,) = messages
        assert message.startswith("node n2 lost (") and "nl-ps-0, nl-worker-1" in message
        for name in ON_N2:
            first, second = incarnations(c, ns, name)
            assert first == before[name] and second > first
            (body,) = [p for p in pod_posts(c, ns)[4:] if p["metadata"]["name"] == name]
            env = {e["name"]: e["value"] for e in body["spec"]["containers"][0]["env"]}
            assert env[naming.ENV_INCARNATION] == str(second)
            if how == "deleted":
                # No node to keep it off (the deleted node is gone).
                assert "nodeAffinity" not in body["spec"].get("affinity", {})
                continue
            terms = body["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"]
            assert {"key": "metadata.name", "operator": "NotIn", "values": ["n2"]} in terms[0][
                "matchFields"
            ]
        # The pods on n1 were left alone; backoffLimit 0 was not spent.
        assert len(pod_posts(c, ns)) == 6
        await c.run_pods(ns, "nl")
        await c.wait_for(lambda: c.status(ns, "nl").get("ready") == "4/4", what="back")
        status = c.status(ns, "nl")
        assert status["phase"] != naming.PHASE_FAILED
        assert all(s["restarts"] == 0 for s in status["replicaStatuses"].values())
        assert status["lastRecovery"]["cause"] == "NodeLost"


async def test_with_node_loss_handling_off_nothing_is_done(cluster: Cluster) -> None:
    c, ns = cluster, "lost-off"
    for node in ("n1", "n2"):
        await add_node(c, node)
    await c.start_operator("--node-loss-handling", "off", "--node-lease-grace-seconds", str(GRACE))
    await running_on_two_nodes(c, ns)
    await lose_n2(c, "ready", set())
    await c.delete(f"{NODES}/n1")
    await asyncio.sleep(3.0)
    assert not force_deleted(c, ns)
    assert len(pod_posts(c, ns)) == 4
    assert not node_lost_events(c, ns)
    assert not [r for r in c.server.log if r.path.startswith((NODES, LEASES)) and r.method == "GET"]
