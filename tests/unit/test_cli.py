"""The `syncreplicas` command line: subcommand registration and lazy imports."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
from syncreplicas_operator import cli


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for command in ("operator", "run", "render", "validate"):
        assert f"    {command} " in out


def test_render_and_validate_import_neither_kopf_nor_the_local_runner() -> None:
    code = (
        "import sys\n"
        "from syncreplicas_operator import cli\n"
        "cli.build_parser(['validate', 'job.yaml'])\n"
        "cli.build_parser(['render', 'job.yaml'])\n"
        "loaded = [m for m in ('kopf', 'syncreplicas_operator.controller.handlers',\n"
        "          'syncreplicas_operator.local') if m in sys.modules]\n"
        "print(','.join(loaded))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == ""


def test_a_missing_subcommand_module_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="syncreplicas")
    subparsers = parser.add_subparsers(dest="command", required=True)
    cli._add_lazy(subparsers, "train", "train", "syncreplicas_operator.no_such_module", "x")
    args = parser.parse_args(["train"])
    assert args.handler(args) == cli.USAGE
    assert "syncreplicas train: not available" in capsys.readouterr().err


def test_a_broken_subcommand_module_is_not_hidden() -> None:
    """Only the module itself missing is "not available"; its own import errors surface."""
    parser = argparse.ArgumentParser(prog="syncreplicas")
    subparsers = parser.add_subparsers(dest="command", required=True)
    with pytest.raises(ModuleNotFoundError):
        cli._add_lazy(subparsers, "x", "x", "no_such_package.module", "x")


def test_no_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main([])
    assert exited.value.code == 2
    assert "COMMAND" in capsys.readouterr().err


def test_unreadable_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate", "/nonexistent/job.yaml"]) == 1
    assert capsys.readouterr().out.startswith("/nonexistent/job.yaml: cannot read")


@pytest.mark.parametrize("module", ["rich", "matplotlib"])
def test_run_without_the_local_extra_is_one_line_and_exit_2(module: str) -> None:
    """The operator image ships without the [local] extra: say so, no traceback."""
    code = (
        "import sys\n"
        "class NotInstalled:  # the import system's answer for a package that is absent\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.partition('.')[0] == {module!r}:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, NotInstalled())\n"
        "from syncreplicas_operator import cli\n"
        "sys.exit(cli.main(['run', 'job.yaml']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"syncreplicas run: needs the [local] extra ({module} is not installed): "
        "pip install 'syncreplicas-operator[local]'"
    ]
