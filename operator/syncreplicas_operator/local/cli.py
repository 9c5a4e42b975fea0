"""``syncreplicas run FILE``: arguments, the job and its processes, then the runner.

The manifest goes through the operator's own code: ``core.spec`` validates it,
``core.manifests`` renders the Pods and ``processes`` rewrites them for one machine. The
runner and its view need the ``[local]`` extra (rich, matplotlib); their import is guarded,
so without the extra ``syncreplicas run`` ends with one line saying so (exit 2), not a
traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import socket
import sys
from pathlib import Path
from typing import Any, Final

from ..core import manifests, naming
from ..core.spec import Job
from ..resources.manifestfile import InputError, parse_documents, read_documents
from .board import DEFAULT_PORT
from .chaos import ChaosKill, ChaosSpecError, parse_chaos, plan_chaos
from .errors import RUN_BAD_INPUT, RUN_INTERRUPTED, RunError
from .processes import LocalPlanError, LocalProcess, plan_local_processes, replica_of
from .resize import Resize, ResizeSpecError, parse_resize

# The third-party packages of the [local] extra that this process imports itself.
EXTRA_MODULES: Final = ("rich", "matplotlib")

try:
    from .runner import LocalRunner
except ModuleNotFoundError as err:
    if err.name not in EXTRA_MODULES:
        raise
    _MISSING_EXTRA: str | None = err.name
else:
    _MISSING_EXTRA = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``syncreplicas run``."""
    parser.add_argument("file", help="SyncReplicasJob manifest (YAML), as for kubectl apply")
    parser.add_argument(
        "--report", metavar="DIR", type=Path,
        help="write summary.json and PNG plots (loss, accuracy, steps/s, staleness, "
        "token queue) to DIR at the end",
    )
    parser.add_argument(
        "--workdir", metavar="DIR", type=Path,
        help="checkpoints and per-replica logs (default: .syncreplicas/<job name>); "
        "a run resumes from the checkpoints found here",
    )
    parser.add_argument(
        "--fresh", action="store_true",
        help="delete the checkpoints in the work directory first instead of resuming",
    )
    parser.add_argument(
        "--metrics-port", metavar="PORT", type=int,
        help="serve every replica's metrics on 127.0.0.1:PORT/metrics with replica_type "
        "and replica_index labels, for a local Prometheus (0: a free port)",
    )
    parser.add_argument(
        "--tensorboard", metavar="PORT", type=int, nargs="?", const=DEFAULT_PORT,
        help=f"serve TensorBoard on 127.0.0.1:PORT (default {DEFAULT_PORT}; 0: a free port) "
        "with the chief's summaries while the job trains (a job with spec.tensorboard: on "
        "its port unless this says another)",
    )
    parser.add_argument(
        "--chaos", metavar="SPEC",
        help="inject faults, e.g. 'chief:2,worker:1,seed=7' (kill the chief twice and a "
        "worker at seeded global steps); 'signal=TERM', 'window=0.1-0.8' also accepted",
    )
    parser.add_argument(
        "--resize", metavar="SPEC",
        help="change the number of workers while the job trains, e.g. '100:4,300:1' (4 "
        "workers from global step 100, 1 from 300); needs spec.elasticPolicy",
    )
    parser.add_argument(
        "--dry-run", action="store_true",
        help="print the processes (argv and environment) that would start, as JSON, and exit",
    )
    parser.add_argument(
        "--plain", action="store_true",
        help="plain progress lines instead of the live view (the default when not a terminal)",
    )


