"""An API that appears after the operator started stops the operator once, to be watched by
the restarted one; one served from the start starts no watch."""

from __future__ import annotations

import threading

from syncreplicas_operator.controller import lateapi
from syncreplicas_operator.resources import k8s


class Discovery:
    """serves() answers in turn (an ApiError where the answer is one), then the last."""

    def __init__(self, *answers: bool | k8s.ApiError) -> None:
        self.answers, self.asked = list(answers), []

    def serves(self, api_version: str, plural: str, fresh: bool = False) -> bool:
        self.asked.append((api_version, plural, fresh))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, k8s.ApiError):
            raise answer
        return answer


def test_served_from_the_start_starts_no_watch() -> None:
    stopped = threading.Event()
    found = Discovery(True)
    assert lateapi.stop_when_served(found, "kueue.x-k8s.io/v1beta2", "workloads",  # type: ignore[arg-type]
                                    stopped.set, poll_seconds=0.01) is None  # fmt: skip
    assert not stopped.is_set()
    assert found.asked == [("kueue.x-k8s.io/v1beta2", "workloads", True)]


def test_served_later_stops_once_and_an_unreachable_server_is_no_answer() -> None:
    stopped = threading.Event()
    unreachable = k8s.ApiError("GET", "/apis/kueue.x-k8s.io/v1beta2", 503, "")
    found = Discovery(False, unreachable, False, True)
    thread = lateapi.stop_when_served(found, "kueue.x-k8s.io/v1beta2", "workloads",  # type: ignore[arg-type]
                                      stopped.set, poll_seconds=0.01)  # fmt: skip
    assert thread is not None
    thread.join(5)
    assert stopped.is_set() and not thread.is_alive()
    assert len(found.asked) == 4 and all(fresh for _, _, fresh in found.asked)
