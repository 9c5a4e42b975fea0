#!/usr/bin/env bash
# Builds the cluster's binaries from their Go modules at the versions of versions.env:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, and
#     kubemark (hollow nodes: the kubelet with a fake container runtime) from
#     k8s.io/kubernetes (hack/cluster/kubernetes/go.mod),
#   etcd from go.etcd.io/etcd/server/v3 (hack/cluster/etcd/go.mod),
#   coredns from github.com/coredns/coredns (its own go.mod, by version), with the
#     plugins a cluster's Corefile uses (plugin.cfg cut down, as CoreDNS documents),
#   pause (the pod sandbox's process) from the C source in the kubernetes module,
#   prometheus from github.com/prometheus/prometheus (its own go.mod, by version), with
#     the Kubernetes and DNS service discoveries (Debian's Prometheus has no Kubernetes
#     one),
#   kube-router from github.com/cloudnativelabs/kube-router/v2 (hack/cluster/kube-router/
#     go.mod): its network-policy controller enforces NetworkPolicy on every node,
#   Kueue's manager from sigs.k8s.io/kueue (hack/cluster/kueue/go.mod), only when
#     SYNCREPLICAS_KUEUE=1 (`make cluster KUEUE=1`): its image's /manager.
#   the Prometheus Operator and its config reloader from github.com/prometheus-operator/
#     prometheus-operator (hack/cluster/prometheus-operator/go.mod), only when
#     SYNCREPLICAS_MONITORING=1 (`make cluster MONITORING=1`).
#   Perses from github.com/perses/perses and its plugins (perses/build.sh), only when
#     SYNCREPLICAS_MONITORING=1.
# Each lands in $CACHE/<name>-<version>/bin. With the binaries there it does nothing; with
# the Go build cache warm a rebuild is a link step. Kubernetes is built first, and every
# other component takes the versions of Kubernetes' build for the modules both compile
# (go-align.py: their go.mod files, or the trimmed copies' at build time), so client-go,
# x/net, gRPC and the rest come from the build cache instead of being compiled again at
# each component's own versions; Kueue needs newer klog, kube-openapi and utils than
# Kubernetes v1.35.8 takes, so it compiles its own.
#
#   build-binaries.sh [--force] [--go | --go-core | --go-rest | --perses]
#     --force   build again what is cached
#     --go      all but Perses: --go-core (Kubernetes, etcd, CoreDNS, kube-router, pause:
#               what the cluster's bring-up needs) then --go-rest (Prometheus, Kueue, the
#               Prometheus Operator); --perses: Perses only (build-all.sh runs the Go
#               builds and the images' with Perses at once)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/versions.env"
CACHE="${SYNCREPLICAS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/syncreplicas}"
# -dwarf=false: the compiler writes no debug information, which the linker's -w (every
# build below) would drop anyway; an empty build cache's etcd took 11% less CPU and time
# (59.9 against 68.4 core-s, 31.5 against 35.8 s: medians of 3, interleaved, 2026-12-05).
# GOGC=400: the compiler and linker collect their garbage a quarter as often, for a little
# more memory. From an empty build cache, etcd took 14% less CPU (medians of 3, interleaved:
# 79.2 against 91.8 core-s; 200: 84.3, 800: 78.8) and Kubernetes' generated OpenAPI package
# with everything under it 13% less (100.0 against 115.0 core-s), its largest compile
# 473 MB against 403 MB (2026-12-07). It changes no build's output or cache key.
export CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false -gcflags=all=-dwarf=false" GOGC=400
force="" core=1 rest=1 perses=1
for arg in "$@"; do
  case "$arg" in
    --force) force="$arg" ;;
    --go) perses=0 ;;
    --go-core) rest=0 perses=0 ;;
    --go-rest) core=0 perses=0 ;;
    --perses) core=0 rest=0 ;;
    *) echo "build-binaries: unknown option $arg (--force, --go, --go-core, --go-rest, --perses)" >&2; exit 2 ;;
  esac
done

cached() {  # cached DIR BINARY...: true when every binary is in DIR
  local dir="$1"; shift
  [[ "$force" == "--force" ]] && return 1
  for b in "$@"; do [[ -x "$dir/$b" ]] || return 1; done
}

