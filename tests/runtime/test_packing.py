"""Variable packing: the same weights and the same checkpoints as without it (one run of
real processes each way), checkpoints that restore across the two modes and every optimizer
updating a packed variable as its pieces (in-process, seconds), PS 0's graph, which
never touches the local copies, and how many PS a packed model is spread over.

The model (tests/runtime/packmodels.py) mixes get_variable weights, a Keras layer, an
embedding (sparse gradient: kept unpacked), an unused trainable variable (no gradient) and a
non-trainable counter; adam adds two slots per variable and two non-slot variables.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.runtime.rtutil import runtime_env
from tests.support.jobs import with_changes
from tests.support.tfcluster import start_cluster

JOB: dict[str, Any] = {
    "replicasToAggregate": 2, "workers": 1, "parameterServers": 2,
    "model": {"entrypoint": "tests.runtime.packmodels:build"},
    "training": {"optimizer": "adam", "learningRate": 0.01, "batchSize": 8, "maxSteps": 8,
                 "logEverySteps": 100, "startupTimeoutSeconds": 180,
                 "packMinBytesPerPS": 0,  # spread this small model over both PS
                 "chiefLostTimeoutSeconds": 120},
}


def train(tmp_path: Path, name: str, pack: bool,
          steps: int) -> tuple[dict[str, np.ndarray], str]:
    """Run the job to ``steps``; returns the final checkpoint's tensors and the chief's log."""
    ckpt = tmp_path / name / "ckpt"
    job = with_changes(JOB, training__maxSteps=steps, training__packVariables=pack,
                       training__checkpointDir=str(ckpt))
    with start_cluster(job, workers=1, ps=2, workdir=tmp_path / name,
                       env=runtime_env()) as cluster:
        codes = cluster.wait(timeout=300)
        logs = cluster.logs()
    assert set(codes.values()) == {0}, logs
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(ckpt))
    tensors = {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}
    assert int(tensors["global_step"]) == steps
    return tensors, cluster.log("chief", 0)


def assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        if name == "syncreplicas/chief_starts":
            continue
        assert a[name].shape == b[name].shape, name
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_packed_run_equals_unpacked_run(tmp_path: Path) -> None:
    """Two replicas, 2 PS, adam: the same checkpoint packed or not (restoring across the
    modes is checked in-process below, for every optimizer)."""
    packed, log = train(tmp_path, "packed", pack=True, steps=8)
    unpacked, log_off = train(tmp_path, "unpacked", pack=False, steps=8)
    # Balanced by bytes over 2 PS: the embedding (384 B, unpacked) fills PS 0, so the four
    # dense variables (260 B) share one packed variable on PS 1.
    assert ("packing: 4 trainable variables in 1 packed PS variable; unpacked (sparse or no "
            "gradient): mix/embedding, mix/unused (model on 2 of 2 PS)") in log, log
    assert "packing:" not in log_off
    # The model's own names and stock slot names, nothing of the packing.
    assert {"mix/w1", "mix/w1/Adam", "mix/w1/Adam_1", "mix/b1", "mix/embedding/Adam",
            "mix_head/kernel", "mix_head/bias/Adam_1", "mix/unused", "mix/counter",
            "beta1_power", "beta2_power"} <= set(packed)
    assert not [n for n in packed if n.startswith("syncreplicas/") and "chief_starts" not in n]
    assert packed["mix/w1"].shape == (6, 8) and packed["mix/embedding"].shape == (12, 8)
    assert "mix/unused/Adam" not in packed  # no gradient, no slot (as without packing)
    assert_same(packed, unpacked)
    # Training moved the weights (the comparison above is not one of initial values).
    assert not np.allclose(packed["mix/w1/Adam"], 0)
    assert "variables initialized" in log


# -- in-process (one local PS server, no replicas): seconds, not minutes ----------------------

OPTIMIZERS = ["sgd", "momentum", "adagrad", "adam", "rmsprop"]


@pytest.fixture(scope="module")
def ps_targets() -> tuple[str, str]:
    """Two one-task in-process "ps" servers (they end with pytest): the packed trainers' and
    the unpacked ones'. One each, as the copies have the model's names: on one server
    they would be the unpacked trainer's variables. Each trainer initializes what it uses."""
    import tensorflow as tf

    from tests.support.tfcluster import free_port

    tf.compat.v1.disable_eager_execution()
    servers = [tf.distribute.Server({"ps": [f"127.0.0.1:{free_port()}"]}, job_name="ps",
                                    task_index=0) for _ in range(2)]
    return str(servers[0].target), str(servers[1].target)


