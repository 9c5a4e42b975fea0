#!/usr/bin/env bash
# Installs the Prometheus Operator (PROMETHEUS_OPERATOR_VERSION of versions.env) into the
# local cluster as its users do: the release's bundle.yaml (its CRDs, the operator's
# Deployment, ServiceAccount and RBAC; module github.com/prometheus-operator/
# prometheus-operator) in the namespace monitoring, with the release's example RBAC for
# Prometheus (example/rbac/prometheus), rendered by `kubectl kustomize` and applied
# server-side. Then monitoring/prometheus.yaml: a Prometheus that selects every
# PodMonitor, ServiceMonitor and PrometheusRule (the chart's among them), once it is Ready.
# Then Perses (monitoring/perses.yaml) with the project syncreplicas, whose default
# datasource is that Prometheus and whose dashboard is the chart's Grafana dashboard,
# migrated now with the built percli and plugins (perses/dashboard.py).
# The images are images.sh's (SYNCREPLICAS_MONITORING=1), under the names the bundle and
# the operator use. Idempotent. Run before install-chart.sh: the chart renders its monitors
# only where the cluster serves monitoring.coreos.com/v1.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
. "$here/versions.env"
export KUBECONFIG="${KUBECONFIG:-$repo/.cluster/kubeconfig}"
kubectl="$repo/.tools/bin/kubectl"
ns=monitoring
t=$SECONDS

say() { echo "monitoring: $*"; }
fail() {
  echo "monitoring: $*" >&2
  "$kubectl" -n "$ns" get deploy,statefulset,pods -o wide >&2 || true
  "$kubectl" -n "$ns" logs deploy/prometheus-operator --tail=30 >&2 || true
  exit 1
}

module="$(cd "$here/prometheus-operator" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' \
  github.com/prometheus-operator/prometheus-operator)"
[[ -f "$module/bundle.yaml" ]] || { echo "monitoring: no $module/bundle.yaml" >&2; exit 1; }
# The bundle names the operator's and the reloader's images by the release's version.
grep -q "prometheus-operator:$PROMETHEUS_OPERATOR_VERSION\$" "$module/bundle.yaml" \
  || { echo "monitoring: $module/bundle.yaml is not $PROMETHEUS_OPERATOR_VERSION's" >&2; exit 1; }

# Render ---------------------------------------------------------------------------------
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$module/bundle.yaml" "$work/"
cp "$module"/example/rbac/prometheus/prometheus-{service-account,cluster-role,cluster-role-binding}.yaml "$work/"
cat > "$work/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: $ns
resources:
- bundle.yaml
- prometheus-service-account.yaml
- prometheus-cluster-role.yaml
- prometheus-cluster-role-binding.yaml
EOF
"$kubectl" kustomize "$work" > "$work/install.yaml"
# The CRDs apart from the rest: the operator looks once, as it starts, at which of them the
# API serves (discovery), and runs no controller for one it did not find.
python3 - "$work" <<'PY'
import sys
from pathlib import Path
work = Path(sys.argv[1])
docs = (work / "install.yaml").read_text().split("\n---\n")
crds = [d for d in docs if "\nkind: CustomResourceDefinition\n" in f"\n{d}\n"]
(work / "crds.yaml").write_text("\n---\n".join(crds) + "\n")
(work / "rest.yaml").write_text("\n---\n".join(d for d in docs if d not in crds) + "\n")
PY

# Apply and wait -------------------------------------------------------------------------
"$kubectl" create namespace "$ns" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
# Server-side: the CRDs are too large for a client-side apply's annotation.
"$kubectl" apply --server-side --force-conflicts -f "$work/crds.yaml" >/dev/null
# Until discovery lists them, as the operator reads it (a CRD is listed once Established;
# `kubectl wait` on a CRD applied a moment ago fails at once: it has no conditions yet).
for _ in $(seq 60); do
  served="$("$kubectl" api-resources --api-group=monitoring.coreos.com -o name 2>/dev/null || true)"
  missing=0
  for r in prometheuses podmonitors servicemonitors prometheusrules; do
    grep -q "^$r\.monitoring\.coreos\.com\$" <<<"$served" || missing=1
  done
  [[ $missing = 0 ]] && break
  sleep 1
