"""Fuzzed manifests (tests/support/manifestgen.py) judged by `syncreplicas validate` and by
the runtime's settings parser, which must agree on the part of the manifest the runtime is
told (tests/support/judges.py says which part, and how SYNCREPLICAS_JOB is built from the
raw fields). tests/cluster/test_fuzzed_manifests.py adds the API server and the operator.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from syncreplicas_operator.core import spec, tfconfig
from syncreplicas_runtime.foundation import config as cluster

from tests.support import judges, manifestgen

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests/fixtures/manifests"
BASE_FILES = (
    *sorted((ROOT / "examples").glob("*.yaml")),
    ROOT / "examples/port/port.yaml",
    *(FIXTURES / name for name in ("full.yaml", "minimal.yaml", "tfjob-style.yaml")),
)
BASES = tuple((p.stem, yaml.safe_load(p.read_text())) for p in BASE_FILES)
EXAMPLES = 300


def the_runtime_agrees(manifest: dict[str, Any], seen: Counter[str]) -> None:
    """The runtime's verdict on its part of ``manifest`` is validate's on that part."""
    refused = judges.validate_paths(manifest)
    seen["refused" if refused else "accepted"] += 1
    if not judges.reaches_runtime(manifest):
        seen["no spec object: nothing reaches the runtime"] += 1
        return
    seen["model left out (the contract's default)"] += judges.contract_defaulted(manifest)
    runtime = judges.runtime_paths(judges.raw_settings(manifest))
    projected = judges.validate_paths(judges.projection(manifest))
    seen["refused by the runtime"] += bool(runtime)
    problem = judges.runtime_disagreement(runtime, projected)
    assert problem is None, f"{problem}\nmanifest: {json.dumps(manifest)[:3000]}"
    assert refused or not runtime, "the runtime refuses a manifest validate accepts"
    if not refused:
        # The raw build is the operator's: the runtime reads the very same settings.
        built = tfconfig.job_settings(spec.parse_job(manifest).spec)
        assert cluster.parse_job(json.dumps(built)) == cluster.parse_job(
            json.dumps(judges.raw_settings(manifest))
        )


def test_validate_and_the_runtime_agree_on_fuzzed_manifests() -> None:
    seen: Counter[str] = Counter()

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
    @given(case=manifestgen.cases(BASES, small=False))
    def judge(case: manifestgen.Case) -> None:
        the_runtime_agrees(case.manifest, seen)

    judge()
    total = seen["accepted"] + seen["refused"]
    assert total >= EXAMPLES, seen
    # The generator keeps a mix: neither side starved.
    assert seen["accepted"] >= total // 6 and seen["refused"] > total // 3, seen
    assert seen["refused by the runtime"] > total // 5, seen


CHIEF_TF_CONFIG = {"cluster": {"ps": ["ps:2222"], "chief": ["c:2222"]},
                   "task": {"type": "chief", "index": 0}}


def runtime_process(settings: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """``python -m syncreplicas_runtime`` as a pod's chief with these settings: it parses
    its configuration before TensorFlow is imported."""
    env = {
        **os.environ,
        "TF_CONFIG": json.dumps(CHIEF_TF_CONFIG),
        "SYNCREPLICAS_JOB": json.dumps(settings),
        "SYNCREPLICAS_TERMINATION_LOG": "",
    }
    return subprocess.run([sys.executable, "-m", "syncreplicas_runtime"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


def test_the_runtime_process_exits_64_naming_the_field_the_parser_names() -> None:
    """A few refused settings through the real process: exit CONFIG (64), the exit line
    naming the field the in-process parser names."""
    cases = [
        ("replicasToAggregate", 2.5),
        ("training", {"maxSteps": 2**63}),
        ("elasticPolicy", {"minWorkers": 3, "maxWorkers": 2}),
    ]
    for key, value in cases:
        settings = {"replicasToAggregate": 1, "workers": 0, "parameterServers": 1, key: value}
        (named,) = judges.runtime_paths(settings)
        field = named.removeprefix("spec.")
        result = runtime_process(settings)
        assert result.returncode == 64, result.stderr
        assert f"syncreplicas: CONFIG (64): bad configuration: {field}: " in result.stderr, (
            result.stderr
        )
