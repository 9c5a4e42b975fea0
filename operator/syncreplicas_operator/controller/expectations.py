"""What this operator just created or deleted but the watch has not shown yet.

As in Kubernetes' controllers: a burst of events must never re-create a child whose
creation is still in flight, nor forget a deletion the index does not reflect yet. An
expectation expires after :data:`EXPECTATION_SECONDS`; the watch must have caught up by
then.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Final

from ..core import naming
from ..core.actions import CreateChild
from ..core.plan.context import Observed
from ..core.spares import ObservedSpare
from ..core.status import ObservedPod

EXPECTATION_SECONDS: Final = 60.0


@dataclass
class Expectations:
    """Names mapped to the monotonic time their expectation expires."""

    created: dict[str, float] = field(default_factory=dict)  # pods
    deleted: dict[str, float] = field(default_factory=dict)  # pods
    services: dict[str, float] = field(default_factory=dict)  # created Services
    policy_created: float = 0.0  # expiry of "the NetworkPolicy was just created"
    # Spares handed a replica: spare name -> (replica type, index, incarnation, expiry),
    # until the watch shows the pod with the replica's labels.
    assigned: dict[str, tuple[str, int, int, float]] = field(default_factory=dict)

    @property
    def pending(self) -> bool:
        """Pods created or deleted that the watch has not confirmed yet."""
        return bool(self.created or self.deleted or self.assigned)

    def expect_created(self, creates: Iterable[CreateChild]) -> None:
        expiry = time.monotonic() + EXPECTATION_SECONDS
        for create in creates:
            if create.kind == "Pod":
                self.created[create.name] = expiry
            elif create.kind == "Service":
                self.services[create.name] = expiry
            elif create.kind == "NetworkPolicy":
                self.policy_created = expiry

    def expect_assigned(self, spare: str, replica: str, incarnation: int) -> None:
        parsed = naming.parse_replica_key(replica)
        if parsed is not None:
            expiry = time.monotonic() + EXPECTATION_SECONDS
            self.assigned[spare] = (parsed[0], parsed[1], incarnation, expiry)

    def expect_deleted(self, pods: Iterable[str]) -> None:
        expiry = time.monotonic() + EXPECTATION_SECONDS
        for name in pods:
            self.deleted[name] = expiry

    def forget_created(self) -> None:
        """After a failed write: start again from what the API shows."""
        self.created.clear()
        self.services.clear()
        self.policy_created = 0.0

    def observe(
        self,
        job: str,
        pods: Iterable[ObservedPod],
        services: set[str],
        policy: bool,
        spares: Iterable[ObservedSpare] = (),
    ) -> Observed:
        """The indexed children, corrected by what this process did and the watch not yet
        showed; expectations the watch confirmed or that expired are dropped."""
        now = time.monotonic()
        seen = {p.name: p for p in pods}
        waiting = {s.name: s for s in spares}
        for name, (_, _, _, expiry) in list(self.assigned.items()):
            if expiry < now or name in seen or name not in waiting:
                del self.assigned[name]  # relabelled (a replica's pod now), gone, or stale
        for book in (self.created, self.deleted, self.services):
            for name, expiry in list(book.items()):
                if expiry < now:
                    del book[name]
        for name in list(self.created):
            if name in seen or name in waiting:
                del self.created[name]
        for name in list(self.deleted):
            if name not in seen and name not in waiting:
                del self.deleted[name]
        for name in list(self.services):
            if name in services:
                del self.services[name]
        if policy:
            self.policy_created = 0.0  # shown by the watch: its absence is now a deletion
        merged = dict(seen)
        for name in self.deleted:
            if name in merged:
                merged[name] = replace(merged[name], deleting=True)
            else:
                waiting[name] = replace(waiting[name], deleting=True)
        for name, (replica_type, index, incarnation, _) in self.assigned.items():
            spare = waiting.pop(name)
            merged[name] = ObservedPod(
                name=name,
                replica_type=replica_type,
                index=index,
                uid=spare.uid,
                phase=spare.phase,
                pod_ip=spare.pod_ip,
                node_name=spare.node_name,
                deleting=spare.deleting,
                incarnation=incarnation,
            )
        for name in self.created:
            parsed = naming.parse_replica_name(job, name)
            if parsed is not None and name not in merged:
                merged[name] = ObservedPod(name=name, replica_type=parsed[0], index=parsed[1])
        return Observed(
            pods=tuple(merged.values()),
            services=frozenset(services | set(self.services)),
            network_policy=policy or self.policy_created > now,
            spares=tuple(waiting.values()),
        )
