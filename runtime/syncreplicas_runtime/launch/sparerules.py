"""Spare pods: the rules of the wait for a replica's identity and of its handover (PURE).

A job may keep spare pods (docs/contract.md, "Spare pods"): their container runs ``python
-m syncreplicas_runtime`` with :data:`TOKEN_ENV` set and no replica's variables. It imports
what a replica imports, then waits on the metrics port (``spare.py``) until the operator
posts a replica's environment to ``ASSIGN_PATH`` (foundation/endpoints.py), and trains as
that replica from then on, in the same process. This module decides everything about that handover
without doing any of it:

- which variables make a process a spare, and what they must hold (:func:`parse_settings`);
- who may hand over an identity (the pod's secret, compared in constant time:
  :func:`authorize`), how big the request may be (:func:`body_length`);
- what an assignment may set (:func:`allowed_name`: ``TF_CONFIG`` and the runtime's own
  ``SYNCREPLICAS_*`` variables, never the spare's; no ``LD_PRELOAD``, no ``PYTHONPATH``: a
  leaked secret hands over a replica's identity and nothing else) and what it must set,
  checked as the replica would check it (:func:`parse_assignment`);
- the file that keeps an assignment across a container restart (:func:`file_text`,
  :func:`parse_file`), and the environment the replica runs with (:func:`replica_environ`).

Each refusal is a :class:`Refusal`: the HTTP status and a one-line message naming the part.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from ..foundation.config import INCARNATION_ENV, ConfigError, parse_config
from .restartrules import RuleError, parse_rule

# Set by the operator on a spare pod: the spare's secret (hex). Its presence: spare mode.
TOKEN_ENV: Final = "SYNCREPLICAS_SPARE_TOKEN"
# The file that keeps the assignment (in the pod's /tmp emptyDir: it survives a container
# restart). Unset: DEFAULT_STATE_FILE; "": none is kept.
STATE_ENV: Final = "SYNCREPLICAS_SPARE_STATE"
DEFAULT_STATE_FILE: Final = "/tmp/syncreplicas-spare-assignment.json"
# The port the spare listens on: the job's metrics port, which the replica takes over.
PORT_ENV: Final = "SYNCREPLICAS_METRICS_PORT"
MIN_TOKEN_CHARS: Final = 32
TOKEN_RE: Final = re.compile(r"^[0-9a-fA-F]+$")

# What an assignment may set: TF_CONFIG and the runtime's variables, never the spare's.
TF_CONFIG: Final = "TF_CONFIG"
JOB_ENV: Final = "SYNCREPLICAS_JOB"
RUNTIME_PREFIX: Final = "SYNCREPLICAS_"
SPARE_PREFIX: Final = "SYNCREPLICAS_SPARE_"
NAME_RE: Final = re.compile(r"^SYNCREPLICAS_[A-Z0-9_]+$")
REQUIRED: Final = (TF_CONFIG, JOB_ENV, INCARNATION_ENV)

# Set by the spare on the replica it became (and so on its warm restarts' forks): the job's
# model was already built by the replicas it joins, so the replica skips the model check it
# would otherwise make before it touches the cluster (plain.py), which delays the takeover.
TOOK_OVER_ENV: Final = "SYNCREPLICAS_TOOK_OVER"

# The HTTP side (its paths: foundation/endpoints.py).
MAX_BODY_BYTES: Final = 1 << 20
BEARER: Final = "bearer"
READY_BODY: Final = b"spare\n"
METRIC: Final = "syncreplicas_spare"
METRIC_HELP: Final = "A spare pod waiting for a replica's identity"
METRICS_CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

ASSIGNED: Final = 200
BAD_REQUEST: Final = 400
UNAUTHORIZED: Final = 401
CONFLICT: Final = 409
TOO_LARGE: Final = 413

# The assignment file's own key next to the request's "env": whom the spare became.
ASSIGNED_KEY: Final = "assigned"


class SettingsError(ValueError):
    """A spare's variable the operator would not have written."""