class LocalTrainer:
    """packmodels trained by one optimizer, its variables packed or not (the runtime's
    packing, optimizer and saver, without the sync machinery)."""

    def __init__(self, target: str, optimizer: str, packed: bool) -> None:
        import tensorflow as tf
        from syncreplicas_api.types import TrainingSpec
        from syncreplicas_runtime.graph.packing import local_model_variables, pack
        from syncreplicas_runtime.graph.rates import make_optimizer
        from syncreplicas_runtime.model.contract import build_model

        from tests.runtime import packmodels

        v1 = tf.compat.v1
        self.graph = tf.Graph()
        own = "/job:ps/task:0/device:CPU:0"
        with self.graph.as_default(), tf.device(own):
            with local_model_variables(own) as copies:
                self.model = build_model(packmodels.build, entrypoint="packmodels:build",
                                         args={}, replica=0, num_replicas=1, batch_size=8,
                                         seed=0)
            opt = make_optimizer(TrainingSpec(optimizer=optimizer), 0.05)
            gvs = opt.compute_gradients(self.model.loss)
            self.packing = pack(gvs, copies, 1, own) if packed else None
            if self.packing is not None:
                gvs = self.packing.grads_and_vars
            # After the loss, as in the runtime (where the update runs later, on the PS):
            # nothing orders an in-place update after every read of the forward pass.
            with tf.control_dependencies([self.model.loss]):
                self.train = opt.apply_gradients(gvs)
            init = [v1.global_variables_initializer()]
            self.after = [self.packing.refresh([self.train])] if packed else []
            self.fill = self.packing.refresh([]) if packed else tf.no_op()
            saved = (self.packing.saver_var_list(opt, v1.global_variables()) if packed
                     else v1.global_variables())
            self.saver = v1.train.Saver(saved, sharded=False, save_relative_paths=True)
        self.sess = v1.Session(target, graph=self.graph)
        self.sess.run(init)
        self.sess.run(self.fill)
        self.steps = 0

    def run(self, steps: int) -> None:
        for _ in range(steps):
            # As in a step's run: the refresh waits for the update, in the same run.
            self.sess.run([self.train, *self.after], self.model.feed(self.steps))
            self.steps += 1

    def save(self, path: Path) -> dict[str, np.ndarray]:
        import tensorflow as tf

        prefix = self.saver.save(self.sess, str(path / "model.ckpt"), write_meta_graph=False)
        reader = tf.train.load_checkpoint(prefix)
        return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}

    def restore(self, path: Path, steps: int) -> None:
        self.saver.restore(self.sess, str(path / "model.ckpt"))
        self.sess.run(self.fill)
        self.steps = steps


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_optimizers_update_packed_variables_as_their_pieces(ps_targets: tuple[str, str],
                                                            optimizer: str,
                                                            tmp_path: Path) -> None:
    """Every supported optimizer is elementwise: packed == unpacked, slots included; and a
    checkpoint written in one mode restores in the other and training goes on the same."""
    packed = LocalTrainer(ps_targets[0], optimizer, packed=True)
    unpacked = LocalTrainer(ps_targets[1], optimizer, packed=False)
    assert packed.packing is not None
    assert [p.placement.packed for p in packed.packing.packs] == [True, False, False]
    initial = packed.save(tmp_path / "init")
    for t in (packed, unpacked):
        t.run(3)
    a, b = packed.save(tmp_path / "p"), unpacked.save(tmp_path / "u")
    assert_same(a, b)
    assert not np.allclose(a["mix/w1"], initial["mix/w1"])  # training moved the weights
    # Crossed: the packed checkpoint into the unpacked graph and the other way round.
    packed.restore(tmp_path / "u", 3)
    unpacked.restore(tmp_path / "p", 3)
    for t in (packed, unpacked):
        t.run(2)
    assert_same(packed.save(tmp_path / "p2"), unpacked.save(tmp_path / "u2"))


