"""The operator's I/O edge: the Kubernetes API, its own metrics, and manifest files."""
