#!/usr/bin/env bash
# helm upgrade --install of charts/syncreplicas into the local cluster, with the images
# images.sh loaded (the chart's default names). The operator's pod carries the image's ID
# as an annotation, so that a rebuilt image rolls it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export KUBECONFIG="${KUBECONFIG:-$repo/.cluster/kubeconfig}"
helm="$repo/.tools/bin/helm"
kubectl="$repo/.tools/bin/kubectl"
namespace="${SYNCREPLICAS_NAMESPACE:-syncreplicas-system}"
app_version="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$repo/charts/syncreplicas/Chart.yaml")"
image_id="$(buildah images --no-trunc --format '{{.ID}}' "ghcr.io/syncreplicas/syncreplicas-operator:$app_version" | head -1)"
t=$SECONDS
# Helm installs crds/ on the first install only and never upgrades a CRD: apply the chart's
# CRD first, as the chart's README tells users to on an upgrade.
if "$kubectl" get crd syncreplicasjobs.syncreplicas.io >/dev/null 2>&1; then
  "$kubectl" apply --server-side --force-conflicts \
    -f "$repo/charts/syncreplicas/crds/" >/dev/null
fi
# The operator's namespace enforces the restricted Pod Security Standard, as a cluster
# administrator would set it: the chart's pods must be admitted under it.
"$kubectl" create namespace "$namespace" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
"$kubectl" label namespace "$namespace" --overwrite >/dev/null \
  pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/warn=restricted
"$helm" upgrade --install syncreplicas "$repo/charts/syncreplicas" \
  --namespace "$namespace" --create-namespace --wait --timeout 5m \
  --set-string "podAnnotations.syncreplicas\.io/image-id=${image_id#sha256:}" "$@"
echo "chart: installed in $((SECONDS - t)) s (namespace $namespace)"
