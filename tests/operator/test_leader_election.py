"""Two real operators with ``--leader-elect on`` against kmock: one acts, the other waits
(alive, its gauge at 0, no pod of its making); the leader stopped (SIGTERM) releases the
Lease and the other acts within a few retry periods, long before the Lease would expire."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from kmockharness import Cluster, Operator, job_manifest

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]

# A Lease long enough that its release (a few retry periods, seconds under load) and its
# expiry (30 s after the last renewal) cannot be confused.
ELECTION = ("--leader-elect", "on", "--leader-election-namespace", "ops",
            "--leader-election-lease-duration", "30", "--leader-election-renew-deadline", "6",
            "--leader-election-retry-period", "0.5")  # fmt: skip
TAKEN_OVER_WITHIN = 15.0  # seconds: released, not expired
LEASE = "coordination.k8s.io/v1/leases"


async def leader_gauge(op: Operator) -> float:
    match = re.search(r"^syncreplicas_operator_leader (\S+)$", await op.metrics_text(), re.M)
    return float(match.group(1)) if match else -1.0


def holder(cluster: Cluster) -> str:
    leases = cluster.objects(LEASE, "ops")
    return str(leases[0]["spec"].get("holderIdentity") or "") if leases else ""


async def test_one_operator_acts_and_the_other_takes_over_when_it_stops(
        cluster: Cluster) -> None:  # fmt: skip
    first = await cluster.start_operator(*ELECTION)
    await cluster.wait_for(lambda: holder(cluster), what="a holder of the Lease")
    leader = holder(cluster)
    second = await cluster.start_operator(*ELECTION)  # live while it waits (its /healthz)
    assert await leader_gauge(first) == 1 and await leader_gauge(second) == 0

    await cluster.create_job(job_manifest("alpha", "team-a", workers=1))
    await cluster.wait_for(lambda: len(cluster.pod_names("team-a", "alpha")) == 3,
                           what="alpha's pods")  # fmt: skip
    assert holder(cluster) == leader and await leader_gauge(second) == 0
    assert "following" in second.log.read_text()

    stopped = time.monotonic()
    # kopf stops, then the Lease is released (waited for without blocking the loop that
    # serves kmock).
    os.killpg(first.proc.pid, signal.SIGTERM)
    await cluster.wait_for(lambda: first.proc.poll() is not None, what="the leader's exit")
    assert "released the lease" in first.log.read_text()
    await cluster.wait_for(lambda: holder(cluster) not in ("", leader), timeout=TAKEN_OVER_WITHIN,
                           what="the other operator holding the Lease")  # fmt: skip
    assert time.monotonic() - stopped < TAKEN_OVER_WITHIN  # not the 30 s of an expiry
    await cluster.create_job(job_manifest("beta", "team-a", workers=1))
    await cluster.wait_for(lambda: len(cluster.pod_names("team-a", "beta")) == 3,
                           what="beta's pods, made by the new leader")  # fmt: skip
    assert await leader_gauge(second) == 1


async def test_a_follower_stops_waiting_at_sigterm(cluster: Cluster) -> None:
    """A follower told to stop (a rolling update, a drain) exits at once, cleanly, and never
    takes the Lease: it must not lead on the settings of a release being replaced. (Its
    own SIGTERM handler: as a container's PID 1 the default action would be ignored.)"""
    first = await cluster.start_operator(*ELECTION)
    await cluster.wait_for(lambda: holder(cluster), what="a holder of the Lease")
    second = await cluster.start_operator(*ELECTION)
    assert await leader_gauge(second) == 0
    second.proc.send_signal(signal.SIGTERM)
    # "At once": well inside the 30 s Lease a follower would otherwise wait on; 15 s, not
    # 5, holds beside the suite's load (the default SIGTERM death is told apart by the exit
    # code below, not by time).
    await cluster.wait_for(lambda: second.proc.poll() is not None, timeout=15,
                           what="the follower's exit")  # fmt: skip
    assert second.proc.returncode == 0  # its handler's exit, not the default SIGTERM death
    assert "leads" not in second.log.read_text().split("following", 1)[-1]
    assert first.proc.poll() is None
