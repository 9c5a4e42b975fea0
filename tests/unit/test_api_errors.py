"""What the operator keeps of an API server's refusal, and who may read the metrics port."""

from __future__ import annotations

import json
from typing import Any

import pytest
from syncreplicas_operator.controller.settings import metrics_namespaces
from syncreplicas_operator.resources import k8s

FORBIDDEN = json.dumps({
    "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden",
    "code": 403,
    "message": 'pods "j-ps-0" is forbidden: violates PodSecurity "restricted:latest": '
               "runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false)",
})  # fmt: skip


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (FORBIDDEN, json.loads(FORBIDDEN)["message"]),
        ("upstream connect error", "upstream connect error"),
        (json.dumps({"kind": "Status"}), json.dumps({"kind": "Status"})),
        ("x" * 400, "x" * 300),
    ],
)
def test_the_api_servers_own_message_is_kept_whole(body: str, message: str) -> None:
    assert k8s.status_message(body) == message
    error = k8s.ApiError("POST", "/api/v1/namespaces/n/pods", 403, body)
    assert error.message == message
    assert str(error) == f"POST /api/v1/namespaces/n/pods: HTTP 403: {message}"


def test_a_refused_create_names_the_object_and_keeps_the_servers_words() -> None:
    error = k8s.ApiError("POST", "/api/v1/namespaces/n/pods", 403, FORBIDDEN)
    refused = k8s.CreateRefused("Pod", "j-ps-0", error)
    assert isinstance(refused, k8s.ApiError)
    assert (refused.kind, refused.name, refused.status) == ("Pod", "j-ps-0", 403)
    assert str(refused).startswith('create Pod j-ps-0: HTTP 403: pods "j-ps-0" is forbidden: '
                                   'violates PodSecurity "restricted:latest"')  # fmt: skip
    assert 403 in k8s.REFUSALS and 503 not in k8s.REFUSALS and 409 not in k8s.REFUSALS


@pytest.mark.parametrize(
    ("named", "own", "expected"),
    [
        ([], "syncreplicas-system", ()),  # from anywhere
        (["monitoring"], "syncreplicas-system", ("monitoring", "syncreplicas-system")),
        (["monitoring", "monitoring"], None, ("monitoring",)),
        (["syncreplicas-system"], "syncreplicas-system", ("syncreplicas-system",)),
    ],
)
def test_the_operators_own_namespace_always_reads_the_metrics(
    monkeypatch: pytest.MonkeyPatch, named: list[str], own: str | None,
    expected: tuple[str, ...],
) -> None:  # fmt: skip
    if own is None:
        monkeypatch.delenv("POD_NAMESPACE", raising=False)
    else:
        monkeypatch.setenv("POD_NAMESPACE", own)
    assert metrics_namespaces(named) == expected


def not_found(what: str) -> str:
    return json.dumps({"kind": "Status", "status": "Failure", "reason": "NotFound",
                       "code": 404, "message": what})  # fmt: skip


@pytest.mark.parametrize(
    ("status", "body", "gone"),
    [
        # A create in a deleted namespace: the job went with it (its loop ends).
        (404, not_found('namespaces "team-b" not found'), True),
        (404, not_found('namespaces "team-b-2" not found'), False),  # another namespace
        (404, not_found('syncreplicasjobs.syncreplicas.io "j" not found'), False),
        (403, not_found('namespaces "team-b" not found'), False),
    ],
)
def test_a_namespace_gone_is_told_from_other_not_founds(status: int, body: str,
                                                        gone: bool) -> None:  # fmt: skip
    error = k8s.ApiError("POST", "/apis/networking.k8s.io/v1/namespaces/team-b/x", status, body)
    assert k8s.namespace_gone(error, "team-b") is gone


JOB_OWNER = {"apiVersion": "syncreplicas.io/v1alpha1", "kind": "SyncReplicasJob",
             "name": "digits", "uid": "u-1", "controller": True}  # fmt: skip
SERVICE = {"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": "digits", "ownerReferences": [JOB_OWNER]}}  # fmt: skip


class Answers(k8s.Api):
    """An Api whose requests get canned answers: POST ``post``, GET ``existing``."""

    def __init__(self, post: int, existing: dict[str, Any] | None) -> None:
        super().__init__(api_client=object(), parallelism=1)  # type: ignore[arg-type]
        self.post, self.existing, self.sent = post, existing, []

    def _call(self, method: str, path: str, body: Any = None, content_type: str = "",
              ok: tuple[int, ...] = ()) -> tuple[int, Any]:  # fmt: skip
        self.sent.append((method, path))
        if method == "POST":
            return self.post, None
        return 200, {"items": [] if self.existing is None else [self.existing]}


def meta(**fields: Any) -> dict[str, Any]:
    return {"metadata": {"name": "digits", **fields}}


@pytest.mark.parametrize(
    ("post", "existing", "new", "refused"),
    [
        (201, None, True, ""),
        # Its own (a retry after a create whose answer was lost): done, nothing to say.
        (409, meta(ownerReferences=[JOB_OWNER]), False, ""),
        # Gone meanwhile, or going (an earlier job's, deleted): the next pass makes it.
        (409, None, False, ""),
        (409, meta(deletionTimestamp="2026-11-28T00:00:00Z",
                   ownerReferences=[{**JOB_OWNER, "uid": "u-0"}]), False, ""),
        # Someone else's: the job is told whose, and that the name must be freed.
        (409, meta(), None, "(it has no owner)"),
        (409, meta(ownerReferences=[{"kind": "Deployment", "name": "web", "uid": "d",
                                     "controller": True}]),
         None, "(it belongs to Deployment web)"),
        # An earlier job's of the name, not yet collected (its owner is gone): as going.
        (409, meta(ownerReferences=[{**JOB_OWNER, "uid": "u-0"}]), False, ""),
        (409, meta(ownerReferences=[{**JOB_OWNER, "name": "mnist", "uid": "u-2"}]), None,
         "(it belongs to SyncReplicasJob mnist)"),
    ],
)  # fmt: skip
def test_a_create_that_finds_the_name_taken_checks_whose_it_is(
    post: int, existing: dict[str, Any] | None, new: bool | None, refused: str
) -> None:
    api = Answers(post, existing)
    if new is not None:
        assert api.create("team", SERVICE) is new
        return
    with pytest.raises(k8s.CreateRefused) as caught:
        api.create("team", SERVICE)
    error = caught.value
    assert (error.kind, error.name, error.status) == ("Service", "digits", 409)
    assert str(error) == (
        'create Service digits: HTTP 409: Service "digits" already exists and is not this '
        f"job's {refused}: delete or rename it, or give the job another name"
    )
    assert api.sent == [("POST", "/api/v1/namespaces/team/services"),
                        ("GET", "/api/v1/namespaces/team/services"
                                "?fieldSelector=metadata.name%3Ddigits")]  # fmt: skip


@pytest.mark.parametrize(
    "body",
    [
        {"kind": "Service", "metadata": {"name": "digits"}},  # no owner to compare with
        # Kinds the operator's role does not let it read: created, never read back.
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
         "metadata": {"name": "digits", "ownerReferences": [JOB_OWNER]}},
    ],
)  # fmt: skip
def test_a_taken_name_is_not_read_without_an_owner_or_a_grant(body: dict[str, Any]) -> None:
    api = Answers(409, meta())
    assert api.create("team", body) is False
    assert [m for m, _ in api.sent] == ["POST"]
