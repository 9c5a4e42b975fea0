"""Table tests of the pure TF_CONFIG + SYNCREPLICAS_JOB parser."""

from __future__ import annotations

import json
from typing import Any

import pytest
from syncreplicas_runtime.foundation.config import ConfigError, parse_config

from tests.support.jobs import with_changes

CLUSTER = {"ps": ["ps0:2222", "ps1:2222"], "chief": ["c:2222"], "worker": ["w0:2222", "w1:2222"]}
JOB = {"replicasToAggregate": 2, "workers": 2, "parameterServers": 2}


def env(task: Any = None, job: Any = None, cluster: Any = None, **extra: str) -> dict[str, str]:
    tf_config = {"cluster": CLUSTER if cluster is None else cluster,
                 "task": {"type": "worker", "index": 1} if task is None else task}
    out = {"TF_CONFIG": json.dumps(tf_config), "SYNCREPLICAS_JOB": json.dumps(job or JOB)}
    out.update(extra)
    return out


def with_job(**changes: Any) -> dict[str, Any]:
    return with_changes(JOB, **changes)


def test_defaults_and_derived_fields() -> None:
    cfg = parse_config(env())
    assert (cfg.role, cfg.index, cfg.address) == ("worker", 1, "w1:2222")
    assert cfg.total_replicas == 3 and cfg.replica_id == 2 and not cfg.is_chief
    assert cfg.training.optimizer == "sgd" and cfg.training.max_steps == 1000
    assert cfg.model.entrypoint == "syncreplicas_runtime.models.linear:build"
    assert cfg.metrics_port == 9090 and cfg.initial_tokens == 0
    assert cfg.min_replicas_to_aggregate == cfg.replicas_to_aggregate == 2  # default: R
    assert cfg.device == "/job:worker/task:1"


def test_metrics_port_override_and_full_job() -> None:
    job = with_job(initialTokens=1, training__optimizer="adam", training__learningRate=0.01,
                   training__batchSize=4, training__maxSteps=7, training__checkpointDir="/c",
                   model__entrypoint="pkg.mod:fn", model__args={"hidden": 3}, metrics__port=0)
    cfg = parse_config(env(task={"type": "chief", "index": 0}, job=job,
                           SYNCREPLICAS_METRICS_PORT="9191"))
    assert cfg.is_chief and cfg.replica_id == 0
    assert cfg.metrics_port == 9191
    assert cfg.training.batch_size == 4 and cfg.training.checkpoint_dir == "/c"
    assert dict(cfg.model.args) == {"hidden": 3}
    assert parse_config(env(job=with_job(minReplicasToAggregate=1))).min_replicas_to_aggregate == 1
    assert cfg.training.pack_variables  # on unless turned off
    off = parse_config(env(job=with_job(training__packVariables=False)))
    assert not off.training.pack_variables
    assert cfg.training.pack_min_bytes_per_ps == 256 * 1024  # the CRD's default
    spread = parse_config(env(job=with_job(training__packMinBytesPerPS=0)))
    assert spread.training.pack_min_bytes_per_ps == 0


