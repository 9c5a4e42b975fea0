"""Parse ``syncreplicas run --resize STEP:WORKERS[,STEP:WORKERS...]`` into a resize schedule.

Pure: no clock, no processes. The runner applies each resize once the job's global step
has reached STEP, as the operator does when ``spec.workers`` changes: new workers are
started in their slots, and the highest-index workers get SIGTERM and leave. The schedule
is a function of the arguments and the manifest alone, so a run repeats it on any machine.

Example: ``100:4,300:1`` scales the job to 4 workers at global step 100 and to 1 at 300.
Only a job with ``spec.elasticPolicy`` may be resized, within its bounds.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.spec import JobSpec


class ResizeSpecError(ValueError):
    """The --resize SPEC is malformed or leaves the job's bounds; the message says which."""


@dataclass(frozen=True)
class Resize:
    """Scale to ``workers`` once the global step is >= ``at_step``."""

    at_step: int
    workers: int


def parse_resize(text: str, spec: JobSpec) -> tuple[Resize, ...]:
    """The schedule of SPEC for a job with ``spec``; raise ResizeSpecError naming the term
    (and the field of the manifest a bound comes from)."""
    terms = [t.strip() for t in text.split(",") if t.strip()]
    if not terms:
        raise ResizeSpecError("--resize: empty spec; expected e.g. '100:4,300:1'")
    policy = spec.elastic_policy
    if policy is None:
        raise ResizeSpecError(
            "--resize: spec.elasticPolicy is not set: the job's workers cannot change while "
            "it trains (set spec.elasticPolicy.minWorkers/maxWorkers)"
        )
    out: list[Resize] = []
    for term in terms:
        step_text, sep, workers_text = (p.strip() for p in term.partition(":"))
        if not sep or not step_text.isdigit() or not workers_text.isdigit():
            raise ResizeSpecError(f"--resize: {term!r}: expected STEP:WORKERS, e.g. '100:4'")
        step, workers = int(step_text), int(workers_text)
        if not 0 < step < spec.training.max_steps:
            raise ResizeSpecError(
                f"--resize: {term!r}: STEP must be in 1..{spec.training.max_steps - 1} "
                f"(spec.training.maxSteps is {spec.training.max_steps})"
            )
        if not policy.min_workers <= workers <= policy.max_workers:
            raise ResizeSpecError(
                f"--resize: {term!r}: spec.workers must be within spec.elasticPolicy "
                f"[minWorkers {policy.min_workers}, maxWorkers {policy.max_workers}], "
                f"got {workers}"
            )
        if out and step <= out[-1].at_step:
            raise ResizeSpecError(
                f"--resize: {term!r}: steps must increase (after {out[-1].at_step})"
            )
        out.append(Resize(at_step=step, workers=workers))
    return tuple(out)
