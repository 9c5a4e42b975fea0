"""The state of the variables on the parameter servers: checkpoints and the chief's in-memory
snapshots, and bringing an empty PS back from either."""
