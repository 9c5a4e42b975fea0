# Sourced by install-kueue.sh and install-multikueue.sh.
# cluster_queue NAME FLAVOR [ADMISSION_CHECK]: the YAML of the ClusterQueue NAME, open to
# every namespace, with cpu 4 and memory 8Gi of FLAVOR (the test clusters' queues), admitted
# only through ADMISSION_CHECK when one is given.
cluster_queue() {
  cat <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: $1
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: $2
      resources:
      - name: cpu
        nominalQuota: "4"
      - name: memory
        nominalQuota: 8Gi
EOF
  if [[ -n "${3:-}" ]]; then
    printf '  admissionChecksStrategy:\n    admissionChecks:\n    - name: %s\n' "$3"
  fi
}
