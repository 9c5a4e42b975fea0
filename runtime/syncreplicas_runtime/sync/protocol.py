"""The sync-state protocol between PS 0's coordinator, the chief and the workers, as a small
graph on PS task 0.

State kept in PS variables outside every sync epoch (read and written by short polls, never
per training step):

- ``epoch``: id of the current sync epoch (random, nonzero; names the PS container);
- ``phase``: a :class:`~syncreplicas_runtime.foundation.phases.Phase`, RESETTING (PS 0
  opened the epoch; the chief keeps, restores or initializes the variables) -> GATHERING
  (variables ready, set by the chief; replicas join) -> RUNNING (PS 0 opened the start
  gate) -> DONE (PS 0, at maxSteps);
- ``ready[r]``: the epoch replica r has joined (chief = 0, worker i = 1 + i);
- ``done[r]``: 1 once replica r saw the end of training (the chief: after its last checkpoint);
- one "done" queue per PS: the PS process blocks on it and exits 0 when PS 0 fills it.

Only PS 0 writes ``epoch`` (it opens an epoch when it starts and after losing another PS);
the chief moves RESETTING to GATHERING only in the epoch it restored for (compare-and-set).
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from ..foundation.config import ClusterConfig
from ..foundation.phases import Phase
from ..process.sessions import session_config
from . import names
from .fencing import FenceOps, FenceReader, build_fence, fenced, owner_table
from .handover import HandoverOps, HandoverState, build_handover

v1 = tf.compat.v1

# Errors that mean "a peer is not there (yet)": retried within a bounded wait.
PEER_ERRORS = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
               tf.errors.AbortedError, tf.errors.CancelledError)


def peer_error(err: BaseException, limit: int = 300) -> str:
    """One of PEER_ERRORS as a log line names it: its type and its message on one line
    (which says which task and address failed, and how), cut at ``limit`` characters."""
    message = " ".join(str(getattr(err, "message", "") or err).split())
    text = f"{type(err).__name__}: {message}" if message else type(err).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


# How often a wait on the protocol's state polls it (seconds).
POLL = 0.02
# In an epoch opened on a running job a replica may wait this much longer than its own
# timeouts for the gate (PS 0 waits up to this long for replicas that are restarting).
REJOIN_GATE_SECONDS = 15.0
TOKEN_DTYPE = tf.int64


def token_queue(replica: int, epoch: int) -> Any:
    """The token queue of ``replica`` in ``epoch`` (same attributes wherever it is built)."""
    with tf.device(names.SYNC_STATE_DEVICE), v1.container(names.container_name(epoch)):
        return v1.FIFOQueue(-1, TOKEN_DTYPE, shapes=[()],
                            shared_name=names.token_queue_name(replica),
                            name=names.token_queue_name(replica))


def ps_done_queue(ps_index: int) -> Any:
    """The queue PS ``ps_index`` blocks on; PS 0 fills it when training finished."""
    with tf.device(names.ps_device(ps_index)):
        return v1.FIFOQueue(-1, tf.int32, shapes=[()],
                            shared_name=names.ps_done_queue_name(ps_index),
                            name=names.ps_done_queue_name(ps_index))


@dataclass(frozen=True)
class SyncState:
    """One read of the protocol variables."""

    initialized: bool
    epoch: int = 0
    phase: Phase = Phase.NONE
    ready: tuple[int, ...] = ()
    done: tuple[int, ...] = ()
    global_step: int | None = None


def members(ready: tuple[int, ...] | list[int], epoch: int) -> list[int]:
    """The replicas that joined ``epoch`` and did not leave it (a leaver's ``ready`` is 0)."""
    return [r for r, e in enumerate(ready) if e == epoch and epoch]


def unconfirmed(elastic: bool, state: SyncState) -> list[int]:
    """Replicas yet to confirm the end of training: every one, or an elastic job's members
    (the chief always; workers that left have nothing to confirm)."""
    who = sorted(set(members(state.ready, state.epoch)) | {0}) if elastic \
        else range(len(state.done))
    return [r for r in who if not state.done[r]]


def probe_targets(cfg: ClusterConfig) -> list[tuple[str, int]]:
    """(host, port) of every PS for a TCP probe; a PS reaches itself on localhost (as
    TensorFlow dials its own task): its name leaves DNS as soon as its pod is being
    deleted, while it still hands its state over."""
    targets = []
    for index, address in enumerate(cfg.ps_addresses):
        host, _, port = address.rpartition(":")
        if cfg.role == "ps" and index == cfg.index:
            host = "localhost"
        targets.append((host, int(port)))
    return targets


class SyncProtocol:
    """A session of this replica on the protocol graph. Safe to use from several threads."""

    def __init__(self, cfg: ClusterConfig, target: str, config: Any = None) -> None:
        self.cfg = cfg
        self._config = config if config is not None else session_config(cfg)
        total = cfg.total_replicas
        self.graph = tf.Graph()
        self._close_ops: dict[int, Any] = {}
        with self.graph.as_default(), tf.device(names.SYNC_STATE_DEVICE):
            kw: dict[str, Any] = {"trainable": False, "collections": [], "use_resource": True,
                                  "initializer": v1.zeros_initializer()}
            self.epoch = v1.get_variable(names.EPOCH_VARIABLE, [], tf.int64, **kw)
            self.phase = v1.get_variable(names.PHASE_VARIABLE, [], tf.int32, **kw)
            self.ready = v1.get_variable(names.READY_VARIABLE, [total], tf.int64, **kw)
            self.done = v1.get_variable(names.DONE_VARIABLE, [total], tf.int32, **kw)
            global_step = v1.get_variable(names.GLOBAL_STEP_VARIABLE, [], tf.int64, **kw)
            owner = owner_table(total)
            # A replica's writes to the protocol state are fenced (sync/fencing.py).
            self.fence: FenceOps | None = (build_fence(owner, cfg.replica_id, cfg.incarnation)
                                           if cfg.replica_id >= 0 else None)
            fenced_writes = tf.control_dependencies(
                [self.fence.check] if self.fence is not None else [])
            self._inited = v1.is_variable_initialized(self.epoch)
            self._gs_inited = v1.is_variable_initialized(global_step)
            self._read = [self.epoch.read_value(), self.phase.read_value(),
                          self.ready.read_value(), self.done.read_value()]
            self._read_gs = global_step.read_value()
            self.handover: HandoverOps = build_handover(
                cfg.parameter_servers, self.fence.check if self.fence is not None else None)
            self._init = tf.group(self.epoch.initializer, self.phase.initializer,
                                  self.ready.initializer, self.done.initializer,
                                  owner.initializer, self.handover.init)
            self._p_int = v1.placeholder(tf.int64, [])
            self._p_index = v1.placeholder(tf.int32, [])
            self._set_phase = self.phase.assign(tf.cast(self._p_int, tf.int32), read_value=False)
            with fenced_writes:
                self._set_ready = v1.scatter_update(self.ready, [self._p_index],
                                                    [self._p_int])
                self._set_done = v1.scatter_update(self.done, [self._p_index], [1])
            # A new epoch starts with nothing asked or held (a PS that handed over is gone).
            self._open_epoch = tf.group(
                self.epoch.assign(self._p_int, read_value=False),
                self.phase.assign(int(Phase.RESETTING), read_value=False),
                self.handover.init)
            resetting = tf.logical_and(tf.equal(self.epoch.read_value(), self._p_int),
                                       tf.equal(self.phase.read_value(), int(Phase.RESETTING)))

            def advance() -> Any:
                with tf.control_dependencies(
                        [self.phase.assign(int(Phase.GATHERING), read_value=False)]):
                    return tf.constant(True)

            self._variables_ready = tf.cond(resetting, advance, lambda: tf.constant(False))
        with self.graph.as_default():
            self._probes = []
            for j in range(cfg.parameter_servers):
                with tf.device(names.ps_device(j)):
                    self._probes.append(tf.timestamp())
            self._ps_done = [ps_done_queue(j).enqueue(1) for j in range(cfg.parameter_servers)]
        self._target = target
        self._fence_reader = FenceReader(cfg) if self.fence is not None else None
        self.session = v1.Session(target, graph=self.graph, config=self._config)

    def reopen(self) -> None:
        """A new session after a PS restart (the old one's graphs died with the PS). A
        replica first makes sure no newer incarnation holds its slot: a session under its
        name would end the newer one's sessions (sync/fencing.py); Exit FENCED if one does."""
        if self._fence_reader is not None:
            try:
                owner = self._fence_reader.read()
            except tf.errors.OpError:
                owner = 0  # PS 0 out of reach: nobody to disturb there
            if owner > self.cfg.incarnation:
                raise fenced(self.cfg, owner)
        old = self.session
        self.session = v1.Session(self._target, graph=self.graph, config=self._config)
        threading.Thread(target=old.close, daemon=True).start()

    def run(self, fetches: Any, feed: dict[Any, Any] | None = None, timeout: float = 10.0) -> Any:
        opts = v1.RunOptions(timeout_in_ms=int(timeout * 1000))
        try:
            return self.session.run(fetches, feed_dict=feed, options=opts)
        except UnicodeDecodeError as err:
            # Seen when an older process of a peer's identity talked to the PS meanwhile
            # (sync/fencing.py): TensorFlow's error message was not UTF-8. A failed run.
            raise tf.errors.AbortedError(None, None, f"a run failed: {err}") from err

    def close(self) -> None:
        self.session.close()

    # -- reads --------------------------------------------------------------------
    def probe(self, timeout: float = 2.0) -> None:
        """Raises one of PEER_ERRORS unless every PS answers within ``timeout``.

        A PS that is not listening fails fast on a TCP connect (a PS connects to itself on
        localhost). Session set-up towards a listening but unresponsive PS can block past
        RunOptions' timeout, so the run is made on a helper thread and abandoned (with its
        session) when it overruns.
        """
        for address, (host, port) in zip(self.cfg.ps_addresses, probe_targets(self.cfg),
                                         strict=True):  # fmt: skip
            try:
                socket.create_connection((host, port), timeout=timeout).close()
            except OSError as err:
                raise tf.errors.UnavailableError(None, None, f"{address}: {err}") from err
        result: list[BaseException | None] = []

        def attempt() -> None:
            try:
                self.run(self._probes, timeout=timeout)
                result.append(None)
            except BaseException as err:
                result.append(err)

        worker = threading.Thread(target=attempt, name="ps-probe", daemon=True)
        worker.start()
        worker.join(timeout + 1.0)
        if not result:
            raise tf.errors.DeadlineExceededError(None, None, "PS probe timed out")
        if result[0] is not None:
            raise result[0]

    def wait_for_ps(self, deadline: float, poll: float = 0.25) -> None:
        """Probe until every PS answers or ``deadline`` (monotonic) passes (then re-raise)."""
        while True:
            try:
                self.probe(timeout=max(0.5, min(2.0, deadline - time.monotonic())))
                return
            except PEER_ERRORS:
                if time.monotonic() >= deadline:
                    raise
                self.reopen()
                time.sleep(poll)

    def state(self) -> SyncState:
        inited, gs_inited = self.run([self._inited, self._gs_inited])
        gs = int(self.run(self._read_gs)) if gs_inited else None
        if not inited:
            return SyncState(initialized=False, global_step=gs)
        epoch, phase, ready, done = self.run(self._read)
        return SyncState(True, int(epoch), Phase(int(phase)), tuple(int(x) for x in ready),
                         tuple(int(x) for x in done), gs)

    def owner(self) -> int:
        """The incarnation that holds this replica's slot (the owner table on PS 0)."""
        assert self._fence_reader is not None
        return self._fence_reader.read()

    # -- writes -------------------------------------------------------------------
    def claim(self) -> None:
        """Join as this replica's owner: raise its slot to this process's incarnation;
        Exit FENCED when a newer incarnation already holds it."""
        assert self.fence is not None
        try:
            owner = int(self.run(self.fence.claim))
        except tf.errors.FailedPreconditionError as err:  # PS 0 restarted: no table yet
            raise tf.errors.AbortedError(None, None, f"cannot claim: {err.message}") from err
        if owner > self.cfg.incarnation:
            raise fenced(self.cfg, owner)

    def init_if_needed(self) -> None:
        if not self.run(self._inited):
            self.run(self._init)

    def set_phase(self, phase: Phase) -> None:
        self.run(self._set_phase, {self._p_int: int(phase)})

    def open_epoch(self, epoch: int) -> None:
        """PS 0: publish ``epoch`` in phase RESETTING (one run: never a new id in an old phase)."""
        self.run(self._open_epoch, {self._p_int: epoch})

    def variables_ready(self, epoch: int) -> bool:
        """Chief: RESETTING -> GATHERING, only if ``epoch`` is still the one being reset."""
        return bool(self.run(self._variables_ready, {self._p_int: epoch}))

    def set_ready(self, replica: int, epoch: int) -> None:
        self.run(self._set_ready, {self._p_index: replica, self._p_int: epoch})

    def set_done(self, replica: int) -> None:
        self.run(self._set_done, {self._p_index: replica})

    def close_token_queues(self, epoch: int) -> None:
        """Close ``epoch``'s token queues so every replica blocked on one wakes up."""
        if epoch not in self._close_ops:
            with self.graph.as_default():
                self._close_ops[epoch] = tf.group(
                    *[token_queue(i, epoch).close(cancel_pending_enqueues=True)
                      for i in range(self.cfg.total_replicas)])
        self.run(self._close_ops[epoch])

    # -- handover at SIGTERM (sync/handover.py) ------------------------------------
    def handover_state(self) -> HandoverState:
        asked, held, saved, chief = self.run(self.handover.read, timeout=2.0)
        return HandoverState(bool(asked), int(held), int(saved), bool(chief))

    def ask_handover(self, slot: int) -> None:
        self.run(self.handover.ask, {self.handover.slot: slot}, timeout=2.0)

    def withdraw_handover(self, slot: int) -> None:
        self.run(self.handover.withdraw, {self.handover.slot: slot}, timeout=2.0)

    def hold_updates(self, step: int) -> None:
        """PS 0's sync loop: held at ``step`` (-1: going on again)."""
        self.run(self.handover.hold, {self.handover.step: step}, timeout=2.0)

    def clear_handover(self) -> None:
        """PS 0: nothing asked, nothing held."""
        self.run(self.handover.init, timeout=2.0)

    def ack_handover(self, step: int) -> None:
        """The chief: its snapshot holds global step ``step``."""
        self.run(self.handover.ack, {self.handover.step: step}, timeout=2.0)

    def release_ps(self) -> None:
        """Tell every PS that training finished (each exits 0)."""
        self.run(self._ps_done)


def new_epoch_id(rng: np.random.Generator | None = None) -> int:
    """A random nonzero 62-bit id: unique across chief and PS restarts without coordination."""
    rng = rng or np.random.default_rng()
    return int(rng.integers(1, 2**62))
