"""Phases (pure): a sync epoch's, stored in the ``phase`` variable on PS 0, and one
process's start-up phase, exported as a metric."""

from __future__ import annotations

from enum import IntEnum


class Phase(IntEnum):
    """RESETTING -> GATHERING (replicas join) -> RUNNING (tokens flowing) -> DONE."""

    NONE = 0
    RESETTING = 1
    GATHERING = 2
    RUNNING = 3
    DONE = 4


class ReplicaPhase(IntEnum):
    """Where one process is in its start-up, exported as ``syncreplicas_replica_phase``.

    A process without a metrics endpoint yet is still importing its modules; these values
    start once the endpoint is up. PS 0 coordinates (runs the sync loop), the other PS serve.
    """

    IMPORTING = 1  # the endpoint is up, TensorFlow and the model are still loading
    WAITING_FOR_PS = 2
    GATHERING = 3  # joined a sync epoch, waiting for the gate to open
    TRAINING = 4
    COORDINATING = 5
    SERVING = 6
