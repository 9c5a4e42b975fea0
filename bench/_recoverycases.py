"""bench/recovery.py's failure scenarios (what each kills, its target) and the table of
their results."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import _observe as obs

CKPT_EVERY = 100
SNAPSHOT_EVERY = 10
R = 3


@dataclass(frozen=True)
class Scenario:
    key: str
    name: str
    kind: str  # chief | worker | ps
    workers: int
    ps: int = 1
    min_r: int | None = None
    snapshot_every: int | None = None  # None: the runtime's default
    system: str = "ours"  # ours | stock
    where: str = "local"  # local | cluster
    target: str = ""
    met: Callable[[list[Kill]], bool] | None = None


@dataclass
class Kill:
    replica: str
    g_before: int
    rate_before: float | None = None
    rate_after: float | None = None
    lost: int | None = None
    first_step_s: float | None = None
    full_r_s: float | None = None
    back_s: float | None = None
    # kill -> the killed replica's first step of its new process (its first counted
    # gradient: the runtime's "first step done" line); None for a PS
    replica_back_s: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        return obs.ratio(self.rate_after, self.rate_before)


@dataclass
class Series:
    scenario: Scenario
    startup_note: str = ""
    kills: list[Kill] = field(default_factory=list)
    events: Counter[str] = field(default_factory=Counter)


def _ratios(kills: list[Kill]) -> list[float]:
    return [k.ratio for k in kills if k.ratio is not None]


def _lost(kills: list[Kill]) -> list[int]:
    return [k.lost for k in kills if k.lost is not None]


def _median_ratio_at_least(x: float) -> Callable[[list[Kill]], bool]:
    return lambda ks: bool(_ratios(ks)) and (obs.median(_ratios(ks)) or 0) >= x


SCENARIOS = [
    Scenario("chief", "chief kill, 1 backup", "chief", workers=3,
             target=">= 0.7x, 0 steps lost",
             met=lambda ks: _median_ratio_at_least(0.7)(ks) and max(_lost(ks), default=1) == 0),
    Scenario("worker", "worker kill, min R = R-1", "worker", workers=2, min_r=R - 1,
             target=">= 0.7x", met=_median_ratio_at_least(0.7)),
    Scenario("ps", f"PS kill, snapshots every {SNAPSHOT_EVERY}", "ps", workers=2, ps=2,
             snapshot_every=SNAPSHOT_EVERY, target=f"steps lost <= {SNAPSHOT_EVERY}",
             met=lambda ks: bool(_lost(ks)) and max(_lost(ks)) <= SNAPSHOT_EVERY),
    Scenario("ps-no-snapshots", "PS kill, no snapshots", "ps", workers=2, ps=2,
             snapshot_every=0, target=f"- (rollback to the checkpoint, every {CKPT_EVERY})"),
    Scenario("stock", "stock: chief kill, 1 backup", "chief", workers=3, system="stock",
             target="- (comparison)"),
]
# The same failures on the real cluster, as Kubernetes delivers them.
SCENARIOS += [
    replace(sc, key=f"cluster-{sc.key}", where="cluster", name={
        "chief": "cluster: chief pod deleted, 1 backup",
        "worker": "cluster: worker killed in its container, min R = R-1",
        "ps": f"cluster: PS pod deleted, snapshots every {SNAPSHOT_EVERY}"}[sc.key])
    for sc in SCENARIOS if sc.key in ("chief", "worker", "ps")
]


def _back(k: Kill) -> float | None:
    """Loss -> the replica counted again: its new process's first step (gradient pushed,
    token taken) for a chief or worker, the global step moving again for a PS."""
    return k.first_step_s if k.replica.startswith("ps") else k.replica_back_s


def _warm_met(kind: str) -> Callable[[list[Kill]], bool]:
    rate = 0.5 if kind == "ps" else 0.9
    most_lost = SNAPSHOT_EVERY if kind == "ps" else 0

    def met(ks: list[Kill]) -> bool:
        backs = [b for b in map(_back, ks) if b is not None]
        return (len(backs) == len(ks) and (obs.median(backs) or 99) <= 3.0 and max(backs) <= 5.0
                and _median_ratio_at_least(rate)(ks)
                and max(_lost(ks), default=most_lost + 1) <= most_lost)

    return met


# Warm restarts (runPolicy.warmRestarts): the replica's process SIGKILLed inside its
# container (as the OOM killer picks the largest), a new one forked in the same container.
SCENARIOS += [
    replace(sc, key=f"cluster-warm-{sc.key}", where="cluster", system="warm", name={
        "chief": "cluster warm: chief's process killed in its container, 1 backup",
        "worker": "cluster warm: worker's process killed in its container, min R = R-1",
        "ps": f"cluster warm: PS's process killed in its container, snapshots every "
              f"{SNAPSHOT_EVERY}"}[sc.key],
        target=("back <= 3 s median, <= 5 s max, " + (
            f">= 0.5x, steps lost <= {SNAPSHOT_EVERY}" if sc.key == "ps"
            else ">= 0.9x, 0 steps lost")),
        met=_warm_met(sc.key))
    for sc in SCENARIOS if sc.key in ("chief", "worker", "ps")
]
# Warm spare pods (runPolicy.spares: 1): the replica's pod deleted (as a drain, an eviction
# or a user would), a spare that had TensorFlow imported takes its identity.
SCENARIOS += [
    replace(sc, key=f"cluster-spare-{sc.key}", where="cluster", system="spare", name={
        "chief": "cluster spare: chief pod deleted, 1 backup",
        "worker": "cluster spare: worker pod deleted, min R = R-1",
        "ps": f"cluster spare: PS pod deleted, snapshots every {SNAPSHOT_EVERY}"}[sc.key],
        target=("back <= 3 s median, <= 5 s max, " + (
            f">= 0.5x, steps lost <= {SNAPSHOT_EVERY}" if sc.key == "ps"
            else ">= 0.9x, 0 steps lost")),
        met=_warm_met(sc.key))
    for sc in SCENARIOS if sc.key in ("chief", "worker", "ps")
]
KEYS = [s.key for s in SCENARIOS]


def summary(series: list[Series]) -> str:
    lines = [
        "| failure | kills | rate after / before median (min) | steps lost median / max "
        "| first step s median | full R s median / max | all back s median "
        "| killed replica's first step s median / max | target | met | other events |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in series:
        ks = s.kills
        ratios, lost = _ratios(ks), [float(x) for x in _lost(ks)]
        full = [k.full_r_s for k in ks if k.full_r_s is not None]
        mine = [k.replica_back_s for k in ks if k.replica_back_s is not None]
        other = "; ".join(f"{k}: {v}" for k, v in sorted(s.events.items()))
        notes = Counter(n for k in ks for n in k.notes)
        other = "; ".join(x for x in (s.startup_note, other, "; ".join(
            f"{n} x{c}" for n, c in notes.items())) if x)
        met = "n/a" if s.scenario.met is None or not ks else (
            "yes" if s.scenario.met(ks) else "NO")
        if s.scenario.system in ("warm", "spare"):
            backs = ", ".join(obs.fmt(_back(k), ".1f") for k in ks)
            other = "; ".join(x for x in (f"back s per kill: {backs}", other) if x)
        lines.append(
            f"| {s.scenario.name} | {len(ks)} | {obs.fmt(obs.median(ratios), '.2f', 'x')} "
            f"({obs.fmt(min(ratios) if ratios else None, '.2f', 'x')}) | "
            f"{obs.fmt(obs.median(lost), '.0f')} / {obs.fmt(max(lost) if lost else None, '.0f')} | "
            f"{obs.fmt(obs.median(k.first_step_s for k in ks), '.1f')} | "
            f"{obs.fmt(obs.median(full), '.1f')} / {obs.fmt(max(full) if full else None, '.1f')} | "
            f"{obs.fmt(obs.median(k.back_s for k in ks), '.1f')} | "
            f"{obs.fmt(obs.median(mine), '.1f')} / {obs.fmt(max(mine) if mine else None, '.1f')} | "
            f"{s.scenario.target} | {met} | "
            f"{other or '-'} |")
    return "\n".join(lines)
