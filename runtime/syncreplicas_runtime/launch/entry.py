"""The entry point's decision: how this pod's process becomes a replica.

From the variables the operator set on the pod, in this order:

1. ``SYNCREPLICAS_SPARE_TOKEN`` (sparerules.TOKEN_ENV): a spare pod. Wait as a spare until
   handed a replica's identity (spare.py); the environment is then the replica's, and the
   decision goes on as for any replica's pod.
2. ``SYNCREPLICAS_WARM_RESTARTS`` (restartrules.POLICY_ENV): the supervisor (supervisor.py)
   forks the replica and forks it again when it dies.
3. Otherwise the plain start: this process is the replica (plain.py).

Only this module's imports run before the decision: each mode is imported when chosen, and
TensorFlow by the mode itself.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from ..foundation import exitcodes
from .plain import fail, main, stacks_on_sigusr1, unexpected


def entry_point() -> int:
    """Start the replica the way the environment says; the process's exit code."""
    stacks_on_sigusr1()
    from . import sparerules
    from .restartrules import RuleError, parse_rule

    if sparerules.is_spare(os.environ):  # a spare pod: wait to be handed a replica's identity
        from .spare import wait_for_assignment

        if (code := wait_for_assignment()) is not None:
            return code
    try:
        rule = parse_rule(os.environ)
    except RuleError as err:
        return fail(exitcodes.CONFIG, f"bad configuration: {err}")
    if rule is None:
        return main()
    from .supervisor import supervise

    return supervise(rule)


def run() -> NoReturn:
    """``python -m syncreplicas_runtime``: :func:`entry_point`, and the process ends with
    its code (1, with the traceback, if it raised)."""
    try:
        code = entry_point()
    except Exception:
        code = unexpected()
    sys.stdout.flush()
    sys.stderr.flush()
    # Daemon threads may sit in TensorFlow calls (the chief's sync loop waits for gradients
    # that will never come): leave without waiting for them.
    os._exit(code)
