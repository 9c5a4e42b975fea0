"""The operator against kmock with replicas' /metrics served by a test HTTP server:
Degraded from the coordinator's R, straggler detection and eviction, recovery in status.

Each replica's pod gets its own loopback address (127.0.0.x), all on one port, as pods on
a cluster share the metrics port; the server answers by the address it was asked on.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import pytest_asyncio
from aiohttp import web
from kmockharness import Cluster, job_manifest
from syncreplicas_operator.core import naming

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]

ADDRESSES = {
    "ps-0": "127.0.0.2",
    "chief-0": "127.0.0.3",
    "worker-0": "127.0.0.4",
    "worker-1": "127.0.0.5",
}


@dataclass
class Replica:
    """What one replica's /metrics says; the counters grow with every read."""

    gauges: dict[str, float] = field(default_factory=dict)
    drop_share: float = 0.0  # of the gradients pushed between two reads
    delay: float = 0.0  # seconds before it answers
    pushed: float = 0.0
    dropped: float = 0.0

    def text(self) -> str:
        self.pushed += 10
        self.dropped += 10 * self.drop_share
        lines = [f"{name} {value}" for name, value in self.gauges.items()]
        lines += [
            "# TYPE syncreplicas_gradients_pushed counter",
            f"syncreplicas_gradients_pushed_total {self.pushed}",
            "# TYPE syncreplicas_stale_gradients_dropped counter",
            f"syncreplicas_stale_gradients_dropped_total {self.dropped}",
        ]
        return "\n".join(lines) + "\n"


