"""Why ``syncreplicas run`` stops early, and the exit codes it ends with.

A failed job passes the runtime's code through when it is one of the documented ones, so
scripts can tell a bad model from a crash; these are the runner's own codes.
"""

from __future__ import annotations

from typing import Final

RUN_FAILED: Final = 1
RUN_BAD_INPUT: Final = 2
RUN_INTERRUPTED: Final = 130


class RunError(Exception):
    """A run that cannot start; the message is shown as is and ``code`` is the exit code."""

    def __init__(self, message: str, code: int = RUN_BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code
