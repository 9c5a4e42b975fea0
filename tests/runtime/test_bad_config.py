"""Bad configuration exits with its documented code and one line naming the cause, on stderr
and in the termination message (docs/contract.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from syncreplicas_runtime.exitcodes import TERMINATION_LOG_ENV

from tests.runtime.rtutil import linear_job, runtime_env
from tests.support.tfcluster import free_port


def tf_config(role: str = "chief", index: int = 0) -> str:
    return json.dumps({"cluster": {"ps": [f"127.0.0.1:{free_port()}"],
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
