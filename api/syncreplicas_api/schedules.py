"""``spec.training.learningRateSchedule``: the learning rate as a function of the global step.

The rate of an update is computed from the global step at which that update is applied, so
every gradient of one update is scaled by the same rate (the runtime's graph/rates.py; the
same function in plain Python is ``rate_at``, which the tests compare it with).

- ``warmupSteps`` W (any decay): the rate rises linearly, ``learningRate * (step + 1) / W``
  for steps below W, and the decay below counts its steps from W on;
- ``decay: None`` (the default): ``learningRate``;
- ``Exponential``: ``learningRate * decayRate ** (s / decaySteps)`` (the exponent's integer
  part with ``staircase``), s the steps after the warm-up;
- ``Cosine``: from ``learningRate`` down to ``alpha * learningRate`` over ``decaySteps``
  along half a cosine, then ``alpha * learningRate``;
- ``Piecewise``: ``learningRate`` until the first of ``steps``, then from each item's
  ``step`` on (a global step, not counted from the warm-up's end) its ``rate``.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Final

from pydantic import Field

from .fields import ApiModel, Bool, CelBounds, Int64, Number, Rule, only_with

MAX_PIECES: Final = 64  # bounds the cost of the rule over ``steps`` (pairs of items)


class Decay(StrEnum):
    """``spec.training.learningRateSchedule.decay``: how the rate falls after the warm-up."""

    NONE = "None"
    EXPONENTIAL = "Exponential"
    COSINE = "Cosine"
    PIECEWISE = "Piecewise"


class RateStep(ApiModel):
    """One item of ``learningRateSchedule.steps``: the rate from a global step on."""

    step: Int64 = Field(ge=1, description="The global step from which ``rate`` applies.")
    rate: Annotated[Number, CelBounds()] = Field(gt=0, description="The learning rate, > 0.")


WHERE = "training.learningRateSchedule"
# (manifest name, Python name) of each setting -> the decays it applies to; the default
# decay (None) has none of them.
_ONLY = {
    ("decayRate", "decay_rate"): (Decay.EXPONENTIAL,),
    ("staircase", "staircase"): (Decay.EXPONENTIAL,),
    ("decaySteps", "decay_steps"): (Decay.EXPONENTIAL, Decay.COSINE),
    ("alpha", "alpha"): (Decay.COSINE,),
    ("steps", "steps"): (Decay.PIECEWISE,),
}
_NEEDS = {
    Decay.EXPONENTIAL: (("decaySteps", "decay_steps"), ("decayRate", "decay_rate")),
    Decay.COSINE: (("decaySteps", "decay_steps"),),
    Decay.PIECEWISE: (("steps", "steps"),),
}


def _needed_by(decay: Decay, field: str, attribute: str) -> Rule[LearningRateSchedule]:
    def check(schedule: LearningRateSchedule) -> list[tuple[str, str]]:
        if schedule.decay == decay and getattr(schedule, attribute) is None:
            return [(field, f"is required with decay {decay}")]
        return []

    return Rule(f"self.decay != '{decay}' || has(self.{field})",
                f"{WHERE}.{field} is required with decay {decay}", check)  # fmt: skip


def _steps_distinct(schedule: LearningRateSchedule) -> list[tuple[str, str]]:
    seen = [item.step for item in schedule.steps or []]
    return [("steps", f"step {s} is given twice")
            for s in sorted({s for s in seen if seen.count(s) > 1})]  # fmt: skip


class LearningRateSchedule(ApiModel):
    """``spec.training.learningRateSchedule``: a warm-up and a decay of ``learningRate``."""

    cel_rules = (
        *(only_with(field, attribute, "decay", decays, WHERE)
          for (field, attribute), decays in _ONLY.items()),
        *(_needed_by(decay, field, attribute)
          for decay, needed in _NEEDS.items() for field, attribute in needed),
        Rule(
            "!has(self.steps) || self.steps.all(a, self.steps.exists_one(b, b.step == a.step))",
            f"{WHERE}.steps: every step at most once",
            _steps_distinct,
            field_path=".steps",
        ),
    )
    decay: Decay = Field(Decay.NONE, description="How the rate falls after the warm-up.")
    warmup_steps: Int64 = Field(
        0, ge=0, description="Steps over which the rate rises linearly to learningRate."
    )
    decay_steps: Int64 | None = Field(
        None,
        ge=1,
        description="Exponential: steps per factor of decayRate. Cosine: steps from "
        "learningRate down to alpha * learningRate.",
    )
    decay_rate: Annotated[Number, CelBounds()] | None = Field(
        None, gt=0, le=1, description="Exponential: the factor per decaySteps, in (0, 1]."
    )
    staircase: Bool | None = Field(
        None, description="Exponential: decay in whole steps of decaySteps (default false)."
    )
    alpha: Annotated[Number, CelBounds()] | None = Field(
        None,
        ge=0,
        le=1,
        description="Cosine: the last rate as a fraction of learningRate (default 0).",
    )
    steps: list[RateStep] | None = Field(
        None,
        min_length=1,
        max_length=MAX_PIECES,
        description="Piecewise: the rate from each global step on; learningRate before "
        "the first.",
    )


def rate_at(learning_rate: float, schedule: LearningRateSchedule | None, step: int) -> float:
    """The learning rate of the update applied at global ``step`` (pure; graph/rates.py
    builds the same as a tensor)."""
    if schedule is None:
        return learning_rate
    warmup = schedule.warmup_steps
    if step < warmup:
        return learning_rate * (step + 1) / warmup
    after = step - warmup
    if schedule.decay == Decay.EXPONENTIAL:
        assert schedule.decay_steps is not None and schedule.decay_rate is not None
        exponent = after / schedule.decay_steps
        if schedule.staircase:
            exponent = math.floor(exponent)
        return learning_rate * math.pow(schedule.decay_rate, exponent)
    if schedule.decay == Decay.COSINE:
        assert schedule.decay_steps is not None
        alpha = schedule.alpha or 0.0
        done = min(after, schedule.decay_steps) / schedule.decay_steps
        return learning_rate * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * done)) + alpha)
    if schedule.decay == Decay.PIECEWISE:
        rate = learning_rate
        for item in sorted(schedule.steps or [], key=lambda item: item.step):
            if step >= item.step:
                rate = item.rate
        return rate
    return learning_rate
