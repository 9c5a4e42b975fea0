"""The run report's PNG plots (loss, held-out metric, speed, staleness, token queue,
replicas aggregated per update).

matplotlib comes with the ``[local]`` extra; importing it here (its light top-level package
only) lets the import guard of ``syncreplicas run`` name it when it is missing, before any
process starts rather than when the run ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

from ..core import metricnames, naming
from .scrape import Sample
from .series import (
    by_replica,
    eval_label,
    eval_series,
    mean_staleness,
    progress_series,
    series,
    steps_per_second,
)
from .summary import RunSummary


def write_plots(directory: Path, summary: RunSummary, history: Sequence[Sample]) -> None:
    """One PNG per name in ``summary.plots`` in ``directory`` (created if missing)."""
    matplotlib.use("Agg")  # files only: never needs a display
    # pyplot is heavy (backends, font cache): only runs that write a report import it.
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    directory.mkdir(parents=True, exist_ok=True)
    replicas = by_replica(history)
    chief = replicas.get(naming.CHIEF_KEY, [])
    eval_key = eval_series(history)
    eval_name = eval_label(eval_key)
    title = f"{summary.job}"

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(directory / name, dpi=100)
        plt.close(fig)

    def step_axis(samples: Sequence[Sample], name: str) -> tuple[list[float], list[float]]:
        xs, ys = [], []
        for sample in samples:
            step = sample.values.get(metricnames.GLOBAL_STEP)
            value = sample.values.get(name)
            if step is not None and value is not None:
                xs.append(step)
                ys.append(value)
        return xs, ys

    fig, ax = plt.subplots(figsize=(7, 4))
    for replica, samples in sorted(replicas.items()):
        if replica.startswith(f"{naming.PS}-"):
            continue  # parameter servers train nothing
        # Before its first step a replica's loss gauge reads 0: not a loss.
        trained = [s for s in samples if s.values.get(metricnames.LOCAL_STEP)]
        xs, ys = step_axis(trained, metricnames.LOSS)
        if xs:
            style = ".-" if replica == naming.CHIEF_KEY else "."
            ax.plot(xs, ys, style, label=replica, markersize=3)
    _finish(ax, f"{title}: training loss", "global step", "loss (last batch)")
    save(fig, "loss.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    if eval_key:
        xs, ys = step_axis(chief, eval_key)
        # The gauge holds its value between evaluations: one point per evaluation.
        kept = [i for i in range(len(ys)) if i == 0 or ys[i] != ys[i - 1]]
        ax.plot([xs[i] for i in kept], [ys[i] for i in kept], "o-",
                label=f"{naming.CHIEF_KEY} {eval_name}")
    eval_name = summary.eval_metric or eval_name
    if summary.eval_value is not None:
        ax.plot([summary.final_global_step], [summary.eval_value], "*", markersize=12,
                label=f"final {eval_name} {summary.eval_value:.4g}")
    _finish(ax, f"{title}: held-out {eval_name or 'metric (none exported)'}",
            "global step", eval_name or "")
    save(fig, "accuracy.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    rate = steps_per_second(progress_series(history))
    ax.plot([t for t, _ in rate], [v for _, v in rate], "-", label="global steps/s")
    _mark_faults(ax, summary)
    faults = (" (red: injected faults)" if summary.chaos else "") + (
        " (green: resizes)" if summary.resizes else "")
    _finish(ax, f"{title}: training speed{faults}", "seconds", "global steps/s")
    save(fig, "steps_per_second.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    for replica, samples in sorted(replicas.items()):
        points = mean_staleness(samples)
        if points:
            ax.plot([t for t, _ in points], [v for _, v in points], ".-", label=replica,
                    markersize=3)
    _finish(ax, f"{title}: gradient staleness per replica", "seconds",
            "mean staleness (steps)")
    save(fig, "staleness.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    depth = series(replicas.get(naming.COORDINATOR_KEY, []), metricnames.TOKEN_QUEUE_DEPTH)
    ax.step([t for t, _ in depth], [v for _, v in depth], where="post",
            label=naming.COORDINATOR_KEY)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    _finish(ax, f"{title}: token queue depth", "seconds", "tokens in sync_token_q")
    save(fig, "token_queue.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    coordinator = replicas.get(naming.COORDINATOR_KEY, [])
    highest = 1.0
    for name, label, style in (
        (metricnames.SPEC_REPLICAS_TO_AGGREGATE, "replicasToAggregate (spec)",
         {"color": "grey", "linestyle": ":", "linewidth": 3, "alpha": 0.6}),
        (metricnames.REPLICAS_TO_AGGREGATE, "gradients per update (R)", {"color": "tab:blue"}),
        (metricnames.LIVE_REPLICAS, "live replicas", {"color": "tab:orange", "linestyle": "--"}),
    ):
        points = series(coordinator, name)
        if points:
            ax.step([t for t, _ in points], [v for _, v in points], where="post", label=label,
                    **style)
            highest = max(highest, *(v for _, v in points))
    _mark_faults(ax, summary)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(0, highest + 0.5)
    _finish(ax, f"{title}: replicas aggregated per update{faults}", "seconds", "replicas")
    save(fig, "replicas.png")


def _mark_faults(ax: Any, summary: RunSummary) -> None:
    """A red dashed line at each injected fault and a green dotted one, labelled, at each
    resize (the x axis in seconds of the run)."""
    for kill in summary.chaos:
        ax.axvline(kill.fired_at, color="red", alpha=0.4, linestyle="--")
    for resize in summary.resizes:
        ax.axvline(resize.fired_at, color="green", alpha=0.6, linestyle=":")
        ax.annotate(f"{resize.workers_from}\u2192{resize.workers_to} workers",
                    (resize.fired_at, 1.0), xycoords=("data", "axes fraction"),
                    fontsize="x-small", color="green", rotation=90, va="top", ha="right")


def _finish(ax: Any, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small")
    else:
        ax.text(0.5, 0.5, "no data scraped", ha="center", va="center", transform=ax.transAxes)
