"""Every version of a kind of object as the API server's watch delivers it: `kubectl get
KIND -A --watch --output-watch-events -o json` in a thread, each event (ADDED, MODIFIED,
DELETED and the object) handed to a callback. A poller that lists every few seconds misses
an object that lives less than its period (on a loaded machine, a job created, failed at
its deadline and deleted by its TTL within one); a watch misses none."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from typing import Any

from tests.cluster import kube


class ObjectStream:
    """``on_event(type, object)`` is called from the stream's thread for every version of
    every object of ``kind`` (the current ones first, as ADDED), until ``stop``."""

    def __init__(self, kind: str, on_event: Callable[[str, dict[str, Any]], None]) -> None:
        self.on_event = on_event
        self.proc = subprocess.Popen(
            [kube.tool("kubectl"), "get", kind, "-A", "--watch", "--output-watch-events",
             "-o", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=kube.env(), text=True,
        )  # fmt: skip
        self.thread = threading.Thread(target=self.read, name=f"stream-{kind}", daemon=True)
        self.thread.start()

    def read(self) -> None:
        """kubectl prints one JSON document per event (one line each), back to back."""
        assert self.proc.stdout is not None
        decoder = json.JSONDecoder()
        buffer = ""
        for line in self.proc.stdout:
            buffer += line
            while buffer.strip():
                try:
                    obj, end = decoder.raw_decode(buffer.lstrip())
                except json.JSONDecodeError:
                    break  # not complete yet
                buffer = buffer.lstrip()[end:]
                self.on_event(str(obj.get("type", "")), obj.get("object") or {})

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.thread.join(timeout=10)
