"""Servers, sessions, checkpoint/restore: the TensorFlow plumbing around one replica."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from .cluster import ClusterConfig
from .snapshot import Snapshot, checkpoint_step, choose_source, restore_snapshot

if TYPE_CHECKING:  # graph.py builds on this module's cluster_spec
    from .graph import TrainingGraph

v1 = tf.compat.v1


def cluster_spec(cfg: ClusterConfig) -> Any:
    """The tasks this replica was told about (every PS, the chief, maybe only itself)."""
    return tf.train.ClusterSpec({k: dict(v) for k, v in cfg.cluster.items() if v})


def session_config(cfg: ClusterConfig) -> Any:
    """Only the PS and this task: no waiting for (or routing through) the other replicas.

    A PS sees only itself. Without these filters a session waits for every task in the
    cluster spec, which is what makes stock workers sleep 30 s before their first step.
    """
    if cfg.role == "ps":
        return v1.ConfigProto(device_filters=[cfg.device])
    return v1.ConfigProto(device_filters=["/job:ps", cfg.device])


def coordinator_session_config() -> Any:
    """PS 0's sync loop: every PS (an update writes variables on each), no replica."""
    return v1.ConfigProto(device_filters=["/job:ps"])


def start_server(cfg: ClusterConfig) -> Any:
    """This process's gRPC server, bound to its own address's port on all interfaces."""
    return tf.distribute.Server(cluster_spec(cfg), job_name=cfg.role, task_index=cfg.index,
                                config=session_config(cfg), start=True)


def open_session(cfg: ClusterConfig, target: str, graph: Any, config: Any = None) -> Any:
    return v1.Session(target, graph=graph,
                      config=config if config is not None else session_config(cfg))


def close_quietly(session: Any) -> None:
    """Close a session without waiting: a run blocked on a dead PS must not block us."""
    threading.Thread(target=session.close, name="session-close", daemon=True).start()


def checkpoint_prefix(directory: str) -> str:
    return os.path.join(directory, "model.ckpt")


def restore_or_initialize(sess: Any, training: TrainingGraph, checkpoint_dir: str,
                          snapshot: Snapshot | None = None) -> tuple[str, int]:
    """Bring the variables on the PS to a consistent state; returns (how, global step).

    - every variable already initialized (the PS outlived the chief): keep them as they are;
      re-running the init op here is what rewinds stock TensorFlow jobs to step 0;
    - some or all missing (a new job, or a PS that restarted): restore the chief's in-memory
      ``snapshot`` if it is newer than the latest checkpoint, else the checkpoint, onto
      every PS, so all variables come from the same step;
    - neither: initialize only what is missing.
    """
    missing = {name.decode() for name in sess.run(training.report_uninitialized)}
    how = "kept"
    if missing:
        latest = v1.train.latest_checkpoint(checkpoint_dir) if checkpoint_dir else None
        source = choose_source(snapshot.step if snapshot else None, checkpoint_step(latest))
        if source == "snapshot" and snapshot and restore_snapshot(sess, training, snapshot):
            how = f"restored from the snapshot at global step {snapshot.step}"
        elif latest:
            training.saver.restore(sess, latest)
            how = f"restored {os.path.basename(latest)}"
        else:
            with training.graph.as_default():
                todo = [v for v in v1.global_variables() if v.op.name in missing]
                sess.run(v1.variables_initializer(todo))
            how = "initialized" if len(todo) == len(training.graph.get_collection("variables")) \
                else f"initialized {len(todo)} missing variables"
    return how, int(sess.run(training.global_step))


def save_checkpoint(sess: Any, training: TrainingGraph, checkpoint_dir: str, step: int) -> str:
    os.makedirs(checkpoint_dir, exist_ok=True)
    return str(training.saver.save(sess, checkpoint_prefix(checkpoint_dir), global_step=step,
                             write_meta_graph=False))
