"""Benchmark: what one failure costs, per kind (chief, worker, PS), and what snapshots cost.

One cluster per scenario (linear model, R = 3, checkpoints every 100 steps, seed 7):

- chief kill with one backup replica (chief + 3 workers);
- worker kill with minReplicasToAggregate = R - 1 (chief + 2 workers);
- PS kill (2 PS, a seeded one of them) with snapshots every 10 steps, and the same with
  snapshots off (snapshotEverySteps 0: today's rollback to the last checkpoint);
- stock TensorFlow's chief kill with one backup, for comparison (checkpoints every 100).

Each scenario: ``--kills`` times, train for a random while (longer than the window), SIGKILL
the replica, start it again at once with the same TF_CONFIG, and watch until it is back. The
harness acts as a supervisor would (restartPolicy OnFailure): a replica that exits non-zero
is started again; one that exits 0 stays gone, as on Kubernetes. Per kill:

- rate after / before: global steps made in the ``--window`` seconds (10) after the kill
  divided by the global steps/s in the window before it (a restarted TensorFlow process
  imports for 5-60 s, so a replica the updates wait for is gone for that long);
- steps lost: global step seen before the kill minus the step training resumed from (the
  chief's "variables kept/restored ..., global step N" line for ours);
- first step: kill -> first global step above the step training resumed from;
- full R: kill -> PS 0's ``syncreplicas_replicas_to_aggregate`` back at R after it was lower
  or unreadable (0: it never was; a lost PS stops updates rather than lowering R);
- all back: kill -> ``syncreplicas_live_replicas`` back at every replica.

With ``--cluster --node-faults``: whole nodes lost instead (crashed, partitioned, drained,
preempted) on the multi-node cluster, with the operator's node handling and under
Kubernetes' defaults alone: bench/nodefaults.py, which this runs.

With ``--cluster`` the same three failures also hit a job on the real cluster
of `make cluster` (bench/_kuberun.py), each series right after its local twin: the chief's
and the PS's pods deleted (``kubectl delete pod``: SIGTERM, the operator creates the
successor, a new pod with a new IP under the same name), a worker's container killed
(``runPolicy.warmRestarts: false``: the kubelet restarts it in place, with its crash-loop
back-off). Then each kind again with warm restarts (the default): the replica's process
SIGKILLed inside its container, a new one forked there by the container's first process
(targets: back within 3 s median and 5 s max, the issue's rates and steps lost). Then each
kind with one warm spare pod (``runPolicy.spares: 1``): the replica's pod deleted once a
spare is ready, the spare takes its identity (same targets). Steps and
epoch lines come from the kubelet's container logs (stamped when written), gauges from the
pods' own addresses; Kubernetes and the runtime do every restart.

Then the steady-state cost of snapshots: global steps/s with snapshotEverySteps 10 vs 0
(1 PS, chief + 2 workers, R = 3), clusters started alternately, medians of
``--cost-repeats``. Not a test.

    .venv/bin/python bench/recovery.py              # 10 kills per scenario, 3 cost repeats
    .venv/bin/python bench/recovery.py --quick      # 2 kills, 5 s windows, 1 cost repeat
    .venv/bin/python bench/recovery.py --only ps    # one scenario (see --help)
    make cluster && .venv/bin/python bench/recovery.py --cluster --kills 5 --only chief \
        --only worker --only ps    # local and cluster side by side
    make cluster && .venv/bin/python bench/recovery.py --cluster --node-faults --repeats 3
"""

from __future__ import annotations

import argparse
import datetime
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _cluster
import _observe as obs
import _ours
from _recoverycases import (
    CKPT_EVERY,
    KEYS,
    SCENARIOS,
    SNAPSHOT_EVERY,
    Kill,
    R,
    Scenario,
    Series,
    summary,
)