@pytest_asyncio.fixture(loop_scope="session")
async def replicas() -> AsyncIterator[tuple[int, dict[str, Replica]]]:
    served = {key: Replica() for key in ADDRESSES}
    # By key, so that a test's replacing a replica (a new process) is what is served next.
    by_address = {address: key for key, address in ADDRESSES.items()}

    async def serve(request: web.Request) -> web.Response:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        replica = served[by_address[sockname[0]]]
        await asyncio.sleep(replica.delay)
        return web.Response(text=replica.text(), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    first = web.TCPSite(runner, ADDRESSES["ps-0"], 0)
    await first.start()
    port = runner.addresses[0][1]
    for address in list(ADDRESSES.values())[1:]:
        await web.TCPSite(runner, address, port).start()
    try:
        yield port, served
    finally:
        await runner.cleanup()


async def metric(cluster: Cluster, name: str) -> float:
    text = await cluster.operators[0].metrics_text()
    match = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def messages(cluster: Cluster, namespace: str, reason: str) -> list[str]:
    return [
        e.get("message", "")
        for e in cluster.objects("v1/events", namespace)
        if e.get("reason") == reason
    ]


async def test_degraded_straggler_eviction_and_recovery(
    shared_cluster: Cluster, replicas: tuple[int, dict[str, Replica]]
) -> None:
    c, ns, job = shared_cluster, "recovery", "rc"
    port, served = replicas
    evictions = "syncreplicas_operator_straggler_evictions_total"
    recoveries = 'syncreplicas_operator_recoveries_total{cause="StragglerEvicted"}'
    evictions_before = await metric(c, evictions)
    recoveries_before = await metric(c, recoveries)
    coordinator, chief = served["ps-0"], served["chief-0"]
    coordinator.gauges.update(syncreplicas_replicas_to_aggregate=3, syncreplicas_live_replicas=3)
    chief.gauges.update(syncreplicas_global_step=100, syncreplicas_restored_step=0)
    # A slow answer: a read of it is still under way when its pod is deleted, and ends
    # after (it must not count against the pod that replaces it).
    served["worker-1"].drop_share, served["worker-1"].delay = 0.9, 1.0
    await c.create_job(
        job_manifest(
            job,
            ns,
            replicasToAggregate=3,
            minReplicasToAggregate=2,
            metrics={"port": port},
            runPolicy={"stragglerPolicy": {"evictAfterSeconds": 2, "minDropFraction": 0.5}},
        )
    )
    await c.wait_for(lambda: len(c.pod_names(ns, job)) == 4, what="pods")
    for key, address in ADDRESSES.items():
        await c.set_pod(ns, f"{job}-{key}", "Running", pod_ip=address)
    await c.wait_for(lambda: c.status(ns, job).get("replicasToAggregate") == 3, what="R read")
    assert (c.condition(ns, job, naming.CONDITION_DEGRADED) or {}).get("status") != "True"

    # worker-1's gradients are dropped 90% of the time: flagged, then its pod deleted
    await c.wait_for(
        lambda: (
            (c.condition(ns, job, naming.CONDITION_STRAGGLER_DETECTED) or {}).get("status")
            == "True"
        ),
        what="StragglerDetected",
    )
    assert "worker-1" in c.condition(ns, job, naming.CONDITION_STRAGGLER_DETECTED)["message"]
    await c.wait_for(
        lambda: messages(c, ns, naming.REASON_STRAGGLER_EVICTED), what="StragglerEvicted event"
    )
    assert f"deleted {job}-worker-1" in messages(c, ns, naming.REASON_STRAGGLER_EVICTED)[0]
    deleted = [req.path.rsplit("/", 1)[-1] for req in c.writes(f"/namespaces/{ns}/pods/", "DELETE")]
    assert deleted == [f"{job}-worker-1"]  # never the chief, never a PS
    recovery = await c.wait_for(
        lambda: c.status(ns, job).get("lastRecovery"), what="lastRecovery"
    )
    assert (recovery["replica"], recovery["cause"], recovery["globalStepBefore"]) == (
        "worker-1",
        "StragglerEvicted",
        100,
    )
    assert await metric(c, evictions) == evictions_before + 1
    assert await metric(c, recoveries) == recoveries_before + 1

    # the coordinator lowers R while worker-1 is gone: Degraded, with an Event
    coordinator.gauges.update(syncreplicas_replicas_to_aggregate=2, syncreplicas_live_replicas=2)
    await c.wait_for(
        lambda: (c.condition(ns, job, naming.CONDITION_DEGRADED) or {}).get("status") == "True",
        what="Degraded",
    )
    degraded = c.condition(ns, job, naming.CONDITION_DEGRADED)
    assert degraded["message"] == (
        "aggregating 2 of 3 gradients per update (replica worker-1 lost)"
    )
    assert "lastTransitionTime" in degraded
    assert messages(c, ns, naming.REASON_JOB_DEGRADED) == [f"Degraded: {degraded['message']}"]

    # worker-1 is back (a new process: fresh counters, no drops) and training goes on
    await c.wait_for(lambda: f"{job}-worker-1" in c.pod_names(ns, job), what="re-created")
    served["worker-1"] = Replica()
    # Its pod runs 3 s later (a slow start): longer than evictAfterSeconds after that late
    # read, so a flag it left would evict the new pod as soon as the recovery is seen.
    await asyncio.sleep(3)
    await c.set_pod(ns, f"{job}-worker-1", "Running", pod_ip=ADDRESSES["worker-1"])
    coordinator.gauges.update(syncreplicas_replicas_to_aggregate=3, syncreplicas_live_replicas=3)
    chief.gauges.update(syncreplicas_global_step=130)
    # Recovery is seen at a read of the replicas' metrics after the step moved.
    await c.wait_for(
        lambda: "recoveredAt" in c.status(ns, job).get("lastRecovery", {}), what="recovered"
    )
    assert c.status(ns, job)["lastRecovery"]["stepsLost"] == 0
    await c.wait_for(
        lambda: (c.condition(ns, job, naming.CONDITION_DEGRADED) or {}).get("status") == "False",
        what="not Degraded",
    )
    assert messages(c, ns, naming.REASON_RECOVERED) == [
        "Recovered: aggregating 3 of 3 gradients per update"
    ]
    assert messages(c, ns, naming.REASON_REPLICA_RECOVERED)
    assert c.status(ns, job)["replicaStatuses"]["worker"]["active"] == 2
