"""The linear model with one batch per global step for every replica (the resize tests).

Which replicas' gradients an update averages depends on who pushed first (backups) and on
who was a member at the time (workers joining and leaving). With the same batch for every
replica, every gradient computed at step s is the same, so any mix of them averages to it:
the weights after N updates equal plain SGD over the batches of steps 0..N-1 exactly when
no update was lost or repeated and no stale gradient (computed at other weights) got in.
"""

from __future__ import annotations

from typing import Any

from syncreplicas_runtime.models import linear


def build(**kwargs: Any) -> dict[str, Any]:
    return linear.build(**{**kwargs, "replica": 0})
