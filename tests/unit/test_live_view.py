"""The live view's rows: start-up phases from the runtime's phase gauge, no invented zeros."""

from __future__ import annotations

import http.server
import io
import threading

import pytest
from rich.console import Console
from syncreplicas_operator.core import metricnames
from syncreplicas_operator.local.scrape import MetricsScraper, Sample
from syncreplicas_operator.local.view import (
    ReplicaState,
    ViewModel,
    headline_step,
    render,
    replica_phase,
    replica_values,
)

RUNNING = ReplicaState(state="running", restarts=0, pid=123)
PHASE = metricnames.REPLICA_PHASE


def sample(live: bool = True, **values: float) -> Sample:
    return Sample(replica="worker-0", at=1.0, values=values, live=live)


@pytest.mark.parametrize(
    ("state", "scraped", "shown"),
    [
        (RUNNING, None, "importing"),  # process started, no endpoint yet
        (RUNNING, sample(**{PHASE: 1}), "importing"),  # endpoint up, TensorFlow loading
        (RUNNING, sample(**{PHASE: 2}), "waiting for PS"),
        (RUNNING, sample(**{PHASE: 3}), "gathering"),
        (RUNNING, sample(**{PHASE: 4}), "training"),
        (RUNNING, sample(**{PHASE: 5}), "coordinating"),
        (RUNNING, sample(**{PHASE: 6}), "serving"),
        (RUNNING, sample(), "running"),  # a runtime without the phase gauge
        (RUNNING, sample(**{PHASE: 99}), "running"),
        # a restarted process whose endpoint is not up: the old incarnation's phase is not its own
        (RUNNING, sample(live=False, **{PHASE: 4}), "importing"),
        (ReplicaState("exited 0", 0, None), sample(**{PHASE: 4}), "exited 0"),
        (ReplicaState("restarting (exit 75)", 1, None), None, "restarting (exit 75)"),
    ],
)
def test_replica_phase(state: ReplicaState, scraped: Sample | None, shown: str) -> None:
    assert replica_phase(state, scraped) == shown


def test_values_of_a_restarted_replica_are_not_shown_until_it_answers() -> None:
    old = sample(live=False, **{metricnames.LOCAL_STEP: 40.0})
    assert replica_values(RUNNING, old) == {}
    exited = ReplicaState("failed (exit 65)", 0, None)
    assert replica_values(exited, old) == {metricnames.LOCAL_STEP: 40.0}


def text_of(model: ViewModel) -> str:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(render(model))
    return out.getvalue()


def test_nothing_read_yet_renders_dashes_and_phases() -> None:
    replicas = {"ps-0": RUNNING, "chief-0": RUNNING, "worker-0": RUNNING}
    latest = {
        "ps-0": Sample("ps-0", 1.0, {PHASE: 5}),
        "chief-0": Sample("chief-0", 1.0, {PHASE: 2}),
    }
    model = ViewModel(
        job="j",
        max_steps=100,
        elapsed=3.0,
        global_step=None,
        steps_per_second=None,
        loss=None,
        eval_name=None,
        eval_value=None,
        queue_depth=None,
        replicas=replicas,
        latest=latest,
    )
    text = text_of(model)
    assert "global step -/100" in text and "loss -" in text
    assert "loss 0" not in text and "step 0" not in text
    rows = {line.split()[0]: line for line in text.splitlines() if line.split()}
    assert "coordinating" in rows["ps-0"]
    assert "waiting for PS" in rows["chief-0"]
    assert "importing" in rows["worker-0"]
    # no local step, staleness or dropped count for a replica that has reported none
    assert rows["worker-0"].split()[-5:-2] == ["-", "-", "-"]


def test_a_replica_that_stops_answering_keeps_its_values_marked_not_live() -> None:
    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"# TYPE syncreplicas_replica_phase gauge\nsyncreplicas_replica_phase 4.0\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    scraper = MetricsScraper({"worker-0": url}, timeout=2.0)
    try:
        scraper.scrape_once()
        first = scraper.latest()["worker-0"]
        assert first.live and first.values[PHASE] == 4.0
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    scraper.scrape_once()  # nobody answers now (a restarted process still importing)
    after = scraper.latest()["worker-0"]
    assert not after.live and after.values == first.values
    assert replica_phase(RUNNING, after) == "importing"


def test_the_headline_step_is_the_chiefs_after_a_ps_loss() -> None:
    step = metricnames.GLOBAL_STEP

    def at(replica: str, value: float, live: bool = True) -> Sample:
        return Sample(replica, 1.0, {step: value}, live=live)

    # PS lost at 250, training resumed from the snapshot at 243: the chief knows first,
    # a worker still waiting shows the step before the loss
    assert headline_step({"chief-0": at("chief-0", 243), "worker-0": at("worker-0", 250)}) == 243
    # the chief restarting: the live workers' highest, not a stale one's
    latest = {"chief-0": at("chief-0", 300, live=False), "worker-0": at("worker-0", 243),
              "worker-1": at("worker-1", 244), "worker-2": at("worker-2", 250, live=False)}
    assert headline_step(latest) == 244
    # nobody answers: the last values read
    assert headline_step({"worker-0": at("worker-0", 7, live=False)}) == 7
    assert headline_step({"ps-0": Sample("ps-0", 1.0, {PHASE: 5})}) is None
