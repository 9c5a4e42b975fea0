#!/usr/bin/env bash
# Builds the cluster's images with buildah (no Docker engine, no registry) and loads them
# into every node's containerd (namespace k8s.io), where the kubelets find them:
#   registry.k8s.io/pause:<PAUSE_VERSION>       the pod sandbox (pause from build-binaries.sh)
#   localhost/syncreplicas/python:3.11-bookworm  the base standing in for python:3.11-slim:
#                                                Debian's python3 by mmdebstrap, a venv at
#                                                /usr/local (python, pip, site-packages)
#   <operator image>, <runtime image>            operator/Dockerfile and runtime/Dockerfile,
#                                                unchanged, with PYTHON_IMAGE=<that base>
#   registry.k8s.io/kueue/kueue:<KUEUE_VERSION>  only when SYNCREPLICAS_KUEUE=1: Kueue's
#                                                manager (build-binaries.sh) as /manager, as
#                                                its release image (distroless) holds it
#   quay.io/prometheus-operator/prometheus-operator:<PROMETHEUS_OPERATOR_VERSION>,
#   quay.io/prometheus-operator/prometheus-config-reloader:<same>,
#   quay.io/prometheus/prometheus:<PROMETHEUS_VERSION>
#                                                only when SYNCREPLICAS_MONITORING=1: the
#                                                binaries of build-binaries.sh, laid out as
#                                                their release images have them
#   docker.io/persesdev/perses:<PERSES_VERSION>  only when SYNCREPLICAS_MONITORING=1: perses
#                                                and percli with the plugins' archives
#                                                (perses/build.sh), as its release image
# The operator and runtime images get the names the chart deploys by default. Each step is
# skipped when its result is there: buildah caches layers (--layers), and an image whose ID
# was imported before is not imported again.
#
#   images.sh                    build what is missing and load it
#   images.sh --build            build only (no cluster needed)
#   images.sh --python           build only the base, operator and runtime images (no
#                                binaries needed: build-all.sh runs it beside the Go builds)
#   SYNCREPLICAS_IMAGES_BUILT=1  the operator and runtime images as they are (build-all.sh
#                                has just built them), not looked at again
#   SYNCREPLICAS_BUILD_STATUS=D  build-all.sh --status D is still building: the operator and
#                                runtime images are waited for (build-all.sh --await D
#                                images), the pause, operator and runtime images loaded
#                                first, then it waits for the whole build (--await D all)
#                                before it makes and loads Kueue's and the monitoring's
#   images.sh --operator-tag T   also an operator image tagged T (the operator image with
#                                one more label: a new image ID, as a release would have),
#                                loaded like the others: what an upgrade test rolls to
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
. "$here/versions.env"
CACHE="${SYNCREPLICAS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/syncreplicas}"
RUN="${SYNCREPLICAS_CLUSTER_DIR:-/tmp/syncreplicas-cluster}"
IMPORTED="$CACHE/containerd-imported"
build_only=0
python_only=0
variant=""
case "${1:-}" in
  --build) build_only=1 ;;
  --python) build_only=1 python_only=1 ;;
  --operator-tag) variant="${2:?--operator-tag needs a tag}" ;;
  "") ;;
  *) echo "images: unknown option $1 (--build, --python, --operator-tag TAG)" >&2; exit 2 ;;
esac

app_version="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$repo/charts/syncreplicas/Chart.yaml")"
PAUSE="registry.k8s.io/pause:$PAUSE_VERSION"
BASE="localhost/syncreplicas/python:3.11-bookworm"
KUEUE="registry.k8s.io/kueue/kueue:$KUEUE_VERSION"
PROM_OPERATOR="quay.io/prometheus-operator/prometheus-operator:$PROMETHEUS_OPERATOR_VERSION"
PROM_RELOADER="quay.io/prometheus-operator/prometheus-config-reloader:$PROMETHEUS_OPERATOR_VERSION"
PROMETHEUS="quay.io/prometheus/prometheus:$PROMETHEUS_VERSION"
PERSES="docker.io/persesdev/perses:$PERSES_VERSION"
OPERATOR="ghcr.io/syncreplicas/syncreplicas-operator:$app_version"
RUNTIME="ghcr.io/syncreplicas/syncreplicas-runtime:$app_version"

