"""The debug step delay's setting (``SYNCREPLICAS_DEBUG_STEP_DELAY_MS``, config.py): a test
and benchmark hook, not for production. Pure.

- ``MS``: sleep that many milliseconds before every step;
- ``@/path``: as many as the file says, re-read while training (a straggler that can be
  turned on and off);
- ``pareto:MS:ALPHA``: a straggler with a heavy tail, a fresh delay before every step drawn
  from a Pareto distribution of scale MS and shape ALPHA (at least MS; mean
  ``MS * ALPHA / (ALPHA - 1)`` for ALPHA > 1; the smaller ALPHA, the heavier the tail),
  from a generator seeded by the replica's name, so that runs repeat.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass

PARETO = "pareto:"


@dataclass(frozen=True)
class StepDelay:
    ms: float = 0.0
    file: str | None = None
    pareto: tuple[float, float] | None = None  # scale (ms), shape


def parse_step_delay(setting: str) -> StepDelay:
    """The setting's meaning; ValueError with the accepted forms."""
    setting = setting.strip() or "0"
    if setting.startswith("@") and len(setting) > 1:
        return StepDelay(file=setting[1:])
    try:
        if setting.startswith(PARETO):
            scale, shape = (float(x) for x in setting[len(PARETO):].split(":"))
            if scale < 0 or shape <= 0:
                raise ValueError(setting)
            return StepDelay(pareto=(scale, shape))
        ms = float(setting)
        if ms < 0:
            raise ValueError(setting)
        return StepDelay(ms=ms)
    except ValueError:
        raise ValueError("must be a number of milliseconds, @FILE or pareto:MS:ALPHA "
                         f"(MS >= 0, ALPHA > 0), got {setting!r}") from None


class ParetoDelays:
    """Delays (seconds) drawn from Pareto(scale, shape), seeded by ``name``."""

    def __init__(self, scale_ms: float, shape: float, name: str) -> None:
        self.scale, self.shape = scale_ms / 1000.0, shape
        self._rng = random.Random(zlib.crc32(name.encode()))

    def next(self) -> float:
        return self.scale * self._rng.paretovariate(self.shape)