done
[[ $missing = 0 ]] || fail "the CRDs are not established: discovery does not list them after 60 s"
"$kubectl" apply --server-side --force-conflicts -f "$work/rest.yaml" >/dev/null
"$kubectl" -n "$ns" rollout status deploy/prometheus-operator --timeout=3m >/dev/null \
  || fail "deployment prometheus-operator did not roll out"
sed "s/\${PROMETHEUS_VERSION}/$PROMETHEUS_VERSION/g" "$here/monitoring/prometheus.yaml" \
  | "$kubectl" apply --server-side -f - >/dev/null
"$kubectl" -n "$ns" wait --for=condition=Available prometheus/syncreplicas --timeout=3m \
  >/dev/null || fail "Prometheus syncreplicas is not Available"

# Perses ---------------------------------------------------------------------------------
CACHE="${SYNCREPLICAS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/syncreplicas}"
perses="$CACHE/perses-$PERSES_VERSION"
[[ -x "$perses/bin/percli" ]] \
  || fail "$perses/bin/percli missing: run build-binaries.sh with SYNCREPLICAS_MONITORING=1"
mkdir -p "$work/plugins" "$work/provisioning"
for archive in "$perses"/plugins/*.tar.gz; do
  name="$(basename "$archive" .tar.gz)"
  mkdir -p "$work/plugins/$name" && tar xzf "$archive" -C "$work/plugins/$name"
done
python3 "$here/perses/dashboard.py" --percli "$perses/bin/percli" --plugins "$work/plugins" \
  "$repo/charts/syncreplicas/files/dashboards/syncreplicas.json" \
  > "$work/provisioning/dashboard.json" || fail "the chart's dashboard did not migrate"
echo '{"kind": "Project", "metadata": {"name": "syncreplicas"},
 "spec": {"display": {"name": "SyncReplicas"}}}' > "$work/provisioning/project.json"
# scrapeInterval: the resolution Perses queries at (its smallest step; the default is 1m,
# which leaves a job's first minute out of its panels); jobs are scraped every 2 s here.
echo '{"kind": "Datasource", "metadata": {"name": "prometheus", "project": "syncreplicas"},
 "spec": {"default": true, "display": {"name": "Prometheus (monitoring/syncreplicas)"},
  "plugin": {"kind": "PrometheusDatasource", "spec": {"scrapeInterval": "5s",
   "proxy": {"kind": "HTTPProxy",
   "spec": {"url": "http://prometheus-operated.'"$ns"'.svc:9090"}}}}}}' \
  > "$work/provisioning/datasource.json"
"$kubectl" -n "$ns" create configmap perses-provisioning --from-file="$work/provisioning" \
  --dry-run=client -o yaml | "$kubectl" apply --server-side --force-conflicts -f - >/dev/null
config_hash="$(cat "$here/monitoring/perses.yaml" "$work"/provisioning/* | sha256sum | cut -c1-16)"
sed -e "s/\${PERSES_VERSION}/$PERSES_VERSION/g" -e "s/\${CONFIG_HASH}/$config_hash/g" \
  "$here/monitoring/perses.yaml" | "$kubectl" apply --server-side --force-conflicts -f - >/dev/null
"$kubectl" -n "$ns" rollout status deploy/perses --timeout=3m >/dev/null \
  || fail "deployment perses did not roll out"
say "the Prometheus Operator $PROMETHEUS_OPERATOR_VERSION, Prometheus $PROMETHEUS_VERSION and Perses $PERSES_VERSION ready in $((SECONDS - t)) s"
