"""The run report from a history with an elastic-R episode: every plot it lists, and how
long R stayed below the spec's."""

from __future__ import annotations

from pathlib import Path

import pytest
from syncreplicas_operator.core import metricnames as mn
from syncreplicas_operator.local.plots import write_plots
from syncreplicas_operator.local.scrape import Sample
from syncreplicas_operator.local.series import aggregating_fewer
from syncreplicas_operator.local.summary import PLOTS, format_summary, summarize

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


def test_the_summary_says_how_low_r_went_and_for_how_long(tmp_path: Path) -> None:
    samples = history()
    summary = summarize(samples, job_name="j", max_steps=110, wall_time=12.0,
                        outcome="succeeded", exit_code=0, restarts={}, checkpoint_step=110)
    # R was 2 in the samples at 4, 5, 6 and 7 s, each holding until the next one
    assert (summary.replicas_to_aggregate_lowest, summary.seconds_aggregating_fewer) == (2, 4.0)
    assert summary.to_json()["seconds_aggregating_fewer"] == 4.0
    text = format_summary(summary, tmp_path / "ckpt", tmp_path / "logs")
    assert "elastic R: updates aggregated as few as 2 gradients while replicas were lost, " \
        "for 4.0s" in text


def test_r_never_lowered_or_unknown() -> None:
    steady = [s for s in history() if s.replica == "ps-0" and not 4 <= s.at < 8]
    assert aggregating_fewer(steady) == (None, 0.0)
    assert aggregating_fewer([]) == (None, 0.0)
    # a runtime without the spec gauge: nothing to compare with
    bare = [Sample("ps-0", float(t), {mn.REPLICAS_TO_AGGREGATE: 1.0}) for t in range(3)]
    assert aggregating_fewer(bare) == (None, 0.0)
