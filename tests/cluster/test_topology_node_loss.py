"""A job placed by Kueue's topology-aware scheduling loses a node of its rack, on the real
cluster (`make cluster KUEUE=1`: two nodes a rack; test_topology.py's job and queue).

Its three workers run in one rack, so on both of that rack's nodes. One of those nodes
crashes. The operator replaces the lost replicas (their node's Lease silent: force-deleted,
created again gated); Kueue's node controller marks the node failed in the Workload and
its scheduler moves that part of the topology assignment to a node with room; a
replacement the ungater had already pinned to the failed node is failed by Kueue
(TerminatedByKueue, which the operator takes as the cluster's disruption, not the
replica's failure) and made again. Within the bound every worker runs again, all of them
in one rack, none on the crashed node, and the job has not failed. Crashing nodes, it runs
alone (exclusive).
"""

from __future__ import annotations

import time

import pytest
import yaml

from tests.cluster import kube
from tests.cluster.jobwatch import RESTORE, node_ready, operator_nodes, placement
from tests.cluster.test_topology import admitted, local_queue, racked_job, racks, running_workers

# It crashes a node: with no other test's pods on the cluster but test_scale_hollow.py's
# (paired), which are all on hollow nodes (kubemark), never on a real one.
pytestmark = [pytest.mark.exclusive, pytest.mark.paired]

JOB = "rack-loss"
BACK_WITHIN = 300  # s: the Lease's 20 s, Kueue's node failure and new assignment, a start


def back_in_one_rack(namespace: str, lost: str, by_node: dict[str, str]) -> set[str] | None:
    workers = running_workers(namespace, JOB)
    if workers is None:
        return None
    nodes = {str(p["spec"]["nodeName"]) for p in workers}
    return nodes if lost not in nodes and len({by_node[n] for n in nodes}) == 1 else None


@pytest.mark.timeout(900)
def test_a_rack_placed_job_that_loses_a_node_runs_all_its_workers_in_one_rack_again(
    namespace: str,
) -> None:
    by_node = racks()
    local_queue(namespace)
    kube.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(racked_job(JOB)))
    lost = ""
    try:
        kube.eventually("the Workload admitted", lambda: admitted(namespace), 180)
        workers = kube.eventually("3 workers running", lambda: running_workers(namespace, JOB), 240)
        (rack,) = {by_node[p["spec"]["nodeName"]] for p in workers}
        # A node of the rack with a worker; the acting operator's last (its failover is
        # test_node_faults.py's), then as few of the job's other pods as may be.
        leader, _ = operator_nodes()
        placed = placement(namespace, JOB)
        on = {str(p["spec"]["nodeName"]) for p in workers}
        lost = min(on, key=lambda n: (n == leader, sum(1 for v in placed.values() if v == n), n))
        crashed = time.monotonic()
        kube.node_fault(lost, "crash")
        nodes = kube.eventually("every worker running again in one rack, none on the lost node",
                                lambda: back_in_one_rack(namespace, lost, by_node), BACK_WITHIN)
        back = time.monotonic() - crashed
        srj = kube.kubectl_json("get", "srj", JOB, "-n", namespace)
        assert not kube.condition(srj, "Failed"), srj.get("status")
        unhealthy = ((admitted(namespace) or {}).get("status") or {}).get("unhealthyNodes")
        events = kube.kubectl_json("get", "events", "-n", namespace)["items"]
        said = sorted({e["reason"] for e in events if e.get("reason") in (
            "PodTerminatedByKueue", "WaitingForTopology", "Ungated", "NodeLost",
            "EvictedDueToNodeFailures")})  # fmt: skip
        print("figures:", {"rack": rack, "lost": lost, "workers on": sorted(nodes),
                           "racks now": sorted({by_node[n] for n in nodes}),
                           "back s": round(back), "events": said,
                           "unhealthyNodes": unhealthy})  # fmt: skip
    except AssertionError as error:
        described = kube.describe(namespace, "srj")
        raise AssertionError(f"{error}\n{described}") from error
    finally:
        kube.kubectl("delete", "srj", JOB, "-n", namespace, "--wait=false", check=False)
        if lost:
            kube.node_fault(lost, RESTORE["crash"], check=False)
            kube.eventually(f"{lost} Ready again", lambda: node_ready(lost) == "True", 180)
