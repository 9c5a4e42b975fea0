#!/usr/bin/env bash
# Builds what `make cluster` runs before it starts the nodes, in two lanes at once:
#   [go]      build-binaries.sh --go: the Go components, one after another (each `go build`
#             keeps both cores busy);
#   [images]  images.sh --python: the Python base (Debian's packages by mmdebstrap), the
#             operator and runtime images (their wheels from PyPI, their layers written),
#             then build-binaries.sh --perses: Perses (npm's packages, its bundles, its Go
#             build; only with SYNCREPLICAS_MONITORING=1).
# On a cold machine the second lane mostly waits on downloads and the disk, which the first
# one's compiles fill; with everything cached both return at once. Each line says its lane;
# it fails when either lane does (after both have ended).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

lane() {  # lane NAME COMMAND...: the command's output, each line prefixed with [NAME]
  local name="$1"
  shift
  "$@" 2>&1 | sed -u "s/^/[$name] /"
}

t=$SECONDS
lane images bash -c '"$1/images.sh" --python && "$1/build-binaries.sh" --perses' _ "$here" &
images=$!
rc=0
lane go "$here/build-binaries.sh" --go || rc=$?
wait "$images" || rc=$?
((rc == 0)) || { echo "build-all: a lane failed (exit $rc); its lines above say which" >&2; exit "$rc"; }
echo "build-all: binaries and images built in $((SECONDS - t)) s"
