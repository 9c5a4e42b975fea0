"""The runtime's metric names that the operator and the local runner read.

The runtime defines these metrics (``syncreplicas_runtime.process.metrics.RuntimeMetrics``); a unit
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
# The chief's: the global step it resumed from when it last joined a sync epoch.
RESTORED_STEP: Final = "syncreplicas_restored_step"
# The coordinator's (PS 0): R of the next update and the replicas pushing gradients.
REPLICAS_TO_AGGREGATE: Final = "syncreplicas_replicas_to_aggregate"
LIVE_REPLICAS: Final = "syncreplicas_live_replicas"
# The coordinator's too: the job's replicasToAggregate (what R returns to).
SPEC_REPLICAS_TO_AGGREGATE: Final = "syncreplicas_spec_replicas_to_aggregate"
# Every replica's warm restarts in its pod before this process (core/warm.py).
PROCESS_RESTARTS: Final = "syncreplicas_process_restarts"
# Every replica's start-up phase, the value of the runtime's ``phases.ReplicaPhase``.
REPLICA_PHASE: Final = "syncreplicas_replica_phase"
# ReplicaPhase value -> what the live view shows (a unit test checks the runtime's enum).
REPLICA_PHASES: Final[dict[int, str]] = {
    1: "importing",
    2: "waiting for PS",
    3: "gathering",
    4: "training",
    5: "coordinating",
    6: "serving",
}

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
    RESTORED_STEP,
    REPLICAS_TO_AGGREGATE,
    LIVE_REPLICAS,
    SPEC_REPLICAS_TO_AGGREGATE,
    REPLICA_PHASE,
    PROCESS_RESTARTS,
)
