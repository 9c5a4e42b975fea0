"""The exception a replica raises to end with a contract exit code and a one-line reason."""

from __future__ import annotations

from ..foundation import exitcodes


class Exit(Exception):
    """End the process with ``code``; ``reason`` is printed as the one-line cause."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{exitcodes.describe(code)}: {reason}")
        self.code = code
        self.reason = reason
