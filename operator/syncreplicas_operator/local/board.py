"""``syncreplicas run --tensorboard[=PORT]``: TensorBoard on the run's summaries while it
trains (the chief writes them into the checkpoint directory), stopped with the run."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import IO

from .errors import RunError

DEFAULT_PORT = 6006


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TensorBoard:
    """One TensorBoard process serving ``logdir`` on 127.0.0.1:``port`` (0: a free port)."""

    def __init__(self, logdir: Path, port: int, log: Path) -> None:
        if importlib.util.find_spec("tensorboard") is None:
            raise RunError("--tensorboard needs TensorBoard: pip install tensorboard==2.21.0 "
                           "(it comes with the [local] extra)")
        self.logdir, self.log = logdir, log
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self, stream: IO[str]) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tensorboard.main", "--logdir", str(self.logdir),
                 "--host", "127.0.0.1", "--port", str(self.port), "--reload_interval", "5"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
            )  # fmt: skip
        print(f"TensorBoard: {self.url} (the summaries in {self.logdir}; its log {self.log})",
              file=stream)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