class Refusal(ValueError):
    """A request the spare does not act on: the HTTP status and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        message = " ".join(message.split())  # one line, whatever it quotes
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Settings:
    """A spare's own variables."""

    token: str
    state_file: str  # "": the assignment is not kept
    port: int


@dataclass(frozen=True)
class Assignment:
    """A replica's identity handed to a spare: the variables, and whom they make it."""

    env: Mapping[str, str]
    role: str
    index: int
    incarnation: int
    warm_restarts: bool  # the replica runs under warm restarts (supervisor.py)

    @property
    def replica(self) -> str:
        """``ps-0``, ``chief-0``, ``worker-3``."""
        return f"{self.role}-{self.index}"


def is_spare(env: Mapping[str, str]) -> bool:
    """Whether the process is a spare (the operator set its secret)."""
    return TOKEN_ENV in env


def parse_settings(env: Mapping[str, str]) -> Settings:
    """A spare's variables; raises SettingsError naming the one that is wrong."""
    token = env.get(TOKEN_ENV, "")
    if len(token) < MIN_TOKEN_CHARS or not TOKEN_RE.match(token):
        raise SettingsError(f"{TOKEN_ENV}: must be at least {MIN_TOKEN_CHARS} hex digits "
                            f"(got {len(token)} characters)")
    raw = env.get(PORT_ENV, "").strip()
    if not raw.isascii() or not raw.isdigit() or not 0 < int(raw) < 65536:
        raise SettingsError(f"{PORT_ENV}: a spare needs a port to listen on (1..65535), "
                            f"got {raw!r}")
    return Settings(token=token, state_file=env.get(STATE_ENV, DEFAULT_STATE_FILE),
                    port=int(raw))


def allowed_name(name: str) -> bool:
    """Whether an assignment may set variable ``name``: ``TF_CONFIG``, or a runtime
    variable (``SYNCREPLICAS_`` and capitals, digits, ``_``) that is not a spare's own."""
    if name == TF_CONFIG:
        return True
    return bool(NAME_RE.match(name)) and not name.startswith(SPARE_PREFIX)


def authorize(header: str | None, token: str) -> None:
    """Raise Refusal 401 unless ``header`` is ``Bearer <token>`` (compared in constant
    time; the scheme in any case, as HTTP has it)."""
    scheme, _, given = (header or "").strip().partition(" ")
    given = given.strip()
    matches = hmac.compare_digest(given.encode("utf-8", "surrogateescape"),
                                  token.encode("utf-8"))  # fmt: skip
    if scheme.lower() != BEARER or not matches:
        raise Refusal(UNAUTHORIZED, "missing or wrong bearer token")


def body_length(content_length: str | None) -> int:
    """The request's body size from its Content-Length; Refusal 400 without one, 413
    above :data:`MAX_BODY_BYTES`."""
    raw = (content_length or "").strip()
    if not raw.isascii() or not raw.isdigit():
        raise Refusal(BAD_REQUEST, "body: a Content-Length is required")
    size = int(raw)
    if size > MAX_BODY_BYTES:
        raise Refusal(TOO_LARGE, f"body: {size} bytes, more than {MAX_BODY_BYTES}")
    return size


def already_assigned(replica: str) -> Refusal:
    """The answer to any assignment once the spare took one."""
    return Refusal(CONFLICT, f"already assigned: this pod is {replica}")


def _shown(name: str) -> str:
    """A name as a one-line message may hold it."""
    return name if name.isprintable() and len(name) <= 100 else repr(name[:100])


