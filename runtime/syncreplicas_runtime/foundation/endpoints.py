"""The paths the metrics port answers (docs/contract.md), whoever holds the port: a
replica's server (process/metrics.py) or a spare waiting for a replica's identity
(launch/spare.py), which hands the port over to the replica it becomes."""

from __future__ import annotations

from typing import Final

METRICS_PATH: Final = "/metrics"
HEALTH_PATH: Final = "/healthz"
READY_PATH: Final = "/readyz"
# POST only: a spare's assignment; a replica answers it 409 (it is one already).
ASSIGN_PATH: Final = "/spare/assign"
