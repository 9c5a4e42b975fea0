"""The operator on a cluster: kopf handlers hand every job to a daemon that plans and applies."""
