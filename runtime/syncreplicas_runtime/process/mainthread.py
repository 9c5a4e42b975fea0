"""Training off the main thread, so that SIGTERM is seen at once.

Python runs a signal handler only on the main thread, between two bytecodes: a main thread
blocked in a session run (a step waiting for its token while the updates are held, a read of
a busy PS) would run it only when the run returned. The replicas train in a thread of their
own and keep the main thread free for their signal handlers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

TICK_SECONDS = 0.2


def run_off_main_thread(body: Callable[[], T],
                        on_tick: Callable[[threading.Thread], T | None] | None = None) -> T:
    """Run ``body`` in a thread named "training" and return what it returns (or raise what it
    raised). The main thread waits in ticks, running signal handlers between them; after
    each, ``on_tick`` (given the thread, still alive) may end the wait with a value."""
    outcome: list[tuple[bool, object]] = []

    def target() -> None:
        try:
            outcome.append((True, body()))
        except BaseException as err:  # raised again in the main thread
            outcome.append((False, err))

    thread = threading.Thread(target=target, name="training", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(TICK_SECONDS)
        if on_tick is not None and thread.is_alive():
            value = on_tick(thread)
            if value is not None:
                return value
    ok, value = outcome[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]
