"""Start, supervise and stop the local processes of one job, as the operator does its pods.

Every restart is decided by the operator's own rule (``core.policy.decide_replica_exit``).
Each process runs in its own process group; Ctrl-C stops the chief first (so it writes a
checkpoint), then workers, then parameter servers. ``--chaos`` faults and ``--resize``
changes of an elastic job's workers are fired from here, at the global steps the
schedules name.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from prometheus_client.metrics_core import Metric

from ..core import exitcodes, metricnames, naming
from ..core.enums import ChiefRestartPolicy
from ..core.policy import ReplicaExitDecision, decide_replica_exit
from ..core.spec import Job
from .chaos import ChaosKill
from .errors import RUN_FAILED, RUN_INTERRUPTED, RunError
from .metrics_server import (
    PortInUseError,
    ReplicaCollector,
    ReplicaProcess,
    runner_families,
    serve,
)
from .plots import write_plots
from .processes import LocalProcess
from .resize import Resize
from .scrape import MetricsScraper
from .summary import (
    ChaosRecord,
    PlannedKill,
    ResizeRecord,
    RunSummary,
    format_summary,
    summarize,
    write_summary,
)
from .view import LiveView, ReplicaState
from .workdir import Workdir, checkpoint_step, final_eval_from_log

RESTART_DELAY_SECONDS: Final = 1.0
CHIEF_STOP_GRACE_SECONDS: Final = 60.0
STOP_GRACE_SECONDS: Final = 15.0
# After the chief succeeds, PS and workers finish on their own; this bounds the wait.
FINISH_GRACE_SECONDS: Final = 30.0
MODEL_CHECK_TIMEOUT_SECONDS: Final = 300
# How the runtime's model check names a bad model (docs/contract.md's exit line).
_MODEL_LINE_PREFIX: Final = f"syncreplicas: {exitcodes.describe(exitcodes.MODEL)}: "

Outcome = tuple[str, int, str]  # (succeeded | failed | interrupted, exit code, message)


def check_model(entrypoint: str, env: dict[str, str]) -> None:
    """Load the model entrypoint once with the runtime's own loader, before any process
    starts; a bad model is a :class:`RunError` with code MODEL and the runtime's reason."""
    result = subprocess.run(
        [sys.executable, "-m", "syncreplicas_runtime.model", entrypoint],
        env=env, capture_output=True, text=True, timeout=MODEL_CHECK_TIMEOUT_SECONDS,
        check=False,
    )
    if result.returncode == 0:
        return
    lines = result.stderr.strip().splitlines() or [f"exit {result.returncode}"]
    raise RunError(lines[-1].removeprefix(_MODEL_LINE_PREFIX), code=exitcodes.MODEL)


def exit_code_of(returncode: int) -> int:
    """Popen's -N for "killed by signal N" as a container runtime reports it (128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def describe_exit(code: int) -> str:
    """``exitcodes.describe`` plus the signal behind 128 + N codes, e.g. ``SIGKILL (137)``."""
    if code > 128 and code - 128 in signal.Signals._value2member_map_:
        return f"{signal.Signals(code - 128).name} ({code})"
    return exitcodes.describe(code)


def _state_after_exit(code: int) -> str:
    return f"exited {code}" if code == 0 else f"failed {describe_exit(code)}"


def _set_parent_death_signal() -> None:
    """In the child: receive SIGTERM if the runner dies, so no replica outlives it."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Replica:
    """One replica's process across its incarnations."""

    spec: LocalProcess
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    state: str = "pending"
    restart_at: float | None = None  # monotonic time of a scheduled restart
    reaped: bool = True  # the current incarnation's exit code is in exit_codes
    exit_codes: list[int] = field(default_factory=list)
    injected: bool = False  # the current incarnation was killed by --chaos

    @property
    def name(self) -> str:
        return self.spec.name

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def reap(self) -> int | None:
        """Record the exit code of an incarnation that ended (once); return it."""
        if self.popen is None or self.popen.poll() is None:
            return None
        code = exit_code_of(self.popen.returncode)
        if not self.reaped:
            self.exit_codes.append(code)
            self.reaped = True
        return code


