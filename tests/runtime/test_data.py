"""tf.data input (model/data.py): shards, data epochs, and the batch as a pure function of
(seed, replica, global step), whatever order the steps come in. In-process, local sessions."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
v1 = tf.compat.v1

from syncreplicas_runtime.foundation import exitcodes  # noqa: E402
from syncreplicas_runtime.model.data import DatasetInput  # noqa: E402
from syncreplicas_runtime.process.exits import Exit  # noqa: E402

N, REPLICAS, BATCH, SEED = 103, 3, 8, 5  # shards of 35, 34, 34 examples: P = 4 batches each


@pytest.fixture(scope="module", autouse=True)
def graph_mode() -> None:
    v1.disable_eager_execution()


class Replica:
    """One replica's input in its own graph and session (a process of its own, in effect)."""

    def __init__(self, replica: int, dataset=None) -> None:
        self.graph = tf.Graph()
        with self.graph.as_default():
            v1.set_random_seed(SEED)  # graph/training.py sets the job's seed on every graph
            ds = dataset() if dataset else tf.data.Dataset.range(N)
            self.input = DatasetInput(ds, replica=replica, num_replicas=REPLICAS,
                                      batch_size=BATCH, seed=SEED)
            self.sess = v1.Session(graph=self.graph)
        self.runs = 0

    def batch_at(self, step: int) -> list[int]:
        self.input.position(self.sess, step)
        return [int(i) for i in self.sess.run(self.input.batch)]


def per_epoch(replica: int) -> int:
    return len(range(replica, N, REPLICAS)) // BATCH


def test_the_batch_of_a_step_is_the_same_in_any_order_graph_or_process() -> None:
    steps = 3 * per_epoch(0) + 3
    for r in range(REPLICAS):
        in_order = Replica(r)
        expected = [in_order.batch_at(s) for s in range(steps)]
        other = Replica(r)
        # A restart mid-epoch, a short jump (read through), a far jump, a rollback.
        for s in [7, 6, 7, 9, 10, 14, 2, 3, 0, steps - 1, 5]:
            assert other.batch_at(s) == expected[s], (r, s)


def test_each_data_epoch_uses_the_shard_once_shards_are_disjoint_epochs_reshuffle() -> None:
    seen_by = {}
    for r in range(REPLICAS):
        rep, p = Replica(r), per_epoch(r)
        shard = set(range(r, N, REPLICAS))
        orders = []
        for epoch in range(3):
            batches = [rep.batch_at(s) for s in range(epoch * p, (epoch + 1) * p)]
            ids = [i for b in batches for i in b]
            assert all(len(b) == BATCH for b in batches)
            # No repeat within the epoch; only the remainder (< BATCH) of the shard is left out.
            assert len(set(ids)) == len(ids) == p * BATCH
            assert set(ids) <= shard and len(shard - set(ids)) == len(shard) % BATCH
            orders.append(ids)
        assert orders[0] != orders[1] != orders[2]
        seen_by[r] = shard
    # One step's window: the replicas' batches never share an example.
    assert not (seen_by[0] & seen_by[1]) and not (seen_by[1] & seen_by[2])


def test_the_position_does_not_depend_on_the_element_values() -> None:
    """A model's dataset zipped with ids (tests/runtime/kerasmodels.py) keeps its order."""
    plain = Replica(1)
    zipped = Replica(1, lambda: tf.data.Dataset.zip(
        (tf.data.Dataset.range(N).map(lambda i: i * 10), tf.data.Dataset.range(2**62))))
    for s in (0, 3, 4, 11):
        plain.input.position(plain.sess, s)
        zipped.input.position(zipped.sess, s)
        values, ids = zipped.sess.run(zipped.input.batch)
        expected = plain.sess.run(plain.input.batch)
        np.testing.assert_array_equal(ids, expected)
        np.testing.assert_array_equal(values, expected * 10)


@pytest.mark.parametrize(("dataset", "reason"), [
    (lambda: tf.data.Dataset.range(N).repeat(),
     "the model dataset is infinite: return one pass over the training set (the runtime "
     "repeats it)"),
    (lambda: tf.data.Dataset.range(10), "the shard of replica 1 of the model dataset has "
                                        "fewer than batchSize=8 examples"),
    # Unknown cardinality: counted, then checked the same way.
    (lambda: tf.data.Dataset.range(10).filter(lambda i: i >= 0),
     "the shard of replica 1 of the model dataset has fewer than batchSize=8 examples"),
])
def test_a_dataset_that_cannot_feed_the_replica_is_a_model_error(dataset, reason: str) -> None:
    rep = Replica(1, dataset)
    with pytest.raises(Exit) as err:
        rep.input.position(rep.sess, 0)
    assert err.value.code == exitcodes.MODEL
    assert err.value.reason == reason


def test_unknown_cardinality_is_counted() -> None:
    filtered = Replica(2, lambda: tf.data.Dataset.range(N).filter(lambda i: i >= 0))
    plain = Replica(2)
    for s in (0, 5, 9):
        assert filtered.batch_at(s) == plain.batch_at(s)
