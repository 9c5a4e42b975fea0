"""The dashboard as a person sees it: Perses (`make cluster MONITORING=1`) drawing the
chart's dashboard in headless Chromium (Debian's, driven by Playwright), read back panel
by panel from the page.

A panel is in one of four states once it settles:
- ``data``: drawn with data: a stat's value, or a time series chart with at least one
  series in its legend;
- ``error``: Perses shows the query's error in the panel (an alert: Prometheus' message);
- ``empty``: drawn and says "No data";
- ``loading``: anything else (a skeleton, a chart whose legend is not there yet).
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.cluster import kube

NAMESPACE = "monitoring"
PROJECT = "syncreplicas"
DASHBOARD = "syncreplicas-training"
# As this machine runs Chromium as root with no network beyond the cluster: without the
# background-networking flags it keeps trying Google's hosts.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-renderer-backgrounding",
                 "--disable-background-timer-throttling"]  # fmt: skip
# Tall enough for every row: Perses draws a panel only once it is in the viewport.
VIEWPORT = {"width": 1600, "height": 3000}
SCREENSHOT_TIMEOUT_MS = 90_000

# Every panel of the page: its title, row, and what its body shows.
_PANELS_JS = """() => Array.from(document.querySelectorAll('[data-testid="panel"]')).map(p => {
  const body = p.querySelector('.MuiCardContent-root') ?? p;
  const group = p.closest('[data-testid="panel-group"]');
  const header = group?.querySelector('[data-testid="panel-group-header"]');
  return {
    title: p.querySelector('h6')?.textContent ?? '',
    row: header?.textContent?.trim() ?? '',
    error: Array.from(p.querySelectorAll('[role=alert]')).map(a => a.textContent).join(' | '),
    canvases: body.querySelectorAll('canvas').length,
    series: body.querySelectorAll('[data-testid="virtuoso-item-list"] > *').length,
    legend: body.querySelectorAll('[data-testid="virtuoso-scroller"]').length,
    text: body.innerText.trim().slice(0, 200),
  };
})"""


@dataclass(frozen=True)
class Panel:
    title: str
    row: str
    state: str  # data, error, empty, loading
    detail: str


def classify(raw: dict[str, Any]) -> Panel:
    """One panel's state from what the page shows (see the module's docstring)."""
    text = str(raw["text"])
    if raw["error"]:
        state, detail = "error", str(raw["error"])
    elif text == "No data":
        state, detail = "empty", text
    elif raw["canvases"] and raw["legend"]:  # a time series chart with its legend table
        state = "data" if raw["series"] else "loading"
        detail = f"{raw['series']} series"
    elif raw["canvases"] and text:  # a stat: its value
        state, detail = "data", text
    else:
        state, detail = "loading", text
    return Panel(str(raw["title"]), str(raw["row"]), state, detail)


def url() -> str:
    """Perses' address from the host: its pod's IP (as `make cluster` prints it)."""
    ip = kube.kubectl("get", "pod", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=perses",
                      "-o", "jsonpath={.items[0].status.podIP}").stdout.strip()  # fmt: skip
    return f"http://{ip}:8080"


def api(base: str, path: str, body: Any = None, method: str = "GET") -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{base}/api/v1/{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def dashboard_path(name: str) -> str:
    return f"projects/{PROJECT}/dashboards/{name}"


def dashboard(base: str, name: str) -> Any:
    """The dashboard ``name`` of the project, as Perses serves it."""
    return api(base, dashboard_path(name))


def series(base: str, query: str) -> int:
    """How many series ``query`` returns now, asked through Perses' proxy to the project's
    Prometheus datasource (the path every panel's query takes)."""
    path = f"/proxy/projects/{PROJECT}/datasources/prometheus/api/v1/query"
    link = f"{base}{path}?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(link, timeout=30) as response:
        return len(json.loads(response.read())["data"]["result"])


def dashboard_url(base: str, name: str, variables: dict[str, str], start: float,
                  end: float) -> str:  # fmt: skip
    """The dashboard over [start, end] (epoch seconds) with its variables set, as a link
    from Perses' time picker and variable bar reads."""
    query = [f"start={int(start * 1000)}", f"end={int(end * 1000)}", "refresh=0s"]
    query += [f"var-{key}={value}" for key, value in variables.items()]
    return f"{base}/projects/{PROJECT}/dashboards/{name}?{'&'.join(query)}"


# A page that draws no frame in this long has a stalled renderer: in loaded CI runs
# (2026-11-28) Chromium's compositor once stopped for good after a page had settled (a
# screenshot waited 60 s for a frame), and once before any panel was drawn (every panel
# left empty through four loads of the page over four minutes, while Prometheus answered
# the same queries through Perses' proxy). Panels are drawn when an IntersectionObserver
# sees them, which needs frames; a new browser process draws again.
FRAME_TIMEOUT_MS = 10_000
# A page whose panels' states have not changed this long is loaded again.
STALLED_SECONDS = 45
_FRAME_JS = """(ms) => Promise.race([
  new Promise(done => requestAnimationFrame(() => done(true))),
  new Promise(done => setTimeout(() => done(false), ms)),
])"""


class Browser:
    """Headless Chromium with one page of VIEWPORT's size, launched again when the page
    stops drawing frames."""

    def __init__(self, playwright: Any) -> None:
        self.playwright = playwright
        self.browser: Any = None
        self.page: Any = None
        self.launches = 0
        self.launch()

    def launch(self) -> None:
        self.close()
        self.browser = self.playwright.chromium.launch(executable_path=CHROMIUM,
                                                       args=CHROMIUM_ARGS)  # fmt: skip
        self.page = self.browser.new_page(viewport=VIEWPORT)
        self.page.set_default_timeout(60_000)
        self.launches += 1

    def close(self) -> None:
        if self.browser is not None:
            try:
                self.browser.close()
            except Exception as error:  # a browser that hangs or died: a new one anyway
                print(f"closing Chromium: {error}".splitlines()[0], flush=True)
            self.browser = None

    def draws(self) -> bool:
        """Whether the page draws a frame within FRAME_TIMEOUT_MS."""
        from playwright.sync_api import Error as PlaywrightError

        try:
            return bool(self.page.evaluate(_FRAME_JS, FRAME_TIMEOUT_MS))
        except PlaywrightError as error:
            print(f"probing for a frame: {error}".splitlines()[0], flush=True)
            return False

    def open(self, link: str) -> None:
        """Load ``link``; in a new browser when this one draws no frame."""
        self.page.goto(link, wait_until="networkidle")
        if not self.draws():
            print(f"no frame drawn in {FRAME_TIMEOUT_MS // 1000} s: Chromium launched again "
                  f"(launch {self.launches + 1})", flush=True)  # fmt: skip
            self.launch()
            self.page.goto(link, wait_until="networkidle")


@contextmanager
def chromium() -> Iterator[Browser]:
    """Headless Chromium (Browser: its page, launched again when it stops drawing)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = Browser(playwright)
        try:
            yield browser
        finally:
            browser.close()


def panels(page: Any) -> list[Panel]:
    return [classify(raw) for raw in page.evaluate(_PANELS_JS)]


def settle(browser: Browser, link: str, expected: int, timeout: float = 210) -> list[Panel]:
    """Open ``link`` and wait until all ``expected`` panels have left ``loading`` and read
    the same twice in a row; their states then (still loading ones as they are). A page
    whose panels settle with some of them "No data", or that still has a panel loading a
    that drew nothing new for STALLED_SECONDS, is loaded again until ``timeout`` (the
    dashboard does not refresh itself here: refresh=0s): a job's first minute or two of
    series can be missing from the first load. Each load checks that the page draws frames
    (Browser.open)."""
    deadline = time.monotonic() + timeout
    while True:
        browser.open(link)
        changed_at = time.monotonic()
        last: list[Panel] = []
        while True:
            time.sleep(1.5)
            now = panels(browser.page)
            done = len(now) >= expected and all(p.state != "loading" for p in now)
            if now != last:
                changed_at = time.monotonic()
            # A page still drawing is left to finish (on a loaded machine the last panels
            # of a load can take over a minute: a CI run's reload at 60 s restarted them
            # each time, and five never finished in 150 s); one that drew nothing new for
            # STALLED_SECONDS is loaded again.
            stalled = time.monotonic() - changed_at > STALLED_SECONDS
            if (done and now == last) or stalled or time.monotonic() > deadline:
                break
            last = now
        settled = all(p.state not in ("empty", "loading") for p in now)
        if settled or time.monotonic() > deadline:
            return now
        if done:
            time.sleep(10)


def problems(found: list[Panel], expected_titles: list[str]) -> list[str]:
    """Every panel not drawn with data, and every expected panel not on the page."""
    out = [f"{p.row} / {p.title}: {p.state}: {p.detail}" for p in found if p.state != "data"]
    titles = [p.title for p in found]
    out += [f"{title}: not on the page" for title in expected_titles if title not in titles]
    return out


def screenshot(browser: Browser, path: Path, redraw: Callable[[], object],
               required: bool = True) -> None:  # fmt: skip
    """The whole dashboard, as tall as it is drawn. Chromium's capture waits for a frame
    from the compositor, which can stall for good on a loaded machine (once in a CI run,
    2026-11-28: 60 s and no frame, after the page had settled): a capture that times out
    is tried again after ``redraw`` (the page loaded and settled afresh, in a new browser
    when this one draws no frame). When the picture is not ``required`` (the test's own
    record beside the panels' states it asserts), a second failure is written to ``path``
    + ".txt" instead of failing the test."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    path.parent.mkdir(parents=True, exist_ok=True)
    for attempt in (1, 2):
        try:
            browser.page.screenshot(path=str(path), full_page=True, animations="disabled",
                                    timeout=SCREENSHOT_TIMEOUT_MS)  # fmt: skip
            return
        except PlaywrightTimeout as error:
            if attempt == 2 and required:
                raise
            print(f"screenshot {path.name}, attempt {attempt}: {error}".splitlines()[0],
                  flush=True)
            if attempt == 2:
                path.with_name(path.name + ".txt").write_text(f"no picture: {error}\n")
                return
            if not browser.draws():
                browser.launch()
            redraw()
