"""The run's summary: what ``syncreplicas run`` prints at the end and writes to summary.json.

``summarize`` is pure (samples and the runner's records in, a :class:`RunSummary` out); the
field names are summary.json's keys, so the file's shape is the dataclass's.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..core import metricnames, naming
from .scrape import Sample
from .series import (
    aggregating_fewer,
    by_replica,
    counter_total,
    eval_label,
    eval_series,
    global_step_series,
    last,
    series,
)

PLOTS: Final = (
    "loss.png",
    "accuracy.png",
    "steps_per_second.png",
    "staleness.png",
    "token_queue.png",
    "replicas.png",
)


@dataclass
class ChaosRecord:
    """One fault the runner injected; ``recovered_after_seconds`` is filled in later."""

    planned_step: int
    step_at_kill: float
    replica: str
    signal: str
    fired_at: float  # seconds since the run started
    recovered_after_seconds: float | None = None


@dataclass
class ResizeRecord:
    """One --resize the runner applied; ``done_after_seconds`` is filled in later: when
    every new worker made its first step (scale-up), or every leaving one exited."""

    planned_step: int
    step_at_resize: float
    workers_from: int
    workers_to: int
    fired_at: float  # seconds since the run started
    replicas: list[str]  # the workers started or asked to leave
    done_after_seconds: float | None = None


@dataclass(frozen=True)
class FiredKill:
    """A fault as summary.json reports it."""

    planned_step: int
    step_at_kill: float
    replica: str
    signal: str
    fired_at: float
    recovered_after_seconds: float | None
    # Training went past the step of the kill, whether or not a scrape caught the moment
    # (a short last stretch can end between two scrapes).
    resumed: bool


@dataclass(frozen=True)
class PlannedKill:
    """A fault the schedule held that the run ended before firing."""

    at_step: int
    replica: str


@dataclass(frozen=True)
class RunSummary:
    """Everything summary.json holds; each field is one of its keys."""

    job: str
    outcome: str  # succeeded | failed | interrupted
    exit_code: int
    message: str
    max_steps: int
    final_global_step: int
    first_global_step_seen: int | None
    checkpoint_step: int | None
    loss: float | None
    eval_metric: str | None
    eval_value: float | None
    accuracy: float | None
    wall_time_seconds: float
    time_to_first_step_seconds: float | None
    steps_per_second: float | None
    restarts: dict[str, int]
    restarts_total: int
    chief_restarts: int
    stale_gradients_dropped: int
    gradients_pushed: int
    chaos: list[FiredKill]
    plots: list[str]
    chaos_planned_not_fired: list[PlannedKill] = field(default_factory=list)
    resumed_from_step: int | None = None
    workdir: str = ""
    exit_codes: dict[str, list[int]] = field(default_factory=dict)
    # Elastic R (PS 0's gauges): the fewest gradients an update aggregated while replicas
    # were lost, and for how long R stayed below replicasToAggregate. None, 0: never.
    replicas_to_aggregate_lowest: int | None = None
    seconds_aggregating_fewer: float = 0.0
    # --resize: the changes of workers applied, and (step, workers) of those not reached.
    resizes: list[ResizeRecord] = field(default_factory=list)
    resizes_planned_not_fired: list[tuple[int, int]] = field(default_factory=list)
    # The chief's SavedModel export at the end of training: its directory and global step.
    export_path: str | None = None
    export_step: int | None = None
    # Its latest best export (training.export.best), likewise.
    best_export_path: str | None = None
    best_export_step: int | None = None

    def to_json(self) -> dict[str, Any]:
        """summary.json's content."""
        return dataclasses.asdict(self)


