"""Fire ``--chaos`` faults and apply ``--resize`` changes at the global steps they name.

The schedules come from the pure ``chaos`` and ``resize`` modules; here they meet the
running job. One fault at a time, and only into a settled job (nothing waiting for a
restart, the victim and the chief up); one resize at a time, applied as the operator
applies a change of spec.workers. Each is recorded with when it took effect (recovery
after a fault, the new workers' first step or the leavers' exit after a resize).
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping, Sequence

from ..core import metricnames, naming
from .chaos import ChaosKill
from .replicas import Replicas
from .resize import Resize
from .scrape import Sample
from .summary import ChaosRecord, PlannedKill, ResizeRecord


class Interventions:
    """The faults and resizes still to come, and those fired."""

    def __init__(
        self,
        replicas: Replicas,
        latest: Callable[[], Mapping[str, Sample]],
        *,
        chaos: Sequence[ChaosKill],
        resizes: Sequence[Resize],
        since_start: Callable[[], float],
        note: Callable[[str], None],
    ) -> None:
        self.replicas = replicas
        self.latest = latest
        self.chaos = list(chaos)
        self.chaos_log: list[ChaosRecord] = []
        self.resizes = list(resizes)
        self.resize_log: list[ResizeRecord] = []
        self.since_start = since_start  # seconds since the run started (the scraper's clock)
        self.note = note

    def tick(self) -> None:
        """One look at the job, from the supervision loop."""
        self._chaos_tick()
        self._resize_tick()

    def chaos_not_fired(self) -> list[PlannedKill]:
        return [PlannedKill(at_step=k.at_step, replica=naming.replica_key(k.role, k.index))
                for k in self.chaos]

    def resizes_not_fired(self) -> list[tuple[int, int]]:
        return [(r.at_step, r.workers) for r in self.resizes]

    def _global_step(self) -> float | None:
        steps = [s.values.get(metricnames.GLOBAL_STEP) for s in self.latest().values()]
        known = [s for s in steps if s is not None]
        return max(known) if known else None

    # -- chaos -------------------------------------------------------------------------
    def _chaos_tick(self) -> None:
        step = self._global_step()
        if self.chaos_log:
            last = self.chaos_log[-1]
            if last.recovered_after_seconds is None:
                # Any replica's step past the kill step, scraped after the kill, is recovery.
                after = [s for s in self.latest().values() if s.at > last.fired_at
                         and (s.values.get(metricnames.GLOBAL_STEP) or 0) > last.step_at_kill]
                if after:
                    last.recovered_after_seconds = round(
                        min(s.at for s in after) - last.fired_at, 3
                    )
                else:
                    return  # one fault at a time: the next waits for this recovery
        if not self.chaos or step is None or step < self.chaos[0].at_step:
            return
        # Only into a settled job: nothing waiting for a restart, the victim up.
        if any(r.restart_at is not None for r in self.replicas):
            return
        by_name = self.replicas.by_name
        victim = by_name[naming.replica_key(self.chaos[0].role, self.chaos[0].index)]
        if not victim.running() or not by_name[naming.CHIEF_KEY].running():
            return
        kill = self.chaos.pop(0)
        signum = signal.SIGKILL if kill.signal == "KILL" else signal.SIGTERM
        with self.replicas.lock:
            victim.injected = True
        self.replicas.signal(victim, signum)
        self.chaos_log.append(ChaosRecord(
            planned_step=kill.at_step, step_at_kill=step, replica=victim.name,
            signal=kill.signal, fired_at=round(self.since_start(), 3),
        ))
        self.note(f"chaos: SIG{kill.signal} {victim.name} at global step {int(step)}")

    # -- resize ------------------------------------------------------------------------
    def _resize_tick(self) -> None:
        """Apply the next --resize once its step is reached, as the operator applies a
        change of spec.workers: start the new slots' workers, or SIGTERM the highest ones
        (they leave the job and exit 0). Records when the change took effect."""
        self._resize_progress()
        if self.resize_log and self.resize_log[-1].done_after_seconds is None:
            return  # one change at a time: the next waits until this one took effect
        step = self._global_step()
        if not self.resizes or step is None or step < self.resizes[0].at_step:
            return
        if any(r.restart_at is not None for r in self.replicas):
            return  # one change at a time: not into a restart
        target = self.resizes[0].workers
        current = self.replicas.workers
        slots = [r for r in self.replicas.of_type(naming.WORKER)
                 if min(current, target) <= r.spec.index < max(current, target)]
        if target > current and any(r.running() for r in slots):
            return  # a worker of a slot asked to leave before has not left yet
        resize = self.resizes.pop(0)
        with self.replicas.lock:
            self.replicas.workers = target
        self.resize_log.append(ResizeRecord(
            planned_step=resize.at_step, step_at_resize=step, workers_from=current,
            workers_to=target, fired_at=round(self.since_start(), 3),
            replicas=[r.name for r in slots],
        ))
        self.note(f"resize: workers {current} -> {target} at global step {int(step)}")
        if target > current:
            for replica in slots:
                self.replicas.spawn(replica)
        else:
            for replica in sorted(slots, key=lambda r: -r.spec.index):
                self.replicas.signal(replica, signal.SIGTERM)

    def _resize_progress(self) -> None:
        """The last resize is done when its new workers made a step, or its leavers left."""
        if not self.resize_log or self.resize_log[-1].done_after_seconds is not None:
            return
        last = self.resize_log[-1]
        if last.workers_to > last.workers_from:
            latest = self.latest()
            done = all(name in latest and latest[name].at > last.fired_at
                       and (latest[name].values.get(metricnames.LOCAL_STEP) or 0) >= 1
                       for name in last.replicas)
        else:
            done = not any(self.replicas.by_name[name].running() for name in last.replicas)
        if done:
            last.done_after_seconds = round(self.since_start() - last.fired_at, 3)
