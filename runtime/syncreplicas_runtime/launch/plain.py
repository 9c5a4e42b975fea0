"""The plain start: this process becomes the replica (ps, chief or worker) and ends with it.

Configure from the environment, serve the metrics port, import TensorFlow, check the model,
start the gRPC server, then run the role; every way out leaves the contract's exit code, its
one-line reason and the termination message (docs/contract.md). Every other start mode ends
here too: the supervisor and the warm-start server run :func:`main` in a forked child
(``preloaded.run_replica``), a spare once it has been handed a replica's identity.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import time
import traceback
from typing import TYPE_CHECKING

# Pure and small, and needed at any moment (a SIGTERM during an import): loaded up front.
from ..foundation import exitcodes
from ..foundation.exitcodes import OK
from ..process.termination import exit_now, report_exit

if TYPE_CHECKING:
    from ..process.metrics import RuntimeMetrics


def stacks_on_sigusr1() -> None:
    """`kill -USR1` prints every thread's Python stack to stderr (the pod's log): where a
    process that makes no progress waits. A fatal signal (SIGSEGV, SIGABRT, SIGBUS, SIGFPE,
    SIGILL: a crash in TensorFlow's native code) prints them too before the process dies,
    so a replica that vanished says where and of what."""
    faulthandler.enable(all_threads=True)
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def main() -> int:
    """Run this process as the replica its environment names; the exit code it ends with."""
    stacks_on_sigusr1()  # also here: a warm start's child runs main() alone
    from ..foundation.config import STEP_DELAY_ENV, ConfigError, parse_config
    from ..foundation.stepdelay import ParetoDelays, parse_step_delay
    from ..process.exits import Exit
    from .restartrules import COUNT_ENV
    from .sparerules import TOOK_OVER_ENV

    started = time.monotonic()
    try:
        # Unless told, this process's incarnation is its start time (ms).
        cfg = parse_config(os.environ, started_ms=int(time.time() * 1000))
    except ConfigError as err:
        return fail(exitcodes.CONFIG, f"bad configuration: {err}")
    name = f"{cfg.role}-{cfg.index}"
    try:
        delay = parse_step_delay(os.environ.get(STEP_DELAY_ENV, "0"))
    except ValueError as err:
        return fail(exitcodes.CONFIG, f"bad configuration: {STEP_DELAY_ENV}: {err}")
    from ..process.metrics import RuntimeMetrics, serve

    metrics = RuntimeMetrics()
    restarts = os.environ.get(COUNT_ENV, "")
    metrics.process_restarts.set(int(restarts) if restarts.isdigit() else 0)
    # Nothing to save: stop at once, saying so. The chief replaces this once it has variables
    # to checkpoint (chief.graceful_stop); until then it stops like the others.
    signal.signal(signal.SIGTERM, lambda *_: _sigterm_exit(metrics))

    class _NoServer:
        ready = False

    readiness: object = _NoServer()
    if cfg.metrics_port:
        try:
            _, readiness = serve(metrics, cfg.metrics_port)
        except OSError as err:
            return fail(exitcodes.CONFIG, f"metrics.port {cfg.metrics_port}: cannot listen: {err}")

    from ..process.tfimport import import_tensorflow

    tf = import_tensorflow()
    tf.compat.v1.disable_eager_execution()
    tf.get_logger().setLevel("ERROR")  # deprecation notices of the v1 API we use on purpose
    from ..process.context import Context
    from ..replica.chief import run_chief
    from ..replica.worker import run_worker

    imported = time.monotonic()
    model_fn = None
    # PS 0 builds the training graph too: it runs the sync loop (ps/coordinator.py).
    if cfg.role != "ps" or cfg.index == 0:
        from ..graph.training import build_training_graph
        from ..model.contract import ModelError, load_entrypoint

        try:
            model_fn = load_entrypoint(cfg.model.entrypoint)
            # Build once before touching the cluster: a broken model fails here, at once.
            # Not in a spare that took a replica over: the replicas it joins built this
            # model already, and the takeover would wait for it (a model error still ends
            # it with MODEL, at its first epoch's graph: graph.training.build_epoch_graph).
            if os.environ.get(TOOK_OVER_ENV) != "1":
                build_training_graph(cfg, model_fn, epoch=1)
        except ModelError as err:
            return fail(exitcodes.MODEL, str(err))
        except Exit as err:  # a setting only the model or a file can refuse (warmStart)
            return fail(err.code, err.reason)
    try:
        from ..process.sessions import start_server

        server = start_server(cfg)
    except Exception as err:  # e.g. the port is taken: transient on a shared node
        return fail(exitcodes.RETRY, f"cannot start the gRPC server on {cfg.address}: {err}")
    ctx = Context(cfg=cfg, server=server, metrics=metrics, readiness=readiness,
                  model_fn=model_fn, name=name, step_delay=delay.ms / 1000.0,
                  step_delay_file=delay.file,
                  step_delays=ParetoDelays(*delay.pareto, name) if delay.pareto else None)
    ctx.log(f"started: tensorflow {tf.__version__} imported in {imported - started:.1f}s, "
            f"server {cfg.address} up at {time.monotonic() - started:.1f}s "
            f"(R={cfg.replicas_to_aggregate}, replicas={cfg.total_replicas}, "
            f"ps={cfg.parameter_servers}) at unix time {time.time():.3f}")
    try:
        if cfg.role == "ps":
            from ..ps.serving import run_ps

            code = run_ps(ctx)
        elif cfg.role == "chief":
            code = run_chief(ctx)
        else:
            code = run_worker(ctx)
    except Exit as err:
        return fail(err.code, err.reason, seen_step(metrics))
    except tf.errors.OpError as err:
        from ..sync.fencing import superseded_by

        if (fence := superseded_by(err)) is not None:  # a run refused by the fence on PS 0
            return fail(exitcodes.FENCED, exitcodes.fenced_reason(
                cfg.replica_id, fence.mine, fence.owner), seen_step(metrics))
        print(f"syncreplicas {name}: {type(err).__name__}: {err.message}", flush=True)
        return fail(exitcodes.RETRY, f"{type(err).__name__}: {op_error_summary(err.message)}",
                    seen_step(metrics))
    if code != exitcodes.OK:
        return fail(code, f"{cfg.role} returned exit code {code}", seen_step(metrics))
    if ctx.left:
        step = seen_step(metrics)
        if not cfg.elastic:  # stopped, not scaled down: its pod is replaced (143 says so)
            ctx.let_name_go()
            return fail(128 + signal.SIGTERM, f"stopped by SIGTERM after leaving the job at "
                        f"global step {step}", step)
        return report_exit(OK, f"left the job at global step {step} (scaled down)", step)
    return succeed(seen_step(metrics), export_facts(ctx.exported))


def seen_step(metrics: RuntimeMetrics) -> int | None:
    """The last global step this replica saw (its metrics' gauge), None before any."""
    value = metrics.global_step.get()
    return None if value is None else int(value)


def op_error_summary(message: str | None) -> str:
    """The informative line of a TensorFlow error (it starts with boilerplate lines)."""
    lines = [ln.strip() for ln in (message or "").splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith(("Graph execution error", "Detected at node",
                                                        "File ", "Stack trace"))]
    return (useful or lines or ["(no message)"])[0][:300]


def fail(code: int, reason: str, global_step: int | None = None) -> int:
    """Print the contract's one-line reason and leave it as the termination message; the
    caller returns ``code``."""
    return report_exit(code, reason, global_step)


def succeed(global_step: int | None, more: dict[str, str] | None = None) -> int:
    """Leave the termination message of exit 0: where training finished (the chief's is the
    job's final global step, which the operator reports) and what it exported."""
    at = f"finished at global step {global_step}" if global_step is not None else "finished"
    return report_exit(OK, at, global_step, more=more)


def export_facts(exported: dict[str, tuple[str, int]]) -> dict[str, str]:
    """The chief's exports as termination-message facts: ``exportPath``, ``exportStep``,
    ``bestExportPath``, ``bestExportStep`` (docs/contract.md)."""
    facts: dict[str, str] = {}
    for kind, (path, step) in sorted(exported.items()):
        facts[f"{kind}Path"], facts[f"{kind}Step"] = path, str(step)
    return facts


def _sigterm_exit(metrics: RuntimeMetrics) -> None:
    exit_now(128 + signal.SIGTERM, "stopped by SIGTERM", seen_step(metrics))


def unexpected() -> int:
    """After an exception nothing else caught: its traceback, then exit 1 with the
    contract's line (the caller returns the code)."""
    traceback.print_exc()
    return fail(1, "unexpected error (traceback above)")
