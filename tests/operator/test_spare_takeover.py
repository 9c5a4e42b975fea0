"""Warm spare pods through the real operator (kopf's watches and indexes, the HTTP call, the
pod patch) against kmock: a deleted PS goes to the spare, which is relabelled, and a new
spare starts; a spare that refuses is deleted and the PS gets a pod of its own.

kmock runs no pods: the spare's endpoint here is a small HTTP server of the test's, on the
job's metrics port at the spare pod's address (127.0.0.1), answering as the runtime does
(docs/contract.md, "Spare pods"; the runtime's side: tests/runtime/test_spare.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from kmockharness import Cluster, free_port, job_manifest
from syncreplicas_operator.core import naming

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]


class SpareEndpoint:
    """The spare's POST /spare/assign: answers ``status``, records what it was sent."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.status = 200
        self.received: list[tuple[str, dict[str, Any]]] = []

    async def assign(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        self.received.append((request.headers.get("Authorization", ""), body))
        if self.status != 200:
            return web.Response(status=self.status, text="wrong token")
        task = json.loads(body["env"][naming.ENV_TF_CONFIG])["task"]
        return web.json_response({"assigned": f"{task['type']}-{task['index']}"})


@pytest_asyncio.fixture(loop_scope="session")
async def spare_endpoint() -> AsyncIterator[SpareEndpoint]:
    endpoint = SpareEndpoint(free_port())
    app = web.Application()
    app.router.add_post(naming.SPARE_ASSIGN_PATH, endpoint.assign)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", endpoint.port)
    await site.start()
    try:
        yield endpoint
    finally:
        await runner.cleanup()


def pod(c: Cluster, ns: str, name: str) -> dict[str, Any] | None:
    return next((p for p in c.objects("v1/pods", ns) if p["metadata"]["name"] == name), None)


def token_of(item: dict[str, Any]) -> str:
    env = item["spec"]["containers"][0]["env"]
    return next(e["value"] for e in env if e["name"] == naming.ENV_SPARE_TOKEN)


async def job_with_a_ready_spare(c: Cluster, ns: str, port: int) -> dict[str, Any]:
    await c.create_job(job_manifest("sp", ns, metrics={"port": port}, runPolicy={"spares": 1}))
    await c.wait_for(lambda: len(c.pod_names(ns, "sp")) == 4, what="the replicas' pods")
    assert not pod(c, ns, "sp-spare-0")  # replicas first
    await c.run_pods(ns, "sp")
    spare = await c.wait_for(lambda: pod(c, ns, "sp-spare-0"), what="the spare")
    await c.set_pod(ns, "sp-spare-0", "Running", pod_ip="127.0.0.1")
    await c.wait_for(lambda: (c.status(ns, "sp").get("spares") or {}).get("ready") == 1,
                     what="status.spares.ready 1")  # fmt: skip
    return spare


async def test_a_deleted_ps_goes_to_the_spare_and_a_new_spare_starts(
    shared_cluster: Cluster, spare_endpoint: SpareEndpoint
) -> None:
    c, ns = shared_cluster, "spare-takes"
    spare = await job_with_a_ready_spare(c, ns, spare_endpoint.port)
    await c.delete(f"/api/v1/namespaces/{ns}/pods/sp-ps-0")

    def relabelled() -> bool:
        item = pod(c, ns, "sp-spare-0") or {}
        labels = (item.get("metadata") or {}).get("labels") or {}
        return labels.get(naming.LABEL_REPLICA_TYPE) == "ps"

    await c.wait_for(relabelled, what="the spare relabelled as ps-0")
    took_over = time.monotonic()
    (auth, body), = spare_endpoint.received
    assert auth == f"Bearer {token_of(spare)}"
    env = body["env"]
    assert json.loads(env[naming.ENV_TF_CONFIG])["task"] == {"type": "ps", "index": 0}
    held = pod(c, ns, "sp-spare-0")
    assert held is not None
    meta = held["metadata"]
    assert meta["labels"][naming.LABEL_REPLICA_INDEX] == "0"
    assert naming.LABEL_SPARE not in meta["labels"]
    assert meta["annotations"][naming.ANNOTATION_INCARNATION] == env[naming.ENV_INCARNATION]
    assert meta["annotations"][naming.ANNOTATION_SPARE_OF] == "ps-0"
    # A new spare behind it, started the operator's --spare-refill-delay-seconds (10) after
    # the takeover; the one that took ps-0 over is kept, and no sp-ps-0 is created.
    await c.wait_for(lambda: pod(c, ns, "sp-spare-1"), what="a new spare")
    assert time.monotonic() - took_over > 8.0
    await c.set_pod(ns, "sp-spare-1", "Running", pod_ip="127.0.0.1")
    await c.wait_for(lambda: (c.status(ns, "sp").get("spares") or {}).get("ready") == 1)
    await asyncio.sleep(1.0)  # passes after the watch showed both: neither is deleted
    deleted = [w.path for w in c.writes(f"/namespaces/{ns}/pods/sp-spare", "DELETE")]
    assert not deleted, deleted
    assert pod(c, ns, "sp-spare-0") is not None and pod(c, ns, "sp-ps-0") is None
    assert naming.REASON_SPARE_ASSIGNED in c.event_reasons(ns)
    assert c.status(ns, "sp")["spares"]["assigned"] == 1


async def test_a_spare_that_refuses_is_deleted_and_the_ps_gets_its_own_pod(
    shared_cluster: Cluster, spare_endpoint: SpareEndpoint
) -> None:
    c, ns = shared_cluster, "spare-refuses"
    await job_with_a_ready_spare(c, ns, spare_endpoint.port)
    spare_endpoint.status = 401
    await c.delete(f"/api/v1/namespaces/{ns}/pods/sp-ps-0")
    await c.wait_for(lambda: pod(c, ns, "sp-ps-0"), what="a pod of its own for ps-0")
    await c.wait_for(lambda: pod(c, ns, "sp-spare-0") is None, what="the spare deleted")
    assert naming.REASON_SPARE_FAILED in c.event_reasons(ns)
    failed = next(e for e in c.objects("v1/events", ns) if e["reason"] == "SpareFailed")
    assert "HTTP 401" in failed["message"]
    # A handover that did not happen is not counted.
    assert int((c.status(ns, "sp").get("spares") or {}).get("assigned") or 0) == 0
