"""The chart lints strictly and renders valid Kubernetes objects for every value set.

Real helm; every rendered object checked with kubernetes-validate (strict) against the
oldest and newest Kubernetes the chart supports. The Prometheus Operator's kinds have no
schema there, so their required fields are checked by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from chartlib import (
    ALERTS_FILE,
    CHART,
    CI_VALUES,
    DASHBOARDS,
    MONITORING_API,
    MONITORING_GROUP,
    NAMESPACE,
    REPO,
    alert_names,
    by_kind,
    helm_args,
    is_user_role,
    load_alert_groups,
    one,
    operator_objects,
    render,
    run,
    tool,
)

VALUE_SETS = [None, *CI_VALUES]
IDS = ["default", *(p.stem for p in CI_VALUES)]
KUBE_VERSIONS = ["1.29.0", kubernetes_validate.latest_version()]
API_CASES = {"no-monitoring-api": [], "monitoring-api": [MONITORING_API]}


def values_of(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    loaded: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
    return loaded


def files(path: Path | None) -> list[Path]:
    return [] if path is None else [path]


def test_ci_value_files_cover_the_required_cases() -> None:
    assert {p.stem for p in CI_VALUES} >= {
        "monitoring-on",
        "monitoring-off",
        "namespaced",
        "custom-images",
    }


@pytest.mark.parametrize("values", VALUE_SETS, ids=IDS)
def test_lint_strict(values: Path | None) -> None:
    # (helm lint has no --api-versions: the monitoring objects are covered by the
    # template tests below.)
    out = run([tool("helm"), "lint", "--strict", str(CHART), *helm_args(values=files(values))])
    assert "0 chart(s) failed" in out.stdout


def check_monitoring_object(obj: dict[str, Any]) -> None:
    """Required fields of the Prometheus Operator kinds this chart renders."""
    kind, spec = obj["kind"], obj.get("spec") or {}
    assert obj["apiVersion"] == MONITORING_API
    assert obj["metadata"]["name"] and obj["metadata"]["namespace"]
    if kind == "ServiceMonitor":
        assert spec["selector"]["matchLabels"], "ServiceMonitor selects nothing"
        assert spec["endpoints"], "ServiceMonitor without endpoints"
        for ep in spec["endpoints"]:
            assert ep["port"] == "metrics"
    elif kind == "PodMonitor":
        assert spec["selector"], "PodMonitor selects nothing"
        assert spec["podMetricsEndpoints"], "PodMonitor without endpoints"
        for ep in spec["podMetricsEndpoints"]:
            assert ep["port"] == "metrics"
    elif kind == "PrometheusRule":
        assert isinstance(spec["groups"], list)
        for group in spec["groups"]:
            assert group["name"] and group["rules"]
            for rule in group["rules"]:
                assert rule.get("alert") or rule.get("record")
                assert rule["expr"]
    else:
        raise AssertionError(f"unexpected monitoring kind {kind}")


@pytest.mark.parametrize("api", list(API_CASES), ids=list(API_CASES))
@pytest.mark.parametrize("values", VALUE_SETS, ids=IDS)
def test_every_rendered_object_is_valid(values: Path | None, api: str) -> None:
    objects = render(values=files(values), api_versions=API_CASES[api], include_crds=True)
    kinds = {o["kind"] for o in objects}
    assert {"CustomResourceDefinition", "Deployment", "ServiceAccount", "Service"} <= kinds
    for obj in objects:
        name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        if obj["apiVersion"].split("/")[0] == MONITORING_GROUP:
            check_monitoring_object(obj)
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as err:
                raise AssertionError(f"{name} invalid for Kubernetes {version}: {err}") from err


@pytest.mark.parametrize("values", VALUE_SETS, ids=IDS)
def test_monitoring_objects_only_when_enabled_and_api_present(values: Path | None) -> None:
    mon = values_of(values).get("monitoring", {})

    def enabled(key: str) -> bool:
        return bool(mon.get(key, {}).get("enabled", True))

    without = render(values=files(values))
    assert not [o for o in without if o["apiVersion"].startswith(MONITORING_GROUP)]
    with_api = render(values=files(values), api_versions=[MONITORING_API])
    for kind, key in [
        ("ServiceMonitor", "serviceMonitor"),
        ("PodMonitor", "podMonitor"),
        ("PrometheusRule", "prometheusRule"),
    ]:
        assert len(by_kind(with_api, kind)) == (1 if enabled(key) else 0), kind
    # The dashboard is a plain ConfigMap: it needs no API, only its switch.
    maps = [o for o in without if o["kind"] == "ConfigMap"]
    assert len(maps) == (1 if enabled("dashboards") else 0)


NODE_RBAC = ("-nodes", "-node-leases")
LEADER_RBAC = "-leader-election"  # test_chart_operator_replicas.py
# Every namespace, or two (a Role in each).
SCOPES = [[], ["watchNamespaces={team-a,team-b}"]]


def job_rbac(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The operator's objects without node-loss handling's and leader election's roles."""
    return [o for o in objects if not o["metadata"]["name"].endswith((*NODE_RBAC, LEADER_RBAC))]


