"""The training replicas, chief and workers: join a sync epoch, train, rejoin (they know PS 0
only through the sync protocol)."""
