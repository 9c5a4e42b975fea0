"""The operator's leader Lease in the API: read it, create it, update it (conditionally on
the resourceVersion read). The rules are ``core/leader.py``'s; the loop is
``controller/election.py``'s.

Requests time out after ``timeout`` seconds (shorter than the renew deadline): a leader cut
off from the API server must see its renewals fail, not wait on them.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from ..core.leader import LeaseRecord, lease_spec, record_of
from .k8s import MERGE_PATCH, request

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


class LeaseStore:
    def __init__(self, api_client: client.ApiClient, namespace: str, name: str,
                 timeout: float) -> None:  # fmt: skip
        self.client, self.namespace, self.name, self.timeout = (
            api_client, namespace, name, timeout)  # fmt: skip
        self.collection = LEASES.format(namespace=namespace)
        self.path = f"{self.collection}/{name}"
        self.resource_version: str | None = None  # of the Lease as last read or written

    def read(self) -> LeaseRecord | None:
        status, lease = request(self.client, "GET", self.path, ok=(404,), timeout=self.timeout)
        if status == 404:
            self.resource_version = None
            return None
        self.resource_version = str(lease["metadata"].get("resourceVersion") or "")
        return record_of(lease)

    def write(self, record: LeaseRecord) -> bool:
        """Create the Lease (none was read) or update the one read; False when another
        replica wrote first (409 Conflict) or created it meanwhile."""
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": lease_spec(record),
        }
        if self.resource_version is None:
            status, lease = request(self.client, "POST", self.collection, body, ok=(409,),
                                    timeout=self.timeout)  # fmt: skip
        else:
            # A merge patch of the whole spec, with the resourceVersion read as its
            # precondition (the API server answers 409 when the Lease changed since).
            if self.resource_version:  # (an API server always gives one; a mock may not)
                body["metadata"]["resourceVersion"] = self.resource_version
            status, lease = request(self.client, "PATCH", self.path, body, MERGE_PATCH,
                                    ok=(409,), timeout=self.timeout)  # fmt: skip
        if status == 409:
            return False
        self.resource_version = str(lease["metadata"].get("resourceVersion") or "")
        return True
