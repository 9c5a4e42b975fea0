"""The operator against kmock: what the runtime's termination message puts in the job's
status (docs/contract.md, "Termination message").

The kubelet copies the runtime container's termination-log file into
``state.terminated.message``; the tests report it as a kubelet would. One operator serves
these tests (``shared_cluster``); each has its own namespace.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web
from kmockharness import Cluster, job_manifest
from syncreplicas_operator.core import naming

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]

BAD_CONFIG = "bad configuration: TF_CONFIG.task.index: 1 out of range"


@pytest_asyncio.fixture(loop_scope="session")
async def metrics_port() -> AsyncIterator[int]:
    """Every replica's /metrics (all on 127.0.0.1): the chief last read at step 1148."""

    async def serve(_: web.Request) -> web.Response:
        return web.Response(text="syncreplicas_global_step 1148\n", content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


def event_messages(c: Cluster, namespace: str, reason: str) -> list[str]:
    return [
        str(e.get("message", ""))
        for e in c.objects("v1/events", namespace)
        if e.get("reason") == reason
    ]


async def test_the_job_succeeds_at_the_chiefs_final_step_not_the_last_read(
    shared_cluster: Cluster, metrics_port: int
) -> None:
    c, ns, job = shared_cluster, "final-step", "fs"
    await c.create_job(
        job_manifest(job, ns, metrics={"port": metrics_port}, training={"maxSteps": 3000})
    )
    await c.wait_for(lambda: len(c.pod_names(ns, job)) == 4, what="pods")
    await c.run_pods(ns, job, pod_ip="127.0.0.1")
    await c.wait_for(lambda: c.status(ns, job).get("globalStep") == 1148, what="step read")
    # Training ends between two reads of the chief's metrics: its message has the step.
    await c.set_pod(
        ns,
        f"{job}-chief-0",
        "Succeeded",
        exit_code=0,
        pod_ip="127.0.0.1",
        termination_message="syncreplicas: OK (0): finished at global step 3000\nglobalStep=3000\n",
    )
    await c.wait_for(lambda: c.status(ns, job).get("phase") == naming.PHASE_SUCCEEDED)
    assert c.status(ns, job)["globalStep"] == 3000
    message = "the chief finished training at global step 3000"
    assert c.condition(ns, job, naming.CONDITION_SUCCEEDED)["message"] == message
    assert event_messages(c, ns, naming.REASON_SUCCEEDED) == [message]


async def test_a_worker_that_exits_64_fails_the_job_with_the_runtimes_reason(
    shared_cluster: Cluster,
) -> None:
    c, ns, job = shared_cluster, "exit-reason", "er"
    await c.create_job(job_manifest(job, ns, runPolicy={"restartPolicy": "ExitCode"}))
    await c.wait_for(lambda: len(c.pod_names(ns, job)) == 4, what="pods")
    for pod in c.objects("v1/pods", ns, job):
        (container,) = pod["spec"]["containers"]
        assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    await c.run_pods(ns, job)
    await c.wait_for(lambda: c.status(ns, job).get("phase") == naming.PHASE_RUNNING)
    await c.set_pod(
        ns,
        f"{job}-worker-1",
        "Failed",
        exit_code=64,
        termination_message=f"syncreplicas: CONFIG (64): {BAD_CONFIG}\n",
    )
    await c.wait_for(lambda: c.status(ns, job).get("phase") == naming.PHASE_FAILED)
    failed = c.condition(ns, job, naming.CONDITION_FAILED)
    assert failed is not None and failed["reason"] == naming.REASON_NON_RETRYABLE_EXIT
    assert failed["message"] == (
        f"{job}-worker-1 exited with CONFIG (64) (restartPolicy ExitCode, 0 of backoffLimit 6 "
        f"restarts used): {BAD_CONFIG}"
    )
    assert event_messages(c, ns, naming.REASON_NON_RETRYABLE_EXIT) == [failed["message"]]
