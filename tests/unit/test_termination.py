"""The termination message: what the runtime writes as it exits, and that the operator reads
what it writes (docs/contract.md, "Termination message")."""

from __future__ import annotations

from pathlib import Path

import pytest
from syncreplicas_operator.core import status as op
from syncreplicas_runtime import exitcodes as rt
from syncreplicas_runtime import termination


@pytest.mark.parametrize(
    ("code", "reason", "step", "message"),
    [
        (0, "finished at global step 3000", 3000,
         "syncreplicas: OK (0): finished at global step 3000\nglobalStep=3000\n"),
        (0, "finished", None, "syncreplicas: OK (0): finished\n"),
        (64, "bad configuration: TF_CONFIG: is not valid JSON", None,
         "syncreplicas: CONFIG (64): bad configuration: TF_CONFIG: is not valid JSON\n"),
        (75, "InternalError: lost\n  a PS", 12,
         "syncreplicas: RETRY (75): InternalError: lost a PS\nglobalStep=12\n"),  # one line
        (1, "", None, "syncreplicas: EXIT (1): (no reason)\n"),
    ],
)  # fmt: skip
def test_termination_message(code: int, reason: str, step: int | None, message: str) -> None:
    assert rt.termination_message(code, reason, step) == message


def test_a_long_reason_is_cut_and_the_step_kept() -> None:
    message = rt.termination_message(65, "é" * 5000, 7)
    assert len(message.encode()) <= rt.TERMINATION_MESSAGE_MAX_BYTES
    assert message.endswith("\nglobalStep=7\n")
    assert message.startswith("syncreplicas: MODEL (65): éé")
    message.encode().decode("utf-8")  # not cut inside a character


@pytest.mark.parametrize(
    ("code", "reason", "step", "said"),
    [
        (0, "finished at global step 3000", 3000, "finished at global step 3000"),
        (64, "bad configuration: replicasToAggregate: must be >= 1, got 0", None,
         "bad configuration: replicasToAggregate: must be >= 1, got 0"),
        (65, "model.entrypoint 'x:y': cannot import 'x'", 4,
         "model.entrypoint 'x:y': cannot import 'x'"),
    ],
)  # fmt: skip
def test_the_operator_reads_what_the_runtime_writes(
    code: int, reason: str, step: int | None, said: str
) -> None:
    read = op.parse_termination_message(rt.termination_message(code, reason, step))
    assert read == op.TerminationMessage(reason=said, global_step=step)
    assert op.GLOBAL_STEP_KEY == rt.GLOBAL_STEP_KEY


# --- writing the file -----------------------------------------------------------------------


def test_written_where_the_variable_says(tmp_path: Path) -> None:
    path = tmp_path / "termination-log"
    env = {rt.TERMINATION_LOG_ENV: str(path)}
    assert termination.write_termination_message("first\n", env)
    assert termination.write_termination_message("syncreplicas: OK (0): finished\n", env)
    assert path.read_text() == "syncreplicas: OK (0): finished\n"  # replaced, not appended


def test_an_empty_variable_turns_it_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    default = tmp_path / "termination-log"
    default.write_text("")
    monkeypatch.setattr(termination, "DEFAULT_TERMINATION_LOG", str(default))
    assert not termination.write_termination_message("x\n", {rt.TERMINATION_LOG_ENV: ""})
    assert default.read_text() == ""


def test_the_default_file_is_written_only_where_the_kubelet_made_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = tmp_path / "termination-log"
    monkeypatch.setattr(termination, "DEFAULT_TERMINATION_LOG", str(default))
    assert not termination.write_termination_message("x\n", {})  # a local run: no file
    assert not default.exists()
    default.write_text("")  # the kubelet's mount
    assert termination.write_termination_message("x\n", {})
    assert default.read_text() == "x\n"


def test_an_unwritable_path_is_skipped_silently(tmp_path: Path) -> None:
    for path in (tmp_path / "no" / "such" / "dir" / "log", tmp_path):  # no dir; a dir
        assert not termination.write_termination_message("x\n", {rt.TERMINATION_LOG_ENV: str(path)})