class LocalRunner:
    """Starts, restarts and stops the replicas of one job; writes the report."""

    def __init__(
        self,
        job: Job,
        processes: Sequence[LocalProcess],
        *,
        workdir: Path,
        chaos: Sequence[ChaosKill] = (),
        resizes: Sequence[Resize] = (),
        fresh: bool = False,
        metrics_port: int | None = None,
        report_dir: Path | None = None,
        plain: bool = False,
        stream: IO[str] | None = None,
    ) -> None:
        self.job = job
        self.workdir = Workdir(workdir)
        self.replicas = [
            Replica(spec=p, log_path=self.workdir.log_path(p.name)) for p in processes
        ]
        self._by_name = {r.name: r for r in self.replicas}
        self.chaos = list(chaos)
        self.chaos_log: list[ChaosRecord] = []
        self.resizes = list(resizes)
        self.resize_log: list[ResizeRecord] = []
        # The workers the job has now: an elastic job's other slots wait (``standby``).
        self.workers = job.spec.workers
        self.fresh = fresh
        self.metrics_port = metrics_port
        self.report_dir = report_dir
        self.plain = plain
        self.stream = stream or sys.stdout
        self.job_restarts = 0  # restarts charged against runPolicy.backoffLimit
        self._interrupts = 0
        self._lock = threading.Lock()
        self.scraper = MetricsScraper(
            {r.name: f"http://127.0.0.1:{r.spec.metrics_port}/metrics" for r in self.replicas
             if r.spec.metrics_port}
        )
        self.view: LiveView | None = None
        self.metrics_server: Any = None
        self.started = time.monotonic()
        self.resumed_from: int | None = None  # checkpoint step found at start

    # -- the run -----------------------------------------------------------------------
    def run(self) -> int:
        self._serve_metrics()  # first: a busy port is the quickest error to report
        try:
            self.resumed_from = self.workdir.prepare(
                fresh=self.fresh, max_steps=self.job.spec.training.max_steps, stream=self.stream
            )
            chief = next(r for r in self.replicas if r.spec.replica_type == naming.CHIEF)
            check_model(self.job.spec.model.entrypoint, {**os.environ, **chief.spec.env})
        except BaseException:
            if self.metrics_server is not None:
                self.metrics_server.shutdown()
            raise
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        outcome: Outcome = ("failed", RUN_FAILED, "")
        try:
            self.started = time.monotonic()
            self.scraper.start()
            self.view = LiveView(
                self.job.name, self.job.spec.training.max_steps, self.scraper.latest,
                self.replica_states, stream=self.stream, plain=self.plain,
            )
            self.view.start()
            for replica in self.replicas:  # PS first, as the operator creates them
                if self._active(replica):
                    self._spawn(replica)
                else:
                    replica.state = "standby"
            outcome = self._supervise()
        finally:
            self._stop_all()
            self.scraper.scrape_once()
            self.scraper.stop()
            if self.view is not None:
                self.view.stop()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            if self.metrics_server is not None:
                self.metrics_server.shutdown()
        summary = self._summary(*outcome)
        print(format_summary(summary, self.workdir.checkpoints, self.workdir.logs),
              file=self.stream)
        if self.report_dir is not None:
            write_summary(self.report_dir, summary)
            write_plots(self.report_dir, summary, self.scraper.history())
            print(f"report: {self.report_dir}", file=self.stream)
        return summary.exit_code

    def _serve_metrics(self) -> None:
        if self.metrics_port is None:
            return
        collector = ReplicaCollector(
            self.scraper.latest, self._runner_metrics,
            job_labels={"namespace": self.job.namespace, "syncreplicas_job": self.job.name},
        )
        try:
            self.metrics_server = serve(collector, self.metrics_port)
        except PortInUseError as err:
            raise RunError(str(err)) from err
        port = self.metrics_server.server_port
        print(f"metrics of all replicas: http://127.0.0.1:{port}/metrics", file=self.stream)

    def _runner_metrics(self) -> Iterator[Metric]:
        processes = [
            ReplicaProcess(r.spec.replica_type, r.spec.index, r.restarts, r.running())
            for r in self.replicas
        ]
        return runner_families(self.job.namespace, self.job.name, processes)

    def replica_states(self) -> dict[str, ReplicaState]:
        with self._lock:
            return {
                r.name: ReplicaState(
                    state=r.state, restarts=r.restarts,
                    pid=r.popen.pid if r.running() and r.popen else None,
                )
                for r in self.replicas
            }

    def _note(self, text: str) -> None:
        if self.view is not None:
            self.view.note(text)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._interrupts += 1
        if self._interrupts > 1:
            # A second Ctrl-C: no more waiting for the chief's checkpoint.
            for replica in self.replicas:
                self._signal(replica, signal.SIGKILL)

    # -- processes ---------------------------------------------------------------------
    def _spawn(self, replica: Replica) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **replica.spec.env}
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        with open(replica.log_path, "ab") as log:
            log.write(f"--- syncreplicas run: start of {replica.name} "
                      f"(restart {replica.restarts}) ---\n".encode())
            log.flush()
            try:
                replica.popen = subprocess.Popen(
                    list(replica.spec.argv), env=env, stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    # Own session: a terminal's Ctrl-C reaches the runner only, which then
                    # stops the replicas in order (chief first) instead of all at once.
                    start_new_session=True,
                    preexec_fn=_set_parent_death_signal,
                )
            except OSError as err:
                raise RunError(
                    f"{replica.name}: cannot start {replica.spec.argv[0]!r} (the container "
                    f"command of its Pod): {err.strerror or err}", code=RUN_FAILED,
                ) from err
        with self._lock:
            replica.state = "running"
            replica.restart_at = None
            replica.injected = False
            replica.reaped = False

    def _signal(self, replica: Replica, signum: int) -> None:
        if replica.running() and replica.popen is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(replica.popen.pid, signum)

    def _wait(self, replicas: Sequence[Replica], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while any(r.running() for r in replicas) and time.monotonic() < deadline:
            time.sleep(0.1)

    def _stop(self, replicas: Sequence[Replica], grace: float) -> None:
        # Only groups of processes alive now: an older incarnation's PID may belong to
        # an unrelated process by the time we stop.
        live = [r for r in replicas if r.running()]
        for replica in live:
            self._signal(replica, signal.SIGTERM)
        self._wait(live, grace)
        for replica in live:
            self._signal(replica, signal.SIGKILL)
        for replica in live:
            if replica.popen is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    replica.popen.wait(timeout=10)
                # The whole group: a replica's own children must not outlive it. The group
                # outlives its leader only while such children exist, so its id is still ours.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(replica.popen.pid, signal.SIGKILL)
        with self._lock:
            for replica in replicas:
                replica.reap()

    def _active(self, replica: Replica) -> bool:
        """A replica the job has now (not a worker slot beyond the current workers)."""
        return replica.spec.replica_type != naming.WORKER or replica.spec.index < self.workers

    def _of_type(self, replica_type: str) -> list[Replica]:
        return [r for r in self.replicas if r.spec.replica_type == replica_type]

    def _stop_all(self) -> None:
        """The chief first (SIGTERM: it writes a checkpoint), then workers, then PS."""
        chief = self._of_type(naming.CHIEF)
        if any(r.running() for r in chief):
            self._note("stopping: chief first, so it writes a checkpoint")
        self._stop(chief, CHIEF_STOP_GRACE_SECONDS)
        self._stop(self._of_type(naming.WORKER), STOP_GRACE_SECONDS)
        self._stop(self._of_type(naming.PS), STOP_GRACE_SECONDS)
        with self._lock:
            for replica in self.replicas:
                replica.reap()
                if replica.state == "running":
                    replica.state = "stopped"

    # -- the supervision loop ----------------------------------------------------------
    def _supervise(self) -> Outcome:
        spec = self.job.spec
        deadline = spec.run_policy.active_deadline_seconds
        while True:
            if self._interrupts:
                return "interrupted", RUN_INTERRUPTED, "interrupted (Ctrl-C)"
            now = time.monotonic()
            if deadline is not None and now - self.started > deadline:
                return "failed", RUN_FAILED, f"activeDeadlineSeconds ({deadline}s) exceeded"
            for replica in self.replicas:
                if replica.restart_at is not None and now >= replica.restart_at:
                    with self._lock:
                        replica.restarts += 1
                    self._spawn(replica)
                    continue
                if replica.popen is None or replica.state != "running":
                    continue
                code = replica.reap()
                if code is None:
                    continue
                verdict = self._on_exit(replica, code)
                if verdict is not None:
                    return verdict
            if not any(r.running() or r.restart_at is not None for r in self.replicas):
                return "failed", RUN_FAILED, "every replica stopped before the chief finished"
            # Replicas given up on: an exit already handled by _on_exit that left them
            # failed and not restarting. Not `not running()`: an incarnation that ends
            # between the loop above and here is not reaped yet, and its exit_codes still
            # end with an earlier incarnation's failure.
            lost = sum(1 for r in self.replicas if r.spec.replica_type != naming.PS
                       and r.state.startswith("failed") and r.restart_at is None)
            replicas_now = 1 + self.workers
            left = replicas_now - lost
            if left < min(spec.replicas_to_aggregate, replicas_now):
                # On a cluster the job would report Stalled and wait for someone to act;
                # here nobody else can bring a replica back, so waiting would hang forever.
                return "failed", RUN_FAILED, (
                    f"only {left} of the {spec.replicas_to_aggregate} replicas "
                    "each step needs are left (the rest exhausted their restarts): stalled"
                )
            self._chaos_tick()
            self._resize_tick()
            time.sleep(0.2)

    def _on_exit(self, replica: Replica, code: int) -> Outcome | None:
        if not self._active(replica):  # scaled down: it was asked to leave
            with self._lock:
                replica.state = "left" if code == 0 else f"left ({describe_exit(code)})"
            return None
        injected = replica.injected
        decision = decide_replica_exit(
            self.job.spec.run_policy, replica.spec.replica_type, code, self.job_restarts
        )
        reason = describe_exit(code)
        with self._lock:
            replica.state = _state_after_exit(code)
        if decision is ReplicaExitDecision.SUCCEED_JOB:
            self._finish_after_chief()
            return "succeeded", 0, "the chief reached maxSteps"
        if decision is ReplicaExitDecision.IGNORE:
            if code != 0:
                self._note(f"{replica.name} exited {reason}; left stopped by the restart policy")
            return None
        if decision is ReplicaExitDecision.FAIL_JOB:
            message = f"{replica.name} exited {reason}; the job failed"
            self._note(message)
            if code in exitcodes.NON_RETRYABLE:
                return "failed", code, message + self._log_tail(replica)
            return "failed", RUN_FAILED, message + self._log_tail(replica)
        # RESTART. Injected faults are the user's experiment, not the job's failures: they
        # are not charged against backoffLimit.
        if not injected:
            self.job_restarts += 1
        if replica.spec.replica_type == naming.CHIEF:
            policy = self.job.spec.chief_restart_policy
            if policy == ChiefRestartPolicy.FAIL:
                return "failed", RUN_FAILED, f"chief exited {reason}; chiefRestartPolicy is Fail"
            if policy == ChiefRestartPolicy.RESTART_JOB:
                self._restart_job()
                return None
        self._note(f"{replica.name} exited {reason}; restarting")
        with self._lock:
            replica.state = f"restarting ({reason})"
            replica.restart_at = time.monotonic() + RESTART_DELAY_SECONDS
        return None

    def _restart_job(self) -> None:
        """chiefRestartPolicy RestartJob: stop workers and PS, then start all again (PS first)."""
        self._note("chief restarted: RestartJob restarts every replica from the checkpoint")
        self._stop(self._of_type(naming.WORKER), STOP_GRACE_SECONDS)
        self._stop(self._of_type(naming.PS), STOP_GRACE_SECONDS)
        restart_at = time.monotonic() + RESTART_DELAY_SECONDS
        with self._lock:
            for replica in self.replicas:
                if self._active(replica):
                    replica.state = "restarting (RestartJob)"
                    replica.restart_at = restart_at

    def _finish_after_chief(self) -> None:
        """The chief is done: PS and workers exit by themselves; stop what does not."""
        others = [r for r in self.replicas if r.spec.replica_type != naming.CHIEF]
        self._wait(others, FINISH_GRACE_SECONDS)
        with self._lock:
            for replica in others:
                code = replica.reap()
                if code is not None and replica.state == "running":
                    replica.state = _state_after_exit(code)

    def _log_tail(self, replica: Replica, lines: int = 5) -> str:
        try:
            tail = replica.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return f"\n  last lines of {replica.log_path}:\n" + "\n".join(f"    {t}" for t in tail)

    # -- chaos -------------------------------------------------------------------------
    def _global_step(self) -> float | None:
        steps = [s.values.get(metricnames.GLOBAL_STEP) for s in self.scraper.latest().values()]
        known = [s for s in steps if s is not None]
        return max(known) if known else None

    def _chaos_tick(self) -> None:
        step = self._global_step()
        if self.chaos_log:
            last = self.chaos_log[-1]
            if last.recovered_after_seconds is None:
                # Any replica's step past the kill step, scraped after the kill, is recovery.
                after = [s for s in self.scraper.latest().values() if s.at > last.fired_at
                         and (s.values.get(metricnames.GLOBAL_STEP) or 0) > last.step_at_kill]
                if after:
                    last.recovered_after_seconds = round(
                        min(s.at for s in after) - last.fired_at, 3
                    )
                else:
                    return  # one fault at a time: the next waits for this recovery
        if not self.chaos or step is None or step < self.chaos[0].at_step:
            return
        # Only into a settled job: nothing waiting for a restart, the victim up.
        if any(r.restart_at is not None for r in self.replicas):
            return
        victim = self._by_name[naming.replica_key(self.chaos[0].role, self.chaos[0].index)]
        if not victim.running() or not self._by_name[naming.CHIEF_KEY].running():
            return
        kill = self.chaos.pop(0)
        signum = signal.SIGKILL if kill.signal == "KILL" else signal.SIGTERM
        with self._lock:
            victim.injected = True
        self._signal(victim, signum)
        self.chaos_log.append(ChaosRecord(
            planned_step=kill.at_step, step_at_kill=step, replica=victim.name,
            signal=kill.signal, fired_at=round(time.monotonic() - self.started, 3),
        ))
        self._note(f"chaos: SIG{kill.signal} {victim.name} at global step {int(step)}")

    # -- resize ------------------------------------------------------------------------
    def _resize_tick(self) -> None:
        """Apply the next --resize once its step is reached, as the operator applies a
        change of spec.workers: start the new slots' workers, or SIGTERM the highest ones
        (they leave the job and exit 0). Records when the change took effect."""
        self._resize_progress()
        if self.resize_log and self.resize_log[-1].done_after_seconds is None:
            return  # one change at a time: the next waits until this one took effect
        step = self._global_step()
        if not self.resizes or step is None or step < self.resizes[0].at_step:
            return
        if any(r.restart_at is not None for r in self.replicas):
            return  # one change at a time: not into a restart
        target = self.resizes[0].workers
        slots = [r for r in self._of_type(naming.WORKER)
                 if min(self.workers, target) <= r.spec.index < max(self.workers, target)]
        if target > self.workers and any(r.running() for r in slots):
            return  # a worker of a slot asked to leave before has not left yet
        resize = self.resizes.pop(0)
        before = self.workers
        with self._lock:
            self.workers = target
        self.resize_log.append(ResizeRecord(
            planned_step=resize.at_step, step_at_resize=step, workers_from=before,
            workers_to=target, fired_at=round(time.monotonic() - self.started, 3),
            replicas=[r.name for r in slots],
        ))
        self._note(f"resize: workers {before} -> {target} at global step {int(step)}")
        if target > before:
            for replica in slots:
                self._spawn(replica)
        else:
            for replica in sorted(slots, key=lambda r: -r.spec.index):
                self._signal(replica, signal.SIGTERM)

    def _resize_progress(self) -> None:
        """The last resize is done when its new workers made a step, or its leavers left."""
        if not self.resize_log or self.resize_log[-1].done_after_seconds is not None:
            return
        last = self.resize_log[-1]
        if last.workers_to > last.workers_from:
            latest = self.scraper.latest()
            done = all(name in latest and latest[name].at > last.fired_at
                       and (latest[name].values.get(metricnames.LOCAL_STEP) or 0) >= 1
                       for name in last.replicas)
        else:
            done = not any(self._by_name[name].running() for name in last.replicas)
        if done:
            last.done_after_seconds = round(time.monotonic() - self.started - last.fired_at, 3)

    # -- the end -----------------------------------------------------------------------
    def _summary(self, outcome: str, code: int, message: str) -> RunSummary:
        return summarize(
            self.scraper.history(),
            job_name=self.job.name,
            max_steps=self.job.spec.training.max_steps,
            wall_time=time.monotonic() - self.started,
            outcome=outcome,
            exit_code=code,
            restarts={r.name: r.restarts for r in self.replicas},
            checkpoint_step=checkpoint_step(self.workdir.checkpoints),
            chaos=self.chaos_log,
            resizes=self.resize_log,
            resizes_planned_not_fired=[(r.at_step, r.workers) for r in self.resizes],
            message=message,
            final_eval=final_eval_from_log(self._by_name[naming.CHIEF_KEY].log_path),
            chaos_planned_not_fired=[
                PlannedKill(at_step=k.at_step, replica=naming.replica_key(k.role, k.index))
                for k in self.chaos
            ],
            resumed_from_step=self.resumed_from,
            workdir=str(self.workdir.root),
            exit_codes={r.name: r.exit_codes for r in self.replicas},
        )
