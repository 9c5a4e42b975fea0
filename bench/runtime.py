"""Benchmark: the syncreplicas runtime against stock TensorFlow, side by side in one run.

Same model (the built-in ``linear``), same cluster shape (1 PS, chief + 3 workers by
default), same machine, alternating the two systems cell by cell. Per cell and system:

- import: launch of the processes until every gRPC port accepts connections (importing
  TensorFlow dominates it; reported apart so it does not hide in time to first step);
- first step: from the moment the last server is up until the first global step;
- all training: until every replica has finished a step of its own;
- steady global steps/s: over a window that starts once every replica trains (plus a
  warm-up), from the global steps the replicas log.

Cells: R = replicas (no backup) and R = replicas - 1 (one backup), each plain and with one
worker slowed by 50 ms per step; and the runtime with and without its metrics server.
Packing cells: the same 16,384 parameters of ``linear`` in 2, 64 and 256 variables, on 1 and
2 PS, run three ways: ours (variables packed, the default), ours with
``packVariables: false`` ("ours-unpacked") and stock; on 2 PS also "ours-spread"
(``packMinBytesPerPS: 0``: this 64 KiB model spread over both PS, where the default keeps it
on PS 0 because each PS's share would be under 256 KiB).
Prints one table per measure and tables of ratios (ours / stock). Not a test.

    .venv/bin/python bench/runtime.py                  # every cell, 3 repeats, median
    .venv/bin/python bench/runtime.py --quick          # 1 repeat, shorter windows
    .venv/bin/python bench/runtime.py --packing        # the packing cells only (~50 min)
    .venv/bin/python bench/runtime.py --packing-smoke  # 256 variables, 1 PS, once (~2 min)
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _cluster
import _observe as obs
import _ours


@dataclass(frozen=True)
class Cell:
    name: str
    replicas_to_aggregate: int
    slow_ms: float = 0.0
    metrics: bool = True
    ps: int = 1
    variables: int = 0  # > 0: a packing cell, the linear model's parameters in this many

    @property
    def packing(self) -> bool:
        return self.variables > 0

    def model_args(self) -> dict[str, int]:
        return {"dim": PACKING_DIM, "variables": self.variables} if self.packing else {}


@dataclass
class Result:
    import_s: float | None = None
    first_step_s: float | None = None
    all_training_s: float | None = None
    steps_per_s: float | None = None
    cpu_ms_per_step: float | None = None
    notes: list[str] = field(default_factory=list)


SLOW_TASK = ("worker", 0)
PACKING_DIM = 16384  # parameters of every packing cell (plus the bias)
PACKING_VARIABLES = (2, 64, 256)
# Batch 32 of 16,384 features is ~270 ms of CPU per global step (synthetic batches made in
# numpy, on both sides): it would hide the transport the packing cells are about.
PACKING_BATCH = 2
# ours / stock steps/s wanted at this many variables; ours at 256 vs ours at 2.
PACKING_TARGETS = {64: 3.0, 256: 8.0}
PACKING_FLAT_TARGET = 0.7
# A run's time besides its window and warm-up: processes importing TensorFlow on a quiet
# machine, the first step, every replica joining, shutting down. For the estimate only.
RUN_OVERHEAD_S = 40.0


def cells(workers: int, slow_ms: float) -> list[Cell]:
    replicas = 1 + workers
    return [
        Cell(f"R={replicas}", replicas),
        Cell(f"R={replicas - 1} +1 backup", replicas - 1),
        Cell(f"R={replicas}, slow {slow_ms:g} ms", replicas, slow_ms),
        Cell(f"R={replicas - 1} +1 backup, slow {slow_ms:g} ms", replicas - 1, slow_ms),
        Cell(f"R={replicas}, metrics off", replicas, metrics=False),
    ]


def packing_cells(workers: int) -> list[Cell]:
    replicas = 1 + workers
    return [
        Cell(f"{n} variables, {ps} PS", replicas, ps=ps, variables=n)
        for ps in (1, 2)
        for n in PACKING_VARIABLES
    ]


def watch(
    events: obs.EventSource,
    check_alive: Callable[[], None],
    pids: Callable[[], list[int]],
    replicas: int,
    t_up: float,
    opts: argparse.Namespace,
    result: Result,
) -> None:
    """Poll the logs until a steady window after every replica trains has been seen.

    Also takes the CPU time of every process of the cluster over the same window: CPU per
    global step depends much less on what else runs on the machine than steps/s does.
    """
    seen: list[obs.StepEvent] = []
    deadline = t_up + opts.timeout
    t_all = None
    window: tuple[float, float] | None = None  # (wall, cpu) at the window's start
    while time.time() < deadline:
        time.sleep(0.05)  # the resolution of times read from log lines
        seen.extend(events())
        check_alive()
        now = time.time()
        if seen and result.first_step_s is None:
            first = min(seen, key=lambda e: e.t)
            result.first_step_s = max(0.0, first.t - t_up)
        if t_all is None:
            firsts: dict[str, float] = {}
            for e in seen:
                firsts[e.replica] = min(firsts.get(e.replica, e.t), e.t)
            if len(firsts) == replicas:
                t_all = max(firsts.values())
                result.all_training_s = max(0.0, t_all - t_up)
        if t_all is not None and window is None and now > t_all + opts.warmup:
            window = (now, _cluster.cpu_seconds(pids()))
        if window is not None and now > window[0] + opts.window:
            cpu = _cluster.cpu_seconds(pids()) - window[1]
            result.steps_per_s = obs.rate(seen, window[0], now)
            if result.steps_per_s:
                result.cpu_ms_per_step = 1000 * cpu / (result.steps_per_s * (now - window[0]))
            return
    result.notes.append(f"not every replica trained within {opts.timeout:.0f} s")
    if seen:  # a rate anyway, over what was seen after the first step
        start = min(e.t for e in seen) + opts.warmup
        result.steps_per_s = obs.rate(seen, start, deadline)


def run_stock(cell: Cell, opts: argparse.Namespace, workdir: Path) -> Result:
    result = Result()
    spec = _cluster.cluster_spec(cell.ps, opts.workers)
    slow = {SLOW_TASK: cell.slow_ms} if cell.slow_ms else None
    extra = ["--device-filters"] if opts.stock_device_filters else []
    if cell.packing:
        extra += [f"--dim={PACKING_DIM}", f"--variables={cell.variables}",
                  f"--batch-size={PACKING_BATCH}"]
    command = _cluster.stock_command(cell.replicas_to_aggregate, 10**9, slow, extra)
    with _cluster.LocalCluster(spec, command, workdir) as cluster:
        t0 = cluster.start_all()
        t_up = cluster.wait_servers_up(opts.timeout)
        result.import_s = t_up - t0
        tails = {
            proc.name: obs.LogTail(proc.log)
            for task, proc in cluster.procs.items()
            if task[0] != "ps"
        }

        def events() -> list[obs.StepEvent]:
            out: list[obs.StepEvent] = []
            for name, t in tails.items():
                out.extend(obs.stock_step_events(name, t.new_lines()))
            return out

        def pids() -> list[int]:
            return [proc.popen.pid for proc in cluster.procs.values()]

        watch(events, cluster.check_alive, pids, 1 + opts.workers, t_up, opts, result)
    return result


def run_ours(cell: Cell, opts: argparse.Namespace, workdir: Path, pack: bool = True,
             spread: bool = False) -> Result:
    result = Result()
    slow = {SLOW_TASK: cell.slow_ms} if cell.slow_ms else {}
    with _ours.start(
        workers=opts.workers,
        replicas_to_aggregate=cell.replicas_to_aggregate,
        max_steps=10**9,
        metrics=cell.metrics,
        slow_ms=slow,
        workdir=workdir,
        ps=cell.ps,
        pack_variables=pack,
        model_args=cell.model_args(),
        batch_size=PACKING_BATCH if cell.packing else 32,
        pack_min_bytes_per_ps=0 if spread else None,
    ) as run:
        t_up = run.wait_servers_up(opts.timeout)
        result.import_s = t_up - run.t_launch
        watch(run.events, run.check_alive, run.pids, 1 + opts.workers, t_up, opts, result)
    return result


def run_ours_unpacked(cell: Cell, opts: argparse.Namespace, workdir: Path) -> Result:
    return run_ours(cell, opts, workdir, pack=False)


def run_ours_spread(cell: Cell, opts: argparse.Namespace, workdir: Path) -> Result:
    return run_ours(cell, opts, workdir, spread=True)


SYSTEMS: dict[str, Callable[[Cell, argparse.Namespace, Path], Result]] = {
    "ours": run_ours,
    "ours-spread": run_ours_spread,
    "ours-unpacked": run_ours_unpacked,
    "stock": run_stock,
}


def runs_on(system: str, cell: Cell) -> bool:
    if system == "stock" and not cell.metrics:
        return False  # stock has no metrics to switch off
    if system == "ours-spread":  # differs from ours only with more than one PS
        return cell.packing and cell.ps > 1
    return system != "ours-unpacked" or cell.packing


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1 repeat, 6 s windows")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workers", type=int, default=3, help="workers besides the chief")
    p.add_argument("--slow-ms", type=float, default=50.0)
    p.add_argument("--window", type=float, default=10.0, help="steady-state window, s")
    p.add_argument("--warmup", type=float, default=3.0, help="after every replica trains, s")
    p.add_argument("--timeout", type=float, default=120.0, help="per run, s")
    p.add_argument("--only", choices=sorted(SYSTEMS), help="run one system only")
    p.add_argument("--cells", help="comma-separated cell numbers (1-based) to run")
    p.add_argument(
        "--stock-device-filters",
        action="store_true",
        help="give stock sessions device_filters (a tuned stock, not the usual way)",
    )
    p.add_argument("--packing", action="store_true", help="the packing cells only")
    p.add_argument(
        "--packing-smoke",
        action="store_true",
        help="smoke check: the 256-variable 1-PS cell once, 3 s windows (about 2 minutes)",
    )
    p.add_argument("--keep-logs", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.window = 1, 6.0
    if args.packing_smoke:
        args.packing, args.repeats, args.window, args.warmup = True, 1, 3.0, 1.0
    return args


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    all_cells = cells(opts.workers, opts.slow_ms) + packing_cells(opts.workers)
    if opts.packing:
        all_cells = [c for c in all_cells if c.packing]
    if opts.packing_smoke:
        all_cells = [c for c in all_cells if c.variables == max(PACKING_VARIABLES) and c.ps == 1]
    if opts.cells:
        all_cells = [all_cells[int(i) - 1] for i in opts.cells.split(",")]
    systems = [opts.only] if opts.only else list(SYSTEMS)
    runs = opts.repeats * sum(runs_on(s, c) for c in all_cells for s in systems)
    results: dict[tuple[str, str], list[Result]] = {}
    started = datetime.datetime.now(datetime.UTC)
    print(f"# bench/runtime.py {' '.join(sys.argv[1:])}  ({started:%Y-%m-%d %H:%M} UTC)")
    root = Path(tempfile.mkdtemp(prefix="bench-runtime-"))
    print(f"# chief + {opts.workers} workers (1 PS unless the cell says); logs in {root}")
    print(
        f"# {len(all_cells)} cells x {opts.repeats} repeat(s), interleaved: {runs} runs, "
        f"about {estimate_s(runs, opts) / 60:.0f} min on a quiet machine "
        f"(up to {runs * opts.timeout / 60:.0f} min if every run times out)",
        flush=True,
    )
    try:
        for rep in range(opts.repeats):
            for ci, cell in enumerate(all_cells):
                for system in systems:
                    if not runs_on(system, cell):
                        continue
                    workdir = root / f"{rep}-{ci}-{system}"
                    t = time.time()
                    try:
                        res = SYSTEMS[system](cell, opts, workdir)
                    except (RuntimeError, TimeoutError) as err:
                        res = Result(notes=[f"failed: {str(err).splitlines()[0]}"])
                    results.setdefault((cell.name, system), []).append(res)
                    print(
                        f"  [{rep + 1}/{opts.repeats}] {cell.name:<28} {system:<13} "
                        f"import {obs.fmt(res.import_s, '.1f', 's')}  "
                        f"first {obs.fmt(res.first_step_s, '.2f', 's')}  "
                        f"all {obs.fmt(res.all_training_s, '.2f', 's')}  "
                        f"{obs.fmt(res.steps_per_s, '.1f')} steps/s  "
                        f"{obs.fmt(res.cpu_ms_per_step, '.1f')} CPU ms/step  "
                        f"({time.time() - t:.0f} s) {'; '.join(res.notes)}",
                        flush=True,
                    )
    finally:
        if not opts.keep_logs:
            shutil.rmtree(root, ignore_errors=True)
    packing = sorted({c.variables for c in all_cells if c.packing})
    alone = model_alone(packing, opts) if packing else {}
    print()
    print(report(all_cells, systems, results, opts, alone))
    return 0


def model_alone(counts: list[int], opts: argparse.Namespace) -> dict[int, float | None]:
    """Median steps/s of the packing model trained alone (bench/_modelalone.py: one
    process, no PS, no sync) per variable count: the graph's own cost of more variables."""
    print(f"  model alone (1 process, no PS): {', '.join(map(str, counts))} variables, "
          f"{opts.repeats} repeat(s)", flush=True)
    command = [sys.executable, str(Path(__file__).resolve().parent / "_modelalone.py"),
               f"--variables={','.join(map(str, counts))}", f"--dim={PACKING_DIM}",
               f"--batch-size={PACKING_BATCH}", f"--repeats={opts.repeats}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                              check=True)
        rates = json.loads(done.stdout.strip().splitlines()[-1])["steps_per_s"]
    except (subprocess.SubprocessError, ValueError, KeyError, IndexError) as err:
        print(f"  model alone failed: {err}", flush=True)
        return {}
    out = {n: obs.median(rates.get(str(n), [])) for n in counts}
    print("  model alone steps/s: " + ", ".join(
        f"{n} variables {obs.fmt(v, '.0f')}" for n, v in out.items()), flush=True)
    return out


def estimate_s(runs: int, opts: argparse.Namespace) -> float:
    """Roughly how long ``runs`` runs take: window, warm-up and the usual start and stop."""
    return runs * (opts.window + opts.warmup + RUN_OVERHEAD_S)


def report(
    all_cells: list[Cell],
    systems: list[str],
    results: dict[tuple[str, str], list[Result]],
    opts: argparse.Namespace,
    alone: dict[int, float | None] | None = None,
) -> str:
    """Markdown tables of medians over the repeats, and the ratios."""

    def med(cell: Cell, system: str, attr: str) -> float | None:
        return obs.median(getattr(r, attr) for r in results.get((cell.name, system), []))

    lines = [
        f"Medians over {opts.repeats} repeat(s). Times in seconds from the moment the last "
        "gRPC server accepted connections; import = launch until then.",
        "",
        "| cell | system | import s | first step s | all replicas training s | global steps/s "
        "| CPU ms / global step |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for cell in all_cells:
        for system in systems:
            if (cell.name, system) not in results:
                continue
            notes = {n for r in results.get((cell.name, system), []) for n in r.notes}
            lines.append(
                f"| {cell.name} | {system} | {obs.fmt(med(cell, system, 'import_s'), '.1f')} | "
                f"{obs.fmt(med(cell, system, 'first_step_s'))} | "
                f"{obs.fmt(med(cell, system, 'all_training_s'))} | "
                f"{obs.fmt(med(cell, system, 'steps_per_s'), '.1f')} | "
                f"{obs.fmt(med(cell, system, 'cpu_ms_per_step'), '.1f')}"
                + (f" ({'; '.join(sorted(notes))})" if notes else "")
                + " |"
            )
    standard = [c for c in all_cells if not c.packing]
    if "ours" in systems and "stock" in systems and standard:
        base, backup, slow, slow_backup, metrics_off = all_cells_by_kind(standard)
        lines += ["", "| ratio | ours | stock | target |", "| --- | --- | --- | --- |"]

        def r(a: Cell | None, b: Cell | None, system: str, attr: str = "steps_per_s") -> str:
            if a is None or b is None:
                return "n/a"
            return obs.fmt(obs.ratio(med(a, system, attr), med(b, system, attr)), ".2f", "x")

        def vs(cell: Cell, attr: str) -> str:
            return obs.fmt(obs.ratio(med(cell, "ours", attr), med(cell, "stock", attr)), ".2f", "x")

        for cell in standard:
            if cell.metrics:
                lines.append(
                    f"| ours / stock, {cell.name}: steps/s (CPU per step) | "
                    f"{vs(cell, 'steps_per_s')} ({vs(cell, 'cpu_ms_per_step')}) | - | >= 1.0x |"
                )
        lines.append(
            f"| slowed / unslowed, no backup | {r(slow, base, 'ours')} | "
            f"{r(slow, base, 'stock')} | - |"
        )
        lines.append(
            f"| slowed / unslowed, 1 backup | {r(slow_backup, backup, 'ours')} | "
            f"{r(slow_backup, backup, 'stock')} | >= 0.9x |"
        )
        lines.append(
            f"| metrics off / on: steps/s (CPU per step) | {r(metrics_off, base, 'ours')} "
            f"({r(metrics_off, base, 'ours', 'cpu_ms_per_step')}) | - | - |"
        )
    packing = [c for c in all_cells if c.packing]
    if packing:
        lines += ["", packing_report(packing, systems, med, alone or {})]
    return "\n".join(lines)


def packing_report(
    packing: list[Cell],
    systems: list[str],
    med: Callable[[Cell, str, str], float | None],
    alone: dict[int, float | None],
) -> str:
    """Steps/s ratios of the packing cells against their targets, and the same model
    trained alone (one process, no PS) for reference."""
    lines = ["| packing | ratio | value | target |", "| --- | --- | --- | --- |"]

    def ratio(a: Cell, sa: str, b: Cell, sb: str, attr: str = "steps_per_s") -> str:
        return obs.fmt(obs.ratio(med(a, sa, attr), med(b, sb, attr)), ".2f", "x")

    for ps in sorted({c.ps for c in packing}):
        row = {c.variables: c for c in packing if c.ps == ps}
        ours_kinds = ["ours"] + (["ours-spread"] if ps > 1 else [])
        for n, cell in sorted(row.items()):
            target = PACKING_TARGETS.get(n)
            for mine in ours_kinds:
                for other in ("stock", "ours-unpacked"):
                    if other in systems and mine in systems:
                        if other == "stock":
                            want = f">= {target:g}x" if target else "-"
                        else:  # packing must not cost the few-variable model anything
                            want = ">= 1.0x" if n == min(PACKING_VARIABLES) else "-"
                        lines.append(
                            f"| {ps} PS, {n} variables | {mine} / {other}: steps/s "
                            f"(CPU per step) | {ratio(cell, mine, cell, other)} "
                            f"({ratio(cell, mine, cell, other, 'cpu_ms_per_step')}) | {want} |"
                        )
        few, many = row.get(min(PACKING_VARIABLES)), row.get(max(PACKING_VARIABLES))
        for mine in ours_kinds:
            if few is not None and many is not None and mine in systems:
                lines.append(
                    f"| {ps} PS | {mine} at {many.variables} / at {few.variables} variables: "
                    f"steps/s | {ratio(many, mine, few, mine)} | >= {PACKING_FLAT_TARGET:g}x |"
                )
    few_n, many_n = min(PACKING_VARIABLES), max(PACKING_VARIABLES)
    if alone.get(few_n) and alone.get(many_n):
        lines.append(
            f"| model alone (1 process, no PS, no sync) | at {many_n} / at {few_n} variables: "
            f"steps/s ({obs.fmt(alone[many_n], '.0f')} / {obs.fmt(alone[few_n], '.0f')}) | "
            f"{obs.fmt(obs.ratio(alone[many_n], alone[few_n]), '.2f', 'x')} | reference |"
        )
    return "\n".join(lines)


def all_cells_by_kind(all_cells: list[Cell]) -> list[Cell | None]:
    """base, backup, slow, slow+backup, metrics-off among the cells run (None if absent)."""
    replicas = max(c.replicas_to_aggregate for c in all_cells)

    def pick(r: int, slow: bool, metrics: bool = True) -> Cell | None:
        found = [
            c
            for c in all_cells
            if c.replicas_to_aggregate == r and bool(c.slow_ms) == slow and c.metrics == metrics
        ]
        return found[0] if found else None

    return [
        pick(replicas, False),
        pick(replicas - 1, False),
        pick(replicas, True),
        pick(replicas - 1, True),
        pick(replicas, False, metrics=False),
    ]


if __name__ == "__main__":
    sys.exit(main())