# The pins of a build: a short hash of what chose its sources (a module's go.mod and
# go.sum; for a trimmed build, its cut function, go-align.py and Kubernetes' go.mod and
# go.sum, which it aligns with), written beside the binaries (OUT/pins). A cached build
# whose pins changed is built again.
pins_of() { cat "$@" | sha256sum | cut -c1-16; }  # pins_of FILE...
module_pins() { pins_of "$here/$1/go.mod" "$here/$1/go.sum"; }
align_pins() {  # align_pins CUT
  pins_of <(declare -f "$1") "$here/go-align.py" "$here/kubernetes/go.mod" "$here/kubernetes/go.sum"
}
built() {  # built DIR PINS BINARY...: cached, from sources with those pins
  local dir="$1" pins="$2"
  shift 2
  cached "$dir" "$@" && [[ "$(cat "$dir/pins" 2>/dev/null)" == "$pins" ]]
}

took() { echo "build: $1 in $(( SECONDS - $2 )) s -> $3"; }

# go_build WHAT OUT MODULE_DIR LDFLAGS PACKAGE...: build the packages with the go.mod in
# MODULE_DIR into OUT (each binary named after its package, as `go build -o DIR/` does),
# replacing OUT only once every binary is there. MODULE_DIR's versions are those of
# Kubernetes' build where both compile a module (go-align.py --tidy wrote them): what the
# Kubernetes build compiled is not compiled again.
go_build() {
  local what="$1" out="$2" module="$3" ldflags="$4" t=$SECONDS
  shift 4
  echo "build: $what"
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  (cd "$here/$module" && go build -trimpath -ldflags "$ldflags" -o "$out.tmp/" "$@")
  module_pins "$module" >"$out.tmp/pins"
  rm -rf "$out" && mv "$out.tmp" "$out"
  took "$what" $t "$out"
}

# trimmed_build WHAT OUT MODULE@VERSION KEPT CUT LDFLAGS PACKAGE...: build the packages of a
# writable copy of the module into OUT, after CUT (a function run in the copy, given KEPT)
# has cut its build configuration down to KEPT as its own documentation says (CoreDNS'
# plugin.cfg, Prometheus' plugins.yml). KEPT is written beside the binaries (OUT/kept).
# CUT also aligns the copy's go.mod with Kubernetes' build (go-align.py) for the k8s.io
# packages the binaries import and what those are built from: those come from the build
# cache, not compiled again at the module's own versions.
trimmed_build() {
  local what="$1" out="$2" module="${3%@*}" version="${3#*@}" kept="$4" cut="$5"
  local ldflags="$6" t=$SECONDS src dir
  shift 6
  echo "build: $what (kept: $kept)"
  dir="$(cd / && go mod download -json "$module@$version" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -n $dir ]] || { echo "build: $module@$version not downloaded" >&2; return 1; }
  src="${out%/bin}/src"
  rm -rf "$src" "$out.tmp" && mkdir -p "$src" "$out.tmp"
  cp -r "$dir/." "$src/" && chmod -R u+w "$src"
  (cd "$src" && "$cut" "$kept" && go build -trimpath -ldflags "$ldflags" -o "$out.tmp/" "$@")
  echo "$kept" >"$out.tmp/kept"
  align_pins "$cut" >"$out.tmp/pins"
  rm -rf "$out" "$src" && mv "$out.tmp" "$out"
  took "$what" $t "$out"
}

# kept_cached DIR KEPT CUT BINARY...: cached, and built with KEPT and CUT as they are now
# (a build with another list or cut, or an untrimmed one, is built again).
kept_cached() {
  local dir="$1" kept="$2" cut="$3"
  shift 3
  built "$dir" "$(align_pins "$cut")" "$@" && [[ "$(cat "$dir/kept" 2>/dev/null)" == "$kept" ]]
}

# The Go components in two parts (the bodies are not indented: one section each). What a
# cluster's bring-up needs first: its control plane and nodes, their DNS, network policy
# and pod sandbox.
go_core() {
# Kubernetes -----------------------------------------------------------------------------
k8s="$CACHE/kubernetes-$KUBERNETES_VERSION/bin"
components=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubemark)
if ! built "$k8s" "$(module_pins kubernetes)" "${components[@]}"; then
  v="${KUBERNETES_VERSION#v}"; major="${v%%.*}"; rest="${v#*.}"; minor="${rest%%.*}"
  # What `kubectl version` and helm's kubeVersion read; without it: v0.0.0.
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=$major"
    ldflags+=" -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
    ldflags+=" -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  # The six commands are the module's `tool`s: a cache without one of them is built again.
  go_build "kubernetes $KUBERNETES_VERSION (${components[*]}; ~5 min cold on 2 cores)" \
    "$k8s" kubernetes "$ldflags" tool
