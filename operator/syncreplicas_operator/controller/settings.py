"""The operator's settings: ``syncreplicas operator`` arguments and what they configure.

All of it runs before kopf starts; ``handlers.main`` then hands over to kopf.
"""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass
from typing import Final

from prometheus_client import start_http_server

from ..core import manifests
from ..core.leader import Timings
from ..core.nodes import DEFAULT_LEASE_GRACE_SECONDS

log = logging.getLogger("syncreplicas.operator")

DEFAULT_METRICS_PORT: Final = 8080
DEFAULT_LIVENESS_PORT: Final = 8081
DEFAULT_LEASE_NAME: Final = "syncreplicas-operator"


@dataclass
class Settings:
    """Process-wide knobs set by :func:`configure` (or the tests)."""

    scrape_interval: float = 15.0
    scrape_timeout: float = 2.0
    # Every replica's gradient counters (stragglers): rarer, and a bounded number at once.
    replica_scrape_interval: float = 30.0
    scrape_concurrency: int = 16
    image: str = manifests.DEFAULT_IMAGE
    # Lost nodes (core/nodes.py): watch Nodes and the kubelets' Leases, force-delete and
    # re-create the replicas of a lost node. Off: Kubernetes' own handling alone.
    node_loss_handling: bool = True
    node_lease_grace: float = DEFAULT_LEASE_GRACE_SECONDS
    # Namespaces whose pods may read the replicas' metrics port (the job's NetworkPolicy);
    # empty: any source. Set, it always holds the operator's own (it reads the replicas).
    metrics_from: tuple[str, ...] = ()
    # Kueue (core/kueue.py): a job labelled kueue.x-k8s.io/queue-name runs once Kueue admits
    # the Workload the operator writes for it. Off: the label means nothing here.
    kueue: bool = False
    # Seconds after a spare took a replica over before the spare behind it is started
    # (core/plan/spares.py refill_wait); 0: at once.
    spare_refill_delay: float = 10.0


