"""One replica process's context: its configuration, metrics, logging and liveness watchdog."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from ..foundation import exitcodes
from ..foundation.config import ClusterConfig
from ..foundation.phases import ReplicaPhase
from ..foundation.stepdelay import ParetoDelays
from .metrics import RuntimeMetrics
from .termination import exit_now
from .unlisting import POLL_SECONDS, UNLISTED_WAIT_SECONDS, wait_until_unlisted

SIGTERM_EXIT = 128 + signal.SIGTERM  # stopped: its pod is being deleted


@dataclass
class Context:
    """What every part of one replica process shares."""

    cfg: ClusterConfig
    server: Any
    metrics: RuntimeMetrics
    readiness: Any
    model_fn: Any
    name: str
    step_delay: float = 0.0
    step_delay_file: str | None = None  # the debug delay is read from here (config.py)
    step_delays: ParetoDelays | None = None  # or drawn afresh before every step
    _delay_read_at: float = 0.0
    last_progress: float = field(default_factory=time.monotonic)
    watchdog_armed: bool = False
    local_steps: int = 0
    # The chief's current epoch (its session and TrainingGraph), for a graceful stop from the
    # SIGTERM thread.
    session: Any = None
    graph: Any = None
    last_checkpoint: int = -1
    stopping: bool = False
    start_counted: bool = False  # the chief counted this process in ``chief_starts``
    # The chief's exports (state/export.py), by kind ("export", "bestExport"): the path and
    # global step of the latest, for its exit's termination message.
    exported: dict[str, tuple[str, int]] = field(default_factory=dict)
    # A worker of an elastic job: SIGTERM asks it to leave the job (replica/worker.py), and
    # ``left`` says it did (its exit 0 says so).
    leaving: threading.Event = field(default_factory=threading.Event)
    left: bool = False
    protocol: Any = None
    # Set by the fence watch (sync/fencing.py): the incarnation that superseded this process,
    # or None (read from PS 0 on each call).
    superseded: Callable[[], int | None] | None = None

    def log(self, msg: str) -> None:
        stamp = time.strftime("%H:%M:%S", time.gmtime())
        print(f"{stamp} syncreplicas {self.name}: {msg}", flush=True)

    def current_step_delay(self) -> float:
        """The debug delay before the next step, in seconds (the file is read every 0.2 s)."""
        if self.step_delay_file and time.monotonic() - self._delay_read_at > 0.2:
            self._delay_read_at = time.monotonic()
            try:
                with open(self.step_delay_file) as f:
                    self.step_delay = max(0.0, float(f.read().strip() or 0) / 1000.0)
            except (OSError, ValueError):
                pass  # being rewritten, or gone: keep the last value
        return self.step_delay

    def progress(self) -> None:
        self.last_progress = time.monotonic()

    def set_ready(self, ready: bool) -> None:
        """Readiness for /readyz and the ``syncreplicas_ready`` gauge, always together; a
        replica that stops training is gathering again (rejoining the next epoch)."""
        self.readiness.ready = ready
        self.metrics.ready.set(1 if ready else 0)
        self.set_phase(ReplicaPhase.TRAINING if ready else ReplicaPhase.GATHERING)

    def set_phase(self, phase: ReplicaPhase) -> None:
        self.metrics.replica_phase.set(int(phase))

    def seen_step(self) -> int | None:
        """The last global step this replica saw (its metrics' gauge), None before any."""
        value = self.metrics.global_step.get()
        return None if value is None else int(value)

    def exit_now(self, code: int, reason: str, global_step: int | None = None) -> NoReturn:
        """End the process at once, from any thread, with the contract's exit line and
        termination message; its ``globalStep=`` is ``global_step``, else the last seen.
        Stopped by SIGTERM, it first lets its name go (:meth:`let_name_go`)."""
        if code == SIGTERM_EXIT:
            self.let_name_go()
        exit_now(code, reason, global_step if global_step is not None else self.seen_step())

    def let_name_go(self) -> None:
        """Wait until this replica's name no longer resolves to this pod (process/unlisting.py),
        and say so when that took a while."""
        waited = wait_until_unlisted(self.cfg.address)
        if waited is None:
            self.log(f"its name still resolves to this pod after {UNLISTED_WAIT_SECONDS:.0f}s; "
                     "exiting")
        elif waited >= POLL_SECONDS:
            self.log(f"waited {waited:.2f}s for its name to leave the cluster's DNS")


def start_watchdog(ctx: Context) -> None:
    """A worker that sees no progress for chiefLostTimeoutSeconds exits 75 (never hangs):
    the updates lack a replica's gradients (the chief's, without a backup) or PS 0's loop."""
    limit = ctx.cfg.training.chief_lost_timeout_seconds

    def watch() -> None:
        while True:
            time.sleep(min(1.0, limit / 4))
            if ctx.watchdog_armed and time.monotonic() - ctx.last_progress > limit:
                # A process that woke up superseded (a partition that healed) says so.
                owner = ctx.superseded() if ctx.superseded is not None else None
                if owner is not None:
                    ctx.exit_now(exitcodes.FENCED, exitcodes.fenced_reason(
                        ctx.cfg.replica_id, ctx.cfg.incarnation, owner))
                ctx.exit_now(exitcodes.RETRY, "no token and no new sync epoch for "
                             f"{limit:.0f}s: a replica the updates need is gone")

    threading.Thread(target=watch, name="watchdog", daemon=True).start()
