"""Small readers of `syncreplicas run`: checkpoint index, the chief's eval line, exit names."""

from __future__ import annotations

from pathlib import Path

import pytest
from syncreplicas_operator.local.cli import free_ports
from syncreplicas_operator.local.replicas import describe_exit
from syncreplicas_operator.local.workdir import checkpoint_step, final_eval_from_log


@pytest.mark.parametrize(
    ("text", "step"),
    [
        ('model_checkpoint_path: "model.ckpt-120"\nall_model_checkpoint_paths: "model.ckpt-100"\n',
         120),
        ('model_checkpoint_path: "/abs/dir/ckpt-7"\n', 7),
        ('model_checkpoint_path: "model.ckpt"\n', None),
        ("", None),
    ],
)
def test_checkpoint_step(tmp_path: Path, text: str, step: int | None):
    (tmp_path / "checkpoint").write_text(text)
    assert checkpoint_step(tmp_path) == step


def test_checkpoint_step_without_a_checkpoint(tmp_path: Path):
    assert checkpoint_step(tmp_path / "missing") is None


def test_final_eval_is_the_last_eval_line(tmp_path: Path):
    log = tmp_path / "chief-0.log"
    log.write_text(
        "syncreplicas chief-0: eval accuracy=0.5000\n"
        "syncreplicas worker-0: eval accuracy=0.1\n"
        "00:09:58 syncreplicas chief-0: eval accuracy=0.9611 loss=0.1200\n"
        "syncreplicas chief-0: finished at global step 600\n"
    )
    assert final_eval_from_log(log) == {"accuracy": 0.9611, "loss": 0.12}
    assert final_eval_from_log(tmp_path / "none.log") == {}


@pytest.mark.parametrize(
    ("code", "text"),
    [(0, "OK (0)"), (65, "MODEL (65)"), (75, "RETRY (75)"), (137, "SIGKILL (137)"),
     (143, "SIGTERM (143)"), (1, "EXIT (1)")],
)
def test_describe_exit(code: int, text: str):
    assert describe_exit(code) == text


def test_free_ports_are_distinct():
    ports = free_ports(8)
    assert len(set(ports)) == 8 and all(0 < p < 65536 for p in ports)
