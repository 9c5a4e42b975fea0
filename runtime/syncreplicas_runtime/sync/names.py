"""Names of what the runtime keeps on the parameter servers (pure: strings only).

The PS resources of a sync epoch live in their own resource container, and queues are
found by ``shared_name``: every replica that builds the same name reaches the same queue, so
these names are the protocol as much as the ops are.
"""

from __future__ import annotations

# Global step, protocol variables and the token queues live on PS task 0.
SYNC_STATE_DEVICE = "/job:ps/task:0"

# Protocol variables on PS 0, outside every sync epoch's container.
EPOCH_VARIABLE = "syncreplicas/epoch"
PHASE_VARIABLE = "syncreplicas/phase"
READY_VARIABLE = "syncreplicas/ready"
DONE_VARIABLE = "syncreplicas/done"
# Per replica slot: the highest incarnation that joined it (sync/fencing.py).
OWNER_VARIABLE = "syncreplicas/owner"
CHIEF_STARTS_VARIABLE = "syncreplicas/chief_starts"
# Elastic R (not checkpointed: the coordinator sets them when it opens an epoch).
AGGREGATE_VARIABLE = "syncreplicas/replicas_to_aggregate"
HEARTBEAT_VARIABLE = "syncreplicas/heartbeat"
# Per replica: the global step its last accepted push was tagged with (-1: none this epoch).
PUSHED_STEP_VARIABLE = "syncreplicas/pushed_step"
# The global step whose tokens PS 0 handed out last (after each update's top-up).
HANDED_OUT_VARIABLE = "syncreplicas/handed_out_step"
# Counts the halves of every update (odd while one is applied): graph/seqlock.py.
SNAPSHOT_SEQ_VARIABLE = "syncreplicas/update_seq"
# A handover at SIGTERM (sync/handover.py): who asks (per slot: the chief, then each PS), the
# global step PS 0's sync loop holds the updates at, the step of the chief's copy of it.
HANDOVER_REQUEST_VARIABLE = "syncreplicas/handover_request"
HANDOVER_HELD_VARIABLE = "syncreplicas/handover_held"
HANDOVER_SAVED_VARIABLE = "syncreplicas/handover_saved"
GLOBAL_STEP_VARIABLE = "global_step"


def ps_device(index: int) -> str:
    return f"/job:ps/task:{index}"


def container_name(epoch: int) -> str:
    """The PS resource container that holds one sync epoch's queues and accumulators."""
    return f"syncreplicas.epoch.{epoch:x}"  # letters, digits and dots only


def token_queue_name(replica: int) -> str:
    """The token queue of one replica (chief = 0, worker i = 1 + i)."""
    return f"syncreplicas_token_{replica}"


def ps_done_queue_name(ps_index: int) -> str:
    """The queue a PS blocks on until the chief says training finished."""
    return f"syncreplicas_ps_done_{ps_index}"


def push_queue_name() -> str:
    """The queue (in the epoch's container) of one entry per push: wakes the coordinator."""
    return "syncreplicas_pushed"
