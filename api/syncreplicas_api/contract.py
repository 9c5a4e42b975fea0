"""``SYNCREPLICAS_JOB``: the training part of the spec that every replica is told
(docs/contract.md), camelCase like the spec, unknown keys refused.

The operator always sends every key. Missing optional keys (a hand-written job) take the
spec's defaults, except two that only the spec's context gives a meaning: no checkpoint
directory means no checkpoints, and the model defaults to the built-in linear one.
"""

from __future__ import annotations

from pydantic import Field

from .types import (
    CheckpointDir,
    ClusterShape,
    Entrypoint,
    MetricsSpec,
    ModelSpec,
    ParameterServers,
    TrainingSpec,
)


class SettingsModel(ModelSpec):
    """``model`` of SYNCREPLICAS_JOB."""

    entrypoint: Entrypoint = "syncreplicas_runtime.models.linear:build"


class SettingsTraining(TrainingSpec):
    """``training`` of SYNCREPLICAS_JOB."""

    checkpoint_dir: CheckpointDir = ""


class JobSettings(ClusterShape):
    """The value of ``SYNCREPLICAS_JOB``; ``parameterServers`` is required here."""

    parameter_servers: ParameterServers
    model: SettingsModel = Field(default_factory=SettingsModel)
    training: SettingsTraining = Field(default_factory=SettingsTraining)
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)
