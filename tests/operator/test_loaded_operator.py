"""The operator against kmock, its threads starved: a job's loop, woken for its pods'
events, still plans from their latest state.

kopf runs a handler that is not a coroutine in a thread of its pool, and stores an
indexer's value when that thread hands it back. On a loaded machine a thread can stall
between doing the work and handing it back. The operator here stalls each of them a random
0-0.5 s there (a ``sitecustomize`` on its ``PYTHONPATH``); its own work in threads
(asyncio's pool) runs as usual. A loop woken from inside such a thread plans before the
store and, not woken again, waits out its idle minute: a job whose pods all run, never
Ready (as once in a loaded run of the suite).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kmockharness import Cluster, job_manifest

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]

# Well under the loop's idle minute (daemon.IDLE_SECONDS), well over a loaded pass.
WITHIN_SECONDS = 20.0

STALLED_HAND_BACK = """\
import concurrent.futures.thread as _thread
import random as _random
import time as _time

_submit = _thread.ThreadPoolExecutor.submit


def _stalling_submit(self, fn, /, *args, **kwargs):
    if self._thread_name_prefix.startswith("asyncio"):
        return _submit(self, fn, *args, **kwargs)

    def stalled(*a, **k):
        result = fn(*a, **k)
        _time.sleep(_random.uniform(0.0, 0.5))
        return result

    return _submit(self, stalled, *args, **kwargs)


_thread.ThreadPoolExecutor.submit = _stalling_submit
"""


async def test_a_starved_operator_plans_from_the_pod_states_it_was_woken_for(
    cluster: Cluster, tmp_path: Path
) -> None:
    site = tmp_path / "stalled-threads"
    site.mkdir()
    (site / "sitecustomize.py").write_text(STALLED_HAND_BACK)
    await cluster.start_operator(env={"PYTHONPATH": str(site)})
    c, ns = cluster, "starved"
    jobs = [f"s{i}" for i in range(6)]
    for job in jobs:
        # No metrics: nothing but the pods' events brings the loop back before its minute.
        await c.create_job(job_manifest(job, ns, metrics={"port": 0}))
        await c.wait_for(lambda j=job: len(c.pod_names(ns, j)) == 4, what=f"{job}'s pods")
        await c.run_pods(ns, job, pod_ip="127.0.0.1")
    for job in jobs:
        await c.wait_for(
            lambda j=job: c.status(ns, j).get("ready") == "4/4",
            timeout=WITHIN_SECONDS,
            what=f"{job} ready",
        )
