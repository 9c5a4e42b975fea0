"""Fuzzed manifests judged by all three judges, then the accepted ones run by the operator.

tests/support/manifestgen.py makes the manifests (the examples and fixtures, mutated);
tests/support/judges.py reads each judge's verdict as the field paths it names. Each case
goes to the real API server (a server-side dry run with strict field validation, on one
client connection), to `syncreplicas validate` (in-process, and every case once more
through the real command, all in one file) and to the runtime's settings parser (its part
of the manifest, built as the operator builds SYNCREPLICAS_JOB, and that part through the
API server too). They must agree: all accept, or all refuse naming the same field.

Then every manifest the API server accepted is created for real in the test's namespace,
its pods pinned to a node that does not exist, so nothing trains but the operator runs
its whole creation path on each. It must not crash (its pods and their restart counts
unchanged, no Traceback in their logs since the test began) and must settle: its log
lines about these jobs (every pass that writes or fails logs one) and its reconcile
counter (every pass that succeeds, summed over its replicas) grow no faster than its
periodic passes allow (a job whose chief never ran was once planned 10-20 times a second:
this test found it).

tests/unit/test_fuzzed_settings.py is the part without a cluster (validate and the
runtime, on the full value ranges).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from syncreplicas_api import resource

from tests.cluster import kube
from tests.support import judges, manifestgen
from tests.unit.test_fuzzed_settings import BASES

EXAMPLES = 300
# The node every applied job's pods are pinned to: none has this label.
NOWHERE = {"syncreplicas.io/fuzz": "no-such-node"}
RECONCILES = "syncreplicas_operator_reconcile_seconds_count"
# A settled job plans on an event, a deadline it set, a write the API refused (again
# after 10 s, with a log line) or its idle pass (60 s): well under this many passes, or log
# lines, per job and second. A loop (a pass waking the next) makes 10 to 20.
SETTLED_PER_JOB_SECOND = 0.2
SETTLE_WINDOW = 6.0
SETTLE_TIMEOUT = 40.0
# What the API server answers when it cannot do a request now, and how often it is asked.
TRANSIENT = (429, 500, 503, 504)
TRANSIENT_ATTEMPTS = 4


def without_namespace(manifest: dict[str, Any]) -> None:
    """The request names the namespace; a manifest's own (full.yaml's) would conflict."""
    manifest.get("metadata", {}).pop("namespace", None)


class ApiServer:
    """Server-side dry runs of creates on one connection; verdicts as field paths."""

    def __init__(self, namespace: str) -> None:
        self.client = config.new_client_from_config(config_file=str(kube.KUBECONFIG))
        self.objects = client.CustomObjectsApi(self.client)
        self.core = client.CoreV1Api(self.client)
        self.namespace = namespace

    def create(self, manifest: dict[str, Any], dry_run: bool = True) -> dict[str, Any] | None:
        """None when created, else the refusal's Status. An answer that says the server
        could not do it now (429, 5xx: etcd's "request timed out" under a loaded machine)
        is asked again, a few times, as a client would."""
        for attempt in range(TRANSIENT_ATTEMPTS):
            try:
                self.objects.create_namespaced_custom_object(
                    resource.GROUP, resource.VERSION, self.namespace, resource.PLURAL,
                    manifest, dry_run="All" if dry_run else None, field_validation="Strict",
                )  # fmt: skip
            except ApiException as error:
                if error.status in TRANSIENT and attempt + 1 < TRANSIENT_ATTEMPTS:
                    print(f"create: HTTP {error.status}, asked again: {error.body!s:.300}",
                          flush=True)  # fmt: skip
                    time.sleep(2)
                    continue
                if error.status == 409 and attempt > 0 and not dry_run:
                    return None  # the attempt that timed out had created it
                if error.status not in (400, 422):
                    raise AssertionError(f"create: HTTP {error.status}: {error.body}") from error
                try:
                    return dict(json.loads(error.body))
                except (TypeError, ValueError):
                    return {"message": str(error.body)}
            return None
        raise AssertionError("unreachable: the last attempt returns or raises")

    def judge(self, manifest: dict[str, Any]) -> tuple[list[str], bool, str]:
        """(paths named, whether it stopped early, the Status's text)."""
        status = self.create(manifest)
        if status is None:
            return [], False, ""
        return judges.api_paths(status), judges.stopped_early(status), json.dumps(status)


def judge_case(server: ApiServer, case: manifestgen.Case, seen: Counter[str]) -> bool:
    """Every judge's verdict on ``case``; their agreement asserted. True when the API server
    accepted it."""
    manifest = case.manifest
    said = judges.validate_paths(manifest)
    api, stopped, status = server.judge(manifest)
    why = f"{case}\nvalidate: {said}\nAPI server: {api}\n{status[:2000]}"
    valid = judges.fields_valid(manifest)
    problem = judges.disagreement(said, api, stopped, valid)
    if problem is not None:
        # Only the object metadata's: judges.OBJECT_METADATA says why, and it is counted.
        allowed = judges.object_metadata_only(manifest, said, api, stopped, valid)
        assert allowed, f"{problem}: {why}"
        seen[judges.OBJECT_METADATA] += 1
    seen["refused" if api else "accepted"] += 1
    if not judges.reaches_runtime(manifest):
        seen["nothing reaches the runtime"] += 1
        return not api
    seen["model left out (the contract's default)"] += judges.contract_defaulted(manifest)
    part = judges.projection(manifest)
    runtime = judges.runtime_paths(judges.raw_settings(manifest))
    projected = judges.validate_paths(part)
    api_part, stopped, status = server.judge(part)
    why += f"\nruntime: {runtime}\nits part: validate {projected}, API server {api_part}"
    problem = judges.runtime_disagreement(runtime, projected) or judges.disagreement(
        projected, api_part, stopped, judges.fields_valid(part)
    )
    assert problem is None, f"{problem}: {why}\n{status[:2000]}"
    assert said or not runtime, f"the runtime refuses an accepted manifest: {why}"
    seen["refused by the runtime"] += bool(runtime)
    return not api


def validate_command(cases: list[manifestgen.Case], tmp: Path) -> dict[int, list[str]]:
    """`syncreplicas validate` on every case at once: document number -> paths named."""
    path = tmp / "cases.yaml"
    path.write_text(yaml.safe_dump_all([c.manifest for c in cases], sort_keys=False))
    result = kube.run(str(kube.REPO / ".venv/bin/syncreplicas"), "validate", str(path),
                      check=False)  # fmt: skip
    assert result.returncode == (1 if any(judges.validate_paths(c.manifest) for c in cases)
                                 else 0), result.stderr  # fmt: skip
    named: dict[int, list[str]] = {}
    for line in result.stdout.splitlines():
        found = re.match(rf"{re.escape(str(path))} \(document (\d+)\): (.*)$", line)
        if found:
            document = int(found.group(1))
            named.setdefault(document, []).extend(
                judges.paths_of_validate_lines([f"{judges.LABEL}: {found.group(2)}"])
            )
    return named


# --- the operator -------------------------------------------------------------------------


def reconciles(server: ApiServer) -> float:
    """The operator's reconcile passes so far, summed over its replicas (a follower's is 0).
    A pass whose write the API refused is not counted there: its log line is."""
    total = 0.0
    for item in server.core.list_namespaced_pod(
        kube.RELEASE_NAMESPACE, label_selector=kube.OPERATOR_PODS
    ).items:
        ports = [p.container_port for c in item.spec.containers for p in c.ports or []
                 if p.name == "metrics"]  # fmt: skip
        text = server.core.connect_get_namespaced_pod_proxy_with_path(
            f"{item.metadata.name}:{ports[0]}", kube.RELEASE_NAMESPACE, "metrics"
        )
        found = re.search(rf"^{RECONCILES} (\S+)$", str(text), re.MULTILINE)
        total += float(found.group(1)) if found else 0.0
    return total


def log_lines(server: ApiServer, since: str) -> dict[str, str]:
    """Every operator replica's log since ``since`` (RFC 3339)."""
    seconds = int((datetime.now(UTC) - datetime.fromisoformat(since)).total_seconds()) + 2
    pods = server.core.list_namespaced_pod(kube.RELEASE_NAMESPACE,
                                           label_selector=kube.OPERATOR_PODS).items
    return {
        p.metadata.name: str(server.core.read_namespaced_pod_log(
            p.metadata.name, kube.RELEASE_NAMESPACE, since_seconds=seconds))
        for p in pods
    }  # fmt: skip


def runnable(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    """The accepted manifest under a unique name, its pods pinned nowhere (the template is
    free-form: the verdict cannot change), without the finalizers no one would remove."""
    out = json.loads(json.dumps(manifest))
    out["metadata"]["name"] = name
    out["metadata"].pop("finalizers", None)
    template = out["spec"].setdefault("template", {})
    template.setdefault("spec", {}).setdefault("nodeSelector", {}).update(NOWHERE)
    return out


def rate(count: Callable[[], float], window: float = SETTLE_WINDOW) -> float:
    """How fast ``count`` grows over ``window`` seconds."""
    before, at = count(), time.monotonic()
    time.sleep(window)
    return (count() - before) / (time.monotonic() - at)


def settled(what: str, count: Callable[[], float], limit: float, timeout: float) -> float:
    """The first rate of ``count`` at most ``limit`` within ``timeout`` s, or fail."""
    began, last = time.monotonic(), float("inf")
    while time.monotonic() - began < timeout:
        last = rate(count)
        if last <= limit:
            return last
    raise AssertionError(f"{what} did not settle: {last:.1f}/s (at most {limit:.1f}/s) "
                         f"after {timeout:.0f} s")  # fmt: skip


@dataclass
class Fuzz:
    """What the tests below share: the namespace, one API client, when they began, the
    operator's pods as they were, and the cases the API server accepted."""

    namespace: str
    server: ApiServer
    began: str
    restarts: dict[str, int]
    accepted: list[manifestgen.Case] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)

    def lines(self) -> float:
        """The operator's log lines about this namespace's jobs so far."""
        text = "".join(log_lines(self.server, self.began).values())
        return float(text.count(f" {self.namespace}/"))


@pytest.fixture(scope="module")
def fuzz(cluster_up: None) -> Iterator[Fuzz]:
    name = f"t-fuzzed-manifests-{uuid.uuid4().hex[:5]}"
    kube.kubectl("create", "namespace", name)
    began = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    yield Fuzz(name, ApiServer(name), began, kube.operator_restarts())
    kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_the_three_judges_agree_on_fuzzed_manifests(fuzz: Fuzz, tmp_path: Path) -> None:
    seen: Counter[str] = Counter()
    judged: list[manifestgen.Case] = []

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
    @given(case=manifestgen.cases(BASES, small=True, prepare=without_namespace))
    def judge(case: manifestgen.Case) -> None:
        judged.append(case)
        if judge_case(fuzz.server, case, seen):
            fuzz.accepted.append(case)

    judge()
    total = seen["accepted"] + seen["refused"]
    assert total >= EXAMPLES and seen["accepted"] >= total // 6, seen

    # The real command, every case in one file: the same verdicts, the same fields. (A
    # case YAML cannot carry as it is, a string PyYAML reads back otherwise, stays out.)
    written = [c for c in judged if yaml.safe_load(yaml.safe_dump(c.manifest)) == c.manifest]
    assert len(written) > len(judged) * 0.9
    by_command = validate_command(written, tmp_path)
    for number, case in enumerate(written, 1):
        assert sorted(by_command.get(number, [])) == sorted(
            judges.validate_paths(case.manifest)
        ), case
    print(f"\n{total} cases judged by the API server, validate and the runtime "
          f"({len(written)} through the real command): {dict(seen)}")  # fmt: skip


def test_the_operator_runs_every_accepted_manifest_without_crashing(fuzz: Fuzz) -> None:
    assert fuzz.accepted, "the judges' test runs first and some manifests were accepted"
    for i, case in enumerate(fuzz.accepted):
        # A generated name (generateName) or one an earlier case has: a name of its own.
        name = str(case.manifest["metadata"].get("name", f"fuzz-{i}"))
        while name in fuzz.applied:
            name = f"fuzz-{i}-{len(fuzz.applied)}"
        refused = fuzz.server.create(runnable(case.manifest, name), dry_run=False)
        assert refused is None, f"accepted by a dry run, refused when created: {refused}\n{case}"
        fuzz.applied.append(name)
    applied = time.monotonic()
    # The operator acted on each: its status (a phase, or the condition saying why its pods
    # could not be created: a template the API server refuses only in a Pod).
    def without_status() -> list[str]:
        items = kube.kubectl_json("get", "srj", "-n", fuzz.namespace)["items"]
        return [j["metadata"]["name"] for j in items if not j.get("status")]

    try:
        kube.eventually("the operator wrote every job's status", lambda: not without_status(),
                        timeout=60)  # fmt: skip
    except AssertionError as error:
        missing = without_status()
        cases = {name: case for name, case in zip(fuzz.applied, fuzz.accepted, strict=True)}
        raise AssertionError(f"{error}: {len(missing)} without, first {missing[:5]}\n"
                             f"{cases.get(missing[0]) if missing else ''}") from error
    acted = time.monotonic() - applied
    # No loop that writes: each pass that acts or fails logs a line.
    lines = settled("the operator's log lines about these jobs", fuzz.lines,
                    SETTLED_PER_JOB_SECOND * len(fuzz.applied), SETTLE_TIMEOUT)  # fmt: skip
    restarted = "an operator replica restarted or was replaced"
    assert kube.operator_restarts() == fuzz.restarts, restarted
    for pod, log in log_lines(fuzz.server, fuzz.began).items():
        assert "Traceback" not in log, f"{pod}:\n{log[-4000:]}"
    print(f"\n{len(fuzz.applied)} jobs applied; the operator acted on all in {acted:.0f} s; "
          f"{lines:.2f} log lines/s about them once settled")  # fmt: skip


def test_the_operator_does_not_plan_the_accepted_jobs_in_a_loop(fuzz: Fuzz) -> None:
    """Jobs whose chief never runs (their pods pinned nowhere), some with their metrics
    off: each is planned again only when something changes or a periodic pass is due,
    not over and over (the reconcile counter, summed over the operator's replicas)."""
    if not fuzz.applied:
        pytest.skip("the operator's test above applied no manifest")
    jobs = len(kube.kubectl_json("get", "srj", "--all-namespaces")["items"])
    # The jobs were created and acted on (the test above). The counter is the operator's
    # over every namespace: the other pytest workers' jobs plan too while they are faulted,
    # scaled or replaced (23.2 passes/s over one window beside two other workers), so the
    # first quiet window within SETTLE_TIMEOUT counts; a loop in these jobs never has one.
    settled("the operator's reconcile passes", lambda: reconciles(fuzz.server),
            max(1.0, SETTLED_PER_JOB_SECOND * jobs), SETTLE_TIMEOUT)  # fmt: skip
