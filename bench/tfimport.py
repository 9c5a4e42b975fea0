"""Benchmark: what a replica's TensorFlow import costs, the runtime's way
(process/tfimport.py: scikit-learn, SciPy and Matplotlib left out until TensorFlow is
imported) vs a plain ``import tensorflow``.

Each run is a fresh Python process that imports TensorFlow, turns eager execution off (as
every replica does) and prints its own CPU seconds (user + system) and wall time; the two
ways alternate (ours, stock, stock, ours, ...) ``--repeats`` times each. Medians and max,
the ratio ours / stock side by side. Not a test.

With ``--image``, the processes run in the runtime image (``buildah run`` in the host's
network, which leaves no bridge or firewall chain behind; the image's own site-packages:
scikit-learn and SciPy, no Matplotlib); without, in this interpreter (the venv has
Matplotlib too).

    .venv/bin/python bench/tfimport.py --repeats 5
    .venv/bin/python bench/tfimport.py --repeats 5 \
        --image ghcr.io/syncreplicas/syncreplicas-runtime:0.1.0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

PROBE = """
import os, sys, time, json
started = time.monotonic()
if sys.argv[1] == "ours":
    from syncreplicas_runtime.process.tfimport import import_tensorflow
    tf = import_tensorflow()
else:
    import tensorflow as tf
tf.compat.v1.disable_eager_execution()
t = os.times()
print(json.dumps({"cpu": t.user + t.system, "wall": time.monotonic() - started,
                  "modules": len(sys.modules)}))
"""


def command(image_container: str | None, way: str) -> list[str]:
    if image_container:
        return ["buildah", "run", "--network=host", image_container, "--", "python", "-c", PROBE,
                way]
    return [sys.executable, "-c", PROBE, way]


def one(image_container: str | None, way: str) -> dict[str, float]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(command(image_container, way), capture_output=True, text=True,
                          check=True, env=env, timeout=600)  # fmt: skip
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--image", help="run in this image (buildah run)")
    args = parser.parse_args(argv)
    container = None
    if args.image:
        container = subprocess.run(["buildah", "from", "-q", args.image], capture_output=True,
                                   text=True, check=True).stdout.strip()  # fmt: skip
    runs: dict[str, list[dict[str, float]]] = {"ours": [], "stock": []}
    try:
        for i in range(args.repeats):
            for way in (("ours", "stock") if i % 2 == 0 else ("stock", "ours")):
                runs[way].append(one(container, way))
                r = runs[way][-1]
                print(f"  {way:5} {r['cpu']:5.2f} core-s  {r['wall']:5.2f} s wall  "
                      f"{int(r['modules'])} modules", flush=True)
    finally:
        if container:
            subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
    where = f"in {args.image}" if args.image else f"in {sys.executable}"
    print(f"\nTensorFlow imported in a fresh process, {where}, {args.repeats} runs each "
          "(medians, max)")
    print(f"{'':8} {'CPU core-s':>18} {'wall s':>18} {'modules':>8}")
    med: dict[str, dict[str, float]] = {}
    for way, found in runs.items():
        med[way] = {k: statistics.median(r[k] for r in found) for k in ("cpu", "wall", "modules")}
        top = {k: max(r[k] for r in found) for k in ("cpu", "wall")}
        print(f"{way:8} {med[way]['cpu']:8.2f} ({top['cpu']:5.2f} max) "
              f"{med[way]['wall']:8.2f} ({top['wall']:5.2f} max) {int(med[way]['modules']):8}")
    print(f"ours / stock: CPU {med['ours']['cpu'] / med['stock']['cpu']:.2f}x, "
          f"wall {med['ours']['wall'] / med['stock']['wall']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
