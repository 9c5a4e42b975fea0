"""A replica stopped by SIGTERM waits for its name to leave DNS (process/unlisting.py)."""

from __future__ import annotations

import pytest
from syncreplicas_runtime.process import unlisting


def test_a_local_run_does_not_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(unlisting, "own_addresses", lambda: set())
    assert unlisting.wait_until_unlisted("localhost:2222") == 0.0


def test_it_waits_until_the_name_no_longer_gives_this_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter([True, True, True, False])
    asked: list[tuple[str, set[str]]] = []

    def resolves_to(host: str, addresses: set[str]) -> bool:
        asked.append((host, addresses))
        return next(answers)

    monkeypatch.setattr(unlisting, "own_addresses", lambda: {"10.244.1.7"})
    monkeypatch.setattr(unlisting, "resolves_to", resolves_to)
    waited = unlisting.wait_until_unlisted("job-worker-0.ns.svc:2222", poll=0.001)
    assert waited is not None and 0.002 <= waited < 1.0
    assert asked == [("job-worker-0.ns.svc", {"10.244.1.7"})] * 4


def test_a_name_that_keeps_this_pod_is_given_up_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(unlisting, "own_addresses", lambda: {"10.244.1.7"})
    monkeypatch.setattr(unlisting, "resolves_to", lambda host, addresses: True)
    assert unlisting.wait_until_unlisted("job-ps-0.ns.svc:2222", limit=0.05, poll=0.01) is None


def test_this_machine_resolves_its_own_name_to_itself_and_an_unknown_one_to_nothing() -> None:
    mine = unlisting.own_addresses()
    assert all(not a.startswith("127.") for a in mine)
    assert not unlisting.resolves_to("no-such-host.invalid", mine | {"10.0.0.1"})
