"""``syncreplicas run``: a SyncReplicasJob as supervised local processes (extra ``[local]``)."""
