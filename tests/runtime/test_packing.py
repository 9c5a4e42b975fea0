"""Variable packing with real processes: the same weights and the same checkpoints as
without it, and checkpoints that restore across the two modes.

The model (tests/runtime/packmodels.py) mixes get_variable weights, a Keras layer, an
embedding (sparse gradient: kept unpacked), an unused trainable variable (no gradient) and a
non-trainable counter; adam adds two slots per variable and two non-slot variables.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.runtime.rtutil import runtime_env
from tests.support.jobs import with_changes
from tests.support.tfcluster import start_cluster

pytestmark = pytest.mark.slow

JOB: dict[str, Any] = {
    "replicasToAggregate": 2, "workers": 1, "parameterServers": 2,
    "model": {"entrypoint": "tests.runtime.packmodels:build"},
    "training": {"optimizer": "adam", "learningRate": 0.01, "batchSize": 8, "maxSteps": 8,
                 "logEverySteps": 100, "startupTimeoutSeconds": 180,
                 "chiefLostTimeoutSeconds": 120},
}


def train(tmp_path: Path, name: str, pack: bool, steps: int,
          restore_from: Path | None = None) -> tuple[dict[str, np.ndarray], str]:
    """Run the job to ``steps``; returns the final checkpoint's tensors and the chief's log."""
    ckpt = tmp_path / name / "ckpt"
    if restore_from is not None:
        shutil.copytree(restore_from, ckpt)
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


@pytest.mark.timeout(1200)
def test_packed_equals_unpacked_and_checkpoints_restore_across_modes(tmp_path: Path) -> None:
    packed, log = train(tmp_path, "packed", pack=True, steps=8)
    unpacked, log_off = train(tmp_path, "unpacked", pack=False, steps=8)
    # Balanced by bytes over 2 PS: the embedding (384 B, unpacked) fills PS 0, so the four
    # dense variables (260 B) share one packed variable on PS 1.
    assert ("packing: 4 trainable variables in 1 packed PS variable; unpacked (sparse or no "
            "gradient): mix/embedding, mix/unused") in log, log
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

    # Written packed, restored unpacked; written unpacked, restored packed: same run on.
    on_unpacked, log_u = train(tmp_path, "packed-then-unpacked", pack=False, steps=14,
                               restore_from=tmp_path / "packed" / "ckpt")
    on_packed, log_p = train(tmp_path, "unpacked-then-packed", pack=True, steps=14,
                             restore_from=tmp_path / "unpacked" / "ckpt")
    for log in (log_u, log_p):
        assert "variables restored model.ckpt-8, global step 8" in log, log
    assert_same(on_unpacked, on_packed)
    assert not np.allclose(on_packed["mix/w1"], packed["mix/w1"])