def training_graph(job: dict[str, Any], role: str) -> Any:
    """``build_training_graph`` of task 0 of ``role`` in a 2-PS cluster with a chief and
    one worker (nothing listens at the addresses: only the graph is built)."""
    import tensorflow as tf
    from syncreplicas_runtime.foundation.config import parse_config
    from syncreplicas_runtime.graph.training import build_training_graph
    from syncreplicas_runtime.model.contract import load_entrypoint

    tf.compat.v1.disable_eager_execution()
    env = {"TF_CONFIG": json.dumps({"cluster": {
        "ps": ["127.0.0.1:1", "127.0.0.1:2"], "chief": ["127.0.0.1:3"],
        "worker": ["127.0.0.1:4"]}, "task": {"type": role, "index": 0}}),
           "SYNCREPLICAS_JOB": json.dumps(job)}
    cfg = parse_config(env)
    return build_training_graph(cfg, load_entrypoint(cfg.model.entrypoint), epoch=7)


def test_ps0_graph_never_touches_the_local_copies() -> None:
    """PS 0 builds the replicas' graph to run the sync loop: nothing it runs reads or writes
    a local copy (they would be allocated on PS 0), while a replica's join fills them."""
    def reaches(fetches: list[Any]) -> set[Any]:
        seen: set[Any] = set()
        todo = [f.op if hasattr(f, "op") else f for f in fetches]
        while todo:
            op = todo.pop()
            if op not in seen:
                seen.add(op)
                todo.extend(t.op for t in op.inputs)
                todo.extend(op.control_inputs)
        return seen

    ps0 = training_graph(JOB, "ps")
    assert ps0.packing is not None
    copies = {c.op for p in ps0.packing.packs for c in p.copies}
    assert {c.device for c in copies} == {"/job:ps/task:0/device:CPU:0"}
    e = ps0.elastic
    runs = [ps0.chief_init_op, ps0.sync_op, ps0.gate_tokens_op, ps0.close_tokens_op, ps0.depth,
            ps0.pending, e.init, e.set_r, *e.read.values(), *e.wait_and_read.values(),
            e.updated_at, ps0.report_uninitialized, ps0.global_step]
    assert not reaches(runs) & copies
    chief = training_graph(JOB, "chief")
    assert chief.packing is not None
    copies = {c.op for p in chief.packing.packs for c in p.copies}
    assert copies <= reaches([chief.local_init_op])


@pytest.mark.parametrize(("dim", "min_bytes", "expected"), [
    (16, None, {0}),          # 68 bytes, the default 256 KiB per PS: all on PS 0
    (16, 0, {0, 1}),          # 0: spread over every PS, however small
    (160_000, None, {0, 1}),  # 640 KB: two shares of at least 256 KiB
    (160_000, 400_000, {0}),  # but not two of at least 400,000 bytes
])
def test_packed_variables_use_as_many_ps_as_give_each_its_minimum_share(
        dim: int, min_bytes: int | None, expected: set[int]) -> None:
    """training.packMinBytesPerPS: a model spread over 2 PS only when each gets its share."""
    training: dict[str, Any] = {} if min_bytes is None else {"packMinBytesPerPS": min_bytes}
    job = {"replicasToAggregate": 2, "workers": 1, "parameterServers": 2,
           "model": {"entrypoint": "syncreplicas_runtime.models.linear:build",
                     "args": {"dim": dim, "variables": 4}},
           "training": training}
    built = training_graph(job, "chief")
    assert built.packing is not None
    assert {p.placement.ps for p in built.packing.packs} == expected
    assert {p.variable.device for p in built.packing.packs} == {
        f"/job:ps/task:{i}" for i in expected}
    assert sum(len(p.copies) for p in built.packing.packs) == 4
    assert built.packing.describe() == (
        f"packing: 4 trainable variables in {len(expected)} packed PS variable"
        f"{'s' if len(expected) > 1 else ''} (model on {len(expected)} of 2 PS)")
