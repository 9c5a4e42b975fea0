"""Parse ``syncreplicas run --chaos SPEC`` and turn it into a seeded kill schedule.

Pure: no clock, no processes. The runner fires each planned kill once the job's global
step has reached it, so a schedule is reproducible for a given seed and manifest no matter
how fast the machine is.

Grammar (comma-separated terms, whitespace ignored)::

    TARGET:COUNT     kill TARGET COUNT times; TARGET is ps, chief or worker (a seeded
                     random index each time) or ps-N / worker-N (that replica)
    seed=N           seed of the schedule (default 0)
    signal=KILL|TERM signal sent (default KILL: no chance to checkpoint)
    window=A-B       kills fall between fractions A and B of maxSteps (default 0.1-0.8)

Example: ``chief:2,worker:1,seed=7`` kills the chief twice and one worker, reproducibly.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Final

from ..core import naming

SIGNALS: Final = ("KILL", "TERM")
MAX_KILLS: Final = 100

_TARGET = re.compile(r"^(ps|chief|worker)(?:-(\d+))?$")


class ChaosSpecError(ValueError):
    """The --chaos SPEC is malformed; the message names the offending term."""


@dataclass(frozen=True)
class KillTarget:
    role: str
    index: int | None  # None: a seeded random replica of that role
    count: int


@dataclass(frozen=True)
class ChaosSpec:
    targets: tuple[KillTarget, ...]
    seed: int = 0
    signal: str = "KILL"
    window: tuple[float, float] = (0.1, 0.8)


@dataclass(frozen=True)
class ChaosKill:
    """One planned fault: send ``signal`` to ``role``-``index`` once global step >= at_step."""

    at_step: int
    role: str
    index: int
    signal: str


def parse_chaos(text: str) -> ChaosSpec:
    """Parse SPEC; raise ChaosSpecError naming the bad term."""
    targets: list[KillTarget] = []
    seed = 0
    signal = "KILL"
    window = (0.1, 0.8)
    terms = [t.strip() for t in text.split(",") if t.strip()]
    if not terms:
        raise ChaosSpecError("--chaos: empty spec; expected e.g. 'chief:2,seed=7'")
    for term in terms:
        if "=" in term:
            key, _, value = (p.strip() for p in term.partition("="))
            if key == "seed":
                seed = _int(term, value, minimum=0)
            elif key == "signal":
                signal = value.upper().removeprefix("SIG")
                if signal not in SIGNALS:
                    raise ChaosSpecError(f"--chaos: {term!r}: signal must be KILL or TERM")
            elif key == "window":
                window = _window(term, value)
            else:
                raise ChaosSpecError(
                    f"--chaos: {term!r}: unknown setting {key!r} (seed, signal, window)"
                )
            continue
        name, sep, count_text = (p.strip() for p in term.partition(":"))
        match = _TARGET.match(name)
        if not sep or match is None:
            raise ChaosSpecError(
                f"--chaos: {term!r}: expected TARGET:COUNT with TARGET one of "
                "ps, chief, worker, ps-N, worker-N"
            )
        role, index_text = match.group(1), match.group(2)
        if role == naming.CHIEF and index_text not in (None, "0"):
            raise ChaosSpecError(
                f"--chaos: {term!r}: there is only one chief (chief or {naming.CHIEF_KEY})"
            )
        index = int(index_text) if index_text is not None else None
        if role == naming.CHIEF:
            index = 0
        count = _int(term, count_text, minimum=1)
        targets.append(KillTarget(role=role, index=index, count=count))
    if not targets:
        raise ChaosSpecError("--chaos: no TARGET:COUNT term; e.g. 'chief:2'")
    if sum(t.count for t in targets) > MAX_KILLS:
        raise ChaosSpecError(f"--chaos: at most {MAX_KILLS} kills in one run")
    return ChaosSpec(targets=tuple(targets), seed=seed, signal=signal, window=window)


def plan_chaos(spec: ChaosSpec, *, max_steps: int, workers: int, ps: int) -> tuple[ChaosKill, ...]:
    """The kill schedule, ordered by global step; raise ChaosSpecError for absent replicas."""
    counts = {naming.PS: ps, naming.CHIEF: 1, naming.WORKER: workers}
    for target in spec.targets:
        available = counts[target.role]
        if available == 0:
            raise ChaosSpecError(f"--chaos: the job has no {target.role} replica to kill")
        if target.index is not None and target.index >= available:
            raise ChaosSpecError(
                f"--chaos: {target.role}-{target.index} does not exist "
                f"(the job has {available} {target.role} replica(s))"
            )
    rng = random.Random(spec.seed)
    victims: list[tuple[str, int]] = []
    for target in spec.targets:
        for _ in range(target.count):
            index = target.index if target.index is not None else rng.randrange(counts[target.role])
            victims.append((target.role, index))
    rng.shuffle(victims)
    low = max(1, int(spec.window[0] * max_steps))
    high = max(low, int(spec.window[1] * max_steps))
    # Distinct steps when the window allows it, so every kill lands in its own recovery.
    span = range(low, high + 1)
    if len(span) >= len(victims):
        steps = sorted(rng.sample(span, len(victims)))
    else:
        steps = sorted(rng.randint(low, high) for _ in victims)
    return tuple(
        ChaosKill(at_step=step, role=role, index=index, signal=spec.signal)
        for step, (role, index) in zip(steps, victims, strict=True)
    )


def _int(term: str, value: str, *, minimum: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ChaosSpecError(f"--chaos: {term!r}: {value!r} is not an integer") from None
    if number < minimum:
        raise ChaosSpecError(f"--chaos: {term!r}: must be >= {minimum}")
    return number


def _window(term: str, value: str) -> tuple[float, float]:
    low_text, sep, high_text = value.partition("-")
    try:
        low, high = float(low_text), float(high_text)
    except ValueError:
        raise ChaosSpecError(f"--chaos: {term!r}: expected window=A-B, e.g. 0.1-0.8") from None
    if not sep or not 0.0 <= low <= high <= 1.0:
        raise ChaosSpecError(f"--chaos: {term!r}: need 0 <= A <= B <= 1")
    return (low, high)
