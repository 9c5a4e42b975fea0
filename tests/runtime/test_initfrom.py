"""Warm start (``spec.training.warmStart``, graph/initfrom.py): a new job takes the chosen
variables from another run's checkpoint, the rest from their initialisers, and counts its
own steps from 0; once it has a checkpoint of its own it restores that instead; a
checkpoint that is not there or does not fit the model ends the chief with CONFIG (64),
naming the field and the variable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from syncreplicas_runtime.foundation import exitcodes
from syncreplicas_runtime.graph import initfrom
from syncreplicas_runtime.process.exits import Exit

from tests.runtime.rtutil import linear_job, until_the_chief_ends

# --- the rules, without TensorFlow processes -----------------------------------------------


def test_the_pattern_is_matched_against_whole_names() -> None:
    names = ["conv/w", "conv/b", "dense/w", "dense/b", "dense_2/w"]
    assert initfrom.choose(".*", names) == names
    assert initfrom.choose("conv/.*", names) == ["conv/w", "conv/b"]
    assert initfrom.choose("dense/.*|conv/w", names) == ["conv/w", "dense/w", "dense/b"]
    with pytest.raises(Exit) as refused:
        initfrom.choose("dense", names)  # a part of a name is not a match
    assert "training.warmStart.variables: 'dense' matches none" in refused.value.reason


@pytest.mark.parametrize(("pattern", "words"), [
    ("conv/(", "is not a regular expression"),
    ("nothing.*", "matches none of the model's trainable variables (conv/w, conv/b)"),
])  # fmt: skip
def test_a_pattern_that_chooses_nothing_is_refused_by_name(pattern: str, words: str) -> None:
    with pytest.raises(Exit) as refused:
        initfrom.choose(pattern, ["conv/w", "conv/b"])
    assert refused.value.code == exitcodes.CONFIG
    assert refused.value.reason.startswith("bad configuration: training.warmStart.variables: ")
    assert words in refused.value.reason


def test_each_chosen_variable_must_be_in_the_checkpoint_as_the_model_has_it() -> None:
    ours = {"conv/w": ((3, 3, 1, 8), "float32"), "dense/w": ((8, 10), "float32")}
    initfrom.check(["conv/w"], ours, {**ours, "extra": ((1,), "float32")}, "/c/model.ckpt-5")
    for theirs, words in (
        ({"conv/w": ((3, 3, 1, 8), "float32")}, "/c/model.ckpt-5 has no variable 'dense/w'"),
        ({**ours, "dense/w": ((8, 5), "float32")},
         "variable 'dense/w' is float32[8, 10] in the model but float32[8, 5] in /c/model."),
        ({**ours, "dense/w": ((8, 10), "float64")}, "but float64[8, 10] in"),
    ):  # fmt: skip
        with pytest.raises(Exit) as refused:
            initfrom.check(["conv/w", "dense/w"], ours, theirs, "/c/model.ckpt-5")
        assert refused.value.code == exitcodes.CONFIG
        assert refused.value.reason.startswith("bad configuration: training.warmStart."
                                               "checkpoint: ")  # fmt: skip
        assert words in refused.value.reason


def test_a_path_that_holds_no_checkpoint_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "model.ckpt-3"
    for path, words in ((tmp_path, "holds no checkpoint"),
                        (missing, "model.ckpt-3.index does not exist")):  # fmt: skip
        with pytest.raises(Exit) as refused:
            initfrom.resolve(str(path))
        assert words in refused.value.reason and "training.warmStart.checkpoint" in \
            refused.value.reason  # fmt: skip


# --- jobs ----------------------------------------------------------------------------------


def train(tmp_path: Path, name: str, **changes: Any) -> tuple[dict[Any, int | None], str]:
    """Run a linear job until its chief ends (the others with it when it succeeded): the
    exit codes and the chief's log."""
    return until_the_chief_ends(linear_job(**changes), tmp_path / name)


def tensors(path: Path) -> dict[str, Any]:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(path))
    return {name: reader.get_tensor(name) for name in ("linear/w", "linear/b", "global_step")}


@pytest.mark.slow
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "unpacked"])
def test_a_new_job_takes_the_chosen_variables_and_then_keeps_its_own(
        tmp_path: Path, packed: bool) -> None:  # fmt: skip
    """Run A trains w and b away from their zeros. Run B, warm-started from A with only
    ``linear/w`` and a learning rate too small to move anything, has A's w and a fresh b at
    its first checkpoint, at its own global step 1. Run again (its own checkpoint there), B
    restores that and warm-starts nothing. Packed, w and b share one PS variable: B writes
    one piece of it."""
    first = tmp_path / "a-ckpt"
    codes, _ = train(tmp_path, "a", training__maxSteps=20, training__checkpointDir=str(first),
                     training__packVariables=packed)  # fmt: skip
    assert set(codes.values()) == {0}
    a = tensors(first)
    assert int(a["global_step"]) == 20 and np.abs(a["linear/w"]).min() > 1e-3 \
        and abs(float(a["linear/b"])) > 1e-3, a  # fmt: skip

    own = tmp_path / "b-ckpt"
    fine_tune = {"training__learningRate": 1e-12, "training__checkpointDir": str(own),
                 "training__checkpointEverySteps": 1, "training__packVariables": packed,
                 "training__warmStart": {"checkpoint": str(first), "variables": "linear/w"}}
    codes, chief = train(tmp_path, "b", training__maxSteps=1, **fine_tune)
    assert set(codes.values()) == {0}, chief
    assert f"initialized; 1 variables warm-started from {first}/model.ckpt-20" in chief, chief
    b = tensors(own)
    assert int(b["global_step"]) == 1
    np.testing.assert_allclose(b["linear/w"], a["linear/w"], rtol=1e-6)
    assert abs(float(b["linear/b"])) < 1e-9  # its initialiser's zero, not A's

    codes, chief = train(tmp_path, "b-again", training__maxSteps=2, **fine_tune)
    assert set(codes.values()) == {0}, chief
    assert "restored model.ckpt-1" in chief and "warm-started" not in chief, chief
    assert int(tensors(own)["global_step"]) == 2


@pytest.mark.slow
def test_a_checkpoint_that_is_not_there_or_does_not_fit_fails_the_job_by_name(
        tmp_path: Path) -> None:  # fmt: skip
    first = tmp_path / "a-ckpt"
    codes, _ = train(tmp_path, "a", training__maxSteps=2, training__checkpointDir=str(first))
    assert set(codes.values()) == {0}
    for name, changes, words in (
        ("missing", {"training__warmStart": {"checkpoint": str(tmp_path / "none")}},
         f"training.warmStart.checkpoint: no checkpoint at {tmp_path / 'none'}"),
        ("other-model", {"model__args": {"dim": 6},
                         "training__warmStart": {"checkpoint": str(first)}},
         "training.warmStart.checkpoint: variable 'linear/w' is float32[6, 1] in the model "
         "but float32[4, 1] in"),
    ):  # fmt: skip
        codes, chief = train(tmp_path, name, training__maxSteps=2,
                             training__checkpointDir=str(tmp_path / f"{name}-ckpt"),
                             **changes)  # fmt: skip
        assert codes[("chief", 0)] == exitcodes.CONFIG, chief
        assert words in chief, chief
