"""``syncreplicas run --tensorboard``: TensorBoard serves the chief's summaries while the job
trains (read through TensorBoard's own HTTP API, as its page does), and stops with the run.

The job has no end of its own: it trains until TensorBoard has shown three points of its
loss, however long TensorBoard takes to start on a loaded machine, then the user's Ctrl-C
ends the run. A run ends through the same ``finally`` whether it finished or was
interrupted (local/runner.py), and TensorBoard goes with it; test_run's linear example
finishes a run and reads its summaries."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_run import ROOT, SYNCREPLICAS, assert_no_process_left, env, kill_leftovers
from tests.e2e.test_run import manifest as linear_manifest

URL_RE = re.compile(r"TensorBoard: (http://127\.0\.0\.1:\d+/)")


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


@pytest.mark.timeout(300)
def test_tensorboard_shows_the_loss_while_the_job_trains_and_stops_with_it(
        tmp_path: Path) -> None:  # fmt: skip
    workdir = tmp_path / "work"
    path = linear_manifest(tmp_path / "job.yaml", "board", maxSteps=1_000_000, logEverySteps=50,
                           checkpointEverySteps=500)  # fmt: skip
    runner = subprocess.Popen(
        [*SYNCREPLICAS, "run", str(path), "--workdir", str(workdir), "--plain",
         "--tensorboard", "0"],
        env={**env(), "SYNCREPLICAS_DEBUG_STEP_DELAY_MS": "20"}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, cwd=ROOT, start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(runner.stdout or ()), daemon=True)
    reader.start()
    seen: list[int] = []
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and runner.poll() is None:
            found = next((URL_RE.search(line) for line in lines if URL_RE.search(line)), None)
            if found:
                try:
                    tags = get(found[1] + "data/plugin/scalars/tags")
                    if "loss" in tags.get(".", {}):
                        points = get(found[1] + "data/plugin/scalars/scalars?run=.&tag=loss")
                        seen = [int(p[1]) for p in points]
                        if len(seen) >= 3:
                            break
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    pass  # TensorBoard still starting
            time.sleep(1.0)
        assert len(seen) >= 3, "".join(lines)
        assert seen == sorted(set(seen)), seen  # one curve, steps increasing
        runner.send_signal(signal.SIGINT)
        runner.wait(timeout=120)
        reader.join(timeout=10)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        kill_leftovers(workdir)
    output = "".join(lines)
    assert runner.returncode == 130 and "interrupted" in output, output
    assert_no_process_left(workdir)
    with pytest.raises(urllib.error.URLError):  # stopped with the run
        get(URL_RE.search(output)[1] + "data/plugin/scalars/tags")  # type: ignore[index]
