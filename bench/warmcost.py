"""Benchmark: what warm restarts cost a running job on the cluster (runPolicy.warmRestarts
true vs false): memory per container and the steady step rate.

One job shape on `make cluster` (linear model, 1 PS, the chief and 2 workers, R = 3, no
checkpoints to speak of), started with warm restarts and without, in turn, ``--repeats``
times each (interleaved: warm, cold, cold, warm, ...). Per run, once every replica has
trained for ``--warmup`` s:

- **steps/s**: global steps over ``--window`` s, from the chief's log lines as the kubelet
  stamped them (bench/_kuberun.py);
- **container memory**: each runtime container's memory cgroup usage less its inactive file
  pages (the working set, as the kubelet and `kubectl top` count it), summed over the job;
- **first process**: with warm restarts, the memory only each container's first process
  maps (private pages: not those it shares with the replica it forked, copy-on-write, nor
  library files other processes map), which holds the imported TensorFlow and does nothing
  else.

Medians and max of the repeats, the ratio warm / cold side by side. Not a test.

With ``--spares``: what a warm spare pod costs instead (runPolicy.spares 1 vs 0, warm
restarts on in both): the same steps/s, and the spare pod's own memory (its container's
working set: TensorFlow imported, waiting), measured once the spare is ready.

    make cluster && .venv/bin/python bench/warmcost.py --repeats 3
    make cluster && .venv/bin/python bench/warmcost.py --repeats 3 --spares
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _kuberun
import _observe as obs
import _ours

from tests.cluster import kube

REPLICAS = ("ps-0", "chief-0", "worker-0", "worker-1")
MIB = 1 << 20


def memory_cgroup(pid: int) -> Path:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return Path("/sys/fs/cgroup/memory") / path.lstrip("/")
    raise RuntimeError(f"pid {pid}: no memory cgroup")


def working_set(pid: int) -> int:
    cgroup = memory_cgroup(pid)
    usage = int((cgroup / "memory.usage_in_bytes").read_text())
    stat = dict(line.split() for line in (cgroup / "memory.stat").read_text().splitlines())
    return max(0, usage - int(stat.get("total_inactive_file", 0)))


def private(pid: int) -> int:
    """The bytes only this process maps (not shared with the replica it forked, nor file
    pages of libraries other processes map too)."""
    total = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(("Private_Clean:", "Private_Dirty:")):
            total += int(line.split()[1]) * 1024
    return total


def one_run(warm: bool, opts: argparse.Namespace, spares: int = 0) -> dict[str, float | None]:
    run = _kuberun.KubeRun(namespace=f"bench-warmcost-{'warm' if warm else 'cold'}{spares}",
                           name="cost", warm=warm, spares=spares)  # fmt: skip
    spec = _ours.job(3, 10**9, parameter_servers=1, checkpoint_dir="/tmp/ckpt",
                     checkpoint_every_steps=10**6)  # fmt: skip
    spec["workers"] = 2
    run.start(spec)
    try:
        seen: list[obs.StepEvent] = []
        deadline = time.time() + opts.startup_timeout
        while len({e.replica for e in seen}) < len(REPLICAS) - 1:
            if time.time() > deadline:
                raise TimeoutError("not every replica trained in time")
            seen += run.events()
            time.sleep(0.2)
        if spares:
            run.wait_spare(lambda t: time.sleep(t), opts.startup_timeout)
        end = time.time() + opts.warmup
        while time.time() < end:
            seen += run.events()
            time.sleep(0.2)
        t0 = time.time()
        while time.time() < t0 + opts.window:
            seen += run.events()
            time.sleep(0.2)
        firsts = [kube.container_process(run.namespace, f"cost-{r}") for r in REPLICAS]
        memory = sum(working_set(pid) for pid in firsts)
        first_private = sum(private(pid) for pid in firsts) if warm else None
        spare = (working_set(kube.container_process(run.namespace, "cost-spare-0")) / MIB
                 if spares else None)  # fmt: skip
        return {"rate": obs.rate(seen, t0, t0 + opts.window), "memory": memory / MIB,
                "first_private": None if first_private is None else first_private / MIB,
                "spare": spare}
    finally:
        run.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--window", type=float, default=15.0)
    p.add_argument("--startup-timeout", type=float, default=180.0)
    p.add_argument("--spares", action="store_true",
                   help="compare runPolicy.spares 1 with 0 (warm restarts on in both)")
    opts = p.parse_args()
    if opts.spares:
        return spare_cost(opts)
    _kuberun.wait_cluster()
    started = datetime.datetime.now(datetime.UTC)
    print(f"# bench/warmcost.py {' '.join(sys.argv[1:])}  ({started:%Y-%m-%d %H:%M} UTC)")
    results: dict[bool, list[dict[str, float | None]]] = {True: [], False: []}
    for i in range(opts.repeats):
        for warm in ((True, False) if i % 2 == 0 else (False, True)):
            result = one_run(warm, opts)
            results[warm].append(result)
            print(f"  repeat {i + 1} {'warm' if warm else 'cold'}: "
                  f"{obs.fmt(result['rate'], '.1f')} steps/s, "
                  f"{obs.fmt(result['memory'], '.0f')} MiB in 4 containers"
                  + (f", first processes {result['first_private']:.0f} MiB private"
                     if result["first_private"] is not None else ""), flush=True)

    def med(warm: bool, key: str) -> float | None:
        return obs.median(r[key] for r in results[warm])

    def most(warm: bool, key: str) -> float | None:
        values = [v for r in results[warm] if (v := r[key]) is not None]
        return max(values) if values else None

    print()
    print("| job (1 PS, chief, 2 workers) | repeats | steps/s median (min) | memory of its 4 "
          "containers, MiB median (max) | first processes' private memory, MiB median (max) |")
    print("| --- | --- | --- | --- | --- |")
    for warm in (False, True):
        rates = [r["rate"] for r in results[warm] if r["rate"] is not None]
        slowest = min(rates) if rates else None
        print(f"| warmRestarts: {str(warm).lower()} | {len(results[warm])} | "
              f"{obs.fmt(med(warm, 'rate'), '.1f')} ({obs.fmt(slowest, '.1f')}) | "
              f"{obs.fmt(med(warm, 'memory'), '.0f')} ({obs.fmt(most(warm, 'memory'), '.0f')}) | "
              f"{obs.fmt(med(warm, 'first_private'), '.0f')} "
              f"({obs.fmt(most(warm, 'first_private'), '.0f')}) |")
    rate = obs.ratio(med(True, "rate"), med(False, "rate"))
    memory = obs.ratio(med(True, "memory"), med(False, "memory"))
    print(f"| ratio warm / cold | | {obs.fmt(rate, '.2f', 'x')} | "
          f"{obs.fmt(memory, '.2f', 'x')} | |")
    return 0


def spare_cost(opts: argparse.Namespace) -> int:
    """runPolicy.spares 1 vs 0, interleaved: steps/s and the spare pod's memory."""
    _kuberun.wait_cluster()
    started = datetime.datetime.now(datetime.UTC)
    print(f"# bench/warmcost.py {' '.join(sys.argv[1:])}  ({started:%Y-%m-%d %H:%M} UTC)")
    results: dict[int, list[dict[str, float | None]]] = {0: [], 1: []}
    for i in range(opts.repeats):
        for spares in ((1, 0) if i % 2 == 0 else (0, 1)):
            result = one_run(True, opts, spares=spares)
            results[spares].append(result)
            print(f"  repeat {i + 1} spares {spares}: {obs.fmt(result['rate'], '.1f')} steps/s, "
                  f"{obs.fmt(result['memory'], '.0f')} MiB in 4 containers"
                  + (f", the spare {result['spare']:.0f} MiB" if result["spare"] else ""),
                  flush=True)  # fmt: skip

    def values(spares: int, key: str) -> list[float]:
        return [v for r in results[spares] if (v := r[key]) is not None]

    print()
    print("| job (1 PS, chief, 2 workers), warm restarts | repeats | steps/s median (min) | "
          "memory of its 4 replicas' containers, MiB median | the spare pod, MiB median (max) |")
    print("| --- | --- | --- | --- | --- |")
    for spares in (0, 1):
        rates, spare = values(spares, "rate"), values(spares, "spare")
        print(f"| spares: {spares} | {len(results[spares])} | {obs.fmt(obs.median(rates), '.1f')} "
              f"({obs.fmt(min(rates) if rates else None, '.1f')}) | "
              f"{obs.fmt(obs.median(values(spares, 'memory')), '.0f')} | "
              f"{obs.fmt(obs.median(spare), '.0f')} "
              f"({obs.fmt(max(spare) if spare else None, '.0f')}) |")
    rate = obs.ratio(obs.median(values(1, "rate")), obs.median(values(0, "rate")))
    print(f"| ratio 1 spare / none | | {obs.fmt(rate, '.2f', 'x')} | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
