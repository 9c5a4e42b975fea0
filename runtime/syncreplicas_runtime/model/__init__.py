"""The model contract: loading a model entrypoint, building and checking it, its tf.data input
and stable Keras names. ``python -m syncreplicas_runtime.model ENTRYPOINT`` checks that an
entrypoint loads."""
