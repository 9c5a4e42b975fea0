"""The chief's SavedModel export (runtime/syncreplicas_runtime/state/export.py). A real job's
export, loaded in a fresh process as a server would, gives the outputs of the model at the
exported checkpoint: tests/runtime/test_summaries.py (one job for both)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from syncreplicas_runtime.model.contract import ModelError, build_model
from syncreplicas_runtime.state.export import KEEP, exported_steps, prune

from tests.runtime.rtutil import runtime_env

# A fresh process, as a model server: TensorFlow 2's loader, the signature by its name.
SERVE = """
import json, sys
import numpy as np, tensorflow as tf
loaded = tf.saved_model.load(sys.argv[1], tags=["serve"])
serve = loaded.signatures["serving_default"]
x = np.array(json.loads(sys.argv[2]), dtype=np.float32)
print(json.dumps({k: v.numpy().tolist() for k, v in serve(x=tf.constant(x)).items()}))
"""


def served(path: Path, x: np.ndarray) -> dict[str, list[list[float]]]:
    done = subprocess.run([sys.executable, "-c", SERVE, str(path), json.dumps(x.tolist())],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**runtime_env(), "CUDA_VISIBLE_DEVICES": ""})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_only_whole_exports_count_and_the_newest_are_kept(tmp_path: Path) -> None:
    """An export written aside and never renamed (its chief killed) is not an export; the
    newest KEEP are kept."""
    for name in ("10", "20", "30", "40", ".50.123.tmp", "notes"):
        (tmp_path / name).mkdir()
    assert exported_steps(sorted(p.name for p in tmp_path.iterdir())) == [10, 20, 30, 40]
    prune(str(tmp_path))
    assert exported_steps([p.name for p in tmp_path.iterdir()]) == [40 - 10 * i
                                                                     for i in range(KEEP)][::-1]


@pytest.mark.parametrize("serving", [
    {"inputs": {}, "outputs": {"y": "pred"}},
    {"inputs": {"x": "x"}},
    {"inputs": {"x": "x"}, "outputs": {"y": 1.0}},
    "pred",
])
def test_a_serving_signature_not_of_the_contracts_shape_is_refused(serving: object) -> None:
    import tensorflow as tf

    def model(**_: object) -> dict[str, object]:
        x = tf.compat.v1.placeholder(tf.float32, [None, 2], name="x")
        pred = tf.reduce_sum(x, axis=1)
        named = {"x": x, "pred": pred}

        def tensor(v: object) -> object:
            return named.get(v, v) if isinstance(v, str) else v

        shaped = ({k: {n: tensor(t) for n, t in side.items()} for k, side in serving.items()}
                  if isinstance(serving, dict) else tensor(serving))
        return {"loss": tf.reduce_mean(pred), "serving": shaped}

    with tf.Graph().as_default(), pytest.raises(ModelError, match="'serving' must be"):
        build_model(model, entrypoint="m:build", args={}, replica=0, num_replicas=1,
                    batch_size=1, seed=0)
