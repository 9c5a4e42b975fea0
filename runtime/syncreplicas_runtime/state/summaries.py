"""The chief's TensorBoard summaries: what tf.estimator wrote into its model directory.

Every ``training.summaryEverySteps`` global steps (absent: logEverySteps; 0: none) the chief
writes, into the checkpoint directory, the loss of its step, the learning rate, global
steps per second since the last summary (Estimator's ``global_step/sec``), the fraction of
its own gradients dropped as stale since then, and whatever ``tf.compat.v1.summary`` ops the
model function made (merged, run with the step's feed). Every evaluation's metrics go under
the ``eval`` run (``eval/`` inside it), as Estimator's did.

A chief that starts training (a new process, or a new sync epoch after a lost parameter
server rolled the job back) first writes ``SessionLog.START`` just after the global step it
trains from: TensorBoard drops the points after that step that an earlier process wrote
(it keeps those at lower steps), so a stretch trained twice is drawn once. Each process
writes files of its own (TensorBoard reads a directory's event files in the order of their
names: the time they were opened).

The files are TFRecords of ``Event`` protos, written with ``tf.io.TFRecordWriter`` and
flushed at every write, so a chief killed between two summaries loses none it wrote.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from typing import Any

import tensorflow as tf
from tensorflow.core.framework import summary_pb2
from tensorflow.core.util import event_pb2

EVAL_RUN = "eval"
FILE_VERSION = "brain.Event:2"
# Tags, as tf.estimator named the ones it had.
LOSS, LEARNING_RATE, STEPS_PER_SEC = "loss", "learning_rate", "global_step/sec"
STALE_FRACTION = "chief/stale_gradient_fraction"


def every_steps(summary_every: int | None, log_every: int) -> int:
    """The summaries' interval in global steps (0: none)."""
    return log_every if summary_every is None else summary_every


class EventFile:
    """One event file: the file version first, then each event, flushed as written."""

    def __init__(self, logdir: str) -> None:
        os.makedirs(logdir, exist_ok=True)
        # Opened later, named later (to the microsecond): TensorBoard reads them in that order.
        stamp = f"{time.time():017.6f}"
        name = f"events.out.tfevents.{stamp}.{socket.gethostname()}.{os.getpid()}"
        self.path = os.path.join(logdir, name)
        self._writer = tf.io.TFRecordWriter(self.path)
        self.write(event_pb2.Event(file_version=FILE_VERSION))

    def write(self, event: Any) -> None:
        event.wall_time = time.time()
        self._writer.write(event.SerializeToString())
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def scalars(values: Mapping[str, float]) -> Any:
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)
                                      for tag, value in values.items()])


class Summaries:
    """The chief's summary writer (one per process); opens its files at the first write."""

    def __init__(self, logdir: str, every: int, evaluates: bool) -> None:
        self.logdir, self.every, self.evaluates = logdir, every, evaluates
        self._train: EventFile | None = None
        self._eval: EventFile | None = None
        self._window: tuple[float, int, int, int] | None = None  # time, step, pushed, stale
        self.last = -1  # the global step of the last summary
        self.model_ops = True  # the model's own summary ops are run (until they fail)

    @property
    def on(self) -> bool:
        return bool(self.logdir) and self.every > 0

    def started(self, step: int, pushed: int = 0, stale: int = 0) -> None:
        """Training (re)starts from global ``step``: earlier processes' points after it are
        orphaned (SessionLog.START at ``step`` + 1: TensorBoard keeps the points at lower
        steps); the window of the next rates begins here."""
        if not self.on:
            return
        for out in (self._file(), self._eval_file() if self.evaluates else None):
            if out is not None:
                out.write(event_pb2.Event(step=step + 1, session_log=event_pb2.SessionLog(
                    status=event_pb2.SessionLog.START)))
        self._window = (time.monotonic(), step, pushed, stale)
        self.last = step

    def due(self, step: int) -> bool:
        return self.on and step // self.every > self.last // self.every

    def write(self, step: int, loss: float, learning_rate: float, pushed: int, stale: int,
              model_summary: bytes | None = None) -> None:  # fmt: skip
        """The summary of global ``step``; ``pushed`` and ``stale`` count the chief's own
        gradients since it started, ``model_summary`` is the model's merged summary ops."""
        now = time.monotonic()
        values = {LOSS: loss, LEARNING_RATE: learning_rate}
        if self._window is not None:
            t0, step0, pushed0, stale0 = self._window
            if now > t0 and step > step0:
                values[STEPS_PER_SEC] = (step - step0) / (now - t0)
            if pushed > pushed0:
                values[STALE_FRACTION] = (stale - stale0) / (pushed - pushed0)
        out = self._file()
        out.write(event_pb2.Event(step=step, summary=scalars(values)))
        if model_summary:
            out.write(event_pb2.Event(step=step,
                                      summary=summary_pb2.Summary.FromString(model_summary)))
        self._window = (now, step, pushed, stale)
        self.last = step

    def write_eval(self, step: int, metrics: Mapping[str, float]) -> None:
        """An evaluation's metrics at global ``step``, under the ``eval`` run."""
        if self.on:
            self._eval_file().write(event_pb2.Event(step=step, summary=scalars(metrics)))

    def close(self) -> None:
        for out in (self._train, self._eval):
            if out is not None:
                out.close()
        self._train = self._eval = None

    def _file(self) -> EventFile:
        if self._train is None:
            self._train = EventFile(self.logdir)
        return self._train

    def _eval_file(self) -> EventFile:
        if self._eval is None:
            self._eval = EventFile(os.path.join(self.logdir, EVAL_RUN))
        return self._eval
