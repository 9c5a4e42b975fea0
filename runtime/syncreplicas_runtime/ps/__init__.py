"""The parameter servers: serve until training ended; PS 0 also runs the sync epochs (they
know the replicas only through the sync protocol)."""
