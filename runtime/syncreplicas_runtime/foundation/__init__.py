"""The pure modules every floor of the runtime uses: the replica's configuration from its
environment (config), the contract's exit codes and termination message (exitcodes), the
sync and start-up phases (phases), the metrics port's paths (endpoints) and the timing of a
log line (laps). No I/O, no TensorFlow, and nothing else of the runtime imported."""
