"""The ``syncreplicas`` command: ``operator``, ``run``, ``render`` and ``validate``.

``render`` and ``validate`` live here (they only read a file and call the pure modules).
``operator`` and ``run`` live in their own modules, which are imported only when their
subcommand is used: each module provides ``add_arguments(parser)`` and ``main(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from .core import manifests, naming
from .core.spec import Job
from .resources.manifestfile import InputError, parse_documents, read_documents

OK = 0
INVALID = 1
USAGE = 2


def _load(path: Path, namespace: str | None, err: TextIO) -> list[Job] | None:
    try:
        documents = read_documents(path)
    except InputError as error:
        print(error, file=err)
        return None
    jobs, problems = parse_documents(documents, namespace)
    for line in problems:
        print(line, file=err)
    return None if problems else jobs


def validate_main(args: argparse.Namespace) -> int:
    """``syncreplicas validate FILE``: 0 and "valid", or 1 and one line per problem."""
    jobs = _load(args.file, None, sys.stdout)
    if jobs is None:
        return INVALID
    for job in jobs:
        spec = job.spec
        print(
            f"valid: {naming.KIND} {job.name}: chief + {spec.workers} worker(s), "
            f"R={spec.replicas_to_aggregate}, {spec.backup_replicas} backup(s), "
            f"{spec.parameter_servers} parameter server(s)"
        )
    return OK


def render_main(args: argparse.Namespace) -> int:
    """``syncreplicas render FILE``: the NetworkPolicy, Services and Pods as YAML."""
    jobs = _load(args.file, args.namespace, sys.stderr)
    if jobs is None:
        return INVALID
    children = [
        child for job in jobs for child in manifests.build_children(job, default_image=args.image)
    ]
    text = yaml.safe_dump_all(children, sort_keys=False, default_flow_style=False)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader (say `| head`) went away: not an error of ours.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - replaces a closed stdout
    return OK


def _add_render(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "render",
        help="print the NetworkPolicy, Services and Pods the operator would create",
        description="Print, as YAML, the objects the operator creates for the job(s) in FILE.",
    )
    parser.add_argument("file", type=Path, metavar="FILE", help="manifest file ('-': stdin)")
    parser.add_argument(
        "--namespace", "-n", default=None, help="namespace (default: the manifest's, else default)"
    )
    parser.add_argument(
        "--image",
        default=manifests.DEFAULT_IMAGE,
        help="runtime image for pods whose spec and template name none (default: %(default)s)",
    )
    parser.set_defaults(handler=render_main)


def _add_validate(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check a SyncReplicasJob manifest as the API server and the operator would",
        description="Exit 0 when every document in FILE is a valid SyncReplicasJob, else "
        "exit 1 with one line per problem naming the field.",
    )
    parser.add_argument("file", type=Path, metavar="FILE", help="manifest file ('-': stdin)")
    parser.set_defaults(handler=validate_main)


def _add_lazy(subparsers: Any, command: str | None, name: str, module: str, help_text: str) -> None:
    """Register a subcommand whose module is imported only when ``name`` is invoked."""
    parser = subparsers.add_parser(name, help=help_text, description=help_text)
    if command != name:
        return
    try:
        implementation = importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name != module:
            raise
        reason = f"syncreplicas {name}: not available in this installation ({module} missing)"

        def unavailable(_: argparse.Namespace) -> int:
            print(reason, file=sys.stderr)
            return USAGE

        parser.set_defaults(handler=unavailable)
        return
    implementation.add_arguments(parser)
    parser.set_defaults(handler=implementation.main)


def _command(argv: Sequence[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The argument parser; ``argv`` decides which lazily imported module is loaded."""
    parser = argparse.ArgumentParser(
        prog="syncreplicas",
        description="Synchronous data-parallel TensorFlow training on Kubernetes.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    command = _command(argv)
    # Subcommands in their own modules (add_arguments(parser), main(args) -> int).
    _add_lazy(subparsers, command, "operator", "syncreplicas_operator.controller.handlers",
              "run the operator: reconcile SyncReplicasJobs into pods")  # fmt: skip
    _add_lazy(subparsers, command, "run", "syncreplicas_operator.local.cli",
              "run a SyncReplicasJob manifest as local processes")  # fmt: skip
    # Subcommands implemented here.
    _add_render(subparsers)
    _add_validate(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``syncreplicas`` script."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(arguments).parse_args(arguments)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
