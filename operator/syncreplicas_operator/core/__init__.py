"""The pure core: the SyncReplicasJob's spec, names, manifests, status and planner.

Nothing here does I/O or imports kopf, kubernetes, aiohttp, rich, matplotlib, TensorFlow or
the runtime (import contracts in pyproject.toml say so); mypy checks it strictly.
"""