class Supervisor:
    """Reads step events, samples PS 0's R and live replicas (ours), and restarts replicas
    that exit non-zero (not those that exit 0)."""

    def __init__(self, run: Any, series: Series, restart: Any, ours: bool) -> None:
        self.run, self.series, self.restart, self.ours = run, series, restart, ours
        self.seen: list[obs.StepEvent] = []
        self.gauges: list[tuple[float, tuple[float, float] | None]] = []
        self.gone: set[tuple[str, int]] = set()
        self.next_sample = 0.0

    def tick(self) -> None:
        self.seen.extend(self.run.events())
        now = time.time()
        if self.ours and now >= self.next_sample:
            self.next_sample = now + 0.2
            r = self.run.gauge("ps", 0, "syncreplicas_replicas_to_aggregate")
            live = self.run.gauge("ps", 0, "syncreplicas_live_replicas")
            self.gauges.append((now, None if r is None or live is None else (r, live)))
        for task, code in self.run.poll().items():
            if code is None or task in self.gone:
                continue
            name = f"{task[0]}-{task[1]}"
            if code == 0 and task[0] != "ps":
                self.series.events[f"{name} exited 0 before the end"] += 1
                self.gone.add(task)
            elif code != 0:
                self.series.events[f"{name} exited {code}, restarted"] += 1
                self.restart(task)

    def sleep(self, seconds: float) -> None:
        end = time.time() + seconds
        while time.time() < end:
            time.sleep(0.05)
            self.tick()

    def last_step(self, before: float) -> int | None:
        prior = [e for e in self.seen if e.t <= before]
        return max(e.global_step for e in prior) if prior else None

    def full(self, total: int) -> bool:
        last = self.gauges[-1][1] if self.gauges else None
        return last is not None and last[0] >= R and last[1] >= total


def resume_point(events: list[obs.StepEvent], t_from: float) -> tuple[obs.StepEvent, int] | None:
    """First event after ``t_from`` whose global step is above the previous event's.

    Returns it with the step training resumed from (the previous value: a checkpoint's
    step after a restore, or the step at the kill when nothing was rolled back).
    """
    ordered = sorted(events, key=lambda e: e.t)
    prev = None
    for e in ordered:
        if e.t >= t_from and prev is not None and e.global_step > prev.global_step:
            return e, prev.global_step
        prev = e
    return None


def back_after(samples: list[tuple[float, Any]], t_kill: float,
               ok: Callable[[Any], bool]) -> float | None:
    """Seconds from the kill to the first good sample after the last bad one (0: none bad)."""
    after = [(t, v) for t, v in samples if t >= t_kill]
    bad = [t for t, v in after if not ok(v)]
    if not bad:
        return 0.0
    good = [t for t, v in after if t > bad[-1] and ok(v)]
    return good[0] - t_kill if good else None


def trained_since_epoch(sup: Supervisor, epochs: list[Any]) -> bool:
    """A global step above the first epoch line's, read after it."""
    return bool(epochs) and any(e.t >= epochs[0].t and e.global_step > epochs[0].global_step
                                for e in sup.seen)


def pick(sc: Scenario, rng: random.Random) -> tuple[str, int]:
    if sc.kind == "chief":
        return ("chief", 0)
    if sc.kind == "worker":
        return ("worker", rng.randrange(sc.workers))
    return ("ps", rng.randrange(sc.ps))


def one_kill(sup: Supervisor, run: Any, sc: Scenario, opts: argparse.Namespace,
             task: tuple[str, int], is_up: Callable[[], bool]) -> Kill:
    total = 1 + sc.workers
    t_kill = time.time()
    g_before = sup.last_step(t_kill)
    kill = Kill(f"{task[0]}-{task[1]}", g_before if g_before is not None else -1)
    kill.rate_before = obs.rate(sup.seen, t_kill - opts.window, t_kill)
    epochs_before = len(run.epochs) if sc.system != "stock" else 0
    run.kill(task, signal.SIGKILL)
    run.restart(task)
    t_up = None
    deadline = t_kill + opts.recovery_timeout
    while time.time() < deadline:
        sup.sleep(0.05)
        if t_up is None and is_up():
            t_up = time.time()
        if time.time() < t_kill + opts.window or t_up is None:
            continue
        if sc.system == "stock":
            if resume_point(sup.seen, t_up):
                break
        elif sup.full(total) and (sc.kind == "worker" or trained_since_epoch(
                sup, run.epochs[epochs_before:])):
            break  # the replica is back (and training went on from the chief's epoch line)
    else:
        kill.notes.append(f"not back within {opts.recovery_timeout:.0f} s")
    # Where training resumed from: for ours the chief's epoch line after a PS loss or its
    # own restart; otherwise the first step above the one before it.
    base_t, base_step = t_kill, kill.g_before
    epoch = run.epochs[epochs_before] if sc.system != "stock" and \
        len(run.epochs) > epochs_before else None
    if epoch is not None:
        kill.lost = max(0, kill.g_before - epoch.global_step)
        if sc.kind == "ps":
            base_t, base_step = epoch.t, epoch.global_step
            if epoch.global_step == 0 and kill.g_before > 0:
                kill.notes.append("global step back to 0")
    elif sc.system != "stock":
        # No epoch line: nothing was kept, restored or initialized, so nothing rolled back
        # unless the global step never got past the one before the kill.
        later = [e.global_step for e in sup.seen if e.t > t_kill]
        kill.lost = max(0, kill.g_before - max(later, default=kill.g_before))
    if sc.kind == "ps" and epoch is not None:
        above = sorted((e for e in sup.seen if e.t >= epoch.t and e.global_step > base_step),
                       key=lambda e: e.t)
        found = (above[0], base_step) if above else None
    else:
        found = resume_point(sup.seen, (t_up or t_kill) if sc.system == "stock" else t_kill)
    if found:
        event, resumed = found
        kill.first_step_s = event.t - t_kill
        if kill.lost is None:
            kill.lost = max(0, kill.g_before - resumed)
            if sc.system == "stock":
                base_t, base_step = event.t, resumed
    end = t_kill + opts.window
    made = [e.global_step for e in sup.seen if base_t <= e.t <= end]
    kill.rate_after = max(0, max(made, default=base_step) - base_step) / opts.window
    firsts = getattr(run, "firsts", None)  # the cluster's runs note each process's first step
    if firsts is not None and not kill.replica.startswith("ps"):
        mine = [t for t, replica in firsts if replica == kill.replica and t > t_kill]
        kill.replica_back_s = min(mine) - t_kill if mine else None
    if sc.system != "stock":
        kill.full_r_s = back_after(sup.gauges, t_kill, lambda v: v is not None and v[0] >= R)
        kill.back_s = back_after(sup.gauges, t_kill, lambda v: v is not None and v[1] >= total)
    return kill


