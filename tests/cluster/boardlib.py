"""A job's TensorBoard (spec.tensorboard) as its user opens it: ``kubectl port-forward
svc/<job>-tensorboard``, TensorBoard's own HTTP API (what its page reads), and its Time
Series page in headless Chromium (perseslib's browser), read back card by card."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.cluster import kube, perseslib

REPORT = kube.REPO / "reports" / "tensorboard"
# The tags on the page: the training curves a model author looks at first.
SHOWN = "^(loss|learning_rate|global_step/sec|accuracy)$"
# TensorBoard's page fits the window (its cards scroll inside): a window's picture.
VIEWPORT = {"width": 1400, "height": 1100}
FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) ->")

# Each scalar card of the Time Series page: its tag, whether its chart drew a line, and
# the steps its data table shows.
_CARDS_JS = """() => Array.from(document.querySelectorAll('scalar-card')).map(card => ({
  tag: card.querySelector('.heading .name, tb-truncated-path')?.textContent?.trim() ?? '',
  lines: card.querySelectorAll('line-chart svg path, line-chart canvas').length,
  text: card.innerText.slice(0, 400),
}))"""


@contextmanager
def port_forward(namespace: str, service: str, port: int) -> Iterator[str]:
    """``kubectl port-forward svc/<service> :<port>``: the local base URL while it runs."""
    proc = subprocess.Popen(
        [kube.tool("kubectl"), "port-forward", "-n", namespace, f"svc/{service}", f":{port}"],
        env=kube.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = FORWARDING.search(line)
        assert found, f"kubectl port-forward: {line}{proc.stdout.read() if proc.poll() else ''}"
        yield f"http://127.0.0.1:{found[1]}/"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def loss_steps(base: str, timeout: float, at_least: int = 3) -> list[int]:
    """The steps of the ``loss`` series TensorBoard serves, once it has ``at_least``."""
    deadline = time.monotonic() + timeout
    steps: list[int] = []
    last = ""
    while time.monotonic() < deadline:
        try:
            tags = get(base + "data/plugin/scalars/tags")
            if "loss" in tags.get(".", {}):
                points = get(base + "data/plugin/scalars/scalars?run=.&tag=loss")
                steps = [int(p[1]) for p in points]
                if len(steps) >= at_least:
                    return steps
            last = json.dumps(tags)[:300]
        except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
            last = str(error)  # TensorBoard still starting
        time.sleep(2)
    raise AssertionError(f"TensorBoard served no loss series in {timeout:.0f} s: {last}")


def forwarded_loss_steps(namespace: str, service: str, timeout: float,
                         at_least: int = 3) -> list[int]:  # fmt: skip
    """loss_steps through ``kubectl port-forward svc/<service>``, opened again whenever it
    has ended. It forwards to one pod, and ends at the first connection that pod refuses:
    TensorBoard in a new chief's pod still starting left a cold run's test_failures with
    "Connection refused" on the local port for all of its 120 s."""
    deadline = time.monotonic() + timeout
    while True:
        with port_forward(namespace, service, 6006) as base:
            window = max(2.0, min(10.0, deadline - time.monotonic()))
            try:
                return loss_steps(base, timeout=window, at_least=at_least)
            except AssertionError:
                if time.monotonic() >= deadline:
                    raise


def shown_step(card: dict[str, Any]) -> int | None:
    """The step in the card's data table (the run ".": smoothed, value, step, relative)."""
    # TensorBoard writes steps past 999 with thousands separators ("16,600").
    found = re.search(r"Relative\s+\.\s+\S+\s+\S+\s+(\d[\d,]*)\s", str(card["text"]))
    return int(found[1].replace(",", "")) if found else None


def loss_card(base: str, name: str, timeout: float = 120,
              images: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """The Time Series page in Chromium until its ``loss`` card is drawn with data (a
    line, and a step in its data table); that card. The page is kept as
    reports/tensorboard/<name>.png (and as ``images``/<name>.png: `make screenshots`)."""
    deadline = time.monotonic() + timeout
    cards: list[dict[str, Any]] = []
    with perseslib.chromium() as browser:
        browser.page.set_viewport_size(VIEWPORT)

        def show_loss() -> None:
            # Cards are drawn as they scroll into view: the tag filter, as a user types it,
            # leaves only these, the loss's at the top.
            browser.open(base + "#timeseries")
            browser.page.fill("metrics-tag-filter input", SHOWN)
            browser.page.keyboard.press("Escape")  # the filter's suggestions

        show_loss()
        while time.monotonic() < deadline:
            cards = browser.page.evaluate(_CARDS_JS)
            # Drawn with data: a line, and the data table's row of the run (a card still
            # loading has its axes' paths and an empty table: seen in a loaded CI run).
            card = next((c for c in cards if c["tag"] == "loss" and c["lines"]
                         and shown_step(c) is not None), None)  # fmt: skip
            if card is not None:
                time.sleep(2)  # the last animation frame, for the picture
                path = REPORT / f"{name}.png"
                perseslib.screenshot(browser, path, show_loss, required=False)
                if images is not None and path.exists():
                    shutil.copy(path, images / path.name)
                return dict(card)
            time.sleep(2)
    raise AssertionError(f"no loss chart drawn in {timeout:.0f} s; cards: {cards}")
