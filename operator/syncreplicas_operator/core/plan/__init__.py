"""Plan one reconciliation of a SyncReplicasJob: observed children in, actions and status out.

Pure: no clock, no API, no kopf. The caller passes ``now`` and what it observed; the plan
says what to create, delete, patch and report. Reconciliation is level-based: the plan
depends only on the desired state and the observed one, so running it twice on the same
input, or after an operator restart, never duplicates a child (names are deterministic).

``pipeline.plan_job`` runs one step per concern over a shared ``context.PlanContext``:
``lifecycle`` (finish, suspend, deadline, TTL), ``exits`` (replica exits, backoff),
``chief`` (chief restarts), ``children`` (create, prune, force-delete), ``progress``
(Running, Restarting, Degraded, Stalled), ``recoveries`` (status.lastRecovery),
``stragglers``; ``result`` turns the context into the ``Plan``.
"""
