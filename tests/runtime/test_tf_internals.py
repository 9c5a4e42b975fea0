"""What the runtime relies on inside the pinned TensorFlow: fails loudly if it changes.

Built in-process on a local session (no cluster): the optimizer's private attributes, the
graph structure stock_pieces() reads, and per-epoch resource containers.
"""

from __future__ import annotations

import json

import pytest

tf = pytest.importorskip("tensorflow")
v1 = tf.compat.v1

from syncreplicas_runtime.foundation.config import parse_config  # noqa: E402
from syncreplicas_runtime.graph import training as G  # noqa: E402
from syncreplicas_runtime.model.contract import ModelError, load_entrypoint  # noqa: E402
from syncreplicas_runtime.sync import names  # noqa: E402
from syncreplicas_runtime.sync.names import container_name  # noqa: E402
from syncreplicas_runtime.sync.protocol import token_queue  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def graph_mode() -> None:
    v1.disable_eager_execution()


def cfg(role: str = "worker", index: int = 0, optimizer: str = "sgd", r: int = 2):
    env = {
        "TF_CONFIG": json.dumps({"cluster": {"ps": ["127.0.0.1:1", "127.0.0.1:2"],
                                             "chief": ["127.0.0.1:3"], "worker": ["127.0.0.1:4"]},
                                 "task": {"type": role, "index": index}}),
        "SYNCREPLICAS_JOB": json.dumps({"replicasToAggregate": r, "workers": 1,
                                        "parameterServers": 2,
                                        # linear's w and b spread one on each PS
                                        "training": {"optimizer": optimizer,
                                                     "packMinBytesPerPS": 0}}),
    }
    return parse_config(env)


def test_pinned_version() -> None:
    assert tf.__version__ == "2.21.0"


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_private_attributes_and_graph_shape(optimizer: str) -> None:
    c = cfg(optimizer=optimizer)
    tg = G.build_training_graph(c, load_entrypoint(c.model.entrypoint), epoch=0xABC)
    with tg.graph.as_default():
        opt = v1.train.SyncReplicasOptimizer(v1.train.GradientDescentOptimizer(0.1), 1)
    for name in ("_sync_token_queue", "_accumulator_list", "_chief_queue_runner",
                 "_opt", "_tokens_per_step", "_replicas_to_aggregate"):
        assert hasattr(opt, name), f"SyncReplicasOptimizer lost {name}"
    assert callable(opt._opt._create_slots)
    ops = tg.graph.get_operations()
    accumulators = [op for op in ops if op.type == "ResourceConditionalAccumulator"]
    assert len(accumulators) == 2  # linear: w and b
    container = container_name(0xABC).encode()
    assert {op.get_attr("container") for op in accumulators} == {container}
    assert {op.device for op in accumulators} == {"/job:ps/task:0", "/job:ps/task:1"}
    # Variables and slots stay outside the epoch's container.
    handles = [op for op in ops if op.type == "VarHandleOp"]
    assert handles and all(op.get_attr("container") == b"" for op in handles
                           if not op.name.startswith("sync_rep_local_step"))
    # Our per-replica token queues, in the container, on the global step's PS.
    queues = [op for op in ops if op.type == "FIFOQueueV2" and op.name.startswith("syncreplicas")]
    assert sorted(op.name for op in queues) == ["syncreplicas_pushed", "syncreplicas_token_0",
                                                "syncreplicas_token_1"]
    assert all(op.get_attr("container") == container for op in queues)
    # Elastic R: every take reads its count from the R variable on PS 0, not a constant.
    takes = [op for op in ops if op.type.endswith("TakeGradient")]
    assert len(takes) == len(accumulators)
    for op in takes:
        source = op.inputs[1].op
        while source.type in ("Identity", "ReadVariableOp"):
            source = source.inputs[0].op
        assert source.type == "VarHandleOp" and source.name == names.AGGREGATE_VARIABLE, source


def test_stock_pieces() -> None:
    with tf.Graph().as_default():
        gs = v1.train.get_or_create_global_step()
        w = v1.get_variable("w", [2], initializer=v1.zeros_initializer())
        loss = tf.reduce_sum(w * w)
        opt = v1.train.SyncReplicasOptimizer(v1.train.GradientDescentOptimizer(0.1), 2)
        opt.apply_gradients(opt.compute_gradients(loss), global_step=gs)
        apply_ops, update = G.stock_pieces(opt)
        assert opt._local_step is not None and opt.local_step_init_op is not None
        assert [op.type for op in apply_ops] == ["ResourceAccumulatorApplyGradient"]
        # The update is the inner optimizer's apply, which increments the global step.
        assert update.type in ("AssignAddVariableOp", "NoOp")
        assert update.name == "GradientDescent"


