"""Keras layers keep their variable names, and so their values on the PS, across graph
rebuilds in one process; and what that relies on inside the pinned Keras 3.

In-process: the PS tasks are gRPC servers of this test process (variables on a server
outlive the graphs and sessions that made them, as on a real PS).
"""

from __future__ import annotations

import collections
import json

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
v1 = tf.compat.v1

from syncreplicas_runtime.foundation.config import parse_config  # noqa: E402
from syncreplicas_runtime.graph import training as G  # noqa: E402
from syncreplicas_runtime.model.contract import load_entrypoint  # noqa: E402
from syncreplicas_runtime.model.keras_names import COUNTERS, stable_names  # noqa: E402
from syncreplicas_runtime.process.sessions import session_config  # noqa: E402
from syncreplicas_runtime.state.checkpoints import restore_or_initialize  # noqa: E402

from tests.support.tfcluster import free_port  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def graph_mode() -> None:
    v1.disable_eager_execution()


def test_keras_names_layers_from_the_global_counters_stable_names_swaps() -> None:
    """Fails if Keras changes how it uniquifies names (model/keras_names.py must then change)."""
    import keras
    from keras.src.backend.common import global_state

    assert keras.__version__.startswith("3.")
    first, second = keras.layers.Dense(1), keras.layers.Dense(1)
    assert first.name != second.name  # a process-global counter, not per model or graph
    table = global_state.get_global_attribute(COUNTERS)
    assert isinstance(table, collections.defaultdict) and table["dense"] >= 2
    for _ in range(3):
        with stable_names():
            assert [keras.layers.Dense(1).name for _ in range(2)] == ["dense", "dense_1"]
            assert keras.Sequential().name == "sequential"
    assert global_state.get_global_attribute(COUNTERS) is table  # the caller's table is back
    assert keras.layers.Dense(1).name == f"dense_{table['dense'] - 1}"


def chief_config(entrypoint: str, pack: bool):
    ps = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    chief = f"127.0.0.1:{free_port()}"
    env = {
        "TF_CONFIG": json.dumps({"cluster": {"ps": ps, "chief": [chief]},
                                 "task": {"type": "chief", "index": 0}}),
        "SYNCREPLICAS_JOB": json.dumps({"replicasToAggregate": 1, "workers": 0,
                                        "parameterServers": 2,
                                        "model": {"entrypoint": entrypoint},
                                        "training": {"packVariables": pack,
                                                     "packMinBytesPerPS": 0}}),
    }
    cfg = parse_config(env)
    spec = tf.train.ClusterSpec({"ps": ps, "chief": [chief]})
    servers = [tf.distribute.Server(spec, job_name="ps", task_index=i) for i in range(2)]
    servers.append(tf.distribute.Server(spec, job_name="chief", task_index=0,
                                        config=session_config(cfg)))
    return cfg, servers


@pytest.mark.parametrize("pack", [True, False], ids=["packed", "unpacked"])
@pytest.mark.parametrize("entrypoint", [
    "syncreplicas_runtime.models.digits_cnn:build",   # Sequential + tf.data
    "examples.port.after:build",                      # Sequential without Input + tf.data
    "tests.runtime.kerasmodels:functional",           # functional model on placeholders
])
def test_every_rebuild_names_the_variables_alike_and_finds_their_values(entrypoint: str,
                                                                        pack: bool) -> None:
    """Packed, the model's variables are local copies (their names are the checkpoint's)
    of PS variables the same plan must find again; unpacked, they are the PS variables."""
    cfg, servers = chief_config(entrypoint, pack)
    model_fn = load_entrypoint(entrypoint)
    names = None
    values = None
    for rebuild in range(4):
        # Other Keras code in the process moves the global counters between builds.
        tf.keras.layers.Dense(1), tf.keras.Sequential()
        training = G.build_training_graph(cfg, model_fn, epoch=rebuild + 1)
        with training.graph.as_default():
            on_ps = {v.op.name: v for v in v1.trainable_variables()}
            if training.packing is not None:
                model_vars = {c.op.name: c for p in training.packing.packs for c in p.copies}
                assert {c.device for c in model_vars.values()} == {
                    "/job:chief/task:0/device:CPU:0"}
                fill = training.local_init_op  # the copies read the PS variables
            else:
                model_vars, fill = on_ps, tf.no_op()
            first = next(iter(on_ps.values()))
            bump = first.assign_add(tf.ones_like(first))
        assert (training.packing is not None) == pack
        assert len(model_vars) >= 4
        assert {v.device for v in on_ps.values()} == {"/job:ps/task:0", "/job:ps/task:1"}
        assert names is None or sorted(model_vars) == names, rebuild
        names = sorted(model_vars)
        with v1.Session(servers[2].target, graph=training.graph,
                        config=session_config(cfg)) as sess:
            if rebuild == 0 and training.fence is not None:
                # What the sync protocol does on PS 0 before anyone restores: the owner
                # table every restore's fence check reads.
                sess.run(training.fence.owner.initializer)
            how, _ = restore_or_initialize(sess, training, "")
            assert how == ("initialized" if rebuild == 0 else "kept"), rebuild
            sess.run(fill)
            now = sess.run({n: v for n, v in model_vars.items()})
            if values is not None:
                for name in names:
                    np.testing.assert_array_equal(now[name], values[name], err_msg=name)
            sess.run(bump)  # the next graph must see this change on the PS
            sess.run(fill)
            values = sess.run({n: v for n, v in model_vars.items()})
