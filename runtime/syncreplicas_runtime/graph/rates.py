"""The optimizer SyncReplicasOptimizer wraps, with its learning rate as a tensor.

The rate is a function of the global step (``spec.training.learningRateSchedule``; the same
function in plain Python is ``syncreplicas_api.schedules.rate_at``), computed on PS 0 where
the global step lives. The update of step s reads it before it advances the global step, so
all R gradients of one update are scaled by the rate of s, whichever replica sent them and
at whatever step it computed them. A model function may return its own ``learning_rate``
tensor instead (a function of ``tf.compat.v1.train.get_global_step()``).
"""

from __future__ import annotations

import math
from typing import Any

import tensorflow as tf
from syncreplicas_api.enums import Optimizer
from syncreplicas_api.optimizers import setting
from syncreplicas_api.schedules import Decay, LearningRateSchedule
from syncreplicas_api.types import TrainingSpec

v1 = tf.compat.v1


def learning_rate(rate: float, schedule: LearningRateSchedule | None, global_step: Any) -> Any:
    """The scalar float32 rate at ``global_step`` (a float constant without a schedule)."""
    if schedule is None:
        return rate
    step = tf.cast(global_step, tf.float64)
    base = tf.constant(rate, tf.float64)
    warmup = schedule.warmup_steps
    after = tf.maximum(step - warmup, 0.0)
    decayed: Any = base
    if schedule.decay == Decay.EXPONENTIAL:
        assert schedule.decay_steps is not None and schedule.decay_rate is not None
        exponent = after / schedule.decay_steps
        if schedule.staircase:
            exponent = tf.floor(exponent)
        decayed = base * tf.pow(tf.constant(schedule.decay_rate, tf.float64), exponent)
    elif schedule.decay == Decay.COSINE:
        assert schedule.decay_steps is not None
        alpha = schedule.alpha or 0.0
        done = tf.minimum(after, schedule.decay_steps) / schedule.decay_steps
        decayed = base * ((1 - alpha) * 0.5 * (1 + tf.cos(math.pi * done)) + alpha)
    elif schedule.decay == Decay.PIECEWISE:
        for item in sorted(schedule.steps or [], key=lambda item: item.step):
            decayed = tf.where(step >= item.step, tf.constant(item.rate, tf.float64), decayed)
    if warmup:
        decayed = tf.where(step < warmup, base * (step + 1) / warmup, decayed)
    return tf.cast(decayed, tf.float32, name="syncreplicas_learning_rate")


def make_optimizer(training: TrainingSpec, rate: Any) -> Any:
    """The TF1 optimizer ``training.optimizer`` names, with its settings (their defaults when
    the job leaves them out)."""
    name = training.optimizer
    if name == Optimizer.SGD:
        return v1.train.GradientDescentOptimizer(rate)
    if name == Optimizer.MOMENTUM:
        return v1.train.MomentumOptimizer(rate, momentum=setting(training, "momentum"),
                                          use_nesterov=setting(training, "nesterov"))
    if name == Optimizer.ADAGRAD:
        return v1.train.AdagradOptimizer(rate)
    if name == Optimizer.ADAM:
        return v1.train.AdamOptimizer(rate, beta1=setting(training, "beta1"),
                                      beta2=setting(training, "beta2"),
                                      epsilon=setting(training, "epsilon"))
    if name == Optimizer.RMSPROP:
        return v1.train.RMSPropOptimizer(rate, momentum=setting(training, "momentum"),
                                         epsilon=setting(training, "epsilon"))
    raise ValueError(f"unknown optimizer {name!r}")


def clip(grads_and_vars: list[tuple[Any, Any]], norm: float | None) -> list[tuple[Any, Any]]:
    """This replica's gradient scaled down to global norm ``norm`` at most (all its variables
    together, tf.clip_by_global_norm), before it is pushed; unchanged without ``norm``."""
    if norm is None:
        return grads_and_vars
    present = [(g, v) for g, v in grads_and_vars if g is not None]
    clipped, _ = tf.clip_by_global_norm([g for g, _ in present], norm)
    by_var = {id(v): g for (_, v), g in zip(present, clipped, strict=True)}
    return [(by_var.get(id(v)), v) for _, v in grads_and_vars]