def test_push_once_lets_one_gradient_per_step_and_replica_into_an_accumulator() -> None:
    """graph/pushonce.py: a second push at a step already applied is dropped (the
    accumulator drops local step -1, which is below its global step); a push at a later
    step is taken."""
    from syncreplicas_runtime.graph.pushonce import push_once

    with tf.Graph().as_default(), v1.Session() as sess:
        w = v1.get_variable("w", [2], initializer=v1.ones_initializer())
        opt = v1.train.SyncReplicasOptimizer(v1.train.GradientDescentOptimizer(0.1), 2)
        opt.apply_gradients(opt.compute_gradients(tf.reduce_sum(w * w)),
                            global_step=v1.train.get_or_create_global_step())
        apply_ops, _ = G.stock_pieces(opt)
        push = tf.group(push_once(apply_ops, opt._accumulator_list, 0, container_name(0xABC)))
        (acc, _device), = opt._accumulator_list
        count, next_step = acc.num_accumulated(), opt._local_step.assign(1)
        sess.run(v1.global_variables_initializer())
        sess.run(v1.local_variables_initializer())
        sess.run(push)
        sess.run(push)  # the same replica at the same local step: dropped
        assert sess.run(count) == 1
        sess.run(next_step)
        sess.run(push)  # a later step: taken
        assert sess.run(count) == 2


def test_epoch_containers_isolate_queues() -> None:
    """Same shared name, different epoch: different queues (and valid container names)."""
    # A one-task in-process "ps" server hosts the PS-pinned queues (ends with pytest).
    from tests.support.tfcluster import free_port

    server = tf.distribute.Server({"ps": [f"127.0.0.1:{free_port()}"]}, job_name="ps",
                                  task_index=0)
    with tf.Graph().as_default(), v1.Session(server.target) as sess:
        a = token_queue(0, epoch=1)
        b = token_queue(0, epoch=2)
        sess.run(a.enqueue_many([[5, 6]]))
        assert sess.run([a.size(), b.size()]) == [2, 0]
        sess.run(a.close(cancel_pending_enqueues=True))
        sess.run(b.enqueue(7))  # b stays open
        assert sess.run(b.size()) == 1
        # Enqueueing zero tokens is legal (the top-up of a full queue).
        sess.run(b.enqueue_many([tf.fill([0], tf.constant(1, tf.int64))]))


@pytest.mark.parametrize(
    ("total", "r", "initial", "expected"),
    [
        (2, 2, 0, [(1, 0), (1, 0)]),
        (3, 2, 0, [(1, 0), (1, 0), (1, 0)]),           # one backup
        (2, 3, 0, [(2, 0), (1, 0)]),                   # R > replicas: two pushes for one
        (3, 3, 4, [(1, 2), (1, 1), (1, 1)]),
        (1, 1, 0, [(1, 0)]),
    ],
)
def test_tokens_per_replica(total: int, r: int, initial: int,
                            expected: list[tuple[int, int]]) -> None:
    shares = G.tokens_per_replica(total, r, initial)
    assert shares == expected
    assert sum(b for b, _ in shares) == max(total, r)
    assert sum(e for _, e in shares) == initial


def test_model_contract_errors() -> None:
    c = cfg()
    with pytest.raises(ModelError, match="cannot import"):
        load_entrypoint("no_such_package.mod:build")
    with pytest.raises(ModelError, match="has no 'nope'"):
        load_entrypoint("syncreplicas_runtime.models.linear:nope")
    with pytest.raises(ModelError, match="raised RuntimeError"):
        G.build_training_graph(c, lambda **_: (_ for _ in ()).throw(RuntimeError("x")), 1)
    with pytest.raises(ModelError, match="'loss' must be a scalar float tensor"):
        G.build_training_graph(c, lambda **_: {"loss": 3}, 1)


@pytest.mark.parametrize(("role", "index", "hosts"), [
    ("worker", 0, ["127.0.0.1", "127.0.0.1"]),
    # A PS probes itself on localhost: its own name leaves DNS while its pod is deleted
    # (the operator unpublishes it) and it still hands its state over.
    ("ps", 1, ["127.0.0.1", "localhost"]),
    ("ps", 0, ["localhost", "127.0.0.1"]),
])  # fmt: skip
def test_a_ps_probes_itself_on_localhost(role: str, index: int, hosts: list[str]) -> None:
    from syncreplicas_runtime.sync.protocol import probe_targets

    assert probe_targets(cfg(role, index)) == list(zip(hosts, [1, 2], strict=True))
