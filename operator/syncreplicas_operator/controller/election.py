"""Leader election for ``syncreplicas operator --leader-elect`` (rules: core/leader.py).

Before kopf starts, the process waits to hold the Lease: a follower watches nothing and
writes nothing, it only reads the Lease every retry period. Once leader, one thread renews
and another watches the time since the last renewal: past the renew deadline the process
exits at once (``os._exit``: no handler of kopf gets to write after that); the kubelet
restarts the container, which comes back as a follower. When kopf has stopped (SIGTERM),
the leader releases the Lease so that a follower takes over at its next look.
"""

from __future__ import annotations

import argparse
import http.server
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from ..core.leader import (
    Decision,
    LeaseRecord,
    Observation,
    Timings,
    decide,
    next_record,
    observe,
    released,
    still_leading,
)
from ..core.timefmt import format_micro_time
from ..resources.k8s import ApiError
from ..resources.leaderlease import LeaseStore
from .daemon import api
from .settings import election_timings

log = logging.getLogger("syncreplicas.operator")

LOST_LEADERSHIP_EXIT = 3  # exit code of a leader that could not renew in time
WATCHDOG_SECONDS = 0.2


def identity() -> str:
    """This process's name in the Lease: its pod (POD_NAME, else the host name) and a
    random suffix, so that a restarted container is a new candidate."""
    pod = os.environ.get("POD_NAME") or os.uname().nodename
    return f"{pod}_{uuid.uuid4().hex[:8]}"


def now_text() -> str:
    return format_micro_time(datetime.now(UTC))