def _env_object(doc: object, extra_keys: frozenset[str]) -> dict[str, str]:
    """The ``env`` object of a request (or of the file, which may hold ``extra_keys``)."""
    if not isinstance(doc, dict):
        raise Refusal(BAD_REQUEST, f"body: must be a JSON object, got {type(doc).__name__}")
    for key in doc:
        if key != "env" and key not in extra_keys:
            raise Refusal(BAD_REQUEST, f"body.{_shown(key)}: unknown key (only env)")
    env = doc.get("env")
    if env is None:
        raise Refusal(BAD_REQUEST, "body.env: is missing")
    if not isinstance(env, dict):
        raise Refusal(BAD_REQUEST, f"body.env: must be an object of name -> string, got "
                      f"{type(env).__name__}")
    out: dict[str, str] = {}
    for name, value in env.items():
        if not allowed_name(name):
            raise Refusal(BAD_REQUEST, f"body.env.{_shown(name)}: not allowed (only TF_CONFIG "
                          f"and {RUNTIME_PREFIX}* other than {SPARE_PREFIX}*)")
        if not isinstance(value, str):
            raise Refusal(BAD_REQUEST, f"body.env.{_shown(name)}: must be a string, got "
                          f"{type(value).__name__}")
        if "\0" in value:
            raise Refusal(BAD_REQUEST, f"body.env.{_shown(name)}: holds a NUL character")
        out[name] = value
    for name in REQUIRED:
        if not out.get(name, "").strip():
            raise Refusal(BAD_REQUEST, f"body.env.{name}: is missing")
    return out


def replica_environ(base: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """The replica's environment: the spare's own without its ``SYNCREPLICAS_SPARE_*``
    variables (the replica and its forks never see the secret), then the assignment's."""
    out = {k: v for k, v in base.items() if not k.startswith(SPARE_PREFIX)}
    out.update(env)
    return out


def _assignment(doc: object, base: Mapping[str, str], extra_keys: frozenset[str]) -> Assignment:
    env = _env_object(doc, extra_keys)
    merged = replica_environ(base, env)
    try:
        # As the replica will read it: a spare given what a replica would exit 64 on stays
        # a spare (started_ms is never used: the incarnation is required).
        cfg = parse_config(merged, started_ms=0)
        rule = parse_rule(merged)
    except (ConfigError, RuleError) as err:
        raise Refusal(BAD_REQUEST, f"body.env: bad configuration: {err}") from err
    return Assignment(env=MappingProxyType(dict(sorted(env.items()))), role=cfg.role,
                      index=cfg.index, incarnation=cfg.incarnation,
                      warm_restarts=rule is not None)  # fmt: skip


def _json(data: bytes | str) -> object:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError
        reason = err.msg if isinstance(err, json.JSONDecodeError) else type(err).__name__
        raise Refusal(BAD_REQUEST, f"body: not JSON ({reason})") from err


def parse_assignment(body: bytes, base: Mapping[str, str]) -> Assignment:
    """A request's body ``{"env": {"NAME": "value", ...}}`` as the assignment it makes of
    the spare whose environment is ``base``; raises Refusal 400 naming the bad part."""
    return _assignment(_json(body), base, frozenset())


def answer(assignment: Assignment) -> bytes:
    """The body of a 200: whom the spare became."""
    return json.dumps({ASSIGNED_KEY: assignment.replica}).encode() + b"\n"


def file_text(assignment: Assignment) -> str:
    """The assignment file: the request's form, with whom it made the spare."""
    doc = {ASSIGNED_KEY: assignment.replica, "env": dict(assignment.env)}
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def parse_file(text: str, base: Mapping[str, str]) -> Assignment:
    """An assignment file as written by :func:`file_text`, checked as a request is (a file
    the rules refuse is no assignment: Refusal)."""
    return _assignment(_json(text), base, frozenset({ASSIGNED_KEY}))


def metrics_text() -> bytes:
    """A spare's /metrics: one gauge, in the Prometheus text format."""
    return (f"# HELP {METRIC} {METRIC_HELP}\n# TYPE {METRIC} gauge\n{METRIC} 1\n").encode()


def stopped_reason(signal_name: str) -> str:
    """The termination message's reason of a spare stopped before it became a replica."""
    return (f"spare pod stopped by {signal_name} before it was assigned a replica's "
            f"identity")


def assigned_line(assignment: Assignment, restarted_from: str = "") -> str:
    """The log line of a spare that became a replica (again, from its file, after a
    container restart)."""
    again = f" again, from {restarted_from} (its container restarted)" if restarted_from else ""
    return f"spare assigned: {assignment.replica} (incarnation {assignment.incarnation}){again}"
