"""The CRD's policy values as StrEnums, defined with the API types (``syncreplicas_api``)
so the spec, the planner and the CRD share one vocabulary."""

from __future__ import annotations

from syncreplicas_api.enums import (
    ChiefRestartPolicy,
    CleanPodPolicy,
    GangScheduler,
    Optimizer,
    RestartPolicy,
)

__all__ = ["ChiefRestartPolicy", "CleanPodPolicy", "GangScheduler", "Optimizer", "RestartPolicy"]