fi

# etcd -----------------------------------------------------------------------------------
etcd="$CACHE/etcd-$ETCD_VERSION/bin"
if ! built "$etcd" "$(module_pins etcd)" etcd; then
  # The package is go.etcd.io/etcd/server/v3: its binary is named "server".
  go_build "etcd $ETCD_VERSION" "$etcd" etcd "-s -w" go.etcd.io/etcd/server/v3
  mv "$etcd/server" "$etcd/etcd"
fi

# CoreDNS --------------------------------------------------------------------------------
# Built with the plugins that a cluster's Corefile uses (ours, and kubeadm's default one for
# a user's own), the trimmed build CoreDNS documents: its plugin.cfg cut down to them and its
# `go generate` step (directives_generate.go) run. The cloud back-ends (route53, azure,
# clouddns), etcd, tracing, dnstap, geoip and the rest are not compiled.
cut_coredns() {
  awk -F: -v keep=" $1 " '/^#/ || NF < 2 || index(keep, " " $1 " ")' plugin.cfg \
    >plugin.cfg.kept && mv plugin.cfg.kept plugin.cfg && go run directives_generate.go \
    && python3 "$here/go-align.py" . .
}
coredns="$CACHE/coredns-$COREDNS_VERSION/bin"
kept="root metadata cancel timeouts reload bufsize bind debug ready health"
kept+=" prometheus errors log loadbalance cache hosts kubernetes loop forward"
if ! kept_cached "$coredns" "$kept" cut_coredns coredns; then
  trimmed_build "coredns $COREDNS_VERSION" "$coredns" "github.com/coredns/coredns@$COREDNS_VERSION" \
    "$kept" cut_coredns "-s -w" .
fi

# kube-router ----------------------------------------------------------------------------
kube_router="$CACHE/kube-router-$KUBE_ROUTER_VERSION/bin"
if ! built "$kube_router" "$(module_pins kube-router)" kube-router; then
  kv="github.com/cloudnativelabs/kube-router/v2/pkg/version"
  go_build "kube-router $KUBE_ROUTER_VERSION" "$kube_router" kube-router \
    "-s -w -X $kv.Version=$KUBE_ROUTER_VERSION -X $kv.BuildDate=1970-01-01T00:00:00Z" tool
fi

# pause ----------------------------------------------------------------------------------
pause="$CACHE/pause-$PAUSE_VERSION/bin"
if ! cached "$pause" pause; then
  src="$(cd "$here/kubernetes" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c"
  mkdir -p "$pause"
  gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION" -o "$pause/pause.tmp" "$src"
  strip "$pause/pause.tmp" && mv "$pause/pause.tmp" "$pause/pause"
  echo "build: pause $PAUSE_VERSION -> $pause"
fi
}

