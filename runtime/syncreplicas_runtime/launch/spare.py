"""Spare mode: a pod's process with TensorFlow imported, waiting for a replica's identity.

``python -m syncreplicas_runtime`` runs this first when the operator made the pod a spare
(``sparerules.TOKEN_ENV``; the rules are in ``sparerules.py``, the contract in
docs/contract.md, "Spare pods"):

1. An assignment file left by this pod's last container (``sparerules.STATE_ENV``): the
   spare had become a replica, and its container restarted. It becomes that replica again
   at once, without serving.
2. Otherwise it imports what every replica imports (``preloaded.preload``), then listens
   on the metrics port: ``/readyz`` (the pod's readiness: the port opens only once
   TensorFlow is imported), ``/healthz``, ``/metrics`` (``syncreplicas_spare 1``) and
   ``POST /spare/assign``. An accepted assignment is written to the file (a temporary
   file renamed over it) before the 200 is sent; then the port is closed for the replica
   to take it over.
3. SIGTERM or SIGINT while a spare: exit 0 at once (the spare pod is being deleted), the
   termination message saying so.

Once assigned, the process's environment is the replica's (the spare's own variables
gone) and ``entry.entry_point`` carries on as for any replica's pod: ``supervisor.py``
under warm restarts, else the replica in this process (``plain.py``). Nothing here leaves a
thread behind (the server's request threads are joined first): ``supervisor.py`` forks,
and a lock held by another thread at a fork stays held in the child.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ..foundation.endpoints import ASSIGN_PATH, HEALTH_PATH, METRICS_PATH, READY_PATH
from ..foundation.exitcodes import CONFIG, OK
from ..process.termination import exit_now, report_exit
from . import sparerules as rules
from .preloaded import preload, say

POLL_SECONDS = 0.1
# A client that sends nothing holds its request's thread this long, and the handover waits
# for every request's thread.
REQUEST_TIMEOUT_SECONDS = 5.0
TEXT = "text/plain; charset=utf-8"
INTERNAL_ERROR = 500


class Waiting:
    """A spare's state: its settings, its environment, and the assignment once taken."""

    def __init__(self, settings: rules.Settings, base: dict[str, str]) -> None:
        self.settings = settings
        self.base = base
        self.lock = threading.Lock()
        self.assignment: rules.Assignment | None = None

    def assign(self, authorization: str | None, content_length: str | None,
               body: io.BufferedIOBase) -> tuple[int, bytes, str]:  # fmt: skip
        """One ``POST /spare/assign``: the status, body and content type of its answer."""
        try:
            rules.authorize(authorization, self.settings.token)
            with self.lock:
                if self.assignment is not None:
                    raise rules.already_assigned(self.assignment.replica)
            size = rules.body_length(content_length)
            data = body.read(size)
            if len(data) < size:
                raise rules.Refusal(rules.BAD_REQUEST, "body: shorter than its Content-Length")
            assignment = rules.parse_assignment(data, self.base)
            with self.lock:
                if self.assignment is not None:
                    raise rules.already_assigned(self.assignment.replica)
                try:
                    keep(self.settings.state_file, assignment)
                except OSError as err:
                    return (INTERNAL_ERROR, f"cannot keep the assignment in "
                            f"{self.settings.state_file}: {err}\n".encode(), TEXT)  # fmt: skip
                self.assignment = assignment
        except rules.Refusal as refused:
            return refused.status, f"{refused.message}\n".encode(), TEXT
        return rules.ASSIGNED, rules.answer(assignment), "application/json"


def keep(path: str, assignment: rules.Assignment) -> None:
    """Write the assignment file atomically (a reader sees the old file or the whole new
    one); no file when ``path`` is ""."""
    if not path:
        return
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(rules.file_text(assignment))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def kept(path: str, base: dict[str, str]) -> rules.Assignment | None:
    """The assignment this pod's last container took, if its file is there and valid."""
    if not path:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        say(f"cannot read the spare's assignment file {path} ({err}); waiting as a spare")
        return None
    try:
        return rules.parse_file(text, base)
    except rules.Refusal as refused:
        say(f"ignoring the spare's assignment file {path} ({refused.message}); waiting as a "
            "spare")
        return None