@pytest.mark.parametrize(
    ("environ", "field"),
    [
        ({"SYNCREPLICAS_JOB": json.dumps(JOB)}, "TF_CONFIG"),
        ({"TF_CONFIG": "{nope", "SYNCREPLICAS_JOB": json.dumps(JOB)}, "TF_CONFIG"),
        (env(task={"type": "evaluator", "index": 0}), "TF_CONFIG.task.type"),
        (env(task={"type": "worker", "index": 5}), "TF_CONFIG.task.index"),
        (env(task={"type": "worker", "index": -1}), "TF_CONFIG.task.index"),
        (env(cluster={"chief": ["c:1"]}), "TF_CONFIG.cluster.ps"),
        (env(cluster={**CLUSTER, "chief": ["a:1", "b:1"]}), "TF_CONFIG.cluster.chief"),
        (env(cluster={**CLUSTER, "master": ["m:1"]}), "TF_CONFIG.cluster.master"),
        (env(cluster={**CLUSTER, "ps": ["no-port"]}), "TF_CONFIG.cluster.ps[0]"),
        (env(job={"workers": 2, "parameterServers": 2}), "replicasToAggregate"),
        (env(job=with_job(replicasToAggregate=0)), "replicasToAggregate"),
        (env(job=with_job(replicasToAggregate="2")), "replicasToAggregate"),
        (env(job=with_job(minReplicasToAggregate=0)), "minReplicasToAggregate"),
        (env(job=with_job(minReplicasToAggregate=3)), "minReplicasToAggregate"),
        (env(job=with_job(minReplicasToAggregate=1.0)), "minReplicasToAggregate"),
        (env(job=with_job(workers=3)), "workers"),
        (env(job=with_job(parameterServers=1)), "parameterServers"),
        (env(job=with_job(initialTokens=-1)), "initialTokens"),
        (env(job=with_job(replicas=3)), "replicas"),
        (env(job=with_job(chiefRestartPolicy="Maybe")), "chiefRestartPolicy"),
        (env(job=with_job(model__entrypoint="no_colon")), "model.entrypoint"),
        (env(job=with_job(model__args=[1])), "model.args"),
        (env(job=with_job(model__kind="x")), "model.kind"),
        (env(job=with_job(training__optimizer="lbfgs")), "training.optimizer"),
        (env(job=with_job(training__learningRate=0)), "training.learningRate"),
        (env(job=with_job(training__batchSize=0)), "training.batchSize"),
        (env(job=with_job(training__maxSteps=True)), "training.maxSteps"),
        (env(job=with_job(training__checkpointEverySteps=0)), "training.checkpointEverySteps"),
        (env(job=with_job(training__snapshotEverySteps=-1)), "training.snapshotEverySteps"),
        (env(job=with_job(training__stepz=1)), "training.stepz"),
        (env(job=with_job(training__chiefLostTimeoutSeconds=-1)),
         "training.chiefLostTimeoutSeconds"),
        (env(job=with_job(training__packVariables="yes")), "training.packVariables"),
        (env(job=with_job(training__packVariables=1)), "training.packVariables"),
        (env(job=with_job(training__packMinBytesPerPS=-1)), "training.packMinBytesPerPS"),
        (env(job=with_job(training__packMinBytesPerPS=1.5)), "training.packMinBytesPerPS"),
        (env(job=with_job(metrics__port=70000)), "metrics.port"),
        (env(SYNCREPLICAS_METRICS_PORT="http"), "SYNCREPLICAS_METRICS_PORT"),
        (env(cluster={**CLUSTER, "worker": {"0": "w0:2222"}}), "TF_CONFIG.task.index"),
        (env(cluster={**CLUSTER, "worker": {"one": "w1:2222"}}), "TF_CONFIG.cluster.worker"),
        (env(cluster={**CLUSTER, "worker": {"1": "w1"}}), "TF_CONFIG.cluster.worker[1]"),
        (env(cluster={**CLUSTER, "worker": []}), "TF_CONFIG.cluster.worker"),
        (env(cluster={**CLUSTER, "worker": {"1": "w1:1", "7": "w7:1"}}), "workers"),
        (env(cluster={**CLUSTER, "ps": {"0": "p0:1", "1": "p1:1"}}), "TF_CONFIG.cluster.ps"),
        (env(cluster={**CLUSTER, "chief": {"0": "c:1"}}), "TF_CONFIG.cluster.chief"),
    ],
)
def test_bad_field_is_named(environ: dict[str, str], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(environ)
    assert err.value.field == field
    assert str(err.value).startswith(field + ":")


def test_no_workers_means_no_worker_list() -> None:
    cluster = {"ps": ["p:1"], "chief": ["c:1"]}
    job = {"replicasToAggregate": 3, "workers": 0, "parameterServers": 1}
    cfg = parse_config(env(task={"type": "chief", "index": 0}, job=job, cluster=cluster))
    assert cfg.total_replicas == 1 and cfg.replicas_to_aggregate == 3  # R > replicas is legal


def test_a_ps_needs_every_worker() -> None:
    cluster = {**CLUSTER, "worker": {"1": "w1:2222"}}
    with pytest.raises(ConfigError) as err:
        parse_config(env(task={"type": "ps", "index": 0}, cluster=cluster))
    assert err.value.field == "TF_CONFIG.cluster.worker"
    dense = {**CLUSTER, "worker": {"0": "w0:2222", "1": "w1:2222"}}
    assert parse_config(env(task={"type": "ps", "index": 0}, cluster=dense)).role == "ps"


@pytest.mark.parametrize("role", ["chief", "worker"])
def test_sparse_worker_list(role: str) -> None:
    """The chief or a worker told only the PS, the chief and itself (size independent of W)."""
    cluster = {"ps": CLUSTER["ps"], "chief": CLUSTER["chief"],
               "worker": {"1": "w1:2222"} if role == "worker" else {}}
    job = with_job(workers=1000)
    cfg = parse_config(env(task={"type": role, "index": 1 if role == "worker" else 0},
                           job=job, cluster=cluster))
    assert cfg.total_replicas == 1001
    assert cfg.ps_addresses == ("ps0:2222", "ps1:2222")
    assert cfg.address == {"chief": "c:2222", "worker": "w1:2222"}[role]
