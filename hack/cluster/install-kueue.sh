#!/usr/bin/env bash
# Installs Kueue (KUEUE_VERSION of versions.env) into the local cluster as its users do:
# the release's kustomize config (config/default of the module sigs.k8s.io/kueue), rendered
# by `kubectl kustomize` and applied server-side, with the overlay kueue/overlay/ (the image
# images.sh loaded, the manager Configuration, webhooks of the integrations left out set to
# Ignore, read access to SyncReplicasJobs). Then, once Kueue's webhooks answer, a set-up the
# tests share (every object kueue.x-k8s.io/v1beta2):
#   ResourceFlavor default-flavor; ClusterQueue syncreplicas (all namespaces, cpu 4 and
#   memory 8Gi of default-flavor, preemption of lower priorities within it);
#   Topology racks (syncreplicas.io/rack, kubernetes.io/hostname), ResourceFlavor tas-flavor
#   over it and ClusterQueue tas (all namespaces, cpu 4 and memory 8Gi of it);
#   WorkloadPriorityClasses low (100) and high (1000).
# Idempotent: on a cluster that has it every apply is a no-op. The manager reads its
# Configuration at start only: its pod template carries the Configuration's and the image's
# digests, so a change of either rolls it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
. "$here/versions.env"
export KUBECONFIG="${KUBECONFIG:-$repo/.cluster/kubeconfig}"
kubectl="$repo/.tools/bin/kubectl"
ns=kueue-system
deploy=kueue-controller-manager
image="registry.k8s.io/kueue/kueue:$KUEUE_VERSION"
t=$SECONDS

say() { echo "kueue: $*"; }
fail() {
  echo "kueue: $*" >&2
  "$kubectl" -n "$ns" get deploy,pods -o wide >&2 || true
  "$kubectl" -n "$ns" logs "deploy/$deploy" --tail=30 >&2 || true
  exit 1
}

# The overlay names the image by version: it must be this one.
tag="$(sed -n 's/^ *newTag: *//p' "$here/kueue/overlay/kustomization.yaml")"
[[ "$tag" == "$KUEUE_VERSION" ]] || {
  echo "kueue: kueue/overlay/kustomization.yaml has newTag $tag, versions.env $KUEUE_VERSION" >&2
  exit 1
}
module="$(cd "$here/kueue" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
[[ -d "$module/config/default" ]] || { echo "kueue: no $module/config/default" >&2; exit 1; }

# Kueue's Configuration names the SyncReplicasJob kind (its external framework, the
# MultiKueue adapter): the kind is served before the manager starts, so the chart's CRD is
# applied first (as install-chart.sh applies it; `make cluster` runs the two side by side).
"$kubectl" apply --server-side --force-conflicts \
  -f "$repo/charts/syncreplicas/crds/" >/dev/null

# Render ---------------------------------------------------------------------------------
# kustomize takes no absolute path to a base: the module's config/ (read-only in the module
# cache) is copied beside a copy of the overlay, which refers to it as ../config. A third
# kustomization on top stamps the pod template with what the manager reads at start.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$module/config" "$work/config"
chmod -R u+w "$work/config"
cp -r "$here/kueue/overlay" "$work/overlay"
config_sha="$(sha256sum "$here/kueue/overlay/controller_manager_config.yaml" | cut -c1-64)"
image_id="$(buildah images --no-trunc --format '{{.ID}}' "$image" 2>/dev/null | head -1)"
mkdir "$work/install"
cat > "$work/install/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../overlay
patches:
- patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: $deploy
      namespace: $ns
    spec:
      template:
        metadata:
          annotations:
            syncreplicas.io/config-sha256: "$config_sha"
            syncreplicas.io/image-id: "${image_id#sha256:}"
EOF
"$kubectl" kustomize "$work/install" > "$work/kueue.yaml"

# Apply and wait -------------------------------------------------------------------------
# Server-side: the CRDs are too large for a client-side apply's annotation.
"$kubectl" apply --server-side --force-conflicts -f "$work/kueue.yaml" >/dev/null

# The webhook's certificate: the manager's cert rotator writes it into the Secret that its
# pod mounts, then waits for the files. The kubelet refreshes a mounted Secret only when it
# syncs the pod, every minute or so: a first install took 16-129 s, up to 2 min of it this
# wait (beside a loaded machine; 21 s with the annotation, certificates in 2 s). A pod whose
# annotations change is synced at once, so once the Secret holds the certificate, the
# manager's pods get one (a Secret that had it already, on a running cluster: at once).
deadline=$((SECONDS + 120))
until [[ -n "$("$kubectl" -n "$ns" get secret kueue-webhook-server-cert \
                 -o 'jsonpath={.data.tls\.crt}' 2>/dev/null)" ]] || ((SECONDS >= deadline)); do
  sleep 1
done
"$kubectl" -n "$ns" annotate pods -l control-plane=controller-manager --overwrite \
  "syncreplicas.io/certificate-written=$(date +%s)" >/dev/null 2>&1 || true
"$kubectl" -n "$ns" rollout status "deploy/$deploy" --timeout=5m >/dev/null \
  || fail "deployment $deploy did not roll out"
"$kubectl" -n "$ns" wait --for=condition=Available "deploy/$deploy" --timeout=2m >/dev/null \
  || fail "deployment $deploy is not Available"

# Available is not serving: the webhook's certificate is made by the manager itself and its
# CA injected into the webhook configurations after start. A dry-run create goes through
# the ResourceFlavor's mutating and validating webhooks.
probe='{"apiVersion":"kueue.x-k8s.io/v1beta2","kind":"ResourceFlavor","metadata":{"name":"syncreplicas-webhook-probe"},"spec":{}}'
deadline=$((SECONDS + 120))
until err="$(echo "$probe" | "$kubectl" create --dry-run=server -f - 2>&1 >/dev/null)"; do
  ((SECONDS < deadline)) || fail "its webhooks do not answer after 120 s: $err"
  sleep 2
done

# The tests' set-up ----------------------------------------------------------------------
. "$here/kueue/clusterqueue.sh"
{
  cat <<'EOF'
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: default-flavor
spec: {}
EOF
  echo ---
  cluster_queue syncreplicas default-flavor
  printf '  preemption:\n    withinClusterQueue: LowerPriority\n---\n'
  cat <<'EOF'
# Topology-aware scheduling: the nodes' racks (the kubelets register with
# syncreplicas.io/rack, two nodes a rack, and syncreplicas.io/node-group=tas) and hosts,
# a flavor over them, and its queue.
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata:
  name: racks
spec:
  levels:
  - nodeLabel: syncreplicas.io/rack
  - nodeLabel: kubernetes.io/hostname
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: tas-flavor
spec:
  nodeLabels:
    syncreplicas.io/node-group: tas
  topologyName: racks
---
EOF
  cluster_queue tas tas-flavor
  cat <<'EOF'
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata:
  name: low
value: 100
description: "syncreplicas tests: low priority"
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata:
  name: high
value: 1000
description: "syncreplicas tests: high priority"
EOF
} | "$kubectl" apply --server-side --force-conflicts -f - >/dev/null
say "installed in $((SECONDS - t)) s ($image; ClusterQueues syncreplicas and tas, WorkloadPriorityClasses low, high)"
