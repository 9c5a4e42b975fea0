"""The runtime's metric names that the operator and the local runner read.

The runtime defines these metrics (``syncreplicas_runtime.metrics.RuntimeMetrics``); a unit
test checks that every name here is one the runtime exports, so a rename there fails a test
instead of silently blanking a status field, the live view or the report.
"""

from __future__ import annotations

from typing import Final

GLOBAL_STEP: Final = "syncreplicas_global_step"
LOCAL_STEP: Final = "syncreplicas_local_step"
LOSS: Final = "syncreplicas_loss"
TOKEN_QUEUE_DEPTH: Final = "syncreplicas_token_queue_depth"
STALE_GRADIENTS_DROPPED: Final = "syncreplicas_stale_gradients_dropped_total"
GRADIENTS_PUSHED: Final = "syncreplicas_gradients_pushed_total"
# A histogram: its _sum and _count samples give the mean staleness.
GRADIENT_STALENESS: Final = "syncreplicas_gradient_staleness_steps"
GRADIENT_STALENESS_SUM: Final = f"{GRADIENT_STALENESS}_sum"
GRADIENT_STALENESS_COUNT: Final = f"{GRADIENT_STALENESS}_count"
# One series per held-out metric, labelled ``name`` (accuracy, mse, ...).
EVAL_METRIC: Final = "syncreplicas_eval_metric"
EVAL_METRIC_NAME_LABEL: Final = "name"

# Every family above, by the name the runtime registers it under.
FAMILIES: Final = (
    GLOBAL_STEP,
    LOCAL_STEP,
    LOSS,
    TOKEN_QUEUE_DEPTH,
    STALE_GRADIENTS_DROPPED,
    GRADIENTS_PUSHED,
    GRADIENT_STALENESS,
    EVAL_METRIC,
)
