"""The chief's SavedModel export (runtime/syncreplicas_runtime/state/export.py). A real job's
export, loaded in a fresh process as a server would, gives the outputs of the model at the
exported checkpoint: tests/runtime/test_summaries.py (one job for both)."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from syncreplicas_api.export import Goal
from syncreplicas_runtime.foundation import exitcodes
from syncreplicas_runtime.model.contract import ModelError, build_model
from syncreplicas_runtime.state.export import KEEP, beats, best_so_far, exported_steps, prune

from tests.runtime.rtutil import linear_job, runtime_env, until_the_chief_ends

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


# --- the best exports (training.export.best) ---------------------------------------------


def test_better_means_the_goals_way_and_nan_is_never_better(tmp_path: Path) -> None:
    assert beats(Goal.MAXIMIZE, 0.5, None) and beats(Goal.MINIMIZE, 0.5, None)
    assert beats(Goal.MAXIMIZE, 0.9, 0.8) and not beats(Goal.MAXIMIZE, 0.8, 0.8)
    assert beats(Goal.MINIMIZE, 0.1, 0.2) and not beats(Goal.MINIMIZE, 0.3, 0.2)
    assert not beats(Goal.MAXIMIZE, float("nan"), None)
    # The best so far is read from the whole exports' eval.json; others do not count.
    for step, mse in ((10, 0.5), (20, 0.2), (30, 0.3)):
        (tmp_path / str(step)).mkdir()
        (tmp_path / str(step) / "eval.json").write_text(json.dumps({"metrics": {"mse": mse}}))
    (tmp_path / ".40.1.tmp").mkdir()
    (tmp_path / "50").mkdir()  # no eval.json: not compared
    assert best_so_far(str(tmp_path), "mse", Goal.MINIMIZE) == 0.2
    assert best_so_far(str(tmp_path), "mse", Goal.MAXIMIZE) == 0.5
    assert best_so_far(str(tmp_path), "accuracy", Goal.MAXIMIZE) is None
    assert best_so_far(str(tmp_path / "none"), "mse", Goal.MINIMIZE) is None


def run_job(tmp_path: Path, **changes: object) -> tuple[dict[object, int | None], str, str]:
    """A linear job with a serving signature until its chief ends: the exit codes, the
    chief's log and its termination message."""
    job = linear_job(replicasToAggregate=2, model__entrypoint="tests.runtime.summarymodel:build",
                     **changes)  # fmt: skip
    message = tmp_path / "chief-termination-log"
    codes, chief = until_the_chief_ends(job, tmp_path,
                                        {"SYNCREPLICAS_TERMINATION_LOG": str(message)},
                                        chief_timeout=180, rest_timeout=60)  # fmt: skip
    return codes, chief, message.read_text() if message.exists() else ""


BEST_LINE = re.compile(r"best export: global step (\d+), mse ([\d.]+) \((.*?)\), to (\S+)$",
                       re.MULTILINE)  # fmt: skip


@pytest.mark.slow
def test_each_evaluation_that_beats_the_best_is_exported_and_the_newest_kept(
        tmp_path: Path) -> None:  # fmt: skip
    """evalEverySteps 5 with best by mse (Minimize), keep 2: an export at each evaluation
    that lowered the mse below every one before, each with its metrics; the newest 2 kept;
    the final export at maxSteps too; and the chief's exit names both for the status."""
    ckpt = tmp_path / "ckpt"
    codes, chief, message = run_job(
        tmp_path, training__maxSteps=60, training__learningRate=0.05,
        training__checkpointDir=str(ckpt), training__checkpointEverySteps=1000,
        training__evalEverySteps=5, training__logEverySteps=1000,
        training__export={"keep": 2, "best": {"metric": "mse", "goal": "Minimize"}})  # fmt: skip
    assert set(codes.values()) == {0}, chief
    best = [(int(m[1]), float(m[2]), m[4]) for m in BEST_LINE.finditer(chief)]
    assert len(best) >= 3, chief
    assert [s for s, _, _ in best] == sorted({s for s, _, _ in best}), best
    values = [v for _, v, _ in best]
    assert all(later < earlier for earlier, later in itertools.pairwise(values)), best
    root = ckpt / "export" / "best"
    kept = exported_steps([p.name for p in root.iterdir()])
    assert kept == [s for s, _, _ in best][-2:], (kept, best)
    for step in kept:
        saved = json.loads((root / str(step) / "eval.json").read_text())
        assert saved["globalStep"] == step
        assert saved["metrics"]["mse"] == pytest.approx(dict((s, v) for s, v, _ in best)[step],
                                                        abs=1e-4)  # fmt: skip
        assert (root / str(step) / "saved_model.pb").is_file()
    assert (ckpt / "export" / "60" / "saved_model.pb").is_file()
    last_best = best[-1]
    assert f"exportPath={ckpt / 'export' / '60'}\nexportStep=60\n" in message, message
    assert f"bestExportPath={last_best[2]}\nbestExportStep={last_best[0]}\n" in message, message


@pytest.mark.slow
def test_a_best_metric_the_model_does_not_evaluate_fails_the_chief_by_name(
        tmp_path: Path) -> None:  # fmt: skip
    codes, chief, message = run_job(
        tmp_path, training__maxSteps=5, training__checkpointDir=str(tmp_path / "ckpt"),
        training__export={"best": {"metric": "accuracy"}})  # fmt: skip
    assert codes[("chief", 0)] == exitcodes.CONFIG, chief
    words = ("bad configuration: training.export.best.metric: 'accuracy' is not one of the "
             "model's evaluation metrics (mse)")  # fmt: skip
    assert words in chief and words in message, chief[-2000:]
