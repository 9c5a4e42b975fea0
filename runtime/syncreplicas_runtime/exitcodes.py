"""Exit codes of the runtime: the part of the operator contract that says whether to retry.

See docs/contract.md. The operator keeps the same numbers in
``syncreplicas_operator.core.exitcodes``; a unit test checks that the two agree.
"""

from __future__ import annotations

from typing import Final

OK: Final = 0
CONFIG: Final = 64
MODEL: Final = 65
UNREACHABLE: Final = 69
RETRY: Final = 75

NON_RETRYABLE: Final = frozenset({CONFIG, MODEL, UNREACHABLE})

NAMES: Final = {
    OK: "OK", CONFIG: "CONFIG", MODEL: "MODEL", UNREACHABLE: "UNREACHABLE", RETRY: "RETRY",
}


def is_retryable(code: int) -> bool:
    """True when a replica that exited with ``code`` should be restarted."""
    return code != OK and code not in NON_RETRYABLE


def describe(code: int) -> str:
    """A short name for logs and status messages, e.g. ``CONFIG (64)``."""
    return f"{NAMES.get(code, 'EXIT')} ({code})"


def exit_line(code: int, reason: str) -> str:
    """The one line every non-zero exit prints to stderr first (docs/contract.md)."""
    return f"syncreplicas: {describe(code)}: {reason}"