# What the operator does to the API (k8s.py writes, kopf watches and patches): exactly
# these permissions, no wildcard and nothing more.
EXPECTED_RULES = {
    ("syncreplicas.io", "syncreplicasjobs"): {"list", "watch", "patch", "delete"},
    ("syncreplicas.io", "syncreplicasjobs/status"): {"patch"},
    ("", "pods"): {"list", "watch", "create", "delete", "patch"},
    ("", "services"): {"list", "watch", "create", "delete"},
    ("networking.k8s.io", "networkpolicies"): {"list", "watch", "create"},
    ("", "events"): {"create"},
    ("policy", "poddisruptionbudgets"): {"list", "create"},
    ("scheduling.x-k8s.io", "podgroups"): {"list", "create", "delete"},
    ("scheduling.volcano.sh", "podgroups"): {"list", "create", "delete"},
}


@pytest.mark.parametrize("sets", SCOPES, ids=["cluster", "namespaced"])
def test_rbac_grants_only_what_the_operator_uses(sets: list[str]) -> None:
    objects = render(sets=sets)
    objects = job_rbac(operator_objects(objects))
    role = (by_kind(objects, "ClusterRole") + by_kind(objects, "Role"))[0]
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        assert "*" not in rule["apiGroups"], rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    assert granted == EXPECTED_RULES


