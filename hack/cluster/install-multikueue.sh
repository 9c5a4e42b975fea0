#!/usr/bin/env bash
# MultiKueue on the local clusters: the running cluster (the manager, with Kueue: make
# cluster KUEUE=1) dispatches jobs to a worker cluster that this script brings up beside it
# (cluster.py with SYNCREPLICAS_CLUSTER=worker: its own control plane, nodes, ranges and run
# directory; clusterlib/config.py), with Kueue and the chart of its own. Then:
#   worker   ClusterQueue multikueue (cpu 4, memory 8Gi of default-flavor); the user
#            kueue-multikueue (a client certificate of the worker's CA), allowed what
#            MultiKueue does there: create, watch and delete SyncReplicasJobs, batch Jobs
#            and Workloads, and write Workloads' status (ClusterRole
#            syncreplicas-multikueue-worker);
#   manager  Secret kueue-system/worker-kubeconfig (that user's kubeconfig, inline), the
#            MultiKueueCluster worker, MultiKueueConfig multikueue, AdmissionCheck
#            multikueue, and ClusterQueue multikueue (cpu 4, memory 8Gi of default-flavor,
#            admitted only through that check); Kueue's own Configuration lists the kind
#            under multiKueue.externalFrameworks (kueue/overlay), and the chart installed
#            with kueue.multiKueue=true lets Kueue write SyncReplicasJobs' status.
# Waits until the MultiKueueCluster says Connected and both ClusterQueues are Active.
# Idempotent. WORKER_NODES (default 1): the worker cluster's nodes.
#   install-multikueue.sh            both halves, one after the other
#   install-multikueue.sh --worker   the worker cluster alone (it needs nothing of the
#                                    manager's: make cluster brings it up beside the
#                                    manager's images, chart and Kueue)
#   install-multikueue.sh --connect  the manager's half, the worker being up
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
kubectl="$repo/.tools/bin/kubectl"
manager_config="$repo/.cluster/kubeconfig"
worker_config="$repo/.cluster/worker/kubeconfig"
t=$SECONDS

case "${1:-}" in
  --worker) halves=worker ;;
  --connect) halves=manager ;;
  "") halves="worker manager" ;;
  *) echo "multikueue: unknown option $1 (--worker, --connect)" >&2; exit 2 ;;
esac
say() { echo "multikueue: $*"; }
manager() { KUBECONFIG="$manager_config" "$kubectl" "$@"; }
worker() { KUBECONFIG="$worker_config" "$kubectl" "$@"; }
on_worker() { env SYNCREPLICAS_CLUSTER=worker KUBECONFIG="$worker_config" "$@"; }
. "$here/kueue/clusterqueue.sh"

if [[ " $halves " == *" manager "* ]]; then
  manager get crd multikueueclusters.kueue.x-k8s.io >/dev/null 2>&1 \
    || { echo "multikueue: no Kueue on the manager cluster (make cluster KUEUE=1)" >&2; exit 1; }
fi

# The worker cluster: nodes, images, the chart and Kueue, as on the manager.
if [[ " $halves " == *" worker "* ]]; then
on_worker python3 "$here/cluster.py" up --nodes "${WORKER_NODES:-1}"
on_worker env SYNCREPLICAS_KUEUE=1 "$here/images.sh"
# One operator replica: the worker is one node, and its hand-overs are tested on the manager.
on_worker "$here/install-chart.sh" --set kueue.enabled=true --set operator.replicas=1
on_worker "$here/install-kueue.sh"

cluster_queue multikueue default-flavor | worker apply --server-side --force-conflicts -f - >/dev/null
worker apply --server-side --force-conflicts -f - >/dev/null <<'EOF'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: syncreplicas-multikueue-worker
rules:
# MultiKueue watches the kind of every integration Kueue runs on the manager (batch/job
# here) on each worker, as Kueue's create-multikueue-kubeconfig.sh grants.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [create, delete, get, list, watch]
- apiGroups: [batch]
  resources: [jobs/status]
  verbs: [get]
- apiGroups: [syncreplicas.io]
  resources: [syncreplicasjobs]
  verbs: [create, delete, get, list, watch]
- apiGroups: [syncreplicas.io]
  resources: [syncreplicasjobs/status]
  verbs: [get]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [create, delete, get, list, watch]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads/status]
  verbs: [get, patch, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: syncreplicas-multikueue-worker
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: syncreplicas-multikueue-worker}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: kueue-multikueue}
EOF
say "worker cluster ready in $((SECONDS - t)) s"
fi
[[ " $halves " == *" manager "* ]] || exit 0

# The manager's half.
on_worker python3 "$here/cluster.py" is-up \
  || { echo "multikueue: the worker cluster is not up (install-multikueue.sh --worker)" >&2; exit 1; }
credentials="$(SYNCREPLICAS_CLUSTER=worker python3 "$here/cluster.py" credentials kueue-multikueue)"

# The manager: Kueue's service account writes the jobs' status (the chart's
# kueue.multiKueue, which make cluster MULTIKUEUE=1 sets), and the worker behind an
# admission check.
manager auth can-i patch syncreplicasjobs.syncreplicas.io --subresource=status -A -q \
  --as=system:serviceaccount:kueue-system:kueue-controller-manager \
  || { echo "multikueue: Kueue may not write SyncReplicasJobs' status on the manager: install the chart with --set kueue.multiKueue=true" >&2; exit 1; }
manager -n kueue-system create secret generic worker-kubeconfig \
  --from-file=kubeconfig="$credentials" --dry-run=client -o yaml \
  | manager apply --server-side --force-conflicts -f - >/dev/null
{
  cat <<'EOF'
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueCluster
metadata:
  name: worker
spec:
  clusterSource:
    kubeConfig:
      locationType: Secret
      location: worker-kubeconfig
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueConfig
metadata:
  name: multikueue
spec:
  clusters: [worker]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata:
  name: multikueue
spec:
  controllerName: kueue.x-k8s.io/multikueue
  parameters:
    apiGroup: kueue.x-k8s.io
    kind: MultiKueueConfig
    name: multikueue
---
EOF
  cluster_queue multikueue default-flavor multikueue
} | manager apply --server-side --force-conflicts -f - >/dev/null

active() {  # active CLUSTER KIND NAME: its Active condition's status
  "$1" get "$2" "$3" -o jsonpath='{.status.conditions[?(@.type=="Active")].status}' 2>/dev/null
}
deadline=$((SECONDS + 180))
until [[ "$(active manager multikueuecluster worker)" == True \
         && "$(active manager clusterqueue multikueue)" == True \
         && "$(active worker clusterqueue multikueue)" == True ]]; do
  if ((SECONDS > deadline)); then
    manager get multikueuecluster worker -o yaml >&2 || true
    manager get clusterqueue multikueue -o yaml >&2 || true
    echo "multikueue: the worker cluster is not connected after 180 s" >&2
    exit 1
  fi
  sleep 2
done
say "worker cluster connected in $((SECONDS - t)) s (MultiKueueCluster worker; ClusterQueue multikueue on both)"