def main(args: argparse.Namespace) -> int:
    """Entry point of ``syncreplicas run``; returns the process exit code."""
    if _MISSING_EXTRA is not None:
        print(f"syncreplicas run: needs the [local] extra ({_MISSING_EXTRA} is not installed): "
              "pip install 'syncreplicas-operator[local]'", file=sys.stderr)
        return RUN_BAD_INPUT
    try:
        job = load_job(Path(args.file))
        if job.spec.run_policy.suspend:
            raise RunError(f"{job.name} is suspended (spec.runPolicy.suspend: true): "
                           "nothing to run until it is false")
        chaos = _chaos(args.chaos, job)
        resizes = _resizes(args.resize, job)
        workdir = (args.workdir or Path(".syncreplicas") / job.name).resolve()
        processes = plan_processes(job, workdir / "checkpoints")
        if args.dry_run:
            json.dump([p.to_dict() for p in processes], sys.stdout, indent=2, sort_keys=True)
            sys.stdout.write("\n")
            return 0
        runner = LocalRunner(
            job, processes, workdir=workdir, chaos=chaos, resizes=resizes, fresh=args.fresh,
            metrics_port=args.metrics_port, report_dir=args.report, plain=args.plain,
            tensorboard_port=_board_port(args.tensorboard, job),
        )
        return runner.run()
    except RunError as err:
        print(f"syncreplicas run: {err}", file=sys.stderr)
        return err.code
    except KeyboardInterrupt:
        # Ctrl-C before any replica started (while checking the model): nothing to stop.
        print("syncreplicas run: interrupted", file=sys.stderr)
        return RUN_INTERRUPTED


def load_job(path: Path) -> Job:
    """The one SyncReplicasJob in ``path``, with the checks and messages of ``validate``."""
    try:
        documents = read_documents(path)
    except InputError as err:
        raise RunError(str(err)) from err
    jobs, problems = parse_documents(documents)
    if problems:
        raise RunError(f"invalid {naming.KIND}:\n" + "\n".join(f"  {p}" for p in problems))
    if len(jobs) != 1:
        raise RunError(f"{path}: expected one {naming.KIND}, found {len(jobs)}")
    return jobs[0]


def _chaos(text: str | None, job: Job) -> tuple[ChaosKill, ...]:
    if not text:
        return ()
    try:
        return plan_chaos(
            parse_chaos(text),
            max_steps=job.spec.training.max_steps,
            workers=job.spec.workers,
            ps=job.spec.parameter_servers,
        )
    except ChaosSpecError as err:
        raise RunError(str(err)) from err


def _resizes(text: str | None, job: Job) -> tuple[Resize, ...]:
    if not text:
        return ()
    try:
        return parse_resize(text, job.spec)
    except ResizeSpecError as err:
        raise RunError(str(err)) from err


def rendered_pods(job: Job) -> list[dict[str, Any]]:
    """The Pods ``syncreplicas render`` prints and the operator creates, PS first."""
    return [c for c in manifests.build_children(job) if c.get("kind") == "Pod"]


def plan_processes(job: Job, checkpoint_dir: Path) -> tuple[LocalProcess, ...]:
    """The rendered Pods as local processes, each with its own free ports.

    An elastic job gets a process for each of its ``maxWorkers`` worker slots (the runner
    starts the first ``workers``), rendered as the operator renders a worker it scales up
    to; every one is told the job's ``workers`` at the start."""
    slots = job.spec.worker_slots
    full = dataclasses.replace(job, spec=dataclasses.replace(job.spec, workers=slots))
    pods = rendered_pods(full)
    keys = [naming.replica_key(*replica_of(p)) for p in pods]
    ports = iter(free_ports(2 * len(keys)))
    tf_ports = {k: next(ports) for k in keys}
    metrics_ports = {k: next(ports) for k in keys}
    try:
        return plan_local_processes(
            pods, tf_ports=tf_ports, metrics_ports=metrics_ports,
            checkpoint_dir=str(checkpoint_dir), python=sys.executable,
            workers=job.spec.workers,
        )
    except LocalPlanError as err:
        raise RunError(str(err)) from err


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free a moment ago (held together while picked)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def _board_port(asked: int | None, job: Job) -> int | None:
    """TensorBoard's port: --tensorboard's, else spec.tensorboard's (None: none)."""
    if asked is not None:
        return asked
    return job.spec.tensorboard.port if job.spec.tensorboard is not None else None
