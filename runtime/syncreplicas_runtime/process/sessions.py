"""This process's gRPC server and its sessions: which tasks each one sees, opening and closing."""

from __future__ import annotations

import os
import threading
from typing import Any

import tensorflow as tf

from ..foundation.config import ClusterConfig

v1 = tf.compat.v1

# gRPC channel options for every channel this process opens (TensorFlow reads the variable
# once, when it makes its first channel; a value set by the user is kept). A replica whose
# pod is replaced comes back under the same name with a new address, and a PS that still
# dials the old one gets no answer at all (the address is gone): gRPC gives up a connect
# after its minimum connect timeout (20 s by default) and only then resolves the name again.
# 2 s and re-resolution at most once a second bring the PS to the new pod within seconds.
# A peer whose node is lost or cut off answers nothing on a connection that is already up:
# a request sent there would wait for TCP to give up (about 15 minutes). A keepalive time
# makes gRPC set TCP_USER_TIMEOUT to the keepalive timeout on every socket, so a request
# unacknowledged for 5 s ends the connection and the name is resolved again; the pings
# themselves come once in 5 minutes, the least a TensorFlow server (gRPC's defaults)
# accepts without counting a strike.
GRPC_OPTIONS_ENV = "TF_GRPC_DEFAULT_OPTIONS"
GRPC_OPTIONS = (
    "grpc.min_reconnect_backoff_ms=2000,grpc.dns_min_time_between_resolutions_ms=1000,"
    "grpc.keepalive_time_ms=300000,grpc.keepalive_timeout_ms=5000"
)


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
    os.environ.setdefault(GRPC_OPTIONS_ENV, GRPC_OPTIONS)
    return tf.distribute.Server(cluster_spec(cfg), job_name=cfg.role, task_index=cfg.index,
                                config=session_config(cfg), start=True)


def open_session(cfg: ClusterConfig, target: str, graph: Any, config: Any = None) -> Any:
    return v1.Session(target, graph=graph,
                      config=config if config is not None else session_config(cfg))


def close_quietly(session: Any) -> None:
    """Close a session without waiting: a run blocked on a dead PS must not block us."""
    threading.Thread(target=session.close, name="session-close", daemon=True).start()
