"""One replica process: its context, metrics endpoint, gRPC server and sessions, and how it
ends (no training graph here)."""