say() { echo "images: $*"; }
exists() { buildah inspect --type image "$1" >/dev/null 2>&1; }
image_id() { buildah inspect --type image --format '{{.FromImageID}}' "$1"; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The images made from binaries (pause's, the add-ons'), one maker at a time: the worker
# cluster's images.sh runs beside this one (flock 8 ... flock -u 8 around each).
mkdir -p "$CACHE"
exec 8>"$CACHE/images.lock"

# pause ----------------------------------------------------------------------------------
[[ $python_only == 1 ]] || flock 8
if [[ $python_only == 0 ]] && ! exists "$PAUSE"; then
  pause_bin="$CACHE/pause-$PAUSE_VERSION/bin/pause"
  [[ -x "$pause_bin" ]] || { echo "images: $pause_bin missing: run build-binaries.sh" >&2; exit 1; }
  c="$(buildah from scratch)"
  buildah copy --quiet "$c" "$pause_bin" /pause >/dev/null
  buildah config --entrypoint '["/pause"]' --user 65535:65535 "$c"
  buildah commit --quiet --rm "$c" "$PAUSE" >/dev/null
  say "built $PAUSE"
fi
[[ $python_only == 1 ]] || flock -u 8

# images of one static binary ----------------------------------------------------------
# Kueue's manager and the Prometheus Operator's, its reloader's and Prometheus's images, on
# scratch instead of their distroless or busybox bases: each binary is static, talks only
# to the API server (with the service account's CA) or scrapes, and nothing runs a shell.
binary_image() {  # binary_image NAME USER ENTRYPOINT SRC:DST...
  local name="$1" user="$2" entrypoint="$3" c pair
  shift 3
  exists "$name" && return 0
  c="$(buildah from scratch)"
  for pair in "$@"; do
    [[ -e "${pair%%:*}" ]] || { echo "images: ${pair%%:*} missing: run build-binaries.sh with the same SYNCREPLICAS_KUEUE / SYNCREPLICAS_MONITORING" >&2; exit 1; }
    buildah copy --quiet "$c" "${pair%%:*}" "${pair#*:}" >/dev/null
  done
  buildah config --entrypoint "[\"$entrypoint\"]" --user "$user" --workingdir / "$c"
  buildah commit --quiet --rm "$c" "$name" >/dev/null
  say "built $name ($(buildah images --format '{{.Size}}' "$name" | head -1))"
}

# base -----------------------------------------------------------------------------------
if ! exists "$BASE"; then
  t=$SECONDS
  say "building $BASE from Debian bookworm (mmdebstrap, ~1 min)"
  mmdebstrap --quiet --variant=minbase \
    --include=python3,python3-pip,python3-venv,ca-certificates,passwd \
    --customize-hook='chroot "$1" python3 -m venv /usr/local' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    bookworm "$work/rootfs.tar"
  c="$(buildah from scratch)"
  buildah add --quiet "$c" "$work/rootfs.tar" / >/dev/null
  buildah config --env PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd '["python3"]' "$c"
  buildah commit --quiet --rm "$c" "$BASE" >/dev/null
  rm -f "$work/rootfs.tar"
  say "built $BASE in $((SECONDS - t)) s"
fi

# operator and runtime -------------------------------------------------------------------
# While build-all.sh still builds them (make test's cluster comes up once its binaries are
# there), they are waited for, not built a second time beside it.
if [[ -n "${SYNCREPLICAS_BUILD_STATUS:-}" && $python_only == 0 ]]; then
  "$here/build-all.sh" --await "$SYNCREPLICAS_BUILD_STATUS" images
fi
# pip inside the build reaches PyPI with this machine's pip settings and CA bundle.
volumes=(-v /etc/ssl/certs:/etc/ssl/certs:ro)
[[ -f /etc/pip.conf ]] && volumes+=(-v /etc/pip.conf:/etc/pip.conf:ro)
for pair in "operator:$OPERATOR" "runtime:$RUNTIME"; do
  dir="${pair%%:*}"; name="${pair#*:}"
  # A variant is made from the image as loaded: that one is not rebuilt first. Nor is an
  # image that build-all.sh has just built from this tree (SYNCREPLICAS_IMAGES_BUILT=1, as
  # make cluster BUILT=1 sets: buildah's look at its cached layers alone takes 20 s).
  [[ -n $variant || "${SYNCREPLICAS_IMAGES_BUILT:-}" == 1 ]] && exists "$name" && continue
  t=$SECONDS
  # The build stage tagged too: its layers (the dependencies' pip install) are the cache
  # that prune-images.py keeps.
  for target in "--target=build:localhost/syncreplicas/$dir-build:cache" ":$name"; do
    buildah bud --quiet --layers --isolation chroot ${target%%:*} \
      --build-arg "PYTHON_IMAGE=$BASE" "${volumes[@]}" \
      -f "$repo/$dir/Dockerfile" --ignorefile "$repo/$dir/Dockerfile.dockerignore" \
      -t "${target#*:}" "$repo" >/dev/null
  done
  say "built $name in $((SECONDS - t)) s ($(buildah images --format '{{.Size}}' "$name" | head -1))"
done
[[ $python_only == 1 ]] && exit 0
# Every rebuild leaves the last one's images behind (GBs each): gone, but for the cache.
python3 "$here/prune-images.py"

# load into every node's containerd ------------------------------------------------------
# One archive per image, imported into each node that lacks it (in parallel).
load() {  # load NAME...
for name in "$@"; do
  id="$(image_id "$name")"
  key="$(echo "$name" | tr '/:' '__')"
  todo=()
  for line in "${nodes[@]}"; do
    node="${line%% *}"; sock="${line#* }"
    [[ -S "$sock" ]] || { echo "images: no containerd at $sock ($node)" >&2; exit 1; }
    mark="$IMPORTED/$node/$key"
    # The listing read whole, not piped into `grep -q`: grep leaves at its first match,
    # and a ctr that writes after that dies of SIGPIPE, which pipefail made this test's
    # answer (a node that had the image took it in again: a minute for the runtime's).
    if [[ -f "$mark" && "$(cat "$mark")" == "$id" ]] \
        && grep -qx "$name" <<< "$(ctr --address "$sock" -n k8s.io images ls -q)"; then
      continue
    fi
    todo+=("$line")
  done
  ((${#todo[@]})) || continue
  t=$SECONDS
  buildah push --quiet "$name" "docker-archive:$work/image.tar:$name" >/dev/null
  pids=()
  for line in "${todo[@]}"; do
    node="${line%% *}"; sock="${line#* }"
    mkdir -p "$IMPORTED/$node"
    ( ctr --address "$sock" -n k8s.io images import "$work/image.tar" >/dev/null \
        && echo "$id" > "$IMPORTED/$node/$key" ) &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  rm -f "$work/image.tar"
  say "loaded $name into ${#todo[@]} node(s) in $((SECONDS - t)) s"
done
}

if [[ $build_only == 0 ]]; then
  mapfile -t nodes < <(python3 "$here/cluster.py" sockets)
  ((${#nodes[@]})) || { echo "images: no nodes: run cluster.py up" >&2; exit 1; }
  # The images of the cluster's own pods first: the runtime's gigabytes go into the nodes
  # while build-all.sh may still compile the add-ons' binaries (SYNCREPLICAS_BUILD_STATUS).
  load "$PAUSE" "$OPERATOR" "$RUNTIME"
fi
if [[ -n "${SYNCREPLICAS_BUILD_STATUS:-}" ]]; then
  "$here/build-all.sh" --await "$SYNCREPLICAS_BUILD_STATUS" all
fi
loads=()
flock 8
if [[ "${SYNCREPLICAS_KUEUE:-}" == 1 ]]; then
  # As its Dockerfile makes it: /manager, user 65532.
  binary_image "$KUEUE" 65532:65532 /manager "$CACHE/kueue-$KUEUE_VERSION/bin/manager:/manager"
fi
if [[ "${SYNCREPLICAS_MONITORING:-}" == 1 ]]; then
  po="$CACHE/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION/bin"
  binary_image "$PROM_OPERATOR" 65534:65534 /bin/operator "$po/operator:/bin/operator"
  binary_image "$PROM_RELOADER" 65534:65534 /bin/prometheus-config-reloader \
    "$po/prometheus-config-reloader:/bin/prometheus-config-reloader"
  # Prometheus's data directory /prometheus is the operator's volume; its pod runs as the
  # Prometheus resource's securityContext says (the operator's default: 1000, fsGroup 2000).
  pb="$CACHE/prometheus-$PROMETHEUS_VERSION/bin"
  binary_image "$PROMETHEUS" 65534:65534 /bin/prometheus \
    "$pb/prometheus:/bin/prometheus" "$pb/promtool:/bin/promtool"
  # As its Dockerfile lays it out; its data (/perses) and unpacked plugins
  # (/etc/perses/plugins) are the pod's volumes. mime.types: the types of the UI's files.
  pe="$CACHE/perses-$PERSES_VERSION"
  binary_image "$PERSES" 65534:65534 /bin/perses \
    "$pe/bin/perses:/bin/perses" "$pe/bin/percli:/bin/percli" \
    "$pe/plugins:/etc/perses/plugins-archive" "/etc/mime.types:/etc/mime.types"
fi
flock -u 8
[[ "${SYNCREPLICAS_KUEUE:-}" == 1 ]] && loads+=("$KUEUE")
[[ "${SYNCREPLICAS_MONITORING:-}" == 1 ]] && loads+=("$PROM_OPERATOR" "$PROM_RELOADER" "$PROMETHEUS" "$PERSES")
if [[ -n $variant ]]; then
  name="${OPERATOR%:*}:$variant"
  # Made again whenever the operator image changed (the variant records which it copies).
  from="$(image_id "$OPERATOR")"
  if ! exists "$name" || [[ "$(buildah inspect --type image \
      --format '{{index .ImageAnnotations "syncreplicas.io/from"}}' "$name")" != "$from" ]]; then
    exists "$name" && buildah rmi "$name" >/dev/null
    c="$(buildah from --pull-never "$OPERATOR")"
    buildah config --label "org.opencontainers.image.version=$variant" \
      --annotation "syncreplicas.io/from=$from" "$c"
    buildah commit --quiet --rm "$c" "$name" >/dev/null
    say "built $name"
  fi
  loads+=("$name")
fi

[[ $build_only == 1 ]] && exit 0
load "${loads[@]}"

# Old images off every node ----------------------------------------------------------------
# A name loaded again moves to the new image; the old one stays under its ID (a
# `sha256:...` reference the CRI keeps), with its unpacked layers: gigabytes per node for
# each runtime image replaced (the kubelet's image GC is off here). Those references whose
# image no name points at are removed; containerd keeps what a container still uses.
for line in "${nodes[@]}"; do
  node="${line%% *}"; sock="${line#* }"
  listing="$(ctr --address "$sock" -n k8s.io images ls)"
  named="$(awk 'NR > 1 && $1 !~ /^sha256:/ {print $3}' <<< "$listing" | sort -u)"
  stale=()
  while read -r ref digest; do
    grep -qx "$digest" <<< "$named" || stale+=("$ref")
  done < <(awk 'NR > 1 && $1 ~ /^sha256:/ {print $1, $3}' <<< "$listing")
  ((${#stale[@]})) || continue
  ctr --address "$sock" -n k8s.io images rm "${stale[@]}" >/dev/null
  say "removed ${#stale[@]} old image(s) from $node"
done
