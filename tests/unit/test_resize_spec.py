"""The --resize SPEC parser: a schedule of worker counts by global step, within the job's
elasticPolicy."""

from __future__ import annotations

import pytest
from syncreplicas_operator.core.spec import JobSpec, parse_job
from syncreplicas_operator.local.resize import Resize, ResizeSpecError, parse_resize

from tests.support.jobs import with_changes

BASE = {
    "apiVersion": "syncreplicas.io/v1alpha1",
    "kind": "SyncReplicasJob",
    "metadata": {"name": "elastic", "namespace": "default"},
    "spec": {
        "replicasToAggregate": 2,
        "minReplicasToAggregate": 1,
        "workers": 2,
        "elasticPolicy": {"minWorkers": 1, "maxWorkers": 4},
        "model": {"entrypoint": "syncreplicas_runtime.models.linear:build"},
        "training": {"maxSteps": 500},
    },
}


def spec(**changes: object) -> JobSpec:
    return parse_job(with_changes(BASE, **changes)).spec


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100:4", [Resize(100, 4)]),
        ("100:4, 300:1", [Resize(100, 4), Resize(300, 1)]),
        (" 1:1 ,2:4,499:2 ", [Resize(1, 1), Resize(2, 4), Resize(499, 2)]),
    ],
)
def test_parse(text: str, expected: list[Resize]) -> None:
    assert list(parse_resize(text, spec())) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty spec"),
        ("100", "expected STEP:WORKERS"),
        ("100:x", "expected STEP:WORKERS"),
        ("-1:2", "expected STEP:WORKERS"),
        ("0:2", "STEP must be in 1..499 (spec.training.maxSteps is 500)"),
        ("500:2", "STEP must be in 1..499"),
        ("100:5", "spec.workers must be within spec.elasticPolicy [minWorkers 1, maxWorkers 4], "
                  "got 5"),
        ("100:0", "got 0"),
        ("100:4,100:1", "steps must increase (after 100)"),
        ("200:4,100:1", "steps must increase (after 200)"),
    ],
)
def test_errors_name_the_term(text: str, fragment: str) -> None:
    with pytest.raises(ResizeSpecError) as err:
        parse_resize(text, spec())
    assert fragment in str(err.value)
    if text:
        assert f"--resize: {text.split(',')[-1].strip()!r}" in str(err.value) or \
            f"--resize: {text.split(',')[0].strip()!r}" in str(err.value)


def test_a_job_without_elastic_policy_cannot_be_resized() -> None:
    fixed = with_changes(BASE)
    del fixed["spec"]["elasticPolicy"]
    with pytest.raises(ResizeSpecError, match=r"spec\.elasticPolicy is not set"):
        parse_resize("100:3", parse_job(fixed).spec)
