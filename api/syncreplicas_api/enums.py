"""The CRD's policy values as StrEnums, so the spec, the planner and the runtime share one
vocabulary.

Members compare equal to the plain strings of a manifest (``RestartPolicy.NEVER ==
"Never"``), and the member order is the order the CRD's ``enum`` lists them in.
"""

from __future__ import annotations

from enum import StrEnum


class Optimizer(StrEnum):
    """``spec.training.optimizer``: the optimizer SyncReplicasOptimizer wraps."""

    SGD = "sgd"
    MOMENTUM = "momentum"
    ADAGRAD = "adagrad"
    ADAM = "adam"
    RMSPROP = "rmsprop"


class RestartPolicy(StrEnum):
    """``spec.runPolicy.restartPolicy``: when a replica that exited is started again."""

    ON_FAILURE = "OnFailure"
    NEVER = "Never"
    EXIT_CODE = "ExitCode"


class CleanPodPolicy(StrEnum):
    """``spec.runPolicy.cleanPodPolicy``: which pods a finished job deletes."""

    RUNNING = "Running"
    ALL = "All"
    NONE = "None"


class ChiefRestartPolicy(StrEnum):
    """``spec.chiefRestartPolicy``: what a chief restart does to the rest of the job."""

    RESET_SYNC_STATE = "ResetSyncState"
    RESTART_JOB = "RestartJob"
    FAIL = "Fail"


class GangScheduler(StrEnum):
    """``spec.runPolicy.schedulingPolicy.gangScheduler``: whose PodGroup the job gets."""

    COSCHEDULING = "Coscheduling"  # scheduler-plugins, scheduling.x-k8s.io
    VOLCANO = "Volcano"  # scheduling.volcano.sh

    @property
    def scheduler_name(self) -> str:
        """The pods' schedulerName when the job names none: the scheduler's usual name."""
        return {"Coscheduling": "scheduler-plugins-scheduler", "Volcano": "volcano"}[self.value]
