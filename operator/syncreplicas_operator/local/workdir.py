"""A run's work directory: its lock, its checkpoints and logs, and what earlier runs left.

``.syncreplicas/<job>`` by default: ``checkpoints/`` (the chief's ``training.checkpointDir``),
``logs/<replica>.log`` and ``run.lock``. A run resumes from the checkpoints it finds here.
"""

from __future__ import annotations

import contextlib
import fcntl
import re
import shutil
from pathlib import Path
from typing import IO, Final

from ..core import naming
from .errors import RunError

_CHECKPOINT_STEP: Final = re.compile(r'^model_checkpoint_path:\s*"(?:.*[-_])?(\d+)"\s*$', re.M)
# The line may carry a timestamp or other prefix before the replica's name.
_EXPORT_LINE: Final = re.compile(
    rf"(?:^|\s)syncreplicas {re.escape(naming.CHIEF_KEY)}: exported a SavedModel of global step "
    r"(\d+) to (\S+)$"
)
_BEST_EXPORT_LINE: Final = re.compile(
    rf"(?:^|\s)syncreplicas {re.escape(naming.CHIEF_KEY)}: best export: global step (\d+), "
    r".* to (\S+)$"
)
_EVAL_LINE: Final = re.compile(
    rf"(?:^|\s)syncreplicas {re.escape(naming.CHIEF_KEY)}: eval ((?:\S+=\S+\s*)+)$"
)


class Workdir:
    """The directories of one run; :meth:`prepare` locks and readies them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.checkpoints = root / "checkpoints"
        self.logs = root / "logs"
        self._lock: IO[str] | None = None

    def log_path(self, replica: str) -> Path:
        return self.logs / f"{replica}.log"

    def prepare(self, *, fresh: bool, max_steps: int, stream: IO[str]) -> int | None:
        """Lock the directory, then keep or clear its checkpoints; the step resumed from."""
        self.logs.mkdir(parents=True, exist_ok=True)
        # Two runs in one work directory would share checkpoints and logs: refuse the second.
        self._lock = open(self.root / "run.lock", "w")  # noqa: SIM115 - held for the run
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            raise RunError(f"another `syncreplicas run` is using {self.root}; wait for it, "
                           "or give this one its own --workdir") from err
        if fresh and self.checkpoints.exists():
            shutil.rmtree(self.checkpoints)
        step = checkpoint_step(self.checkpoints)
        resumed_from = step
        if step is not None and step >= max_steps:
            # A finished run's checkpoint would make this run end at once: keep it aside.
            resumed_from = None
            done = self.root / "checkpoints.finished"
            shutil.rmtree(done, ignore_errors=True)
            self.checkpoints.rename(done)
            print(f"previous run finished at step {step}; its checkpoints are in {done}",
                  file=stream)
        elif step is not None:
            print(f"resuming from the checkpoint at global step {step} in "
                  f"{self.checkpoints}", file=stream)
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        return resumed_from


def checkpoint_step(checkpoint_dir: Path) -> int | None:
    """Global step of the latest checkpoint, read from TensorFlow's `checkpoint` index file."""
    try:
        text = (checkpoint_dir / "checkpoint").read_text()
    except OSError:
        return None
    match = _CHECKPOINT_STEP.search(text)
    return int(match.group(1)) if match else None


def final_eval_from_log(path: Path) -> dict[str, float]:
    """The chief's last logged evaluation (``eval accuracy=0.9611 ...``), empty if none."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    for line in reversed(lines):
        match = _EVAL_LINE.search(line)
        if match:
            pairs = (item.partition("=") for item in match.group(1).split())
            with contextlib.suppress(ValueError):
                return {name: float(value) for name, _, value in pairs}
    return {}


def export_from_log(path: Path, best: bool = False) -> tuple[str, int] | None:
    """The chief's last SavedModel export (its directory, its global step), None if none;
    ``best``: its last best export (training.export.best)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    pattern = _BEST_EXPORT_LINE if best else _EXPORT_LINE
    for line in reversed(lines):
        match = pattern.search(line)
        if match:
            return match.group(2), int(match.group(1))
    return None
