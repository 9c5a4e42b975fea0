"""The checkpoint directory's files: a checkpoint is written aside and committed by renames,
the directory keeps the newest few, and its state file always names the newest.

A save is slow (seconds for a large model), and a chief can be stopped in the middle of one
(a partitioned or frozen node) and finish it much later, after a replacement wrote newer
checkpoints. So a checkpoint is first written into a staging directory of its own
(``.staging-<step>-<token>``, invisible to every reader), checked again once written (the
caller's fence and the directory's newest step), and only then moved in: data files first,
the ``.index`` last, so a checkpoint appears whole or not at all. A save that fails the
second check leaves nothing behind. What is left is the moment between that check and the
renames (microseconds, against the seconds of the write); even then the state file, which
is what a restore reads, names the newest checkpoint of the directory, never the one just
moved in if a newer one is there.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import uuid
from collections.abc import Iterable

import tensorflow as tf

KEEP = 3  # checkpoints kept in the directory: the newest three
PREFIX = "model.ckpt"
STAGING = ".staging-"
_INDEX = re.compile(re.escape(PREFIX) + r"-(\d+)\.index")
_FILE = re.compile(re.escape(PREFIX) + r"-(\d+)\.(index|data-.*)")
_STAGED = re.compile(re.escape(STAGING) + r"(\d+)-[0-9a-f]+")


def checkpoint_steps(filenames: Iterable[str]) -> list[int]:
    """The global steps of a directory's whole checkpoints (``model.ckpt-N.index``), sorted."""
    return sorted({int(m[1]) for name in filenames if (m := _INDEX.fullmatch(name))})


def newest_checkpoint_step(filenames: Iterable[str]) -> int | None:
    """The highest global step among a directory's checkpoints (``model.ckpt-N.index``)."""
    steps = checkpoint_steps(filenames)
    return steps[-1] if steps else None


def staging_dir(directory: str, step: int) -> str:
    """A fresh staging directory for the checkpoint of ``step`` (created, empty)."""
    path = os.path.join(directory, f"{STAGING}{step}-{uuid.uuid4().hex[:12]}")
    os.makedirs(path)
    return path


def commit(directory: str, staged_prefix: str) -> str:
    """Move the staged checkpoint ``staged_prefix`` (``<staging>/model.ckpt-N``) into
    ``directory``: data files first, the index last. Returns its final prefix; the staging
    directory is the caller's to discard."""
    staging, name = os.path.split(staged_prefix)
    files = [f for f in os.listdir(staging) if f.startswith(name + ".")]
    for f in sorted(files, key=lambda f: (f.endswith(".index"), f)):  # the index makes it whole
        os.replace(os.path.join(staging, f), os.path.join(directory, f))
    return os.path.join(directory, name)


def discard(staging: str) -> None:
    shutil.rmtree(staging, ignore_errors=True)


def tidy(directory: str, keep: int = KEEP) -> list[int]:
    """Delete all but the newest ``keep`` checkpoints and any staging directory of a step
    below the newest (a save that can no longer commit), then point the state file
    (``checkpoint``) at the newest. Returns the steps kept, oldest first."""
    names = os.listdir(directory)
    steps = checkpoint_steps(names)
    kept, dropped = steps[-keep:], set(steps[:-keep])
    doomed = [(m[2] != "index", name) for name in names
              if (m := _FILE.fullmatch(name)) and int(m[1]) in dropped]
    for _, name in sorted(doomed):  # the indexes first: no half checkpoint is left visible
        _remove(os.path.join(directory, name))
    for name in names:
        staged = _STAGED.fullmatch(name)
        if staged and kept and int(staged[1]) < kept[-1]:
            discard(os.path.join(directory, name))
    if kept:
        tf.compat.v1.train.update_checkpoint_state(
            directory, f"{PREFIX}-{kept[-1]}",
            all_model_checkpoint_paths=[f"{PREFIX}-{s}" for s in kept])
    return kept


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
