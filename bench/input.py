"""Benchmark: tf.data input against ``feed(step)`` on the same data and model.

The digits CNN (``syncreplicas_runtime.models.digits_cnn``, Keras layers) trained by the
runtime twice per repeat, alternating: fed by the runtime's tf.data input (sharded per
replica, an iterator positioned from the global step, model/data.py) and by ``feed(step)`` with
numpy (bench/_inputmodels.py; same shard, same permutation per data epoch). Shape: 1 PS,
chief + ``--workers`` workers, R = replicas. Steady global steps/s is the median of the
chief's per-window rates after the first window. Prints a Markdown table. Not a test.

    .venv/bin/python bench/input.py            # 3 repeats, 600 steps
    .venv/bin/python bench/input.py --quick    # 1 repeat, 60 steps (a smoke check)
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import tfcluster  # noqa: E402

INPUTS = {
    "tf.data": "syncreplicas_runtime.models.digits_cnn:build",
    "feed(step)": "bench._inputmodels:cnn_feed",
}
RATE_RE = re.compile(r"global_step=\d+ local_step=\d+ steps/s=([\d.]+)")


def run_once(entrypoint: str, workers: int, steps: int, log_every: int) -> float | None:
    job = {
        "replicasToAggregate": workers + 1, "workers": workers, "parameterServers": 1,
        "initialTokens": 0,
        "model": {"entrypoint": entrypoint, "args": {}},
        "training": {"optimizer": "adam", "learningRate": 0.003, "batchSize": 32,
                     "maxSteps": steps, "logEverySteps": log_every,
                     "startupTimeoutSeconds": 300, "chiefLostTimeoutSeconds": 300},
        "metrics": {"port": 0},
    }
    with tempfile.TemporaryDirectory(prefix="bench-input-") as tmp, tfcluster.start_cluster(
            job, workers=workers, ps=1, workdir=Path(tmp),
            env={"PYTHONPATH": str(ROOT), "SYNCREPLICAS_METRICS_PORT": "0",
                 "TF_CPP_MIN_LOG_LEVEL": "2"}) as cluster:
        codes = cluster.wait(timeout=600 + steps)
        log = cluster.log("chief", 0)
    if set(codes.values()) != {0}:
        print(f"  {entrypoint}: exits {codes}", flush=True)
        return None
    rates = [float(m[1]) for m in RATE_RE.finditer(log)][1:]  # the first window warms up
    return statistics.median(rates) if rates else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 repeat, 60 steps")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    repeats, steps = (1, 60) if args.quick else (args.repeats, args.steps)
    log_every = max(10, steps // 20)
    results: dict[str, list[float]] = {name: [] for name in INPUTS}
    started = time.monotonic()
    for rep in range(repeats):
        for name, entrypoint in INPUTS.items():
            rate = run_once(entrypoint, args.workers, steps, log_every)
            print(f"repeat {rep + 1}/{repeats} {name}: {rate} global steps/s", flush=True)
            if rate is not None:
                results[name].append(rate)
    medians = {n: statistics.median(v) if v else None for n, v in results.items()}
    print(f"\ndigits CNN, 1 PS, chief + {args.workers} worker(s), R = replicas, batch 32, "
          f"{steps} steps, {repeats} repeat(s), {time.monotonic() - started:.0f} s\n")
    print("| input | steady global steps/s (median) | runs |")
    print("| --- | --- | --- |")
    for name, value in medians.items():
        shown = f"{value:.2f}" if value is not None else "-"
        print(f"| {name} | {shown} | {len(results[name])} |")
    base, data = medians["feed(step)"], medians["tf.data"]
    if base and data:
        print(f"\ntf.data / feed(step): {data / base:.2f}")


if __name__ == "__main__":
    main()
