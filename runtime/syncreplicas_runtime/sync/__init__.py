"""The sync-state protocol on PS 0, shared by its coordinator and the replicas: the names of
what PS 0 holds, the protocol's variables and queues."""
