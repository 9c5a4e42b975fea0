"""Bad configuration exits with its documented code and one line naming the cause, on stderr
and in the termination message (docs/contract.md); so do the exits that end a replica at
once from another thread (a watchdog, PS 0's sync loop, SIGTERM)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from syncreplicas_runtime.foundation import exitcodes
from syncreplicas_runtime.foundation.config import parse_config
from syncreplicas_runtime.foundation.exitcodes import TERMINATION_LOG_ENV

from tests.runtime.rtutil import linear_job, runtime_env
from tests.support.tfcluster import free_port

# The file's tests in one pytest-xdist worker of the local lane (`-n 2 --dist loadgroup`):
# the module's ``outcomes`` starts thirteen replicas, most of which import TensorFlow, and a
# worker that ran one of its cases would start all thirteen again.
pytestmark = pytest.mark.xdist_group("test_bad_config")


def tf_config(role: str = "chief", index: int = 0, ps: int = 1) -> str:
    return json.dumps({"cluster": {"ps": [f"127.0.0.1:{free_port()}" for _ in range(ps)],
                                   "chief": [f"127.0.0.1:{free_port()}"]},
                       "task": {"type": role, "index": index}})


def job(**changes: object) -> str:
    settings = {"workers": 0, "replicasToAggregate": 1, "metrics": {"port": 0},
                "training__startupTimeoutSeconds": 3, **changes}
    return json.dumps(linear_job(**settings))


CASES = {
    "tf_config_not_json": ({"TF_CONFIG": "{", "SYNCREPLICAS_JOB": job()}, 64,
                           "CONFIG (64): bad configuration: TF_CONFIG: is not valid JSON"),
    "unknown_role": ({"TF_CONFIG": tf_config("evaluator"), "SYNCREPLICAS_JOB": job()}, 64,
                     "TF_CONFIG.task.type: unknown role 'evaluator'"),
    "r_below_one": ({"TF_CONFIG": tf_config(), "SYNCREPLICAS_JOB": job(replicasToAggregate=0)},
                    64, "replicasToAggregate: must be >= 1, got 0"),
    "workers_beyond_max": ({"TF_CONFIG": tf_config(), "SYNCREPLICAS_JOB": job(
        workers=5, elasticPolicy={"minWorkers": 0, "maxWorkers": 4})},
        64, "workers: must be <= elasticPolicy.maxWorkers (4), got 5"),
    # An elastic job's PS is told every worker slot (it calls a worker for its gradients).
    "ps_without_worker_slots": ({"TF_CONFIG": json.dumps({"cluster": {
        "ps": [f"127.0.0.1:{free_port()}"], "chief": [f"127.0.0.1:{free_port()}"],
        "worker": [f"127.0.0.1:{free_port()}"] * 2}, "task": {"type": "ps", "index": 0}}),
        "SYNCREPLICAS_JOB": job(workers=2, elasticPolicy={"minWorkers": 0, "maxWorkers": 4})},
        64, "elasticPolicy.maxWorkers: is 4 but TF_CONFIG.cluster.worker lists 2"),
    "unknown_model": ({"TF_CONFIG": tf_config(),
                       "SYNCREPLICAS_JOB": job(model={"entrypoint": "nowhere.models:build"})},
                      65, "cannot import 'nowhere.models'"),
    "model_raises": ({"TF_CONFIG": tf_config(), "SYNCREPLICAS_JOB": job(
        model={"entrypoint": "tests.runtime.badmodels:explode"})},
        65, "raised RuntimeError: the model failed to build"),
    "model_breaks_contract": ({"TF_CONFIG": tf_config(), "SYNCREPLICAS_JOB": job(
        model={"entrypoint": "tests.runtime.badmodels:no_loss"})},
        65, "'loss' must be a scalar float tensor"),
    "model_calls_numpy": ({"TF_CONFIG": tf_config(), "SYNCREPLICAS_JOB": job(
        model={"entrypoint": "tests.runtime.badmodels:eager_numpy"})},
        65, "'tests.runtime.badmodels:eager_numpy' calls .numpy() on a graph tensor: models "
            "are built in graph mode"),
    "model_calls_keras_fit": ({"TF_CONFIG": tf_config(), "SYNCREPLICAS_JOB": job(
        model={"entrypoint": "tests.runtime.badmodels:keras_fit"})},
        65, "'tests.runtime.badmodels:keras_fit' calls Keras Model.fit, which runs its own "
            "(eager) training loop"),
    "ps_unreachable": ({"TF_CONFIG": tf_config(), "SYNCREPLICAS_JOB": job()}, 69,
                       "UNREACHABLE (69): PS not reachable within 3s"),
    # PS 0's sync loop (a thread) ends the process with os._exit: the message is still left.
    "sync_loop_ps_unreachable": ({"TF_CONFIG": tf_config("ps", 0, ps=2),
                                  "SYNCREPLICAS_JOB": job(parameterServers=2)}, 69,
                                 "UNREACHABLE (69): PS not reachable within 3s"),
}


Outcome = tuple[int | None, str, str | None]  # exit code, stderr, termination message


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """Start every case at once (most import TensorFlow: in parallel, it is one wait)."""
    procs = {}
    logs = tmp_path_factory.mktemp("termination")
    try:
        for name, (env, _, _) in CASES.items():
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "syncreplicas_runtime"],
                env={**os.environ, **runtime_env(), **env,
                     TERMINATION_LOG_ENV: str(logs / name)},
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                start_new_session=True)
        out = {}
        for name, proc in procs.items():
            try:
                _, stderr = proc.communicate(timeout=240)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, stderr = proc.communicate()
            log = logs / name
            out[name] = (proc.returncode, stderr, log.read_text() if log.exists() else None)
        return out
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_exit_code_and_reason(name: str, outcomes: dict[str, Outcome]) -> None:
    _, code, reason = CASES[name]
    got, stderr, message = outcomes[name]
    assert got == code, stderr
    lines = [ln for ln in stderr.splitlines() if ln.startswith("syncreplicas: ")]
    assert len(lines) == 1, stderr
    assert reason in lines[0]
    # The same line is the termination message, for the operator and `kubectl describe`.
    assert message == lines[0] + "\n", stderr


def bad_tf_config(**env: str) -> subprocess.CompletedProcess[str]:
    """A replica with TF_CONFIG that is no JSON: it exits 64 before importing TensorFlow."""
    return subprocess.run(
        [sys.executable, "-m", "syncreplicas_runtime"],
        env={**os.environ, **runtime_env(), "TF_CONFIG": "{", "SYNCREPLICAS_JOB": job(), **env},
        capture_output=True, text=True, timeout=120)


def test_the_termination_message_is_the_exit_line(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    proc = bad_tf_config(**{TERMINATION_LOG_ENV: str(log)})
    assert proc.returncode == 64, proc.stderr
    message = log.read_text()
    assert message.startswith("syncreplicas: CONFIG (64): bad configuration: TF_CONFIG: is not ")
    assert message == proc.stderr, message  # the one line it printed, and nothing else


@pytest.mark.parametrize("where", ["", "{tmp}/no/such/dir/termination-log", "{tmp}"])
def test_no_termination_message_where_none_can_be_written(tmp_path: Path, where: str) -> None:
    """Off (""), or a path that cannot be written: the exit is the same, and silent."""
    proc = bad_tf_config(**{TERMINATION_LOG_ENV: where.format(tmp=tmp_path)})
    assert proc.returncode == 64, proc.stderr
    assert proc.stderr.startswith("syncreplicas: CONFIG (64): bad configuration: TF_CONFIG")
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_chief_stopped_while_it_waits_for_the_ps_says_so(tmp_path: Path) -> None:
    """Before the chief has variables to checkpoint, SIGTERM stops it like any replica:
    exit 143 with its exit line, not killed by the signal with nothing said."""
    log = tmp_path / "termination-log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "syncreplicas_runtime"],
        env={**os.environ, **runtime_env(), "TF_CONFIG": tf_config(),
             "SYNCREPLICAS_JOB": job(training__startupTimeoutSeconds=120),
             TERMINATION_LOG_ENV: str(log)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # its server is up: it waits for the PS that never comes
            if "started:" in line:
                break
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, stderr
    lines = [ln for ln in stderr.splitlines() if ln.startswith("syncreplicas: ")]
    assert lines == ["syncreplicas: EXIT (143): stopped by SIGTERM"], stderr
    assert log.read_text() == lines[0] + "\n"


# --- exits of a running replica, in this process: os._exit is recorded, not run --------------


class Ended:
    """Stands in for os._exit: records the code and the termination message as the process
    would end, then parks the calling thread for good (a daemon thread: os._exit does not
    return, and a watchdog left running would exit again)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.exits: list[tuple[int, str | None]] = []
        self.done = threading.Event()

    def os_exit(self, code: int) -> None:
        assert threading.current_thread() is not threading.main_thread()
        self.exits.append((code, self.log.read_text() if self.log.exists() else None))
        self.done.set()
        threading.Event().wait()

    def wait(self, timeout: float = 10.0) -> tuple[int, str | None]:
        assert self.done.wait(timeout), "the process did not exit"
        return self.exits[0]