def job_options(sc: Scenario, ckpt: str) -> dict[str, Any]:
    """The options of our scenarios' job (the same locally and on the cluster)."""
    return dict(checkpoint_dir=ckpt, checkpoint_every_steps=CKPT_EVERY,
                min_replicas_to_aggregate=sc.min_r, snapshot_every_steps=sc.snapshot_every,
                # the model spread over both PS, so that either one's loss loses some
                pack_min_bytes_per_ps=0 if sc.kind == "ps" else None)


def start_run(sc: Scenario, workdir: Path, unpublish: bool = True, grpc_options: str = ""
              ) -> tuple[Any, Callable[[tuple[str, int]], bool], Any]:  # fmt: skip
    """(run, is a task's server up, restart) for one scenario's cluster, started
    (``grpc_options``: the runtime's TF_GRPC_DEFAULT_OPTIONS instead of its own)."""
    ckpt = str(workdir / "ckpt")
    if sc.where == "cluster":
        import _kuberun

        _kuberun.wait_cluster()
        warm, spares = sc.system == "warm", int(sc.system == "spare")
        kube_run = _kuberun.KubeRun(
            namespace=f"bench-recovery-{'warm-' * warm}{'spare-' * spares}{sc.kind}",
            name="recovery", warm=warm, spares=spares, keep=workdir / "pod-logs",
            unpublish=unpublish,
            env={"TF_GRPC_DEFAULT_OPTIONS": grpc_options} if grpc_options else {})
        spec = _ours.job(R, 10**9, parameter_servers=sc.ps,
                         **job_options(sc, "/var/lib/syncreplicas/checkpoints"))
        spec["workers"] = sc.workers
        kube_run.start(spec)
        return kube_run, kube_run.is_up, kube_run.restart
    if sc.system == "stock":
        spec = _cluster.cluster_spec(sc.ps, sc.workers)
        extra = [f"--checkpoint-dir={ckpt}", f"--checkpoint-every-steps={CKPT_EVERY}"]
        command = _cluster.stock_command(R, 10**9, extra=extra)
        run: Any = _cluster.LocalCluster(spec, command, workdir)
        run.__enter__()
        run.start_all()
        return run, lambda t: _cluster.port_open(run.address(t)), run.start
    run = _ours.start(workers=sc.workers, replicas_to_aggregate=R, max_steps=10**9,
                      workdir=workdir, metrics=True, ps=sc.ps, **job_options(sc, ckpt))
    return run, lambda t: _cluster.port_open(run.cluster.replica(*t).grpc_address), run.restart


def wait_training(sup: Supervisor, replicas: int, timeout: float) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        sup.sleep(0.2)
        if len({e.replica for e in sup.seen}) == replicas:
            return ""
    return f"only {sorted({e.replica for e in sup.seen})} trained within {timeout:.0f} s"


