"""Variable packing: one flat variable per PS and dtype, so a step moves O(PS) tensors.

Each model variable read and each gradient push is its own RPC, so with one PS variable
per model variable the transport, not the model, sets a step's cost (about 0.35 ms per
variable and step). With packing a replica's step moves one tensor per packed variable
each way, whatever the number of model variables.

How the model's variables are covered. While the model function runs, a variable creator
scope (``local_model_variables``) puts every *trainable* variable on the replica's own
device instead of a PS, whatever made it: ``tf.compat.v1.get_variable``, ``tf.Variable``
or a Keras layer all create variables through TensorFlow's creator stack. The model's
graph is left exactly as the model built it; its variables are simply local copies. After
the model is built, ``pack`` groups them (``packplan``: byte-balanced over the PS, one
flat variable per PS and dtype), creates the packed variables on the PS (initialised from
the concatenated initial values of the copies, so the first weights equal the unpacked
ones) and returns, for the optimizer, one gradient per packed variable: the model's
gradients flattened and concatenated on the replica. A model smaller than
``training.packMinBytesPerPS`` (256 KiB by default) per PS is spread over fewer PS (all of
it on PS 0 when it is small): each PS holding a variable costs every replica one more
round trip each way per step. No op of the model is rewired, so nothing depends on how a
model reads its variables (reads, gathers, loops, Keras internals).

When the copies are refreshed. Each training step's own run ends, after the replica's
token and the global-step read that tags its next gradient, by reading every packed
variable once (one RecvTensor per PS), splitting and reshaping it on the replica and
writing the copies. The next step computes on those values, so the step needs no extra
``session.run`` and its variables are at least as new as its tag, as in stock TensorFlow.
The refresh also waits for the step's loss, so no read of the step can see the new values.
Joining an epoch (``local_init_op``, run by the chief after it kept, restored or
initialized the variables) refreshes the copies as well. The chief evaluates on its copies:
after its last step they hold the variables as of that step's token. PS 0 builds the same
graph to run the sync loop, with its own device as the replica's, so its copies would live
on PS 0; it runs only ``chief_init_op`` and the update, neither of which touches a copy, so
they are never allocated there.

What is not packed. Elementwise optimizers (sgd, momentum, adagrad, adam, rmsprop) update
a flat variable exactly as they update its pieces. A trainable variable whose gradient is
not a dense float tensor (``IndexedSlices`` from a gather, or no gradient at all) or whose
shape is not fully known keeps its own variable on the PS (``syncreplicas/unpacked/<name>``)
and its own accumulator, so sparse updates stay sparse; its local copy is refreshed
whole at every step. A large embedding is therefore better trained with packing off.
Non-trainable model variables are not touched: they stay on the PS as without packing.

Checkpoints. The saver writes every model variable under its own name and shape, and the
optimizer's slots as ``<variable>/<SlotName>`` (``linear/w/Adam``, ``linear/w/Momentum``),
exactly the names stock TensorFlow writes; restoring reassembles the packed variables from
those pieces. A checkpoint written packed restores unpacked and the other way round, and
``tf.train.load_checkpoint`` reads it like any other. Optimizer variables that are not
slots (Adam's ``beta1_power``/``beta2_power``) keep their stock names too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import tensorflow as tf
from tensorflow.python.training.saving import saveable_object

from ..sync.names import ps_device
from .packplan import Placement, VariableInfo, plan_packing

v1 = tf.compat.v1

PACKED_PREFIX = "syncreplicas/packed"
UNPACKED_PREFIX = "syncreplicas/unpacked"


def _trainable(kwargs: dict[str, Any]) -> bool:
    trainable = kwargs.get("trainable")
    if trainable is None:  # TensorFlow's own default
        return bool(kwargs.get("synchronization") != tf.VariableSynchronization.ON_READ)
    return bool(trainable)


@contextmanager
def local_model_variables(device: str) -> Iterator[list[Any]]:
    """Within: every trainable variable created is placed on ``device`` and recorded."""
    created: list[Any] = []

    def creator(next_creator: Any, **kwargs: Any) -> Any:
        if not _trainable(kwargs):
            return next_creator(**kwargs)
        with tf.device(device):
            var = next_creator(**kwargs)
        created.append(var)
        return var

    with v1.variable_creator_scope(creator):
        yield created


def packed_name(placement: Placement) -> str:
    if placement.packed:
        return f"{PACKED_PREFIX}/ps{placement.ps}/{placement.dtype}"
    return f"{UNPACKED_PREFIX}/{placement.names[0]}"


@dataclass
class Pack:
    """One PS variable and the local copies it holds (flat when ``placement.packed``)."""

    placement: Placement
    variable: Any
    copies: list[Any]

    @property
    def sizes(self) -> list[int]:
        return [c.shape.num_elements() for c in self.copies]

    def pieces(self, value: Any) -> list[Any]:
        """``value`` of the PS variable cut into the copies' shapes (on the current device)."""
        if not self.placement.packed:
            return [value]
        parts = tf.split(value, self.sizes) if len(self.copies) > 1 else [value]
        return [tf.reshape(p, c.shape) for p, c in zip(parts, self.copies, strict=True)]

    def join(self, pieces: Sequence[Any]) -> Any:
        """The PS variable's value made of one tensor per copy (the inverse of ``pieces``)."""
        if not self.placement.packed:
            return pieces[0]
        flat = [tf.reshape(p, [-1]) for p in pieces]
        return tf.concat(flat, 0) if len(flat) > 1 else flat[0]