@pytest.fixture
def ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ended:
    log = tmp_path / "termination-log"
    monkeypatch.setenv(TERMINATION_LOG_ENV, str(log))
    end = Ended(log)
    monkeypatch.setattr(os, "_exit", end.os_exit)
    return end


def replica(**changes: object) -> Any:
    """A chief's process context with no server: enough for the code that ends it."""
    from syncreplicas_runtime.process.context import Context
    from syncreplicas_runtime.process.metrics import RuntimeMetrics

    cfg = parse_config({"TF_CONFIG": tf_config(), "SYNCREPLICAS_JOB": job(**changes)})
    return Context(cfg=cfg, server=None, metrics=RuntimeMetrics(), readiness=None,
                   model_fn=None, name="chief-0")


def test_the_watchdog_leaves_its_exit_line_and_step(ended: Ended) -> None:
    from syncreplicas_runtime.process.context import start_watchdog

    ctx = replica(training__chiefLostTimeoutSeconds=1)
    ctx.metrics.global_step.set(17)
    ctx.watchdog_armed, ctx.last_progress = True, time.monotonic() - 5
    start_watchdog(ctx)
    assert ended.wait() == (75, "syncreplicas: RETRY (75): no token and no new sync epoch for "
                                "1s: a replica the updates need is gone\nglobalStep=17\n")


