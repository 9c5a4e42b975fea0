"""Check the job's model once, before any process starts, with the runtime's own loader.

``python -m syncreplicas_runtime.model ENTRYPOINT`` in a child process (the operator never
imports the runtime or TensorFlow): a model that does not load or build ends the run at
once with the runtime's reason, instead of every replica failing the same way.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from typing import Final

from ..core import exitcodes
from .errors import RunError

MODEL_CHECK_TIMEOUT_SECONDS: Final = 300
# How the runtime's model check names a bad model (docs/contract.md's exit line).
_MODEL_LINE_PREFIX: Final = f"syncreplicas: {exitcodes.describe(exitcodes.MODEL)}: "


def check_model(entrypoint: str, env: Mapping[str, str]) -> None:
    """Load the model entrypoint once; a bad model is a :class:`RunError` with code MODEL
    and the runtime's reason."""
    result = subprocess.run(
        [sys.executable, "-m", "syncreplicas_runtime.model", entrypoint],
        env=env, capture_output=True, text=True, timeout=MODEL_CHECK_TIMEOUT_SECONDS,
        check=False,
    )
    if result.returncode == 0:
        return
    lines = result.stderr.strip().splitlines() or [f"exit {result.returncode}"]
    raise RunError(lines[-1].removeprefix(_MODEL_LINE_PREFIX), code=exitcodes.MODEL)
