"""Bad configuration exits with its documented code and one line naming the cause."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

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


@pytest.fixture(scope="module")
def outcomes() -> dict[str, tuple[int | None, str]]:
    """Start every case at once (most import TensorFlow: in parallel, it is one wait)."""
    procs = {}
    try:
        for name, (env, _, _) in CASES.items():
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "syncreplicas_runtime"],
                env={**os.environ, **runtime_env(), **env}, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, start_new_session=True)
        out = {}
        for name, proc in procs.items():
            try:
                _, stderr = proc.communicate(timeout=240)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, stderr = proc.communicate()
            out[name] = (proc.returncode, stderr)
        return out
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_exit_code_and_reason(name: str, outcomes: dict[str, tuple[int | None, str]]) -> None:
    _, code, reason = CASES[name]
    got, stderr = outcomes[name]
    assert got == code, stderr
    lines = [ln for ln in stderr.splitlines() if ln.startswith("syncreplicas: ")]
    assert len(lines) == 1, stderr
    assert reason in lines[0]


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