class Elector:
    def __init__(self, store: LeaseStore, me: str, timings: Timings,
                 on_change: Callable[[bool], None],
                 on_lost: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.store, self.me, self.timings, self.clock = store, me, timings, clock
        self.on_change = on_change
        self.on_lost = on_lost if on_lost is not None else lambda: os._exit(LOST_LEADERSHIP_EXIT)
        self.observed: Observation | None = None
        self.last_renewed: float | None = None
        self.leading = False
        self.refusal = ""  # the last refusal logged (401/403), so that it is logged once
        self._stop = threading.Event()

    def look(self) -> bool:
        """Read the Lease once and write it if this replica may hold it (the leader writes
        its renewal first, unread: :meth:`_renew_as_written`); True when it holds it
        afterwards. A failed request counts as not holding it."""
        began = self.clock()
        if self.leading:
            renewed = self._renew_as_written()
            if renewed is not None:
                return renewed
        try:
            record = self.store.read()
            self.observed = observe(self.observed, record, began)
            decision = decide(self.me, self.observed, began)
            if decision is Decision.WAIT:
                return False
            written = next_record(self.me, record, decision, now_text(), self.timings)
            writing = self.clock()
            if not self.store.write(written):
                return False
        except Exception as err:  # the API unreachable, a timeout, a refusal
            refused = isinstance(err, ApiError) and err.status in (401, 403)
            if refused and str(err) != self.refusal:
                # A missing grant never heals by waiting: say so (once per message).
                log.warning("leader election: refused: %s", err)
            else:
                log.debug("leader election: %s: %s", type(err).__name__, err)
            self.refusal = str(err) if refused else ""
            return False
        self._wrote(written, writing)
        return True

    def _wrote(self, written: LeaseRecord, writing: float) -> None:
        """This replica's write of ``written``, begun at ``writing``, succeeded."""
        self.observed = observe(self.observed, written, self.clock())
        # When the write began: the renewal is at least this fresh, never fresher (a
        # follower's wait starts once it sees the write; the read before it does not count).
        self.last_renewed = writing

    def _renew_as_written(self) -> bool | None:
        """The leader's fast path, as client-go's: renew the record as this replica last
        wrote it, conditional on that write's resourceVersion, without reading it first.
        One request a renewal instead of two, so that a slow API server still lets one
        through within the renew deadline (a loaded test cluster's, at seconds a request,
        made the leaders of the operator and of Kueue exit in turn). True: renewed; False:
        it failed (the next look tries again); None: the Lease changed since (a conflict),
        or this replica wrote no record of its own: read it."""
        record = self.observed.record if self.observed is not None else None
        if record is None or record.holder != self.me:
            return None
        written = next_record(self.me, record, Decision.RENEW, now_text(), self.timings)
        writing = self.clock()
        try:
            if not self.store.write(written):
                log.info("leader election: the lease changed since this replica renewed it; "
                         "reading it")  # fmt: skip
                return None
        except Exception as err:  # the API unreachable, a timeout, a refusal
            if isinstance(err, ApiError) and err.status in (401, 403):
                return None  # the read meets it too, and says so once
            log.debug("leader election: renewal failed: %s: %s", type(err).__name__, err)
            return False
        self._wrote(written, writing)
        return True

    def acquire(self) -> bool:
        """Block until this replica leads (True) or :meth:`stop` is called (False)."""
        holder = None
        while not self._stop.is_set():
            if self.look():
                self._gain()
                return True
            current = self.holder()
            if current != holder:
                holder = current
                log.info("leader election: following %s", holder or "nobody (lease free)")
            self._stop.wait(self.timings.retry_period)
        return False

    def holder(self) -> str | None:
        """Who holds the Lease as last read ("" when free, None before any reading)."""
        record = self.observed.record if self.observed is not None else None
        return record.holder if record is not None else None

    def _gain(self) -> None:
        self.leading = True
        log.info("leader election: %s leads (lease %s/%s)", self.me, self.store.namespace,
                 self.store.name)  # fmt: skip
        self.on_change(True)
        threading.Thread(target=self._renew, name="leader-renew", daemon=True).start()
        threading.Thread(target=self._watchdog, name="leader-watchdog", daemon=True).start()

    def _renew(self) -> None:
        while not self._stop.wait(self.timings.retry_period):
            if not self.look() and self.holder() not in (None, "", self.me):
                self._lose(f"the lease is held by {self.holder()}")
                return

    def _watchdog(self) -> None:
        while not self._stop.wait(WATCHDOG_SECONDS):
            if self.last_renewed is not None and not still_leading(
                    self.last_renewed, self.clock(), self.timings):  # fmt: skip
                self._lose(f"no renewal for {self.timings.renew_deadline:.0f}s")
                return

    def _lose(self, why: str) -> None:
        if not self.leading or self._stop.is_set():
            return
        self.leading = False
        log.error("leader election: %s lost the lease (%s); stopping", self.me, why)
        self.on_change(False)
        self.on_lost()

    def stop(self) -> None:
        self._stop.set()

    def release(self) -> None:
        """Stop renewing; if this replica still holds the Lease, free it."""
        self.stop()
        if not self.leading:
            return
        self.leading = False
        try:
            record = self.store.read()
            if record is not None and record.holder == self.me:
                self.store.write(released(record, now_text()))
                log.info("leader election: %s released the lease", self.me)
        except Exception as err:
            log.warning("leader election: release failed (%s: %s); the lease expires in %.0fs",
                        type(err).__name__, err, self.timings.lease_duration)  # fmt: skip
        self.on_change(False)


def elector(args: argparse.Namespace, on_change: Callable[[bool], None]) -> Elector:
    """The elector ``syncreplicas operator --leader-elect on`` runs, from its arguments."""
    timings = election_timings(args)
    store = LeaseStore(api().client, args.leader_election_namespace, args.leader_election_id,
                       timeout=max(1.0, timings.renew_deadline / 2))  # fmt: skip
    return Elector(store, identity(), timings, on_change)


class FollowerHealth:
    """``/healthz`` on the liveness port while this replica waits to lead (kopf serves it
    once it runs): a follower is alive, so its kubelet leaves it alone."""

    def __init__(self, port: int) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200 if self.path == "/healthz" else 404)
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        """Free the port for kopf."""
        self.server.shutdown()
        self.server.server_close()
