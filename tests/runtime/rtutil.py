"""Helpers of the runtime tests: jobs for the linear model, environment, log parsing."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.jobs import with_changes
from tests.support.tfcluster import start_cluster

REPO = Path(__file__).resolve().parents[2]

LINEAR_JOB: dict[str, Any] = {
    "replicasToAggregate": 2,
    "workers": 1,
    "parameterServers": 1,
    "initialTokens": 0,
    "model": {"entrypoint": "syncreplicas_runtime.models.linear:build", "args": {"dim": 4}},
    "training": {"optimizer": "sgd", "learningRate": 0.05, "batchSize": 8, "maxSteps": 30,
                 "logEverySteps": 10, "startupTimeoutSeconds": 180,
                 "chiefLostTimeoutSeconds": 120},
}


def linear_job(**changes: Any) -> dict[str, Any]:
    """LINEAR_JOB with changes; ``training__maxSteps=5`` reaches into nested objects."""
    return with_changes(LINEAR_JOB, **changes)


def until_the_chief_ends(job: dict[str, Any], workdir: Path,
                         chief_env: dict[str, str] | None = None, chief_timeout: float = 240.0,
                         rest_timeout: float = 120.0) -> tuple[dict[Any, int | None], str]:
    """Run ``job`` (a PS, the chief, a worker) until its chief ends, and the others with it
    when it succeeded (a chief that failed leaves them to the clean-up): the exit codes
    and the chief's log. ``chief_env`` is added to the chief's environment."""
    with start_cluster(job, workers=1, ps=1, workdir=workdir, env=runtime_env(),
                       start=False) as cluster:  # fmt: skip
        cluster.replica("chief", 0).env.update(chief_env or {})
        cluster.start_all()
        if cluster.wait_one("chief", 0, timeout=chief_timeout) == 0:
            cluster.wait(timeout=rest_timeout)
        return cluster.poll(), cluster.log("chief", 0)


def runtime_env() -> dict[str, str]:
    """Environment of runtime processes: the repository root importable (test models)."""
    path = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": f"{REPO}{os.pathsep}{path}" if path else str(REPO),
            "TF_CPP_MIN_LOG_LEVEL": "2"}


LOG_LINE = re.compile(r"global_step=(\d+) local_step=(\d+) steps/s=([\d.]+) loss=([-\d.e+naif]+)")


def logged_steps(log: str) -> list[tuple[int, float]]:
    """(global step, loss) of every periodic log line."""
    return [(int(m[1]), float(m[4])) for m in LOG_LINE.finditer(log)]


RATE = re.compile(r"global_step=(\d+) .* lr=([-\d.e+naif]+)")


def logged_rates(log: str) -> list[tuple[int, float]]:
    """(global step, learning rate) of every periodic log line."""
    return [(int(m[1]), float(m[2])) for m in RATE.finditer(log)]


class StepDelay:
    """A step delay every replica reads from one file while it trains (the runtime's
    ``SYNCREPLICAS_DEBUG_STEP_DELAY_MS=@FILE``): slow while a test needs time to pass in
    few steps (a restart's TensorFlow import), fast once it does not."""

    def __init__(self, path: Path, ms: float) -> None:
        self.path = path
        self.set(ms)

    @property
    def env(self) -> dict[str, str]:
        return {"SYNCREPLICAS_DEBUG_STEP_DELAY_MS": f"@{self.path}"}

    def set(self, ms: float) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{ms}\n")
        tmp.replace(self.path)  # atomic: a reader never sees an empty file


def eventually(probe: Callable[[], Any], timeout: float) -> Any:
    """``probe()``'s first truthy value within ``timeout`` s (polled every 50 ms), or None."""
    deadline = time.monotonic() + timeout
    while not (value := probe()):
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)
    return value
