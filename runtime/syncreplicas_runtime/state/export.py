"""The chief's SavedModel export at the end of training (tf.estimator's LatestExporter).

A model that returns a serving signature (``"serving": {"inputs": {...}, "outputs":
{...}}``, model/contract.py) is exported when training ends, from the last checkpoint:
the model function is called again in a graph of its own on this process (no parameter
servers, no sync machinery: only the model), its variables are restored from that
checkpoint by their names (checkpoints keep the model's own names, packed or not), and the
graph is saved with tag ``serve`` and the signature ``serving_default`` to
``<checkpointDir>/export/<global step>``.

With ``training.export.best`` (tf.estimator's BestExporter), the chief also exports at
every evaluation whose metric beats every one before it, to ``export/best/<global step>``,
with that evaluation's metrics in ``eval.json`` beside the model: the best so far is read
back from those files, so a restarted chief compares with what an earlier one exported.

Every export is written aside (``.<step>.<pid>.tmp`` in its directory) and renamed into
place, so a chief killed halfway leaves no half export under a step's name; the next chief
exports again. Each directory keeps its newest ``training.export.keep`` exports (3).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Mapping
from typing import Any

import tensorflow as tf
from syncreplicas_api.export import KEEP, Goal

from ..foundation.config import ClusterConfig
from ..model.contract import BuiltModel, build_model

v1 = tf.compat.v1
EXPORT_DIR = "export"
BEST_DIR = "best"
METRICS_FILE = "eval.json"
SIGNATURE = "serving_default"


def export_root(checkpoint_dir: str) -> str:
    return os.path.join(checkpoint_dir, EXPORT_DIR)


def best_root(checkpoint_dir: str) -> str:
    return os.path.join(checkpoint_dir, EXPORT_DIR, BEST_DIR)


def keep_of(cfg: ClusterConfig) -> int:
    return cfg.training.export.keep if cfg.training.export is not None else KEEP


def beats(goal: Goal, value: float, best: float | None) -> bool:
    """Whether ``value`` is better than ``best`` (None: nothing yet); NaN never is."""
    if math.isnan(value):
        return False
    return best is None or (value > best if goal == Goal.MAXIMIZE else value < best)


def best_so_far(root: str, metric: str, goal: Goal) -> float | None:
    """The best ``metric`` among the whole best exports in ``root`` (their eval.json)."""
    values: list[float] = []
    for step in exported_steps(os.listdir(root) if os.path.isdir(root) else []):
        try:
            with open(os.path.join(root, str(step), METRICS_FILE)) as f:
                values.append(float(json.load(f)["metrics"][metric]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # an export of another setting, or not ours: not compared
    if not values:
        return None
    return max(values) if goal == Goal.MAXIMIZE else min(values)


def exported_steps(names: list[str]) -> list[int]:
    """The global steps of a directory's whole exports (its numeric names), sorted."""
    return sorted(int(n) for n in names if n.isdigit())


def export_saved_model(cfg: ClusterConfig, model_fn: Any, checkpoint: str, step: int,
                       root: str | None = None,
                       metrics: Mapping[str, float] | None = None) -> str | None:  # fmt: skip
    """Export the model at ``checkpoint`` (the one of global ``step``) under ``root`` (the
    final exports' directory unless told), with ``metrics`` in eval.json beside it when
    given; its directory, or None when the model returns no serving signature."""
    root = root or export_root(cfg.training.checkpoint_dir)
    final = os.path.join(root, str(step))
    if os.path.isdir(final):
        return final  # an earlier chief exported this step (and then lost its exit)
    graph = tf.Graph()
    with graph.as_default():
        t = cfg.training
        v1.train.get_or_create_global_step()  # a model's own rate may read it
        built = build_model(model_fn, entrypoint=cfg.model.entrypoint, args=cfg.model.args,
                            replica=0, num_replicas=cfg.total_replicas,
                            batch_size=t.batch_size, seed=t.seed)  # fmt: skip
        if built.serving is None:
            return None
        saved = set(tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map())
        model_vars = [v for v in v1.global_variables() if v.op.name in saved]
        others = [v for v in v1.global_variables() if v.op.name not in saved]
        saver = v1.train.Saver(model_vars)
        os.makedirs(root, exist_ok=True)
        aside = os.path.join(root, f".{step}.{os.getpid()}.tmp")
        shutil.rmtree(aside, ignore_errors=True)
        with v1.Session(graph=graph) as sess:
            sess.run(v1.variables_initializer(others))
            saver.restore(sess, checkpoint)
            builder = v1.saved_model.Builder(aside)
            builder.add_meta_graph_and_variables(
                sess, [v1.saved_model.tag_constants.SERVING],
                signature_def_map={SIGNATURE: signature(built)}, strip_default_attrs=True)
            builder.save()
    if metrics is not None:
        with open(os.path.join(aside, METRICS_FILE), "w") as f:
            json.dump({"globalStep": step, "metrics": dict(metrics)}, f, sort_keys=True)
    try:
        os.rename(aside, final)
    except OSError:  # another process exported this step meanwhile: keep theirs
        shutil.rmtree(aside, ignore_errors=True)
    prune(root, keep_of(cfg))
    return final


def signature(built: BuiltModel) -> Any:
    assert built.serving is not None
    return v1.saved_model.predict_signature_def(inputs=dict(built.serving["inputs"]),
                                                outputs=dict(built.serving["outputs"]))


def prune(root: str, keep: int = KEEP) -> None:
    """Keep the newest ``keep`` exports."""
    for step in exported_steps(os.listdir(root))[:-keep]:
        shutil.rmtree(os.path.join(root, str(step)), ignore_errors=True)
