"""Scrape every local replica's ``/metrics`` on its own clock and keep the time series.

Reading metrics never touches the training processes beyond an HTTP GET: the runtime
serves them from its own thread, so scraping adds no `session.run` call. A replica that is
down (restarting, finished) is simply missing from that round.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from prometheus_client.metrics_core import Metric

from ..core import metricstext


@dataclass(frozen=True)
class Sample:
    """One replica's metrics at one moment: flat values plus the parsed families."""

    replica: str  # naming.replica_key: "chief-0", "worker-1", ...
    at: float  # seconds since the run started
    values: Mapping[str, float]
    families: tuple[Metric, ...] = field(repr=False, default=())
    # False once a later scrape found no endpoint: the process is down or a new
    # incarnation is still importing, so these values are the previous one's.
    live: bool = True

    def get(self, name: str, default: float | None = None) -> float | None:
        return self.values.get(name, default)


def fetch(url: str, timeout: float) -> str | None:
    """The body of ``url`` or None when the replica is not serving (down or starting)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body: bytes = response.read()
            return body.decode("utf-8")
    except (urllib.error.URLError, OSError, ValueError):
        return None


class MetricsScraper:
    """One daemon thread per replica, each scraping every ``interval`` seconds.

    Per-replica clocks: a replica that answers slowly (a process busy importing TensorFlow
    on a loaded machine) never delays the others. ``latest()`` feeds the live view and the
    aggregated endpoint; ``history()`` feeds the report. History keeps flat values only, so
    a long run stays small in memory.
    """

    def __init__(self, targets: Mapping[str, str], interval: float = 0.5,
                 timeout: float = 3.0) -> None:
        self._targets = dict(targets)  # replica name -> metrics URL
        self._interval = interval
        self._timeout = timeout
        self._lock = threading.Lock()
        self._latest: dict[str, Sample] = {}
        self._history: list[Sample] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._loop, args=(replica,), name=f"scrape-{replica}",
                             daemon=True)
            for replica in self._targets
        ]
        self._started = time.monotonic()

    def start(self) -> None:
        self._started = time.monotonic()
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=self._timeout + 1)

    def scrape_once(self) -> None:
        """One round over every replica (also called once more at the end of a run)."""
        for replica in self._targets:
            self._scrape(replica)

    def _scrape(self, replica: str) -> None:
        text = fetch(self._targets[replica], timeout=self._timeout)
        if text is None:
            with self._lock:
                last = self._latest.get(replica)
                if last is not None and last.live:
                    self._latest[replica] = replace(last, live=False)
            return
        try:
            families = metricstext.parse(text)
        except ValueError:
            return  # a torn read while the process exits; the next round is whole
        sample = Sample(
            replica=replica,
            at=time.monotonic() - self._started,
            values=metricstext.flatten(families),
            families=families,
        )
        with self._lock:
            self._latest[replica] = sample
            self._history.append(Sample(replica=replica, at=sample.at, values=sample.values))

    def latest(self) -> dict[str, Sample]:
        with self._lock:
            return dict(self._latest)

    def history(self) -> list[Sample]:
        with self._lock:
            return list(self._history)

    def _loop(self, replica: str) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            self._scrape(replica)
            self._stop.wait(max(0.0, self._interval - (time.monotonic() - began)))
