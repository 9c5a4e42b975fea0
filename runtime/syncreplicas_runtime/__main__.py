"""Entry point ``python -m syncreplicas_runtime``, every replica's and spare's command:
``launch.entry`` decides how the process becomes a replica and ends it with the replica's
exit code."""

from .launch.entry import run

if __name__ == "__main__":
    run()
