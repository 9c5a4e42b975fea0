"""The model contract, and loading a model from ``package.module:function``.

A model is a function that builds one replica's part of a TF1 graph and returns a mapping:

    def build(*, replica: int, num_replicas: int, batch_size: int, seed: int, **args) -> dict:
        ...variables from tf.compat.v1.get_variable or Keras layers (they land on the PS)...
        return {
            "loss": loss,                  # required: scalar float tensor of this replica's batch
            "feed": next_feed,             # optional: callable(step: int) -> feed_dict
            "eval": {"accuracy": acc},     # optional: scalar tensors the chief evaluates
            "eval_feed": eval_feed_dict,   # optional: feed_dict for the eval tensors
            "learning_rate": rate,         # optional: scalar float tensor, the rate of the
                                           # update at tf.compat.v1.train.get_global_step()
            "serving": {"inputs": {"x": x},            # optional: the SavedModel's
                        "outputs": {"y": prediction}},  # serving_default signature
        }

or, with tf.data input, ``"dataset"`` (a finite dataset of single examples) and ``"loss"`` as
a callable that gets this replica's batch (the dataset's element structure, batched) and
returns the scalar loss; the runtime shards, shuffles, batches and positions it (data.py).

A ``learning_rate`` of the model's replaces ``training.learningRate`` for any schedule
that ``training.learningRateSchedule`` cannot say (a job may set one or the other); the
runtime evaluates it on PS 0 in each update, at the update's global step.

``replica`` is 0 for the chief and 1 + i for worker i. ``feed(step)`` gets the global step
at which the replica reads the variables, so data can be a deterministic function of
(seed, replica, step). ``args`` are the job's ``model.args``. The function is called once per
graph (again after every sync-state reset), inside the replica's device scope, with Keras's
layer-name counters fresh (keras_names.py), so every graph names its variables alike.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


class ModelError(Exception):
    """The model entrypoint cannot be loaded, raises, or breaks the contract."""


@dataclass(frozen=True)
class BuiltModel:
    loss: Any
    feed: Callable[[int], Mapping[Any, Any]] | None = None
    eval: Mapping[str, Any] = field(default_factory=dict)
    eval_feed: Mapping[Any, Any] | None = None
    input: Any = None  # data.DatasetInput when the model returned a "dataset"
    learning_rate: Any = None  # the model's own rate tensor, if it returned one
    # The serving signature, {"inputs": {name: tensor}, "outputs": {name: tensor}}, if any.
    serving: Mapping[str, Mapping[str, Any]] | None = None

    def feed_for(self, sess: Any, step: int) -> Mapping[Any, Any] | None:
        """The feed_dict of a training step at global ``step`` (positions tf.data input)."""
        if self.input is not None:
            self.input.position(sess, step)
        return self.feed(step) if self.feed else None


def load_entrypoint(entrypoint: str) -> Callable[..., Any]:
    """Import ``package.module:function`` and return the function."""
    module_name, _, func_name = entrypoint.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # any import-time failure is the model's fault
        raise ModelError(f"model.entrypoint {entrypoint!r}: cannot import {module_name!r}: "
                         f"{type(err).__name__}: {err}") from err
    func = getattr(module, func_name, None)
    if func is None:
        raise ModelError(f"model.entrypoint {entrypoint!r}: {module_name} has no {func_name!r}")
    if not callable(func):
        raise ModelError(f"model.entrypoint {entrypoint!r}: {func_name!r} is not callable")
    return func  # type: ignore[no-any-return]


def build_model(func: Callable[..., Any], *, entrypoint: str, args: Mapping[str, Any],
                replica: int, num_replicas: int, batch_size: int, seed: int) -> BuiltModel:
    """Call the model function and check what it returns against the contract."""
    import tensorflow as tf

    from .keras_names import stable_names

    try:
        with stable_names():
            out = func(replica=replica, num_replicas=num_replicas, batch_size=batch_size,
                       seed=seed, **dict(args))
            inp, loss = _dataset_input(out, replica=replica, num_replicas=num_replicas,
                                       batch_size=batch_size, seed=seed)
    except ModelError as err:
        raise ModelError(f"model {entrypoint!r}: {err}") from err
    except Exception as err:
        raise ModelError(f"model {entrypoint!r} {explain_build_error(err)}") from err
    if not isinstance(out, Mapping):
        raise ModelError(f"model {entrypoint!r} must return a mapping, got {type(out).__name__}")
    unknown = set(out) - {"loss", "feed", "eval", "eval_feed", "dataset", "learning_rate",
                          "serving"}
    if unknown:
        raise ModelError(f"model {entrypoint!r} returned unknown keys {sorted(unknown)}")
    if not isinstance(loss, tf.Tensor) or loss.shape.rank != 0 or not loss.dtype.is_floating:
        raise ModelError(f"model {entrypoint!r}: 'loss' must be a scalar float tensor, "
                         f"got {loss!r}")
    feed = out.get("feed")
    if feed is not None and not callable(feed):
        raise ModelError(f"model {entrypoint!r}: 'feed' must be callable(step) -> feed_dict")
    evals = out.get("eval") or {}
    if not isinstance(evals, Mapping) or not all(
        isinstance(k, str) and isinstance(v, tf.Tensor) and v.shape.rank == 0
        for k, v in evals.items()
    ):
        raise ModelError(f"model {entrypoint!r}: 'eval' must map names to scalar tensors")
    rate = out.get("learning_rate")
    if rate is not None and (not isinstance(rate, tf.Tensor) or rate.shape.rank != 0
                             or not rate.dtype.is_floating):
        raise ModelError(f"model {entrypoint!r}: 'learning_rate' must be a scalar float "
                         f"tensor, got {rate!r}")
    serving = out.get("serving")
    if serving is not None and not _is_signature(serving, tf.Tensor):
        raise ModelError(f"model {entrypoint!r}: 'serving' must be {{'inputs': {{name: "
                         "tensor}, 'outputs': {name: tensor}}, each with at least one tensor")
    return BuiltModel(loss=loss, feed=feed, eval=dict(evals), eval_feed=out.get("eval_feed"),
                      input=inp, learning_rate=rate,
                      serving={k: dict(v) for k, v in serving.items()} if serving else None)


def _is_signature(serving: Any, tensor: type) -> bool:
    """Whether ``serving`` is {"inputs": {str: tensor, ...}, "outputs": {str: tensor, ...}}."""
    return (isinstance(serving, Mapping) and set(serving) == {"inputs", "outputs"}
            and all(isinstance(side, Mapping) and side
                    and all(isinstance(k, str) and isinstance(v, tensor)
                            for k, v in side.items())
                    for side in serving.values()))


def _dataset_input(out: Any, **where: int) -> tuple[Any, Any]:
    """(DatasetInput or None, loss tensor): calls the loss on the batch for a "dataset"."""
    if not isinstance(out, Mapping) or out.get("dataset") is None:
        return None, out.get("loss") if isinstance(out, Mapping) else None
    import tensorflow as tf

    from .data import DatasetInput

    if not isinstance(out["dataset"], tf.data.Dataset):
        raise ModelError(f"'dataset' must be a tf.data.Dataset, got "
                         f"{type(out['dataset']).__name__}")
    if out.get("feed") is not None:
        raise ModelError("return either 'dataset' or 'feed', not both")
    if not callable(out.get("loss")):
        raise ModelError("with 'dataset', 'loss' must be callable(batch) -> scalar loss")
    inp = DatasetInput(out["dataset"], **where)
    return inp, out["loss"](inp.batch)


# Keras training loops run eagerly. Keras filters its own frames out of tracebacks, so the
# call is found on the model's line that made it.
KERAS_LOOP = re.compile(r"\.(fit|train_on_batch|evaluate|predict)\(")


def explain_build_error(err: BaseException) -> str:
    """One line naming why building failed, with eager-only code called out."""
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    eager = "eager" in str(err).lower() or any("keras" in f.filename for f in frames)
    for frame in reversed(frames):
        found = KERAS_LOOP.search(frame.line or "") if eager else None
        if found:
            return (f"calls Keras Model.{found[1]}, which runs its own (eager) training loop: "
                    "build the loss and return it, the runtime trains")
    message = str(err).strip().splitlines()[0] if str(err).strip() else ""
    if "has no attribute 'numpy'" in message:
        return ("calls .numpy() on a graph tensor: models are built in graph mode, "
                "where tensors have no value until the runtime runs them")
    if "eager" in message.lower():
        return f"needs eager execution, but models are built in graph mode ({message[:200]})"
    return f"raised {type(err).__name__}: {message[:300]}"