@pytest.mark.parametrize(("in_epoch", "message"), [
    (False, "syncreplicas: EXIT (143): stopped by SIGTERM\nglobalStep=38\n"),
    # The step it checkpointed, not the older one of its last step.
    (True, "syncreplicas: EXIT (143): stopped by SIGTERM after writing model.ckpt-40\n"
           "globalStep=40\n"),
])
def test_the_chiefs_sigterm_checkpoint_leaves_its_exit_line_and_step(
    ended: Ended, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, in_epoch: bool, message: str
) -> None:
    from syncreplicas_runtime.replica import chief

    ctx = replica(training__checkpointDir=str(tmp_path / "ckpt"))
    ctx.metrics.global_step.set(38)
    if in_epoch:
        ctx.session = SimpleNamespace(run=lambda fetch: 40)
        ctx.graph = SimpleNamespace(global_step="global_step:0")
        monkeypatch.setattr(chief, "save_checkpoint",
                            lambda sess, training, where, step, *_: f"{where}/model.ckpt-{step}")
    chief.graceful_stop(ctx)
    assert ended.wait() == (143, message)


@pytest.mark.parametrize(("global_step", "message"), [
    (30, "syncreplicas: OK (0): finished at global step 30\nglobalStep=30\n"),
    (12, "syncreplicas: RETRY (75): training ended at global step 12, before maxSteps 30\n"
         "globalStep=12\n"),
])
def test_a_chief_restarted_after_training_ended_reports_the_step(
    ended: Ended, global_step: int, message: str
) -> None:
    """PS 0 says DONE before the chief ran a step: its exit still carries the global step."""
    from syncreplicas_runtime.launch.plain import fail, seen_step, succeed
    from syncreplicas_runtime.process.exits import Exit
    from syncreplicas_runtime.replica.chief import finished_before

    ctx = replica(training__maxSteps=30)
    try:
        finished_before(ctx, global_step)
        code = succeed(seen_step(ctx.metrics))
    except Exit as err:  # as __main__.main reports it
        code = fail(err.code, err.reason, seen_step(ctx.metrics))
    assert code == (exitcodes.OK if global_step == 30 else exitcodes.RETRY)
    assert ended.log.read_text() == message


@pytest.mark.parametrize(("entrypoint", "code", "reason"), [
    ("syncreplicas_runtime.models.linear:build", 0, None),
    ("nowhere.models:build", 65, "MODEL (65): model.entrypoint 'nowhere.models:build': "
                                 "cannot import 'nowhere.models'"),
    ("syncreplicas_runtime.models.linear:nothing", 65, "has no 'nothing'"),
])
def test_entrypoint_check_command(entrypoint: str, code: int, reason: str | None) -> None:
    """``python -m syncreplicas_runtime.model``: what the local runner asks before a run."""
    proc = subprocess.run([sys.executable, "-m", "syncreplicas_runtime.model", entrypoint],
                          env={**os.environ, **runtime_env()}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == code, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("syncreplicas: ")]
    if reason is None:
        assert lines == []
    else:
        assert len(lines) == 1 and reason in lines[0], proc.stderr