@pytest.mark.parametrize("sets", SCOPES, ids=["cluster", "namespaced"])
def test_node_loss_handling_reads_nodes_and_node_leases_only(sets: list[str]) -> None:
    """Cluster-wide Nodes (even for one watched namespace), Leases in kube-node-lease only;
    list and watch; none of it, and the operator told so, when the handling is off."""
    objects = operator_objects(render(sets=sets))
    nodes = [o for o in objects if o["metadata"]["name"].endswith(NODE_RBAC)]
    assert sorted((o["kind"], o["metadata"].get("namespace")) for o in nodes) == [
        ("ClusterRole", None), ("ClusterRoleBinding", None),
        ("Role", "kube-node-lease"), ("RoleBinding", "kube-node-lease"),
    ]  # fmt: skip
    rules = {
        (o["kind"], g, r, v)
        for o in nodes
        for rule in o.get("rules") or []
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert rules == {
        ("ClusterRole", "", "nodes", "list"), ("ClusterRole", "", "nodes", "watch"),
        ("Role", "coordination.k8s.io", "leases", "list"),
        ("Role", "coordination.k8s.io", "leases", "watch"),
    }  # fmt: skip
    args = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--node-loss-handling=on" in args and "--node-lease-grace-seconds=20" in args
    off = operator_objects(render(sets=[*sets, "operator.nodeLossHandling=false"]))
    assert not [o for o in off if o["metadata"]["name"].endswith(NODE_RBAC)]
    args = one(off, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--node-loss-handling=off" in args


@pytest.mark.parametrize("sets", SCOPES, ids=["cluster", "namespaced"])
def test_users_may_edit_scale_and_view_jobs_through_the_default_roles(sets: list[str]) -> None:
    """Namespace users with Kubernetes' admin or edit role may create and `kubectl scale`
    SyncReplicasJobs; view may read them (aggregated ClusterRoles)."""
    roles = {tuple(sorted(k.rsplit("-", 1)[-1] for k in r["metadata"]["labels"]
                          if k.startswith("rbac.authorization.k8s.io/aggregate-to-"))): r
             for r in render(sets=sets) if is_user_role(r)}
    assert set(roles) == {("admin", "edit"), ("view",)}

    def grants(role: dict[str, Any]) -> set[tuple[str, str]]:
        return {(resource, verb) for rule in role["rules"] for resource in rule["resources"]
                for verb in rule["verbs"]}

    edit = grants(roles[("admin", "edit")])
    assert {("syncreplicasjobs", "create"), ("syncreplicasjobs/scale", "update"),
            ("syncreplicasjobs/scale", "patch"), ("syncreplicasjobs", "delete")} <= edit
    assert ("syncreplicasjobs/status", "patch") not in edit  # the operator's alone
    view = grants(roles[("view",)])
    assert {verb for _, verb in view} == {"get", "list", "watch"}
    assert ("syncreplicasjobs/scale", "get") in view
    assert not [o for o in render(sets=[*sets, "rbac.aggregateToDefaultRoles=false"])
                if is_user_role(o)]


def test_rbac_can_be_left_to_the_user() -> None:
    objects = render(sets=["rbac.create=false", "serviceAccount.create=false"])
    assert not {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"} & {
        o["kind"] for o in objects
    }
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "default"


def test_operator_deployment_is_probed_hardened_and_bounded() -> None:
    objects = render()
    deploy = one(objects, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    args = container["args"]
    assert args[0] == "operator"
    assert f"--liveness-port={ports['health']}" in args
    assert f"--metrics-port={ports['metrics']}" in args
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["resources"]["requests"]["cpu"]
    assert container["resources"]["requests"]["memory"]
    assert container["resources"]["limits"]["memory"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    # A writable /tmp, since the root filesystem is read-only.
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    # Replicas and their rollout: test_chart_operator_replicas.py.
    selector = deploy["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    service = one(objects, "Service")
    assert service["spec"]["selector"] == selector
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


def test_images_default_to_the_app_version_and_accept_digests() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    container = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].endswith(f":{chart['appVersion']}")
    custom = CHART / "ci" / "custom-images.yaml"
    vals = values_of(custom)
    objects = render(values=[custom])
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    image = vals["image"]
    assert pod["containers"][0]["image"] == f"{image['repository']}@{image['digest']}"
    assert pod["containers"][0]["imagePullPolicy"] == "Always"
    assert pod["imagePullSecrets"] == [{"name": "registry-credentials"}]


@pytest.mark.parametrize("values", VALUE_SETS, ids=IDS)
def test_runtime_image_reaches_the_operator(values: Path | None) -> None:
    from syncreplicas_operator import cli

    container = one(render(values=files(values)), "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]
    args = cli.build_parser(container["args"]).parse_args(container["args"])
    runtime = values_of(values).get("runtimeImage") or yaml.safe_load(
        (CHART / "values.yaml").read_text()
    )["runtimeImage"]
    assert args.image.startswith(runtime["repository"])
    if runtime.get("digest"):
        assert args.image.endswith("@" + runtime["digest"])


def test_servicemonitor_selects_the_operator_service() -> None:
    objects = render(api_versions=[MONITORING_API])
    sm, svc = one(objects, "ServiceMonitor"), one(objects, "Service")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    relabel = sm["spec"]["endpoints"][0]["relabelings"]
    assert {"targetLabel": "syncreplicas_component", "replacement": "operator"} in relabel


def test_podmonitor_keeps_the_job_labels() -> None:
    pm = one(render(api_versions=[MONITORING_API]), "PodMonitor")
    endpoint = pm["spec"]["podMetricsEndpoints"][0]
    assert endpoint["port"] == "metrics"
    kept = {
        r["sourceLabels"][0]: r["targetLabel"]
        for r in endpoint["relabelings"]
        if "sourceLabels" in r
    }
    assert kept == {
        "__meta_kubernetes_pod_label_syncreplicas_io_job_name": "syncreplicas_job",
        "__meta_kubernetes_pod_label_syncreplicas_io_replica_type": "replica_type",
        "__meta_kubernetes_pod_label_syncreplicas_io_replica_index": "replica_index",
    }
    keys = {e["key"] for e in pm["spec"]["selector"]["matchExpressions"]}
    assert keys == {"syncreplicas.io/job-name", "syncreplicas.io/replica-type"}
    assert pm["spec"]["namespaceSelector"] == {"any": True}


def test_prometheusrule_is_the_alerts_file() -> None:
    rule = one(render(api_versions=[MONITORING_API]), "PrometheusRule")
    assert rule["spec"]["groups"] == load_alert_groups()
    on = CHART / "ci" / "monitoring-on.yaml"
    disabled = values_of(on)["monitoring"]["prometheusRule"]["disabledAlerts"]
    rule = one(render(values=[on], api_versions=[MONITORING_API]), "PrometheusRule")
    names = alert_names(rule["spec"]["groups"])
    assert names == [n for n in alert_names(load_alert_groups()) if n not in disabled]
    assert rule["metadata"]["labels"]["release"] == "prometheus"


def test_schema_lists_exactly_the_alerts_that_can_be_disabled() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    prop = schema["properties"]["monitoring"]["properties"]["prometheusRule"]["properties"]
    assert prop["disabledAlerts"]["items"]["enum"] == alert_names(load_alert_groups())
    assert ALERTS_FILE.exists()


def test_dashboard_configmap_is_labelled_for_the_grafana_sidecar() -> None:
    cm = one(render(), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == NAMESPACE
    assert set(cm["data"]) == {p.name for p in DASHBOARDS}
    for path in DASHBOARDS:
        assert json.loads(cm["data"][path.name]) == json.loads(path.read_text())
    on = CHART / "ci" / "monitoring-on.yaml"
    cm = one(render(values=[on]), "ConfigMap")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["team"] == "ml"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Training"}
    relabelled = one(
        render(sets=["monitoring.dashboards.labels.grafana_dashboard=yes"]), "ConfigMap"
    )
    assert relabelled["metadata"]["labels"]["grafana_dashboard"] == "yes"


def test_chart_crds_are_the_repository_crds() -> None:
    source = REPO / "crds" / "syncreplicasjobs.yaml"
    copy = CHART / "crds" / "syncreplicasjobs.yaml"
    assert copy.exists(), "run `make crds`"
    assert copy.read_bytes() == source.read_bytes(), "the chart's CRD is stale: run `make crds`"
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == sorted(
        p.name for p in (REPO / "crds").iterdir()
    )


def test_notes_give_ready_commands() -> None:
    out = run(
        [
            tool("helm"),
            "install",
            "srj",
            str(CHART),
            "--dry-run=client",
            "--namespace",
            NAMESPACE,
            "--set",
            "watchNamespace=team-a",
        ]
    ).stdout
    notes = out.split("NOTES:", 1)[1]
    assert f"kubectl -n {NAMESPACE} rollout status deployment/srj-syncreplicas-operator" in notes
    assert "kubectl -n team-a get syncreplicasjobs" in notes
    assert "kubectl -n team-a apply -f -" in notes
    # The example job in the notes is a valid SyncReplicasJob, by the operator's own checks.
    from syncreplicas_operator.core.spec import parse_job

    manifest = notes.split("<<'JOB'", 1)[1].split("  JOB\n", 1)[0]
    manifest = manifest.split("\n", 1)[1]
    job = parse_job(yaml.safe_load("\n".join(line[2:] for line in manifest.splitlines())))
    assert job.spec.image == "ghcr.io/syncreplicas/syncreplicas-runtime:0.1.0"


@pytest.mark.parametrize("values", VALUE_SETS, ids=IDS)
def test_operator_args_are_what_the_operator_cli_accepts(values: Path | None) -> None:
    from syncreplicas_operator import cli

    container = one(render(values=files(values)), "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]
    argv = list(container["args"])
    # The image's entrypoint is `syncreplicas`; argparse exits on an unknown option.
    args = cli.build_parser(argv).parse_args(argv)
    assert args.command == "operator"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert args.liveness_port == ports["health"]
    assert args.metrics_port == ports["metrics"]
    vals = values_of(values)
    legacy = [vals["watchNamespace"]] if vals.get("watchNamespace") else []
    assert args.namespace == [*vals.get("watchNamespaces", []), *legacy]


def test_runtime_image_default_is_the_operators_default() -> None:
    from syncreplicas_operator.core.manifests import DEFAULT_IMAGE

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    runtime = yaml.safe_load((CHART / "values.yaml").read_text())["runtimeImage"]
    assert f"{runtime['repository']}:{runtime['tag'] or chart['appVersion']}" == DEFAULT_IMAGE


def test_kube_version_floor_is_enforced() -> None:
    base = [tool("helm"), "template", "srj", str(CHART)]
    run([*base, "--kube-version", "1.29.0"])
    old = run([*base, "--kube-version", "1.28.15"], check=False)
    assert old.returncode != 0 and "kubeVersion" in old.stderr


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Kubernetes label-selector semantics (matchLabels + matchExpressions)."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, vals = expr["key"], expr["operator"], expr.get("values", [])
        ok = {
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
            "In": labels.get(key) in vals,
            "NotIn": labels.get(key) not in vals,
        }[op]
        if not ok:
            return False
    return True


def test_podmonitor_selects_every_pod_the_operator_builds_and_nothing_else() -> None:
    from syncreplicas_operator.core import manifests
    from syncreplicas_operator.core.spec import parse_job

    job = parse_job(
        {
            "apiVersion": "syncreplicas.io/v1alpha1",
            "kind": "SyncReplicasJob",
            "metadata": {"name": "demo", "namespace": "ml", "uid": "1234"},
            "spec": {
                "replicasToAggregate": 2,
                "workers": 2,
                "parameterServers": 2,
                "model": {"entrypoint": "syncreplicas_runtime.models.linear:build"},
            },
        }
    )
    children = manifests.build_children(job)
    pm = one(render(api_versions=[MONITORING_API]), "PodMonitor")
    endpoint = pm["spec"]["podMetricsEndpoints"][0]
    pods = [c for c in children if c["kind"] == "Pod"]
    assert len(pods) == 5
    for pod in pods:
        assert _matches(pm["spec"]["selector"], pod["metadata"]["labels"]), pod["metadata"]
        ports = [p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])]
        assert endpoint["port"] in ports, pod["metadata"]["name"]
    # Services carry the job labels too, but a PodMonitor only ever looks at pods; the
    # operator's own pod does not match.
    operator_pod = one(render(), "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert not _matches(pm["spec"]["selector"], operator_pod)
