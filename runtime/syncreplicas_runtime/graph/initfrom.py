"""Warm start (``spec.training.warmStart``): the restore that initialises the model's chosen
trainable variables from another run's checkpoint, built on the chief with its graph.

Which variables: the model's trainable variables, by the names its checkpoints use (packed
or not, graph/packing.py), whose whole name matches the pattern. Each must be in the
checkpoint with the same shape and dtype; anything wrong (no checkpoint there, a pattern
that is not one or names nothing, a variable missing or of another shape) ends the chief
with CONFIG (64), the field and the variable named, before it touches the cluster.

A packed PS variable holds several model variables: when the pattern takes only some of
them, the restore writes those pieces and keeps the others as they were initialised.
state/checkpoints.py runs the restore once, when the job starts with no checkpoint of its
own.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf
from syncreplicas_api.warmstart import WHERE, WarmStart
from tensorflow.python.training.saving import saveable_object

from ..foundation import exitcodes
from ..process.exits import Exit
from .packing import Pack, Packing

v1 = tf.compat.v1

Signature = tuple[tuple[int, ...], str]  # a variable's shape and dtype


def refuse(field: str, why: str) -> Exit:
    return Exit(exitcodes.CONFIG, f"bad configuration: {WHERE}.{field}: {why}")


def choose(pattern: str, names: Sequence[str]) -> list[str]:
    """The names that ``pattern`` matches whole, in their order."""
    try:
        regex = re.compile(pattern)
    except re.error as error:
        raise refuse("variables", f"{pattern!r} is not a regular expression: {error}") from None
    chosen = [n for n in names if regex.fullmatch(n)]
    if not chosen:
        raise refuse("variables", f"{pattern!r} matches none of the model's trainable "
                     f"variables ({', '.join(names)})")  # fmt: skip
    return chosen


def check(chosen: Sequence[str], ours: Mapping[str, Signature],
          theirs: Mapping[str, Signature], path: str) -> None:  # fmt: skip
    """Every chosen variable is in the checkpoint ``theirs`` as the model has it."""
    for name in chosen:
        if name not in theirs:
            raise refuse("checkpoint", f"{path} has no variable {name!r} (it has "
                         f"{len(theirs)}: {', '.join(sorted(theirs))[:600]})")  # fmt: skip
        (shape, dtype), (their_shape, their_dtype) = ours[name], theirs[name]
        if shape != their_shape or dtype != their_dtype:
            raise refuse("checkpoint", f"variable {name!r} is {dtype}{list(shape)} in the "
                         f"model but {their_dtype}{list(their_shape)} in {path}")  # fmt: skip


def resolve(checkpoint: str) -> str:
    """The checkpoint's prefix: a directory's latest, or the prefix as given."""
    if os.path.isdir(checkpoint):
        latest = v1.train.latest_checkpoint(checkpoint)
        if not latest:
            raise refuse("checkpoint", f"the directory {checkpoint} holds no checkpoint")
        return str(latest)
    if not tf.io.gfile.exists(checkpoint + ".index"):
        raise refuse("checkpoint", f"no checkpoint at {checkpoint} (neither a directory nor "
                     f"a checkpoint's prefix: {checkpoint}.index does not exist)")  # fmt: skip
    return checkpoint


def contents(path: str) -> dict[str, Signature]:
    """Each variable of the checkpoint at ``path``: its shape and dtype."""
    try:
        reader = tf.train.load_checkpoint(path)
    except (tf.errors.OpError, ValueError) as error:
        raise refuse("checkpoint", f"cannot read {path}: {error}") from None
    dtypes = reader.get_variable_to_dtype_map()
    return {name: (tuple(shape), dtypes[name].name)
            for name, shape in reader.get_variable_to_shape_map().items()}  # fmt: skip


def _signature(variable: Any) -> Signature:
    return tuple(variable.shape.as_list()), variable.dtype.base_dtype.name


class _PackPieces(saveable_object.SaveableObject):  # type: ignore[misc]
    """Restores the chosen pieces of a PS variable, keeping its others as they are."""

    def __init__(self, pack: Pack, chosen: Sequence[int], device: str) -> None:
        self.pack, self.chosen, self.restore_device = pack, list(chosen), device
        with tf.device(device):
            pieces = pack.pieces(pack.variable.read_value())
        specs = [saveable_object.SaveSpec(pieces[i], "", pack.copies[i].op.name)
                 for i in self.chosen]  # fmt: skip
        super().__init__(pack.variable, specs, pack.variable.op.name)

    def restore(self, restored_tensors: Any, restored_shapes: Any) -> Any:
        del restored_shapes
        with tf.device(self.restore_device):
            pieces = self.pack.pieces(self.pack.variable.read_value())
            for i, tensor in zip(self.chosen, restored_tensors, strict=True):
                pieces[i] = tensor
            value = self.pack.join(pieces)
        return self.pack.variable.assign(value, read_value=False)


@dataclass(frozen=True)
class InitFrom:
    """The warm start's restore: ``names`` from the checkpoint at ``path``."""

    path: str
    names: tuple[str, ...]
    saver: Any

    def restore(self, sess: Any) -> str:
        """Run it; what it did, for the chief's log line."""
        self.saver.restore(sess, self.path)
        return f"{len(self.names)} variables warm-started from {self.path}"


def build(warm: WarmStart | None, packing: Packing | None, trainable: Sequence[Any],
          device: str) -> InitFrom | None:  # fmt: skip
    """The restore of ``warm`` (None: no warm start), in the current graph. ``trainable``
    are the model's trainable variables when they are not packed."""
    if warm is None:
        return None
    if packing is not None:
        ours = {c.op.name: _signature(c) for p in packing.packs for c in p.copies}
    else:
        ours = {v.op.name: _signature(v) for v in trainable}
    chosen = choose(warm.variables, list(ours))
    path = resolve(warm.checkpoint)
    check(chosen, ours, contents(path), path)
    wanted = set(chosen)
    saved: list[Any] = []
    if packing is not None:
        for pack in packing.packs:
            picked = [i for i, c in enumerate(pack.copies) if c.op.name in wanted]
            if picked:
                saved.append(_PackPieces(pack, picked, device))
    else:
        saved = [v for v in trainable if v.op.name in wanted]
    saver = v1.train.Saver(saved, sharded=False)
    return InitFrom(path=path, names=tuple(chosen), saver=saver)
