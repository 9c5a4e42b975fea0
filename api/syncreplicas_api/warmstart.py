"""``spec.training.warmStart``: a new job's variables taken from another run's checkpoint.

As ``tf.estimator.WarmStartSettings``: when the job starts for the first time (no
checkpoint of its own in ``checkpointDir``), the chief initialises the model's trainable
variables whose names match ``variables`` from ``checkpoint`` instead of their
initialisers; everything else (the global step, the optimizer's slots, the variables the
pattern leaves out) starts fresh. Restarts, resizes and a lost parameter server restore the
job's own checkpoints and snapshots as before: the warm start is never applied again.

``variables`` is a Python regular expression matched against each whole name; it, the
checkpoint's existence and every chosen variable's shape and dtype are checked by the
chief as it starts (they depend on the model and on the file), which exits CONFIG (64)
naming the field and the variable.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import Field

from .fields import ApiModel, GoPattern, Str

MAX_PATH_LENGTH: Final = 1024
MAX_PATTERN_LENGTH: Final = 1024
WHERE: Final = "training.warmStart"
ALL: Final = ".*"

CheckpointPath = Annotated[
    Str,
    GoPattern(r"^/.+$", "an absolute path inside the container"),
    Field(
        max_length=MAX_PATH_LENGTH,
        description="A checkpoint the pods can read: a directory (its latest checkpoint, "
        "as tf.train.latest_checkpoint finds it) or a checkpoint's prefix "
        "(.../model.ckpt-1000). Mount its volume read-only in the template.",
    ),
]


class WarmStart(ApiModel):
    """``spec.training.warmStart``: which variables a new job takes from which checkpoint."""

    checkpoint: CheckpointPath
    variables: Str = Field(
        ALL,
        min_length=1,
        max_length=MAX_PATTERN_LENGTH,
        description="A Python regular expression matched against the whole name of each "
        "trainable variable of the model (default: all of them); the ones it leaves out "
        "start from their initialisers (a fresh last layer: 'conv.*').",
    )
