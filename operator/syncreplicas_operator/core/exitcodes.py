"""Exit codes of the runtime as the operator reads them: which failures to retry.

See docs/contract.md. The runtime defines the same numbers in
``syncreplicas_runtime.foundation.exitcodes``; a unit test checks that the two agree.
"""

from __future__ import annotations

from typing import Final

OK: Final = 0
CONFIG: Final = 64
MODEL: Final = 65
UNREACHABLE: Final = 69
RETRY: Final = 75
# A newer incarnation of the same replica runs (SYNCREPLICAS_INCARNATION): this process was
# refused by the parameter servers and stood down. Not a failure of the replica.
FENCED: Final = 77

NON_RETRYABLE: Final = frozenset({CONFIG, MODEL, UNREACHABLE})

NAMES: Final = {
    OK: "OK",
    CONFIG: "CONFIG",
    MODEL: "MODEL",
    UNREACHABLE: "UNREACHABLE",
    RETRY: "RETRY",
    FENCED: "FENCED",
}


def is_retryable(code: int) -> bool:
    """True when a replica that exited with ``code`` should be restarted."""
    return code != OK and code not in NON_RETRYABLE


def describe(code: int) -> str:
    """A short name for logs and status messages, e.g. ``CONFIG (64)``."""
    return f"{NAMES.get(code, 'EXIT')} ({code})"
