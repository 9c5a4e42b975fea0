"""Run one job's local processes from start to report, as the operator runs its pods.

The parts, each a module of its own: ``replicas`` starts, signals and stops the
processes; ``supervisor`` judges every exit by the operator's rule; ``interventions``
fires ``--chaos`` faults and ``--resize`` changes; ``modelcheck`` loads the model first.
Here they are put together with the metrics (scraped, served, shown live) and the
summary. Ctrl-C stops the chief first (so it writes a checkpoint), then workers, then
parameter servers; a second Ctrl-C kills them all at once.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from prometheus_client.metrics_core import Metric

from ..core import naming
from ..core.spec import Job
from .board import TensorBoard
from .chaos import ChaosKill
from .errors import RUN_FAILED, RunError
from .interventions import Interventions
from .metrics_server import (
    PortInUseError,
    ReplicaCollector,
    ReplicaProcess,
    runner_families,
    serve,
)
from .modelcheck import check_model
from .plots import write_plots
from .processes import LocalProcess
from .replicas import Replicas
from .resize import Resize
from .scrape import MetricsScraper
from .summary import RunSummary, format_summary, summarize, write_summary
from .supervisor import Outcome, Supervisor
from .view import LiveView, ReplicaState
from .workdir import Workdir, checkpoint_step, export_from_log, final_eval_from_log


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
        tensorboard_port: int | None = None,
    ) -> None:
        self.job = job
        self.workdir = Workdir(workdir)
        self.replicas = Replicas(processes, self.workdir.log_path, workers=job.spec.workers)
        self.fresh = fresh
        self.metrics_port = metrics_port
        self.report_dir = report_dir
        self.plain = plain
        self.stream = stream or sys.stdout
        self._interrupts = 0
        self.scraper = MetricsScraper(
            {r.name: f"http://127.0.0.1:{r.spec.metrics_port}/metrics" for r in self.replicas
             if r.spec.metrics_port}
        )
        self.view: LiveView | None = None
        self.metrics_server: Any = None
        self.board = (TensorBoard(self.workdir.checkpoints, tensorboard_port,
                                  self.workdir.logs / "tensorboard.log")
                      if tensorboard_port is not None else None)  # fmt: skip
        self.started = time.monotonic()
        self.resumed_from: int | None = None  # checkpoint step found at start
        self.interventions = Interventions(
            self.replicas, self.scraper.latest, chaos=chaos, resizes=resizes,
            since_start=lambda: time.monotonic() - self.started, note=self._note,
        )
        self.supervisor = Supervisor(
            job, self.replicas, interrupted=lambda: self._interrupts > 0,
            tick=self.interventions.tick, note=self._note,
        )

    # -- the run -----------------------------------------------------------------------
    def run(self) -> int:
        self._serve_metrics()  # first: a busy port is the quickest error to report
        try:
            self.resumed_from = self.workdir.prepare(
                fresh=self.fresh, max_steps=self.job.spec.training.max_steps, stream=self.stream
            )
            chief = self.replicas.of_type(naming.CHIEF)[0]
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
            if self.board is not None:
                self.board.start(self.stream)
            if self.job.spec.run_policy.warm_restarts:
                self.replicas.start_warm(self.workdir.logs / "warmstart.log")
            for replica in self.replicas:  # PS first, as the operator creates them
                if self.replicas.active(replica):
                    self.replicas.spawn(replica)
                else:
                    replica.state = "standby"
            outcome = self.supervisor.run(self.started)
        finally:
            self.replicas.stop_all(self._note)
            self.replicas.stop_warm()
            if self.board is not None:
                self.board.stop()
            self.scraper.scrape_once()
            self.scraper.stop()
            if self.view is not None:
                self.view.stop()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            if self.metrics_server is not None:
                self.metrics_server.shutdown()
        summary = self._summary(*outcome)
        ckpt = self.workdir.checkpoints
        wrote = ckpt.is_dir() and any(ckpt.glob("events.out.tfevents.*"))
        print(format_summary(summary, ckpt, self.workdir.logs, summaries=wrote),
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
        with self.replicas.lock:
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
            self.replicas.kill_all()

    # -- the end -----------------------------------------------------------------------
    def _summary(self, outcome: str, code: int, message: str) -> RunSummary:
        replicas = self.replicas
        return summarize(
            self.scraper.history(),
            job_name=self.job.name,
            max_steps=self.job.spec.training.max_steps,
            wall_time=time.monotonic() - self.started,
            outcome=outcome,
            exit_code=code,
            restarts={r.name: r.restarts for r in replicas},
            checkpoint_step=checkpoint_step(self.workdir.checkpoints),
            chaos=self.interventions.chaos_log,
            resizes=self.interventions.resize_log,
            resizes_planned_not_fired=self.interventions.resizes_not_fired(),
            message=message,
            final_eval=final_eval_from_log(replicas.by_name[naming.CHIEF_KEY].log_path),
            chaos_planned_not_fired=self.interventions.chaos_not_fired(),
            resumed_from_step=self.resumed_from,
            workdir=str(self.workdir.root),
            exit_codes={r.name: r.exit_codes for r in replicas},
            export=export_from_log(replicas.by_name[naming.CHIEF_KEY].log_path),
            best_export=export_from_log(replicas.by_name[naming.CHIEF_KEY].log_path, best=True),
        )