class _PackSaveable(saveable_object.SaveableObject):  # type: ignore[misc]
    """Saves a PS variable (or one of its slots) as the model's pieces, by their names."""

    def __init__(self, pack: Pack, variable: Any, names: list[str], device: str) -> None:
        self.pack, self.variable = pack, variable
        with tf.device(variable.device):
            value = variable.read_value()
        with tf.device(device):
            pieces = pack.pieces(value)
        specs = [saveable_object.SaveSpec(p, "", n) for p, n in zip(pieces, names, strict=True)]
        super().__init__(variable, specs, variable.op.name)
        self.device_for_restore = device

    def restore(self, restored_tensors: Any, restored_shapes: Any) -> Any:
        del restored_shapes
        with tf.device(self.device_for_restore):
            value = self.pack.join(list(restored_tensors))
        return self.variable.assign(value, read_value=False)


@dataclass
class Packing:
    """The packed variables of one training graph and what the graph does with them."""

    packs: list[Pack]
    grads_and_vars: list[tuple[Any, Any]]  # for the optimizer: PS variables only
    device: str                             # the replica's device (where copies live)
    num_ps: int                             # the job's PS tasks (not all may hold a pack)

    def describe(self) -> str:
        """One log line: how many model variables ended up in how many PS variables."""
        packed = [p for p in self.packs if p.placement.packed]
        alone = [p.placement.names[0] for p in self.packs if not p.placement.packed]
        members = sum(len(p.copies) for p in packed)
        plural = "" if len(packed) == 1 else "s"
        used = len({p.placement.ps for p in self.packs})
        return (f"packing: {members} trainable variables in {len(packed)} packed PS "
                f"variable{plural}"
                + (f"; unpacked (sparse or no gradient): {', '.join(alone)}" if alone else "")
                + f" (model on {used} of {self.num_ps} PS)")

    def refresh(self, after: Sequence[Any]) -> Any:
        """Write the PS variables into the local copies, once everything in ``after`` ran."""
        assigns = []
        for pack in self.packs:
            with tf.control_dependencies(list(after)), tf.device(pack.variable.device):
                value = pack.variable.read_value()
            with tf.device(self.device):
                for copy, piece in zip(pack.copies, pack.pieces(value), strict=True):
                    assigns.append(copy.assign(piece, read_value=False))
        return tf.group(*assigns, name="syncreplicas_refresh")

    def saver_var_list(self, optimizer: Any, global_variables: Sequence[Any]) -> list[Any]:
        """What the Saver saves: packed variables and their slots under the model's names
        (``<name>`` and ``<name>/<SlotName>``), every other variable as it is."""
        covered: set[int] = set()
        out: list[Any] = []
        for pack in self.packs:
            names = [c.op.name for c in pack.copies]
            out.append(_PackSaveable(pack, pack.variable, names, self.device))
            covered.add(id(pack.variable))
            base = pack.variable.op.name
            for slot_name in sorted(optimizer.get_slot_names()):
                slot = optimizer.get_slot(pack.variable, slot_name)
                if slot is None:
                    continue
                if not slot.op.name.startswith(base + "/"):
                    raise RuntimeError(f"slot {slot.op.name!r} is not named after {base!r}")
                suffix = slot.op.name[len(base) + 1:]
                out.append(_PackSaveable(pack, slot, [f"{n}/{suffix}" for n in names],
                                         self.device))
                covered.add(id(slot))
        return out + [v for v in global_variables if id(v) not in covered]


def _info(var: Any, grad: Any) -> VariableInfo:
    dtype = var.dtype.base_dtype
    dense = isinstance(grad, tf.Tensor)
    known = var.shape.is_fully_defined()
    return VariableInfo(name=var.op.name,
                        nbytes=(var.shape.num_elements() if known else 0) * dtype.size,
                        dtype=dtype.name, packable=dense and known and dtype.is_floating)


def pack(grads_and_vars: Sequence[tuple[Any, Any]], copies: Sequence[Any], num_ps: int,
         device: str, min_bytes_per_ps: int = 0) -> Packing:
    """Create the PS variables that hold ``copies`` (the model's trainable variables, local
    on ``device``) and the gradients to apply to them. ``grads_and_vars`` are the model's
    gradients as ``compute_gradients`` returns them; the packs go on as many of the
    ``num_ps`` PS as give each ``min_bytes_per_ps`` (``packplan.ps_to_use``). Call in the
    graph, after the model."""
    graph = tf.compat.v1.get_default_graph()
    grads = {id(v): g for g, v in grads_and_vars}
    by_name = {c.op.name: c for c in copies}
    plan = plan_packing([_info(c, grads.get(id(c))) for c in copies], num_ps,
                        min_bytes_per_ps)
    packs = []
    for placement in plan:
        members = [by_name[n] for n in placement.names]
        pack_ = Pack(placement, None, members)
        with tf.device(device):
            initial = pack_.join([m.initial_value for m in members])
        with tf.device(ps_device(placement.ps)):
            pack_.variable = tf.Variable(initial, name=packed_name(placement), trainable=True,
                                         dtype=members[0].dtype.base_dtype)
        packs.append(pack_)
    # The copies are the replica's own: nobody initializes, saves or trains them as such.
    local = {id(c) for c in copies}
    for key in (v1.GraphKeys.GLOBAL_VARIABLES, v1.GraphKeys.TRAINABLE_VARIABLES):
        ref = graph.get_collection_ref(key)
        ref[:] = [v for v in ref if id(v) not in local]
    for c in copies:
        graph.add_to_collection(v1.GraphKeys.LOCAL_VARIABLES, c)
    out: list[tuple[Any, Any]] = []
    for p in packs:
        member_grads = [grads.get(id(c)) for c in p.copies]
        if p.placement.packed:
            with tf.device(device):
                out.append((p.join(member_grads), p.variable))
        elif member_grads[0] is not None:
            out.append((member_grads[0], p.variable))
    return Packing(packs=packs, grads_and_vars=out, device=device, num_ps=num_ps)
