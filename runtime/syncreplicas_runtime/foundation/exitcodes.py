"""Exit codes of the runtime: the part of the operator contract that says whether to retry,
and the words a replica leaves as it exits (its exit line and its termination message).

See docs/contract.md. The operator keeps the same numbers in
``syncreplicas_operator.core.exitcodes`` and reads the termination message in
``syncreplicas_operator.core.status``; unit tests check that the two sides agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

OK: Final = 0
CONFIG: Final = 64
MODEL: Final = 65
UNREACHABLE: Final = 69
RETRY: Final = 75
# Another process holds this replica's identity: a newer incarnation (SYNCREPLICAS_INCARNATION)
# of the same replica joined, and the parameter servers refuse this one. Not a failure of the
# replica: never restart it (its replacement runs already).
FENCED: Final = 77

NON_RETRYABLE: Final = frozenset({CONFIG, MODEL, UNREACHABLE})

NAMES: Final = {
    OK: "OK", CONFIG: "CONFIG", MODEL: "MODEL", UNREACHABLE: "UNREACHABLE", RETRY: "RETRY",
    FENCED: "FENCED",
}


def is_retryable(code: int) -> bool:
    """True when a replica that exited with ``code`` should be restarted."""
    return code != OK and code not in NON_RETRYABLE


def describe(code: int) -> str:
    """A short name for logs and status messages, e.g. ``CONFIG (64)``."""
    return f"{NAMES.get(code, 'EXIT')} ({code})"


def fenced_reason(slot: int, mine: int, owner: int) -> str:
    """The reason of a FENCED exit: whose identity, this process's incarnation, the owner's."""
    who = "the chief" if slot == 0 else f"worker {slot - 1}"
    return (f"superseded: {who} (replica slot {slot}) is held by incarnation {owner}, newer "
            f"than this process's incarnation {mine}; standing down (never restart)")


def exit_line(code: int, reason: str) -> str:
    """The one line every non-zero exit prints to stderr first (docs/contract.md)."""
    return f"syncreplicas: {describe(code)}: {reason}"


# The termination message (docs/contract.md): the file Kubernetes copies into the
# container's status as it ends (``state.terminated.message``), where the operator reads
# it. The env variable moves it (tests, local runs) or, set to "", turns it off.
TERMINATION_LOG_ENV: Final = "SYNCREPLICAS_TERMINATION_LOG"
DEFAULT_TERMINATION_LOG: Final = "/dev/termination-log"
# The kubelet reads at most the last 4096 bytes of the file (and trims a pod's messages to
# 12 KiB together): a message of at most 1 KiB is kept whole.
TERMINATION_MESSAGE_MAX_BYTES: Final = 1024
GLOBAL_STEP_KEY: Final = "globalStep"


# Room kept for the exit line when other facts are added (an export's path may be long).
EXIT_LINE_ROOM: Final = 256


def termination_message(code: int, reason: str, global_step: int | None = None,
                        more: Mapping[str, str] | None = None) -> str:  # fmt: skip
    """The termination message of a replica that exits with ``code``: its exit line (the
    reason on one line), then ``globalStep=N``, the last global step it saw, when it saw
    one, then each of ``more`` as ``key=value`` (the chief's exports: a value with
    whitespace, or one that does not fit, is left out). At most
    :data:`TERMINATION_MESSAGE_MAX_BYTES` bytes (the reason is cut)."""
    facts = f"{GLOBAL_STEP_KEY}={global_step}\n" if global_step is not None else ""
    for key, value in (more or {}).items():
        fact = f"{key}={value}\n"
        fits = len((facts + fact).encode()) <= TERMINATION_MESSAGE_MAX_BYTES - EXIT_LINE_ROOM
        if value and not any(c.isspace() for c in value) and fits:
            facts += fact
    line = exit_line(code, " ".join(reason.split()) or "(no reason)")
    room = TERMINATION_MESSAGE_MAX_BYTES - len(facts.encode()) - 1  # the line's newline
    line = line.encode()[:room].decode("utf-8", "ignore")
    return f"{line}\n{facts}"
