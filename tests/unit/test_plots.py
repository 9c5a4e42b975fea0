"""The run report writes every plot it lists, from a history with an elastic-R episode."""

from __future__ import annotations

from pathlib import Path

import pytest
from syncreplicas_operator.core import metricnames as mn
from syncreplicas_operator.local.plots import write_plots
from syncreplicas_operator.local.scrape import Sample
from syncreplicas_operator.local.summary import PLOTS, summarize

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def history() -> list[Sample]:
    """A chief, one worker lost between 4 s and 8 s, and PS 0 lowering R to 2 meanwhile."""
    out = []
    for t in range(12):
        step = 10.0 * t
        lost = 4 <= t < 8
        out.append(Sample("chief-0", float(t), {mn.GLOBAL_STEP: step, mn.LOCAL_STEP: step,
                                               mn.LOSS: 1.0 / (t + 1)}))
        if not lost:
            out.append(Sample("worker-0", float(t), {mn.GLOBAL_STEP: step, mn.LOCAL_STEP: step}))
        out.append(Sample("ps-0", float(t), {
            mn.SPEC_REPLICAS_TO_AGGREGATE: 3.0,
            mn.REPLICAS_TO_AGGREGATE: 2.0 if lost else 3.0,
            mn.LIVE_REPLICAS: 2.0 if lost else 3.0,
            mn.TOKEN_QUEUE_DEPTH: 0.0,
        }))
    return out


def test_every_listed_plot_is_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    samples = history()
    summary = summarize(samples, job_name="j", max_steps=110, wall_time=12.0,
                        outcome="succeeded", exit_code=0, restarts={}, checkpoint_step=110)
    assert "replicas.png" in summary.plots and list(summary.plots) == list(PLOTS)
    write_plots(tmp_path, summary, samples)
    for name in PLOTS:
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, name