def summarize(
    history: Sequence[Sample],
    *,
    job_name: str,
    max_steps: int,
    wall_time: float,
    outcome: str,
    exit_code: int,
    restarts: Mapping[str, int],
    checkpoint_step: int | None,
    chaos: Sequence[ChaosRecord] = (),
    message: str = "",
    final_eval: Mapping[str, float] | None = None,
    chaos_planned_not_fired: Sequence[PlannedKill] = (),
    resizes: Sequence[ResizeRecord] = (),
    resizes_planned_not_fired: Sequence[tuple[int, int]] = (),
    resumed_from_step: int | None = None,
    workdir: str = "",
    exit_codes: Mapping[str, Sequence[int]] | None = None,
    export: tuple[str, int] | None = None,
    best_export: tuple[str, int] | None = None,
) -> RunSummary:
    """The run's summary from the scraped history and the runner's records.

    ``final_eval`` is the chief's last evaluation as it logged it: the chief evaluates at
    the very end and may exit before the next scrape sees the value.
    """
    replicas = by_replica(history)
    chief = replicas.get(naming.CHIEF_KEY, [])
    steps = global_step_series(history)
    scraped_step = max((v for _, v in steps), default=0.0)
    final_step = int(max(scraped_step, float(checkpoint_step or 0)))
    first_step_at = next((t for t, v in steps if v > 0), None)
    end_at = steps[-1][0] if steps else 0.0
    training_time = (end_at - first_step_at) if first_step_at is not None else 0.0
    progressed = scraped_step - next((v for _, v in steps if v > 0), scraped_step)
    eval_key = eval_series(history)
    eval_name = eval_label(eval_key)
    eval_value = last(series(chief, eval_key)) if eval_key else None
    if final_eval:
        eval_name = eval_name if eval_name in final_eval else (
            "accuracy" if "accuracy" in final_eval else sorted(final_eval)[0])
        eval_value = final_eval[eval_name]
    # The lowest step any replica reported once training ran: a resumed run never shows a
    # step below the checkpoint it restored.
    positive = [v for _, v in steps if v > 0]
    lowest_r, fewer_seconds = aggregating_fewer(replicas.get(naming.COORDINATOR_KEY, []))
    return RunSummary(
        job=job_name,
        outcome=outcome,
        exit_code=exit_code,
        message=message,
        max_steps=max_steps,
        final_global_step=final_step,
        first_global_step_seen=int(min(positive)) if positive else None,
        checkpoint_step=checkpoint_step,
        loss=last(series(chief, metricnames.LOSS)),
        eval_metric=eval_name,
        eval_value=eval_value,
        accuracy=eval_value if eval_name == "accuracy" else None,
        wall_time_seconds=round(wall_time, 3),
        time_to_first_step_seconds=round(first_step_at, 3) if first_step_at else None,
        steps_per_second=round(progressed / training_time, 3) if training_time > 0 else None,
        restarts=dict(sorted(restarts.items())),
        restarts_total=sum(restarts.values()),
        chief_restarts=restarts.get(naming.CHIEF_KEY, 0),
        stale_gradients_dropped=int(
            sum(
                counter_total(series(s, metricnames.STALE_GRADIENTS_DROPPED))
                for s in replicas.values()
            )
        ),
        gradients_pushed=int(
            sum(counter_total(series(s, metricnames.GRADIENTS_PUSHED)) for s in replicas.values())
        ),
        chaos=[
            FiredKill(
                planned_step=record.planned_step,
                step_at_kill=record.step_at_kill,
                replica=record.replica,
                signal=record.signal,
                fired_at=record.fired_at,
                recovered_after_seconds=record.recovered_after_seconds,
                resumed=final_step > record.step_at_kill,
            )
            for record in chaos
        ],
        plots=list(PLOTS),
        chaos_planned_not_fired=list(chaos_planned_not_fired),
        resumed_from_step=resumed_from_step,
        workdir=workdir,
        exit_codes={name: list(codes) for name, codes in (exit_codes or {}).items()},
        replicas_to_aggregate_lowest=lowest_r,
        seconds_aggregating_fewer=round(fewer_seconds, 3),
        resizes=[dataclasses.replace(r, replicas=list(r.replicas)) for r in resizes],
        resizes_planned_not_fired=list(resizes_planned_not_fired),
        export_path=export[0] if export else None,
        export_step=export[1] if export else None,
        best_export_path=best_export[0] if best_export else None,
        best_export_step=best_export[1] if best_export else None,
    )


def write_summary(directory: Path, summary: RunSummary) -> None:
    """summary.json in ``directory`` (created if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    text = json.dumps(summary.to_json(), indent=2, sort_keys=True) + "\n"
    (directory / "summary.json").write_text(text)


def format_summary(summary: RunSummary, checkpoint_dir: Path, logs_dir: Path,
                   summaries: bool = False) -> str:
    """The lines printed when the run ends; ``summaries``: the chief wrote TensorBoard
    summaries into ``checkpoint_dir``."""

    def fmt(value: Any, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    lines = [
        f"{summary.job}: {summary.outcome} - {summary.message}",
        f"  global step {summary.final_global_step}/{summary.max_steps}, "
        f"loss {fmt(summary.loss, '.4g')}, "
        f"{summary.eval_metric or 'eval'} {fmt(summary.eval_value, '.4g')}",
        f"  wall time {summary.wall_time_seconds:.1f}s, "
        f"{fmt(summary.steps_per_second, '.2f')} steps/s, "
        f"restarts {summary.restarts_total}, "
        f"stale gradients dropped {summary.stale_gradients_dropped}",
        f"  checkpoints: {checkpoint_dir} (step {fmt(summary.checkpoint_step, 'd')})"
        f", logs: {logs_dir}",
    ]
    if summaries:
        lines.append(f"  TensorBoard summaries: tensorboard --logdir {checkpoint_dir}")
    if summary.export_path:
        lines.append(f"  SavedModel: {summary.export_path} (global step {summary.export_step})")
    if summary.best_export_path:
        lines.append(f"  best SavedModel: {summary.best_export_path} "
                     f"(global step {summary.best_export_step})")
    if summary.replicas_to_aggregate_lowest is not None:
        lines.append(
            f"  elastic R: updates aggregated as few as {summary.replicas_to_aggregate_lowest}"
            f" gradients while replicas were lost, for {summary.seconds_aggregating_fewer:.1f}s"
        )
    for resize in summary.resizes:
        done = resize.done_after_seconds
        what = ("every new worker training" if resize.workers_to > resize.workers_from
                else "every leaving worker gone")
        lines.append(
            f"  resize: workers {resize.workers_from} -> {resize.workers_to} at step "
            f"{int(resize.step_at_resize)}: "
            + (f"{what} after {done:.1f}s" if done is not None else f"not seen: {what}")
        )
    for at_step, workers in summary.resizes_planned_not_fired:
        lines.append(f"  resize: workers -> {workers} at step {at_step}: not reached")
    for kill in summary.chaos:
        recovered = kill.recovered_after_seconds
        lines.append(
            f"  chaos: SIG{kill.signal} {kill.replica} at step "
            f"{int(kill.step_at_kill)}: "
            + (f"training resumed after {recovered:.1f}s" if recovered is not None
               else "training resumed" if kill.resumed
               else "no progress seen afterwards")
        )
    return "\n".join(lines)
