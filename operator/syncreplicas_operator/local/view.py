"""The live view of ``syncreplicas run``: progress and sync health while the job trains.

``render`` builds a rich renderable from what the runner knows (scraped metrics, replica
states); ``LiveView`` refreshes it in a terminal, or prints one plain line every few seconds
when the output is not a terminal (logs, CI).
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..core import eta, metricnames, naming
from .scrape import Sample
from .series import eval_label, eval_series


@dataclass(frozen=True)
class ReplicaState:
    state: str  # pending | running | exited 0 | restarting (exit 75) | failed (exit 65) ...
    restarts: int
    pid: int | None


@dataclass(frozen=True)
class ViewModel:
    job: str
    max_steps: int
    elapsed: float
    global_step: float | None
    steps_per_second: float | None
    loss: float | None
    eval_name: str | None
    eval_value: float | None
    queue_depth: float | None
    replicas: Mapping[str, ReplicaState]
    latest: Mapping[str, Sample]
    note: str = ""


def _fmt(value: float | None, spec: str = ".4g") -> str:
    return "-" if value is None else format(value, spec)


def _eval(latest: Mapping[str, Sample]) -> tuple[str | None, float | None]:
    chief = latest.get(naming.CHIEF_KEY)
    if chief is None:
        return None, None
    key = eval_series([chief])
    return (eval_label(key), chief.values[key]) if key else (None, None)


# Phases in which a replica does its job (shown green).
_WORKING = ("training", "coordinating", "serving")


def replica_phase(state: ReplicaState, sample: Sample | None) -> str:
    """What a replica is doing: its process state, or while its process runs, its start-up
    phase as it exports it (``importing`` until its metrics endpoint answers)."""
    if state.state != "running":
        return state.state
    if sample is None or not sample.live:
        return "importing"
    value = sample.values.get(metricnames.REPLICA_PHASE)
    if value is None:
        return "running"  # a runtime that does not export its phase
    return metricnames.REPLICA_PHASES.get(int(value), "running")


def replica_values(state: ReplicaState, sample: Sample | None) -> Mapping[str, float]:
    """The values a replica's row shows: none for a running process that has not answered
    yet (a restarted replica's previous values are not its own)."""
    if sample is None or (state.state == "running" and not sample.live):
        return {}
    return sample.values


def render(model: ViewModel) -> Group:
    """The whole view: a headline and one row per replica."""
    head = Text()
    head.append(f"{model.job}  ", style="bold")
    step = "-" if model.global_step is None else f"{int(model.global_step)}"
    head.append(f"global step {step}/{model.max_steps}  ")
    if progress := eta.summary(model.global_step, model.max_steps, model.steps_per_second):
        head.append(f"({progress})  ")
    head.append(f"{_fmt(model.steps_per_second, '.2f')} steps/s  ")
    head.append(f"loss {_fmt(model.loss)}  ")
    if model.eval_name:
        head.append(f"eval {model.eval_name} {_fmt(model.eval_value, '.4f')}  ")
    head.append(f"token queue {_fmt(model.queue_depth, '.0f')}  ")
    head.append(f"{model.elapsed:.0f}s", style="dim")
    table = Table(expand=False, pad_edge=False, box=None, header_style="bold")
    for column in ("replica", "state", "local step", "staleness", "dropped", "restarts", "pid"):
        table.add_column(column, justify="left" if column in ("replica", "state") else "right")
    for replica, state in model.replicas.items():
        sample = model.latest.get(replica)
        values = replica_values(state, sample)
        count = values.get(metricnames.GRADIENT_STALENESS_COUNT)
        total = values.get(metricnames.GRADIENT_STALENESS_SUM, 0.0)
        staleness = (total / count) if count else None
        phase = replica_phase(state, sample)
        style = "green" if phase in _WORKING else ("red" if "fail" in phase else "")
        table.add_row(
            replica,
            Text(phase, style=style),
            _fmt(values.get(metricnames.LOCAL_STEP), ".0f"),
            _fmt(staleness, ".2f"),
            _fmt(values.get(metricnames.STALE_GRADIENTS_DROPPED), ".0f"),
            str(state.restarts),
            str(state.pid or "-"),
        )
    parts: list[Any] = [head, table]
    if model.note:
        parts.append(Text(model.note, style="yellow"))
    return Group(*parts)


def plain_line(model: ViewModel) -> str:
    """One log line for non-terminal output."""
    step = "-" if model.global_step is None else str(int(model.global_step))
    restarts = sum(s.restarts for s in model.replicas.values())
    text = (
        f"[{model.elapsed:6.1f}s] step {step}/{model.max_steps} "
        f"({eta.summary(model.global_step, model.max_steps, model.steps_per_second) or '-'}) "
        f"{_fmt(model.steps_per_second, '.2f')} steps/s loss {_fmt(model.loss)} "
        f"queue {_fmt(model.queue_depth, '.0f')} restarts {restarts}"
    )
    if model.eval_name:
        text += f" {model.eval_name} {_fmt(model.eval_value, '.4f')}"
    return text


def headline_step(latest: Mapping[str, Sample]) -> float | None:
    """The job's global step for the headline: the chief's while it answers (after a PS
    loss it is the first to know the step training resumed from), else the highest a live
    replica reports, else the highest ever read. A replica that stopped answering keeps its
    last value, which after a PS loss can be above the step training resumed from."""
    name = metricnames.GLOBAL_STEP
    chief = latest.get(naming.CHIEF_KEY)
    if chief is not None and chief.live and name in chief.values:
        return chief.values[name]
    for samples in ([s for s in latest.values() if s.live], list(latest.values())):
        steps = [s.values[name] for s in samples if name in s.values]
        if steps:
            return max(steps)
    return None


class LiveView:
    """Refreshes the view from ``snapshot()`` until ``stop()``; thread-safe."""

    def __init__(
        self,
        job: str,
        max_steps: int,
        latest: Callable[[], Mapping[str, Sample]],
        replicas: Callable[[], Mapping[str, ReplicaState]],
        stream: TextIO | None = None,
        plain_every: float = 5.0,
        plain: bool = False,
    ) -> None:
        self._job = job
        self._max_steps = max_steps
        self._latest = latest
        self._replicas = replicas
        self._stream = stream or sys.stdout
        self._plain_every = plain_every
        self._started = time.monotonic()
        self._steps: collections.deque[tuple[float, float]] = collections.deque(maxlen=64)
        self._note = ""
        self._notes: collections.deque[str] = collections.deque(maxlen=4)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._live: Live | None = None
        self._console = Console(file=self._stream)
        self._terminal = self._console.is_terminal and not plain

    def note(self, text: str) -> None:
        """A line under the table (the last restarts and injected faults)."""
        text = f"[{time.monotonic() - self._started:6.1f}s] {text}"
        self._notes.append(text)
        self._note = "\n".join(self._notes)
        if not self._terminal:
            self._console.print(text, highlight=False, soft_wrap=True)

    def model(self) -> ViewModel:
        now = time.monotonic()
        latest = self._latest()
        step = headline_step(latest)
        if step is not None and (not self._steps or self._steps[-1][1] != step):
            self._steps.append((now, step))
        rate = None
        recent = [p for p in self._steps if now - p[0] <= 10.0]
        if len(recent) >= 2 and recent[-1][0] > recent[0][0]:
            rate = max(0.0, (recent[-1][1] - recent[0][1]) / (now - recent[0][0]))
        chief = latest.get(naming.CHIEF_KEY)
        eval_name, eval_value = _eval(latest)
        return ViewModel(
            job=self._job,
            max_steps=self._max_steps,
            elapsed=now - self._started,
            global_step=step,
            steps_per_second=rate,
            loss=chief.values.get(metricnames.LOSS) if chief else None,
            eval_name=eval_name,
            eval_value=eval_value,
            queue_depth=(ps0.values.get(metricnames.TOKEN_QUEUE_DEPTH)
                         if (ps0 := latest.get(naming.COORDINATOR_KEY)) else None),
            replicas=self._replicas(),
            latest=latest,
            note=self._note,
        )

    def start(self) -> None:
        self._started = time.monotonic()
        if self._terminal:
            self._live = Live(
                render(self.model()), console=self._console, refresh_per_second=2,
                transient=False,
            )
            self._live.start()
        self._thread = threading.Thread(target=self._loop, name="live-view", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._live is not None:
            self._live.update(render(self.model()))
            self._live.stop()
        else:
            self._console.print(plain_line(self.model()), highlight=False, soft_wrap=True)

    def _loop(self) -> None:
        interval = 0.5 if self._live is not None else self._plain_every
        while not self._stop.wait(interval):
            model = self.model()
            if self._live is not None:
                self._live.update(render(model))
            else:
                self._console.print(plain_line(model), highlight=False, soft_wrap=True)
