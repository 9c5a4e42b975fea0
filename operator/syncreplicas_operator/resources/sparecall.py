"""Hand a spare pod its replica: one HTTP POST to the spare's endpoint (docs/contract.md,
"Spare pods"). The operator's only request to a pod that changes what it does.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Final

from ..core import naming

# The spare answers at once (it writes one small file); a spare that does not is no use.
TIMEOUT_SECONDS: Final = 3.0


def assign(address: str, port: int, token: str, env: Mapping[str, str]) -> str:
    """Post the replica's environment to the spare; "" when it took it, else why not."""
    host = f"[{address}]" if ":" in address else address
    request = urllib.request.Request(
        f"http://{host}:{port}{naming.SPARE_ASSIGN_PATH}",
        data=json.dumps({"env": dict(env)}).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
            response.read()
            return ""
    except urllib.error.HTTPError as err:
        detail = err.read(500).decode(errors="replace").strip()
        return f"HTTP {err.code}" + (f": {detail}" if detail else "")
    except (OSError, ValueError) as err:
        return str(getattr(err, "reason", err)) or type(err).__name__
