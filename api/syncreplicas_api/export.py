"""``spec.training.export``: the SavedModels the chief exports, and how many it keeps.

As tf.estimator's exporters. A model that returns a serving signature is exported at the
end of training to ``<checkpointDir>/export/<global step>`` (``LatestExporter``); with
``best``, also at every evaluation whose ``metric`` beats every evaluation before it
(``BestExporter``), to ``<checkpointDir>/export/best/<global step>``, with the evaluation's
metrics beside the model in ``eval.json``. Each of the two keeps its newest ``keep``
exports. The best so far is read back from those files, so a restarted chief compares
with what an earlier one exported. ``metric`` must be one of the model's evaluation
metrics: the chief checks it as it starts and exits CONFIG (64) naming the field.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from pydantic import Field

from .fields import ApiModel, Int32, Str

KEEP: Final = 3


class Goal(StrEnum):
    """``spec.training.export.best.goal``: which way the metric is better."""

    MAXIMIZE = "Maximize"
    MINIMIZE = "Minimize"


class BestExport(ApiModel):
    """``spec.training.export.best``: export at each evaluation that beats the best so far."""

    metric: Str = Field(
        min_length=1,
        max_length=63,
        description="The evaluation metric compared (a key of the model's eval dict, e.g. "
        "accuracy).",
    )
    goal: Goal = Field(
        Goal.MAXIMIZE, description="Maximize (accuracy) or Minimize (a loss, an error)."
    )


class Export(ApiModel):
    """``spec.training.export``: how many exports are kept, and whether the best are."""

    keep: Int32 = Field(
        KEEP,
        ge=1,
        le=100,
        description="Exports kept of each kind (the final ones, the best ones): the newest.",
    )
    best: BestExport | None = Field(
        None,
        description="Also export at each evaluation that beats the best before it by "
        "metric; absent: only at the end.",
    )
