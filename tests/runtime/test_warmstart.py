"""Warm starts (syncreplicas_runtime.launch.warmstart): replicas forked from a server that imported
TensorFlow once behave as processes started with ``python -m syncreplicas_runtime``.

A job trains to the end with every replica forked from the server (each one's parent is
the server, each in a process group of its own); exit codes come back as Popen reports
them: 0, the runtime's own code for a bad configuration, -9 for SIGKILL and 143 for a
SIGTERM the runtime handles; the replica's environment, working directory and output are
the request's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from syncreplicas_operator.local.warmstart import WarmServer
from syncreplicas_runtime.foundation import exitcodes

from tests.runtime.rtutil import linear_job, runtime_env
from tests.support.groups import parent_of, signal_set
from tests.support.tfcluster import start_cluster, warm_server

pytestmark = pytest.mark.slow


def eventually(probe: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Whether ``probe`` holds within ``timeout`` s (a forked child sets itself up after
    its pid is known)."""
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_job_of_forked_replicas_trains_to_the_end(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNCREPLICAS_WARM_START", "1")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", runtime_env()["TF_CPP_MIN_LOG_LEVEL"])
    server = warm_server()
    job = linear_job(training__maxSteps=20)
    with start_cluster(job, workers=1, ps=1, workdir=tmp_path, env=runtime_env()) as cluster:
        for replica in cluster.replicas:
            assert parent_of(replica.pid) == server.process.pid
            assert os.getpgid(replica.pid) == replica.pid
        codes = cluster.wait(timeout=180)
        assert codes == {("ps", 0): 0, ("chief", 0): 0, ("worker", 0): 0}, cluster.logs()
    assert "finished at global step 20" in cluster.log("chief", 0)


def test_exit_codes_environment_and_output_are_the_requests(tmp_path: Path) -> None:
    server = WarmServer(tmp_path / "warm.sock", tmp_path / "server.log")
    try:
        out = tmp_path / "out.log"

        def spawn(env: dict[str, str]) -> object:
            with open(out, "ab") as log, open(os.devnull) as null:
                return server.spawn({**os.environ, **env}, str(tmp_path), null.fileno(),
                                    log.fileno(), log.fileno())  # fmt: skip

        # No TF_CONFIG: the runtime's configuration error, its reason on the output.
        bad = spawn({"TF_CONFIG": "", "SYNCREPLICAS_JOB": ""})
        assert bad.wait(timeout=60) == exitcodes.CONFIG  # type: ignore[attr-defined]
        assert "bad configuration" in out.read_text()

        job = linear_job(training__maxSteps=10**6)
        with start_cluster(job, workers=1, ps=1, workdir=tmp_path / "job", env=runtime_env(),
                           start=False) as cluster:  # fmt: skip
            worker = cluster.replica("worker", 0)  # waits for a PS that never comes
            killed = spawn(worker.env)
            assert killed.poll() is None  # type: ignore[attr-defined]
            os.killpg(killed.pid, signal.SIGKILL)  # type: ignore[attr-defined]
            assert killed.wait(timeout=30) == -signal.SIGKILL  # type: ignore[attr-defined]
            stopped = spawn(worker.env)
            assert parent_of(stopped.pid) == server.process.pid  # type: ignore[attr-defined]
            cwd = Path(f"/proc/{stopped.pid}/cwd")  # type: ignore[attr-defined]
            assert eventually(lambda: cwd.resolve() == tmp_path.resolve())
            # Once it runs (its SIGTERM handler set), SIGTERM ends it as the runtime says.
            assert eventually(lambda: "started:" in out.read_text(), 60)
            # SIGPIPE ignored, as in a replica started cold (a forked one that had it at its
            # default died with 141 when a reader closed its socket mid-write, under load).
            assert signal_set(stopped.pid, "SigIgn", signal.SIGPIPE)  # type: ignore[attr-defined]
            stopped.terminate()  # type: ignore[attr-defined]
            assert stopped.wait(timeout=30) == 128 + signal.SIGTERM  # type: ignore[attr-defined]
        # Each ran as the replica its environment names (TF_CONFIG: worker 0).
        assert "worker-0" in out.read_text(), out.read_text()
    finally:
        server.stop()
    # The server leaves when stopped; its socket is gone.
    assert server.process.poll() is not None and not (tmp_path / "warm.sock").exists()


def test_the_server_says_how_to_run_it() -> None:
    done = subprocess.run([sys.executable, "-m", "syncreplicas_runtime.launch.warmstart"],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2 and "usage" in done.stderr
