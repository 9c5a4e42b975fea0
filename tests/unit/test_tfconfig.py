"""TF_CONFIG and SYNCREPLICAS_JOB: docs/contract.md's format, accepted by the runtime."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from syncreplicas_operator.core import naming, spec, tfconfig
from syncreplicas_runtime.foundation import config as runtime_cluster

ROOT = Path(__file__).resolve().parents[2]


def job_spec(**overrides: Any) -> spec.JobSpec:
    manifest: dict[str, Any] = {
        "replicasToAggregate": 2,
        "workers": 2,
        "model": {"entrypoint": "syncreplicas_runtime.models.linear:build"},
    }
    manifest.update(overrides)
    return spec.parse_spec(manifest)


def contract_job_json() -> dict[str, Any]:
    """The SYNCREPLICAS_JOB example of docs/contract.md, its // comments removed."""
    text = (ROOT / "docs" / "contract.md").read_text()
    block = text.split("## `SYNCREPLICAS_JOB`", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    return json.loads(re.sub(r"//[^\n]*", "", block))


def keys(value: Any) -> Any:
    """The key structure of a JSON value (free-form model.args excluded)."""
    if isinstance(value, dict):
        return {k: (None if k == "args" else keys(v)) for k, v in value.items()}
    return None


def test_job_settings_have_exactly_the_contract_keys() -> None:
    assert keys(tfconfig.job_settings(job_spec())) == keys(contract_job_json())


def test_job_settings_carry_the_spec() -> None:
    s = job_spec(
        replicasToAggregate=3,
        workers=4,
        parameterServers=2,
        initialTokens=1,
        chiefRestartPolicy="RestartJob",
        model={"entrypoint": "m.n:build", "args": {"hidden": [8, 4]}},
        training={"optimizer": "adam", "learningRate": 0.5, "maxSteps": 7, "checkpointDir": ""},
        metrics={"port": 0},
    )
    settings = tfconfig.job_settings(s)
    assert settings["replicasToAggregate"] == 3
    assert settings["training"]["packVariables"] is True  # default on
    off = job_spec(training={"packVariables": False})
    assert tfconfig.job_settings(off)["training"]["packVariables"] is False
    assert settings["training"]["packMinBytesPerPS"] == 256 * 1024  # default
    spread = job_spec(training={"packMinBytesPerPS": 0})
    assert tfconfig.job_settings(spread)["training"]["packMinBytesPerPS"] == 0
    assert settings["minReplicasToAggregate"] == 3  # default: R
    lowered = tfconfig.job_settings(job_spec(replicasToAggregate=3, minReplicasToAggregate=2))
    assert lowered["minReplicasToAggregate"] == 2
    assert settings["workers"] == 4
    assert settings["parameterServers"] == 2
    assert settings["initialTokens"] == 1
    assert settings["chiefRestartPolicy"] == "RestartJob"
    assert settings["model"] == {"entrypoint": "m.n:build", "args": {"hidden": [8, 4]}}
    assert settings["training"]["optimizer"] == "adam"
    assert settings["training"]["learningRate"] == 0.5
    assert settings["training"]["maxSteps"] == 7
    assert settings["training"]["checkpointDir"] == ""
    assert settings["metrics"] == {"port": 0}


@pytest.mark.parametrize(
    ("workers", "ps", "expected_types"),
    [(0, 1, ["ps", "chief"]), (1, 1, ["ps", "chief", "worker"]), (5, 3, ["ps", "chief", "worker"])],
)
def test_cluster_spec_shape(workers: int, ps: int, expected_types: list[str]) -> None:
    s = job_spec(workers=workers, parameterServers=ps)
    cluster = tfconfig.cluster_spec(s, tfconfig.cluster_addresses("j", "ns"))
    assert list(cluster) == expected_types
    assert len(cluster["ps"]) == ps
    assert cluster["chief"] == ["j-chief-0.j.ns.svc:2222"]
    assert len(cluster.get("worker", [])) == workers
    assert cluster["ps"][-1] == f"j-ps-{ps - 1}.j.ns.svc:2222"
    per_replica = tfconfig.cluster_spec(
        s, tfconfig.cluster_addresses("j", "ns", replica_services=True)
    )
    assert per_replica["chief"] == ["j-chief-0.ns.svc:2222"]


def test_local_addresses() -> None:
    s = job_spec(workers=1)
    ports = {"ps": [5001], "chief": [5002], "worker": [5003]}
    assert tfconfig.cluster_spec(s, tfconfig.local_addresses(ports)) == {
        "ps": ["127.0.0.1:5001"],
        "chief": ["127.0.0.1:5002"],
        "worker": ["127.0.0.1:5003"],
    }


@pytest.mark.parametrize(
    ("replica_type", "index", "error"),
    [
        ("worker", 2, "worker index 2 out of range (the cluster has 2)"),
        ("chief", 1, "chief index 1 out of range"),
        ("ps", -1, "ps index -1 out of range"),
        ("evaluator", 0, "unknown replica type 'evaluator'"),
    ],
)
def test_tf_config_refuses_tasks_outside_the_cluster(
    replica_type: str, index: int, error: str
) -> None:
    cluster = tfconfig.cluster_spec(job_spec(), tfconfig.cluster_addresses("j", "ns"))
    with pytest.raises(ValueError, match=re.escape(error)):
        tfconfig.tf_config(cluster, replica_type, index)


def test_tf_config_does_not_share_the_cluster() -> None:
    cluster = tfconfig.cluster_spec(job_spec(), tfconfig.cluster_addresses("j", "ns"))
    config = tfconfig.tf_config(cluster, "ps", 0)
    config["cluster"]["worker"].append("x:1")
    assert len(cluster["worker"]) == 2
    assert config["task"] == {"type": "ps", "index": 0}


@pytest.mark.parametrize(
    ("replica_type", "index", "workers_told"),
    [
        ("ps", 0, ["j-worker-0.j.ns.svc:2222", "j-worker-1.j.ns.svc:2222"]),
        ("chief", 0, {}),
        ("worker", 1, {"1": "j-worker-1.j.ns.svc:2222"}),
    ],
)
def test_only_a_ps_is_told_every_worker(
    replica_type: str, index: int, workers_told: object
) -> None:
    cluster = tfconfig.cluster_spec(job_spec(), tfconfig.cluster_addresses("j", "ns"))
    config = tfconfig.tf_config(cluster, replica_type, index)
    assert config["cluster"]["worker"] == workers_told
    assert config["cluster"]["ps"] == cluster["ps"]
    assert config["cluster"]["chief"] == cluster["chief"]


@pytest.mark.parametrize(("replica_type", "index"), [("chief", 0), ("worker", 7)])
def test_a_replica_environment_does_not_grow_with_workers(replica_type: str, index: int) -> None:
    sizes = []
    for workers in (10, 1000):
        s = job_spec(workers=workers, replicasToAggregate=2)
        cluster = tfconfig.cluster_spec(s, tfconfig.cluster_addresses("j", "ns"))
        env = tfconfig.replica_environment("j", "ns", s, cluster, replica_type, index)
        sizes.append(len(env[naming.ENV_TF_CONFIG]))
    assert sizes[1] <= sizes[0] * 1.2, sizes


@pytest.mark.parametrize("workers", [0, 3])
def test_every_replica_environment_parses_in_the_runtime(workers: int) -> None:
    """The runtime's own parser accepts what the operator hands every replica."""
    s = job_spec(workers=workers, replicasToAggregate=2, parameterServers=2, initialTokens=1)
    cluster = tfconfig.cluster_spec(s, tfconfig.cluster_addresses("job", "team"))
    for replica_type, count in s.replica_counts().items():
        for index in range(count):
            env = tfconfig.replica_environment("job", "team", s, cluster, replica_type, index)
            assert set(env) == {
                naming.ENV_TF_CONFIG,
                naming.ENV_JOB,
                naming.ENV_JOB_NAME,
                naming.ENV_NAMESPACE,
            }
            config = runtime_cluster.parse_config(env)
            assert (config.role, config.index) == (replica_type, index)
            assert config.replicas_to_aggregate == 2
            assert config.workers == workers
            assert config.parameter_servers == 2
            assert config.initial_tokens == 1
            assert config.training.max_steps == s.training.max_steps
            assert config.training.checkpoint_dir == s.training.checkpoint_dir
            assert config.metrics_port == s.metrics.port


def test_environment_is_deterministic() -> None:
    """Same spec, same bytes: a re-planned pod is identical to the one it replaces."""
    s = job_spec(model={"entrypoint": "a.b:c", "args": {"z": 1, "a": 2}})
    cluster = tfconfig.cluster_spec(s, tfconfig.cluster_addresses("j", "ns"))
    first = tfconfig.replica_environment("j", "ns", s, cluster, "chief", 0)
    second = tfconfig.replica_environment("j", "ns", s, cluster, "chief", 0)
    assert first == second
    assert " " not in first[naming.ENV_TF_CONFIG]
    assert json.loads(first[naming.ENV_JOB])["model"]["args"] == {"a": 2, "z": 1}