# What only its add-ons need (make test loads the core's images into the nodes meanwhile):
# Prometheus (also the host's, for test_monitoring.py), Kueue, the Prometheus Operator.
go_rest() {
# Prometheus -----------------------------------------------------------------------------
# With the service discoveries of its plugins.yml cut down to Kubernetes' and DNS' (the ones
# the Prometheus Operator's monitors produce; file and static ones are always there), and
# `go generate -tags plugins ./plugins` run, as its Makefile's `plugins` target does: the
# cloud SDKs (AWS, Azure, GCE, ...) are not compiled.
cut_prometheus() {
  local sd
  for sd in $1; do echo "- github.com/prometheus/prometheus/discovery/$sd"; done >plugins.yml
  go generate -tags plugins ./plugins || return
  # Kubernetes' client-go (v0.35), not Prometheus' own (v0.29): its packages, k8s.io/api
  # above all, come from Kubernetes' build cache. Two of Prometheus' lines do not build
  # with it. main.go hands klog-gokit (Prometheus' stand-in for klog, which client-go
  # outgrew: klog.LoggerWithName) its logger: without it, client-go logs through klog to
  # stderr at klog's default verbosity, 0. And the Reflector's default watch-error handler
  # takes a context now.
  sed -i -e '/^\t"k8s.io\/klog"$/d' -e '/^\tklogv2 "k8s.io\/klog\/v2"$/d' \
    -e '/^\tklog\(v2\)\?\.\(ClampLevel\|SetLogger\)(/d' cmd/prometheus/main.go
  sed -i 's/^\tcache\.DefaultWatchErrorHandler(r, err)$/\tcache.DefaultWatchErrorHandler(context.Background(), r, err)/' \
    discovery/kubernetes/kubernetes.go
  if grep -qE '"k8s.io/klog|\bklog(v2)?\.' cmd/prometheus/main.go \
      || ! grep -q 'DefaultWatchErrorHandler(context.Background(), r, err)' discovery/kubernetes/kubernetes.go; then
    echo "build: Prometheus' sources are not as cut_prometheus expects" >&2
    return 1
  fi
  go mod edit -dropreplace k8s.io/klog -dropreplace k8s.io/klog/v2 -droprequire k8s.io/klog
  python3 "$here/go-align.py" . ./cmd/prometheus ./cmd/promtool
}
prometheus="$CACHE/prometheus-$PROMETHEUS_VERSION/bin"
kept="kubernetes dns"
if ! kept_cached "$prometheus" "$kept" cut_prometheus prometheus promtool; then
  pv="github.com/prometheus/common/version"
  # The module's version of Prometheus 2.x is v0.x (v2.53.4 is v0.53.4).
  trimmed_build "prometheus $PROMETHEUS_VERSION" "$prometheus" \
    "github.com/prometheus/prometheus@v0.${PROMETHEUS_VERSION#v2.}" "$kept" cut_prometheus \
    "-s -w -X $pv.Version=${PROMETHEUS_VERSION#v} -X $pv.Branch=release -X $pv.Revision=module" \
    ./cmd/prometheus ./cmd/promtool
fi

# Kueue ----------------------------------------------------------------------------------
# Only for `make cluster KUEUE=1` (~3 min cold on 2 cores: every job integration's API).
kueue="$CACHE/kueue-$KUEUE_VERSION/bin"
if [[ "${SYNCREPLICAS_KUEUE:-}" == 1 ]] && ! built "$kueue" "$(module_pins kueue)" manager; then
  # The ldflags of its Makefile (LD_FLAGS): the version its log and kueue_build_info show.
  qv="sigs.k8s.io/kueue/pkg/version"
  go_build "kueue $KUEUE_VERSION" "$kueue" kueue \
    "-s -w -X $qv.GitVersion=$KUEUE_VERSION -X $qv.GitCommit=module -X $qv.BuildDate=1970-01-01T00:00:00Z" \
    tool
  # The package is sigs.k8s.io/kueue/cmd/kueue: its binary is named "kueue"; the image's is /manager.
  mv "$kueue/kueue" "$kueue/manager"
fi

# Prometheus Operator --------------------------------------------------------------------
# Only for `make cluster MONITORING=1`.
prom_operator="$CACHE/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION/bin"
if [[ "${SYNCREPLICAS_MONITORING:-}" == 1 ]] \
    && ! built "$prom_operator" "$(module_pins prometheus-operator)" operator prometheus-config-reloader; then
  # The ldflags of its Makefile (GO_BUILD_LDFLAGS): the version its logs and build_info show.
  pv="github.com/prometheus/common/version"
  go_build "prometheus-operator $PROMETHEUS_OPERATOR_VERSION" "$prom_operator" \
    prometheus-operator \
    "-s -w -X $pv.Version=${PROMETHEUS_OPERATOR_VERSION#v} -X $pv.Branch=release -X $pv.Revision=module" \
    tool
fi
}

# Perses ---------------------------------------------------------------------------------
# Only for `make cluster MONITORING=1` (286 s cold, 147 s with warm Go and npm caches, on 2
# cores: npm ci twice, the UI's bundle, the server's Go build, three plugins). Cached by
# version and by the pins of perses/go.sum, the plugins' package-lock.json, the build
# script itself and what aligns its Go build with Kubernetes' (go-align.py).
perses_build() {
  [[ "${SYNCREPLICAS_MONITORING:-}" == 1 ]] || return 0
  perses="$CACHE/perses-$PERSES_VERSION"
  pins="$(pins_of "$here/perses/go.sum" "$here/perses/plugins/package-lock.json" "$here/perses/build.sh" \
    "$here/go-align.py" "$here/kubernetes/go.mod" "$here/kubernetes/go.sum")"
  if ! cached "$perses/bin" perses percli || [[ "$(cat "$perses/pins" 2>/dev/null)" != "$pins" ]]; then
    "$here/perses/build.sh" "$perses"
    echo "$pins" > "$perses/pins"
  fi
}

if [[ $core == 1 ]]; then go_core; fi
if [[ $rest == 1 ]]; then go_rest; fi
if [[ $perses == 1 ]]; then perses_build; fi
