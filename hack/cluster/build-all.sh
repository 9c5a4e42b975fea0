#!/usr/bin/env bash
# Builds what `make cluster` runs before it starts the nodes, in two lanes at once:
#   [go]      build-binaries.sh --go-core, then --go-rest: the Go components, one after
#             another (each `go build` keeps both cores busy), those the cluster's bring-up
#             needs first (Kubernetes, etcd, CoreDNS, kube-router, pause), then the
#             add-ons' (Prometheus, Kueue, the Prometheus Operator);
#   [images]  images.sh --python: the Python base (Debian's packages by mmdebstrap), the
#             operator and runtime images (their wheels from PyPI, their layers written),
#             then build-binaries.sh --perses: Perses (npm's packages, its bundles, its Go
#             build; only with SYNCREPLICAS_MONITORING=1).
# On a cold machine the second lane mostly waits on downloads and the disk, which the first
# one's compiles fill; with everything cached both return at once. Each line says its lane;
# it fails when either lane does (after both have ended).
#
#   build-all.sh [--status DIR]   build; with --status, DIR says how far it got: DIR/go
#                                 once the first lane's first half is built (a cluster can
#                                 come up), DIR/images the second's (the operator's and
#                                 runtime's images can go into its nodes), DIR/core both
#                                 (the add-ons build on meanwhile), DIR/rc its exit status
#   build-all.sh --await DIR go|images|core|all
#                                 wait for that build to get so far; fails when it failed
#                                 (or ended without a word)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

if [[ "${1:-}" == --await ]]; then
  dir="${2:?--await DIR go|images|core|all}" what="${3:?--await DIR go|images|core|all}"
  case "$what" in go | images | core | all) ;; *) echo "build-all: --await DIR go|images|core|all, not $what" >&2; exit 2 ;; esac
  t=$SECONDS
  while true; do
    if [[ -e "$dir/rc" ]]; then
      [[ "$(cat "$dir/rc")" == 0 ]] && break
      echo "build-all: the build failed (exit $(cat "$dir/rc")): its lines say which lane" >&2
      exit 1
    fi
    [[ $what != all && -e "$dir/$what" ]] && break
    pid="$(cat "$dir/pid" 2>/dev/null || true)"  # none yet: the build is only starting
    if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null && [[ ! -e "$dir/rc" ]]; then
      echo "build-all: the build in $dir ended without an exit status" >&2
      exit 1
    fi
    sleep 1
  done
  ((SECONDS - t < 2)) || echo "build-all: waited $((SECONDS - t)) s for the build ($what)"
  exit 0
fi

status=""
if [[ "${1:-}" == --status ]]; then
  status="${2:?--status DIR}"
  rm -rf "$status" && mkdir -p "$status" && echo $$ >"$status/pid"
  trap 'echo $? >"$status/rc"' EXIT
fi

lane() {  # lane NAME COMMAND...: the command's output, each line prefixed with [NAME]
  local name="$1"
  shift
  "$@" 2>&1 | sed -u "s/^/[$name] /"
}

# halfway NAME: the lane NAME has built its first half; both have: DIR/core.
halfway() {
  [[ -n $status ]] || return 0
  touch "$status/$1"
  if [[ -e "$status/go" && -e "$status/images" ]]; then touch "$status/core"; fi
}
export -f halfway
export status

t=$SECONDS
lane images bash -c '"$1/images.sh" --python && halfway images && "$1/build-binaries.sh" --perses' \
  _ "$here" &
images=$!
rc=0
lane go bash -c '"$1/build-binaries.sh" --go-core && halfway go && "$1/build-binaries.sh" --go-rest' \
  _ "$here" || rc=$?
wait "$images" || rc=$?
((rc == 0)) || { echo "build-all: a lane failed (exit $rc); its lines above say which" >&2; exit "$rc"; }
echo "build-all: binaries and images built in $((SECONDS - t)) s"