SETTINGS = Settings()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``syncreplicas operator``."""
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        metavar="NS",
        help="watch only this namespace (repeatable); default: all namespaces",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=DEFAULT_METRICS_PORT,
        help="port of /metrics (0: no metrics server)",
    )
    parser.add_argument(
        "--liveness-port",
        type=int,
        default=DEFAULT_LIVENESS_PORT,
        help="port of kopf's /healthz (0: none)",
    )
    parser.add_argument(
        "--scrape-interval",
        type=float,
        default=SETTINGS.scrape_interval,
        help="seconds between reads of each chief's and coordinator's (PS 0) /metrics "
        "for status.globalStep, status.replicasToAggregate and status.lastRecovery",
    )
    parser.add_argument(
        "--replica-scrape-interval",
        type=float,
        default=SETTINGS.replica_scrape_interval,
        help="seconds between reads of every replica's /metrics: the chief's and workers' "
        "for stragglers (gradients dropped as stale; the window is the last 5 reads), "
        "every replica's for its warm restarts",
    )
    parser.add_argument(
        "--scrape-concurrency",
        type=int,
        default=SETTINGS.scrape_concurrency,
        help="most /metrics reads of one job in flight at once",
    )
    parser.add_argument(
        "--image",
        default=SETTINGS.image,
        help="runtime image for pods whose spec and template name none (default: %(default)s)",
    )
    parser.add_argument(
        "--metrics-from-namespace",
        action="append",
        default=[],
        metavar="NS",
        help="admit the replicas' metrics port only from pods in this namespace "
        "(repeatable; the operator's own, $POD_NAMESPACE, is always added); default: "
        "from anywhere. Applies to NetworkPolicies created from then on",
    )
    parser.add_argument(
        "--node-loss-handling",
        choices=("on", "off"),
        default="on" if SETTINGS.node_loss_handling else "off",
        help="watch Nodes and the kubelets' Leases and re-create at once the replicas of a "
        "lost node (gone, not Ready, Lease not renewed, out of service); off: leave them "
        "to Kubernetes (default: %(default)s)",
    )
    parser.add_argument(
        "--node-lease-grace-seconds",
        type=float,
        default=SETTINGS.node_lease_grace,
        help="a node whose kubelet has not renewed its Lease for this long is lost (the "
        "kubelet renews every 10 s; default: %(default)s)",
    )
    parser.add_argument(
        "--spare-refill-delay-seconds",
        type=float,
        default=SETTINGS.spare_refill_delay,
        help="start the spare behind a takeover this long after a spare took a replica "
        "over, so that its new pod and TensorFlow's import do not take CPU from the "
        "recovery (0: at once; default: %(default)s)",
    )
    parser.add_argument(
        "--kueue",
        choices=("on", "off"),
        default="on" if SETTINGS.kueue else "off",
        help="queue jobs labelled kueue.x-k8s.io/queue-name in Kueue: each gets a Workload "
        "and runs only while Kueue admits it (default: %(default)s)",
    )
    parser.add_argument(
        "--leader-elect",
        choices=("on", "off"),
        default="off",
        help="run as one of several replicas: act only while holding the leader Lease "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--leader-election-namespace",
        default=os.environ.get("POD_NAMESPACE", "default"),
        help="namespace of the leader Lease (default: $POD_NAMESPACE, else %(default)s)",
    )
    parser.add_argument(
        "--leader-election-id",
        default=DEFAULT_LEASE_NAME,
        help="name of the leader Lease (default: %(default)s)",
    )
    defaults = Timings()
    parser.add_argument(
        "--leader-election-lease-duration",
        type=float,
        default=defaults.lease_duration,
        help="seconds a follower waits, after the Lease last changed, before taking it "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--leader-election-renew-deadline",
        type=float,
        default=defaults.renew_deadline,
        help="seconds a leader may go without renewing before it stops (default: %(default)s)",
    )
    parser.add_argument(
        "--leader-election-retry-period",
        type=float,
        default=defaults.retry_period,
        help="seconds between two looks at (or renewals of) the Lease (default: %(default)s)",
    )
    parser.add_argument("--verbose", action="store_true", help="debug logging")


def configure(args: argparse.Namespace) -> None:
    """Logging and settings from the parsed arguments."""
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        # kopf logs every handler call at INFO: thousands of lines per large job.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    if args.scrape_interval <= 0:
        raise SystemExit("--scrape-interval must be > 0")
    SETTINGS.scrape_interval = args.scrape_interval
    if args.replica_scrape_interval <= 0:
        raise SystemExit("--replica-scrape-interval must be > 0")
    if args.scrape_concurrency < 1:
        raise SystemExit("--scrape-concurrency must be >= 1")
    SETTINGS.replica_scrape_interval = args.replica_scrape_interval
    SETTINGS.scrape_concurrency = args.scrape_concurrency
    SETTINGS.image = args.image
    SETTINGS.metrics_from = metrics_namespaces(args.metrics_from_namespace)
    if args.node_lease_grace_seconds <= 0:
        raise SystemExit("--node-lease-grace-seconds must be > 0")
    SETTINGS.node_loss_handling = args.node_loss_handling == "on"
    SETTINGS.node_lease_grace = args.node_lease_grace_seconds
    SETTINGS.kueue = args.kueue == "on"
    if args.spare_refill_delay_seconds < 0:
        raise SystemExit("--spare-refill-delay-seconds must be >= 0")
    SETTINGS.spare_refill_delay = args.spare_refill_delay_seconds
    if problems := election_timings(args).problems():
        raise SystemExit(f"--leader-election-*: {'; '.join(problems)}")
    log_watched_namespaces(args.namespace)


def log_watched_namespaces(namespaces: list[str]) -> None:
    """Say once, at start, whose jobs this operator acts on (``--namespace``)."""
    if namespaces:
        log.info("watching SyncReplicasJobs in namespace(s) %s only; jobs in any other "
                 "namespace are left alone", ", ".join(dict.fromkeys(namespaces)))  # fmt: skip
    else:
        log.info("watching SyncReplicasJobs in every namespace")


def metrics_namespaces(named: list[str]) -> tuple[str, ...]:
    """Who may read the metrics port: the namespaces named, and the operator's own."""
    if not named:
        return ()
    own = os.environ.get("POD_NAMESPACE")
    return tuple(sorted({*named, *([own] if own else [])}))


def election_timings(args: argparse.Namespace) -> Timings:
    return Timings(lease_duration=args.leader_election_lease_duration,
                   renew_deadline=args.leader_election_renew_deadline,
                   retry_period=args.leader_election_retry_period)  # fmt: skip


def serve_metrics(args: argparse.Namespace) -> None:
    """The operator's /metrics on ``--metrics-port`` (register the families first)."""
    if args.metrics_port:
        server, _ = start_http_server(args.metrics_port)
        log.info("operator metrics on :%d/metrics", server.server_port)


def liveness_endpoint(args: argparse.Namespace) -> str | None:
    """kopf's liveness endpoint URL, or None when ``--liveness-port 0``."""
    return f"http://0.0.0.0:{args.liveness_port}/healthz" if args.liveness_port else None
