"""``python -m syncreplicas_runtime.model ENTRYPOINT``: does the model entrypoint load?

Exit 0 when it imports and is callable; otherwise exit 65 (MODEL) with the contract's one
line on stderr. The local runner asks this before it starts any process.
"""

from __future__ import annotations

import sys

from ..foundation.exitcodes import MODEL, exit_line
from .contract import ModelError, load_entrypoint


def check_entrypoint_main(argv: list[str]) -> int:
    """The exit code of the check of ``argv``'s one entrypoint (2: usage)."""
    if len(argv) != 1:
        print("usage: python -m syncreplicas_runtime.model package.module:function",
              file=sys.stderr)
        return 2
    try:
        load_entrypoint(argv[0])
    except ModelError as err:
        print(exit_line(MODEL, str(err)), file=sys.stderr, flush=True)
        return MODEL
    return 0


if __name__ == "__main__":
    sys.exit(check_entrypoint_main(sys.argv[1:]))