def handler_for(state: Waiting) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT_SECONDS

        def answer(self, code: int, body: bytes, ctype: str = TEXT) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            if code == 405:
                self.send_header("Allow", "POST")
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == READY_PATH:
                self.answer(200, rules.READY_BODY)
            elif path == HEALTH_PATH:
                self.answer(200, b"ok\n")
            elif path == METRICS_PATH:
                self.answer(200, rules.metrics_text(), rules.METRICS_CONTENT_TYPE)
            elif path == ASSIGN_PATH:
                self.answer(405, b"POST only\n")
            else:
                self.answer(404, b"not found\n")

        def do_POST(self) -> None:
            if self.path.split("?", 1)[0] != ASSIGN_PATH:
                self.answer(404, b"not found\n")
                return
            try:
                code, body, ctype = state.assign(self.headers.get("Authorization"),
                                                 self.headers.get("Content-Length"),
                                                 self.rfile)  # fmt: skip
            except OSError:  # the client went away or sent too slowly: no answer
                self.close_connection = True
                return
            self.close_connection = True
            self.answer(code, body, ctype)

        def log_message(self, *args: Any) -> None:  # probes and scrapes are not log lines
            pass

    return Handler


class Server(ThreadingHTTPServer):
    """A thread per request, every one joined by ``server_close``."""

    block_on_close = True
    timeout = POLL_SECONDS  # how often ``handle_request`` looks at the assignment


def wait(server: Server, state: Waiting) -> rules.Assignment:
    """Answer requests until one is an accepted assignment."""
    while (assignment := state.assignment) is None:
        server.handle_request()
    return assignment


def scrub_from_process(name: str) -> None:
    """Overwrite a variable's value in the environment the process was started with, which
    ``/proc/PID/environ`` shows for it and every process forked from it (removing it from
    ``os.environ`` leaves that copy as it was). Linux; elsewhere nothing."""
    value = os.environb.get(name.encode())
    if not value:
        return
    with contextlib.suppress(OSError, AttributeError, ValueError, TypeError):
        libc = ctypes.CDLL(None)
        libc.getenv.restype = ctypes.c_void_p
        libc.getenv.argtypes = [ctypes.c_char_p]
        address = libc.getenv(name.encode())
        if address and ctypes.string_at(address, len(value)) == value:
            ctypes.memset(address, ord("0"), len(value))


def become(assignment: rules.Assignment) -> None:
    """Make the process's environment the replica's: the spare's variables gone (the
    secret from the process's first environment too), the assignment's set, and
    ``sparerules.TOOK_OVER_ENV``."""
    scrub_from_process(rules.TOKEN_ENV)
    environ = rules.replica_environ(os.environ, assignment.env)
    for name in [n for n in os.environ if n not in environ]:
        del os.environ[name]
    os.environ.update(environ)
    os.environ[rules.TOOK_OVER_ENV] = "1"


def wait_for_assignment() -> int | None:
    """Be a spare until assigned; then the environment is the replica's and None comes
    back (run the replica as for any pod). An exit code when the spare's own variables are
    wrong or its port cannot be opened. A SIGTERM or SIGINT ends the process here."""
    started = time.monotonic()
    try:
        settings = rules.parse_settings(os.environ)
    except rules.SettingsError as err:
        return report_exit(CONFIG, f"bad configuration: {err}")
    state = Waiting(settings, dict(os.environ))
    assignment = kept(settings.state_file, state.base)
    if assignment is not None:
        say(rules.assigned_line(assignment, restarted_from=settings.state_file))
        become(assignment)
        return None

    def stop(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        taken = state.assignment  # read without the lock: a signal handler never waits
        if taken is not None:  # assigned, not yet handed over: stopped as that replica
            exit_now(128 + signum, f"stopped by {name} as {taken.replica}, assigned a "
                     "moment ago, before it started")
        say(f"spare stopped by {name} after {time.monotonic() - started:.1f} s, never assigned")
        exit_now(OK, rules.stopped_reason(name))

    # Left in place once assigned: until the replica's own handlers are (the supervisor's,
    # plain.main's), a stop ends it as the replica it became (as the container's first
    # process, with no handler, it would not see the signal at all).
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    preload()
    try:
        server = Server(("", settings.port), handler_for(state))
    except OSError as err:
        return report_exit(CONFIG, f"{rules.PORT_ENV} {settings.port}: cannot listen: {err}")
    say(f"spare ready in {time.monotonic() - started:.1f} s (pid {os.getpid()}, port "
        f"{settings.port})")
    try:
        assignment = wait(server, state)
    finally:
        server.server_close()  # the listener, then every request's thread joined
    say(rules.assigned_line(assignment))
    become(assignment)
    return None
