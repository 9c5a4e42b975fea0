"""spec.parse_job / parse_spec: defaults, every problem at once, field paths, no aliasing.

The table of bad fields shared with the CRD is in test_crd.py; these are the cases that
only concern spec.py.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from syncreplicas_operator.core import spec


def manifest(**spec_fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "replicasToAggregate": 2,
        "workers": 3,
        "model": {"entrypoint": "syncreplicas_runtime.models.linear:build"},
    }
    body.update(spec_fields)
    return {
        "apiVersion": "syncreplicas.io/v1alpha1",
        "kind": "SyncReplicasJob",
        "metadata": {"name": "job", "namespace": "team", "uid": "u-1", "generation": 4},
        "spec": body,
    }


def problems(document: object) -> list[tuple[str, str]]:
    with pytest.raises(spec.SpecError) as caught:
        spec.parse_job(document)
    return [(p.path, p.message) for p in caught.value.problems]


def test_defaults() -> None:
    job = spec.parse_job(manifest())
    assert (job.name, job.namespace, job.uid, job.generation) == ("job", "team", "u-1", 4)
    s = job.spec
    assert s.parameter_servers == 1
    assert s.initial_tokens == 0
    assert s.training == spec.TrainingSpec(
        optimizer="sgd",
        learning_rate=0.1,
        batch_size=32,
        max_steps=1000,
        checkpoint_dir="/var/lib/syncreplicas/checkpoints",
        checkpoint_every_steps=100,
        snapshot_every_steps=10,
        log_every_steps=100,
        eval_every_steps=0,
        seed=0,
        startup_timeout_seconds=300,
        chief_lost_timeout_seconds=120,
        pack_variables=True,
        pack_min_bytes_per_ps=262144,
    )
    assert s.metrics.port == 9090
    assert s.image is None
    assert s.template == {}
    assert s.role_templates == {}
    assert s.run_policy == spec.RunPolicy(
        restart_policy="OnFailure",
        backoff_limit=6,
        active_deadline_seconds=None,
        ttl_seconds_after_finished=None,
        clean_pod_policy="Running",
        suspend=False,
    )
    assert s.chief_restart_policy == "ResetSyncState"
    assert s.stall_timeout_seconds == 300


def test_namespace_default() -> None:
    document = manifest()
    del document["metadata"]["namespace"]
    assert spec.parse_job(document).namespace == "default"
    assert spec.parse_job(document, default_namespace="ml").namespace == "ml"


@pytest.mark.parametrize(
    ("workers", "r", "replicas", "backups"),
    [(0, 1, 1, 0), (3, 2, 4, 2), (3, 4, 4, 0), (1, 5, 2, 0)],
)
def test_replica_arithmetic(workers: int, r: int, replicas: int, backups: int) -> None:
    s = spec.parse_spec(manifest(workers=workers, replicasToAggregate=r)["spec"])
    assert s.total_replicas == replicas
    assert s.backup_replicas == backups
    assert s.replica_counts() == {"ps": 1, "chief": 1, "worker": workers}
    with pytest.raises(ValueError, match="evaluator"):
        s.replica_count("evaluator")


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (None, [("(document)", "must be a SyncReplicasJob object, got null")]),
        ([1], [("(document)", "must be a SyncReplicasJob object, got array")]),
        (
            {"kind": "Pod"},
            [
                ("apiVersion", "must be syncreplicas.io/v1alpha1, got None"),
                ("kind", "must be SyncReplicasJob, got 'Pod'"),
                ("metadata", "is required"),
                ("metadata.name", "is required"),
                ("spec", "is required"),
            ],
        ),
    ],
    ids=["null", "list", "pod"],
)
def test_document_level_problems(document: object, expected: list[tuple[str, str]]) -> None:
    assert problems(document) == expected


def test_every_problem_has_a_path_and_a_reason() -> None:
    found = problems(
        manifest(
            workers="3",
            parameterServers=0,
            model={"entrypoint": "x", "args": "a=1"},
            training={"learningRate": True, "maxSteps": 2.5, "optimizer": 1},
            runPolicy={"suspend": 1, "cleanPodPolicy": "Done"},
            metrics="9090",
            surprise=True,
        )
    )
    assert found == [
        ("spec.surprise", "unknown field (check the spelling)"),
        ("spec.parameterServers", "must be >= 1, got 0"),
        ("spec.workers", "must be an integer, got string"),
        ("spec.model.entrypoint", "'x' does not match ^[A-Za-z_][\\w.]*:[A-Za-z_]\\w*$ "
         "(expected package.module:function)"),
        ("spec.model.args", "must be an object, got string"),
        ("spec.training.optimizer", "must be a string, got integer"),
        ("spec.training.learningRate", "must be a number, got boolean"),
        ("spec.training.maxSteps", "must be an integer, got number"),
        ("spec.metrics", "must be an object, got string"),
        ("spec.runPolicy.cleanPodPolicy", "must be one of Running, All, None; got 'Done'"),
        ("spec.runPolicy.suspend", "must be a boolean, got integer"),
    ]  # fmt: skip


def test_error_text_is_one_line_per_problem() -> None:
    with pytest.raises(spec.SpecError) as caught:
        spec.parse_job(manifest(workers=-1, replicasToAggregate=0))
    assert str(caught.value).splitlines() == [
        "spec.replicasToAggregate: must be >= 1, got 0",
        "spec.workers: must be >= 0, got -1",
    ]


def test_null_means_default() -> None:
    """YAML `field:` with no value is null: treated as absent, as the API server prunes it."""
    s = spec.parse_job(manifest(training=None, initialTokens=None)).spec
    assert s.training == spec.TrainingSpec()
    assert s.initial_tokens == 0


def test_parse_never_aliases_the_manifest() -> None:
    document = manifest(
        model={"entrypoint": "a.b:c", "args": {"layers": [1, 2]}},
        template={"spec": {"containers": [{"name": "syncreplicas"}]}},
        worker={"template": {"metadata": {"labels": {"a": "b"}}}},
    )
    before = copy.deepcopy(document)
    s = spec.parse_job(document).spec
    s.model.args["layers"].append(3)
    s.template["spec"]["containers"].append({"name": "x"})
    s.role_templates["worker"]["metadata"]["labels"]["a"] = "c"
    assert document == before


def test_specs_are_frozen_and_comparable() -> None:
    a = spec.parse_job(manifest())
    b = spec.parse_job(manifest())
    assert a == b
    with pytest.raises(AttributeError):
        a.spec.workers = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("change", "fields"),
    [
        ({}, []),
        ({"workers": 4}, ["spec.workers"]),
        ({"training": {"maxSteps": 1}}, ["spec.training"]),
        ({"model": {"entrypoint": "x.y:z"}}, ["spec.model.entrypoint"]),
        ({"model": {"entrypoint": "syncreplicas_runtime.models.linear:build", "args": {"a": 1}}},
         []),
        ({"runPolicy": {"suspend": True}, "image": "x"}, []),
        ({"replicasToAggregate": 3, "parameterServers": 2},
         ["spec.replicasToAggregate", "spec.parameterServers"]),
        ({"elasticPolicy": {"minWorkers": 1, "maxWorkers": 4}}, ["spec.elasticPolicy"]),
    ],
)  # fmt: skip
def test_immutable_changes(change: dict[str, Any], fields: list[str]) -> None:
    old = spec.parse_job(manifest()).spec
    new = spec.parse_job(manifest(**change)).spec
    assert [p.path for p in spec.immutable_changes(old, new)] == fields


ELASTIC = {"minReplicasToAggregate": 1, "elasticPolicy": {"minWorkers": 1, "maxWorkers": 4}}


@pytest.mark.parametrize(
    ("change", "problems"),
    [
        ({"workers": 4}, []),
        ({"workers": 1}, []),
        ({"elasticPolicy": None}, [("spec.elasticPolicy",
                                    "cannot be added or removed once the job exists")]),
        ({"elasticPolicy": None, "workers": 2}, [
            ("spec.elasticPolicy", "cannot be added or removed once the job exists"),
            ("spec.workers", "can change only with spec.elasticPolicy (set it when the job is "
                             "created)"),
        ]),
        ({"elasticPolicy": {"minWorkers": 1, "maxWorkers": 5}},
         [("spec.elasticPolicy.maxWorkers", "is immutable once the job exists")]),
    ],
)  # fmt: skip
def test_immutable_changes_of_an_elastic_job(
    change: dict[str, Any], problems: list[tuple[str, str]]
) -> None:
    """workers changes exactly when the job has an elasticPolicy, which stays as it was."""
    old = spec.parse_job(manifest(**ELASTIC)).spec
    new = spec.parse_job(manifest(**{**ELASTIC, **change})).spec
    assert [tuple(p) for p in spec.immutable_changes(old, new)] == problems


def test_workers_change_message_says_what_to_do() -> None:
    old = spec.parse_job(manifest()).spec
    new = spec.parse_job(manifest(workers=4)).spec
    assert [str(p) for p in spec.immutable_changes(old, new)] == [
        "spec.workers: can change only with spec.elasticPolicy (set it when the job is created)"
    ]
