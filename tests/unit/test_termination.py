"""The termination message: what the runtime writes as it exits, and that the operator reads
what it writes (docs/contract.md, "Termination message")."""

from __future__ import annotations

from pathlib import Path

import pytest
from syncreplicas_operator.core import status as op
from syncreplicas_runtime.foundation import exitcodes as rt
from syncreplicas_runtime.process import termination


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


def test_the_chiefs_exports_are_facts_the_operator_reads_and_what_cannot_be_one_is_left_out(
) -> None:  # fmt: skip
    from syncreplicas_runtime.launch.plain import export_facts

    facts = export_facts({"export": ("/c/export/300", 300),
                          "bestExport": ("/c/export/best/200", 200)})  # fmt: skip
    message = rt.termination_message(0, "finished at global step 300", 300, facts)
    parsed = op.parse_termination_message(message)
    assert parsed.global_step == 300 and parsed.reason == "finished at global step 300"
    assert parsed.exports == (("export", "/c/export/300", 300),
                              ("bestExport", "/c/export/best/200", 200))  # fmt: skip
    # A path with whitespace is no fact; one too long for the message is left out whole,
    # and the exit line keeps its room.
    spaced = rt.termination_message(0, "finished", 3, export_facts({"export": ("/a b", 3)}))
    assert op.parse_termination_message(spaced).exports == ()
    long = rt.termination_message(0, "finished", 3, export_facts({"export": ("/" + "p" * 900, 3)}))
    assert len(long.encode()) <= rt.TERMINATION_MESSAGE_MAX_BYTES
    assert op.parse_termination_message(long).exports == ()
    assert long.startswith("syncreplicas: OK (0): finished\nglobalStep=3\n")


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


# --- leaving: the exit line and the message together ----------------------------------------


@pytest.mark.parametrize(
    ("code", "reason", "step", "stderr"),
    [
        (0, "finished at global step 30", 30, ""),  # exit 0 prints no exit line
        (75, "no token and no new sync epoch for 120s: a replica the updates need is gone", 17,
         "syncreplicas: RETRY (75): no token and no new sync epoch for 120s: a replica the "
         "updates need is gone\n"),
        (69, "PS not reachable within 3s: DeadlineExceededError", None,
         "syncreplicas: UNREACHABLE (69): PS not reachable within 3s: DeadlineExceededError\n"),
        (143, "stopped by SIGTERM after writing model.ckpt-40", 40,
         "syncreplicas: EXIT (143): stopped by SIGTERM after writing model.ckpt-40\n"),
    ],
)  # fmt: skip
def test_report_exit_prints_the_line_and_leaves_the_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
    code: int, reason: str, step: int | None, stderr: str,
) -> None:
    path = tmp_path / "termination-log"
    assert termination.report_exit(code, reason, step, {rt.TERMINATION_LOG_ENV: str(path)}) == code
    assert capsys.readouterr().err == stderr
    assert path.read_text() == rt.termination_message(code, reason, step)


def test_exit_now_leaves_the_message_before_it_ends_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The exit of a watchdog, PS 0's sync loop or the chief's SIGTERM thread (os._exit)."""
    path = tmp_path / "termination-log"
    monkeypatch.setenv(rt.TERMINATION_LOG_ENV, str(path))
    ended: list[tuple[int, str]] = []

    def os_exit(code: int) -> None:
        ended.append((code, path.read_text()))  # what is there as the process ends
        raise SystemExit(code)

    monkeypatch.setattr(termination.os, "_exit", os_exit)
    with pytest.raises(SystemExit):
        termination.exit_now(75, "the sync loop failed: ValueError: x", 12)
    line = "syncreplicas: RETRY (75): the sync loop failed: ValueError: x\n"
    assert ended == [(75, f"{line}globalStep=12\n")]
    assert capsys.readouterr().err == line