def run_series(sc: Scenario, opts: argparse.Namespace, workdir: Path) -> Series:
    series = Series(sc)
    run, is_up, restart = start_run(sc, workdir, unpublish=not opts.terminating_published,
                                    grpc_options=opts.grpc_options)
    rng = random.Random(opts.seed)
    try:
        sup = Supervisor(run, series, restart, ours=sc.system != "stock")
        series.startup_note = wait_training(sup, 1 + sc.workers, opts.startup_timeout)
        for i in range(opts.kills):
            sup.sleep(rng.uniform(opts.window + 1, opts.window + 5))
            if sc.system == "spare":
                run.wait_spare(sup.sleep, opts.recovery_timeout)
            task = pick(sc, rng)
            kill = one_kill(sup, run, sc, opts, task, lambda t=task: is_up(t))
            series.kills.append(kill)
            print(f"  {sc.key:<15} kill {i + 1:>2} {kill.replica:<8} at step {kill.g_before:>6}: "
                  f"rate {obs.fmt(kill.ratio, '.2f', 'x')} "
                  f"({obs.fmt(kill.rate_before, '.1f')} -> {obs.fmt(kill.rate_after, '.1f')}), "
                  f"lost {kill.lost}, first step {obs.fmt(kill.first_step_s, '.1f', 's')}, "
                  f"full R {obs.fmt(kill.full_r_s, '.1f', 's')}, "
                  f"all back {obs.fmt(kill.back_s, '.1f', 's')}, "
                  f"it stepped after {obs.fmt(kill.replica_back_s, '.1f', 's')} "
                  f"{'; '.join(kill.notes)}",
                  flush=True)
            if kill.first_step_s is None and kill.rate_after == 0:
                series.events["no progress: series stopped"] += 1
                break
        if sc.where == "cluster":
            for kind, n in sorted(run.restarts().items()):
                if n:
                    series.events[f"status.replicaStatuses.{kind}.restarts"] = n
    finally:
        if sc.system == "stock":
            run.close()
        elif sc.where == "cluster":
            run.stop()
        else:
            run.cluster.stop()
    return series


# -- the steady-state cost of snapshots --------------------------------------------------------

def cost_run(every: int, opts: argparse.Namespace, workdir: Path) -> float | None:
    """Global steps/s over one window, ``opts.warmup`` s after every replica stepped."""
    run = _ours.start(workers=2, replicas_to_aggregate=R, max_steps=10**9, workdir=workdir,
                      metrics=False, snapshot_every_steps=every)
    try:
        series = Series(Scenario("cost", "cost", "none", workers=2))
        sup = Supervisor(run, series, run.restart, ours=False)
        note = wait_training(sup, 3, opts.startup_timeout)
        if note:
            print(f"  cost snapshotEverySteps={every}: {note}", flush=True)
            return None
        sup.sleep(opts.warmup)
        t0 = time.time()
        sup.sleep(opts.window)
        return obs.rate(sup.seen, t0, time.time())
    finally:
        run.cluster.stop()


def snapshot_cost(opts: argparse.Namespace, root: Path) -> str:
    rates: dict[int, list[float | None]] = {SNAPSHOT_EVERY: [], 0: []}
    for i in range(opts.cost_repeats):
        order = (SNAPSHOT_EVERY, 0) if i % 2 == 0 else (0, SNAPSHOT_EVERY)
        for every in order:
            rate = cost_run(every, opts, root / f"cost-{i}-{every}")
            rates[every].append(rate)
            print(f"  cost repeat {i + 1}: snapshotEverySteps={every:<3} "
                  f"{obs.fmt(rate, '.1f')} global steps/s", flush=True)
    on, off = obs.median(rates[SNAPSHOT_EVERY]), obs.median(rates[0])
    ratio = obs.ratio(on, off)
    met = "n/a" if ratio is None else ("yes" if ratio >= 0.97 else "NO")
    return "\n".join([
        "| snapshotEverySteps | repeats | global steps/s (median) | ratio to 0 | target | met |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| 0 | {len(rates[0])} | {obs.fmt(off, '.1f')} | 1.00x | - | - |",
        f"| {SNAPSHOT_EVERY} | {len(rates[SNAPSHOT_EVERY])} | {obs.fmt(on, '.1f')} | "
        f"{obs.fmt(ratio, '.3f', 'x')} | cost <= 3% (>= 0.97x) | {met} |",
    ])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, help="kills per scenario (10; --quick: 2)")
    p.add_argument("--quick", action="store_true",
                   help="2 kills per scenario, 5 s windows, 1 cost repeat")
    p.add_argument("--window", type=float, default=10.0,
                   help="s before and after a kill over which steps/s are compared")
    p.add_argument("--recovery-timeout", type=float, default=120.0)
    p.add_argument("--startup-timeout", type=float, default=150.0)
    p.add_argument("--cost-repeats", type=int, default=3)
    p.add_argument("--warmup", type=float, default=3.0, help="s before a cost window")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--only", choices=[*KEYS, "cost"], action="append",
                   help="run only these (repeatable); default: every scenario and the cost")
    p.add_argument("--cluster", action="store_true",
                   help="also the cluster-* scenarios, each right after its local twin "
                        "(needs `make cluster`)")
    p.add_argument("--node-faults", action="store_true",
                   help="with --cluster: instead, the node faults on the multi-node cluster "
                        "(bench/nodefaults.py; its options: --repeats, --k8s-repeats, --only, "
                        "--systems, --timeout)")
    p.add_argument("--terminating-published", action="store_true",
                   help="cluster: the job's Services select a pod being deleted too (its "
                        "address stays in DNS until its object is gone), as before the "
                        "operator took it out")
    p.add_argument("--grpc-options", default="",
                   help="cluster: the runtime's gRPC channel options (TF_GRPC_DEFAULT_OPTIONS) "
                        "instead of its own, e.g. an earlier set side by side")
    p.add_argument("--spare-refill-delay", type=float, default=None, metavar="S",
                   help="cluster: helm upgrade the operator to this spare refill delay "
                        "(operator.spareRefillDelaySeconds) first, e.g. 0 against 10")
    p.add_argument("--keep-logs", action="store_true",
                   help="keep the logs (on the cluster: every pod's, as read) in the temp dir")
    args = p.parse_args(argv)
    if args.quick:
        args.window, args.cost_repeats, args.warmup = 5.0, 1, 2.0
    if args.kills is None:
        args.kills = 2 if args.quick else 10
    return args


def set_spare_refill_delay(seconds: float) -> None:
    """helm upgrade with operator.spareRefillDelaySeconds, waiting for the operator to roll."""
    from tests.cluster import kube

    kube.rollout("upgrade", kube.RELEASE, str(kube.CHART), "-n", kube.RELEASE_NAMESPACE,
                 "--reuse-values", "--set", f"operator.spareRefillDelaySeconds={seconds:g}")
    print(f"# operator: spareRefillDelaySeconds {seconds:g}", flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--node-faults" in argv:
        if "--cluster" not in argv:
            print("bench/recovery.py: --node-faults needs --cluster", file=sys.stderr)
            return 2
        import nodefaults

        return nodefaults.main([a for a in argv if a not in ("--node-faults", "--cluster")])
    opts = parse_args(argv)
    only = opts.only or [*KEYS, "cost"]
    if opts.cluster:
        only = [*only, *(f"cluster-{k}" for k in only if f"cluster-{k}" in KEYS),
                *(f"cluster-warm-{k}" for k in only if f"cluster-warm-{k}" in KEYS),
                *(f"cluster-spare-{k}" for k in only if f"cluster-spare-{k}" in KEYS)]
    else:
        only = [k for k in only if not k.startswith("cluster-") or opts.only]
    if opts.spare_refill_delay is not None:
        set_spare_refill_delay(opts.spare_refill_delay)
    root = Path(tempfile.mkdtemp(prefix="bench-recovery-"))
    started = datetime.datetime.now(datetime.UTC)
    print(f"# bench/recovery.py {' '.join(sys.argv[1:])}  ({started:%Y-%m-%d %H:%M} UTC)")
    print(f"# linear model, R={R}, checkpoints every {CKPT_EVERY} steps, {opts.kills} kills per "
          f"scenario, {opts.window:.0f} s windows, seed {opts.seed}; logs in {root}", flush=True)
    results = []
    cost = ""
    try:
        # Each cluster scenario right after its local twin.
        order = sorted(SCENARIOS, key=lambda sc: KEYS.index(
            sc.key.removeprefix("cluster-").removeprefix("warm-").removeprefix("spare-")))
        for sc in order:
            if sc.key not in only:
                continue
            try:
                results.append(run_series(sc, opts, root / sc.key))
            except (RuntimeError, TimeoutError) as err:
                results.append(Series(sc, startup_note=f"failed: {str(err).splitlines()[0]}"))
        if "cost" in only:
            cost = snapshot_cost(opts, root)
    finally:
        if not opts.keep_logs:
            shutil.rmtree(root, ignore_errors=True)
    print()
    if results:
        print(summary(results))
    if cost:
        print()
        print(cost)
    return 0


if __name__ == "__main__":
    sys.exit(main())
