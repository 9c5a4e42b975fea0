#!/usr/bin/env bash
# Builds Perses for `make cluster MONITORING=1`, from the sources of go.mod's modules:
#   bin/perses and bin/percli: the server with its UI embedded, and its CLI, from
#     github.com/perses/perses: `npm ci` in ui/ (its package-lock.json), the UI's library
#     packages compiled with swc and the app bundled with rspack (what its `turbo run
#     build` does, without the type declarations the bundle does not read), the bundle
#     gzipped into ui/embed.go (its scripts/compress_assets.sh), then `go build`;
#   plugins/<Name>-<version>.tar.gz: the Prometheus datasource and query plugin, and the
#     TimeSeriesChart and StatChart panels, each from its module (github.com/perses/
#     plugins/<name>): bundled with rsbuild's module federation (the plugin's own
#     rsbuild.config.ts) in a workspace whose root is plugins/ here (package.json and its
#     lock: the plugins' npm dependencies; their monorepo's root is not in the modules),
#     then archived by `percli plugin build`, which vendors the CUE schemas they import
#     (perses' cue/ module, from the same Perses source) as the server loads them.
# Into $1 (bin/ and plugins/), replaced only once everything is there. Nothing is
# downloaded but npm packages (from the lock files) and Go modules (go.sum).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/../versions.env"
out="$1"
t=$SECONDS
say() { echo "build: perses: $*"; }
# -dwarf=false: no debug information compiled; GOGC=400: less of the compiler's time
# collecting garbage (build-binaries.sh says why of both).
export GOFLAGS="-mod=mod -buildvcs=false -gcflags=all=-dwarf=false" CGO_ENABLED=0 GOGC=400
# A module's source directory, downloaded first (`go list -m` alone does not download).
moddir() { (cd "$here" && go mod download "$1" && go list -m -f '{{.Dir}}' "$1"); }
modversion() { (cd "$here" && go list -m -f '{{.Version}}' "$1"); }
[[ "$(modversion github.com/perses/perses)" == "$PERSES_VERSION" ]] \
  || { echo "build: perses: go.mod's github.com/perses/perses is not PERSES_VERSION ($PERSES_VERSION)" >&2; exit 1; }

work="$out.tmp"
rm -rf "$work" && mkdir -p "$work/bin" "$work/plugins"
# The sources are read-only in the module cache: built in a copy, removed at the end.
src="$work/src"
mkdir -p "$src"
cp -r "$(moddir github.com/perses/perses)" "$src/perses"
chmod -R u+w "$src"
npm_ci() { npm ci --no-audit --no-fund --ignore-scripts --loglevel=error; }

# Server and percli -----------------------------------------------------------------------
say "UI (npm ci, swc, rspack: ~1.5 min)"
(
  cd "$src/perses/ui"
  npm_ci
  for pkg in core components plugin-system dashboards explore; do
    (cd "$pkg" && npx swc ./src -d dist --config-file ../.swcrc >/dev/null)
  done
  # Minified by terser-webpack-plugin, as its rspack.config.mjs has it: rspack's own SWC
  # minimizer (1.2.8) takes a third of the CPU (22 s against 75 s) but its bundle does not
  # draw a dashboard ("TypeError: l is not a function" in getViewPanel; 2026-12-07).
  (cd app && npx rspack build >/dev/null)
  cd .. && bash scripts/compress_assets.sh >/dev/null
  rm -rf ui/node_modules
)
say "server and percli (go build)"
pv="github.com/prometheus/common/version"
# Its k8s.io packages and what they are built from at the Kubernetes build's versions
# (../go-align.py): those come from the build cache, not compiled again.
(cd "$src/perses" && python3 "$here/../go-align.py" . ./cmd/perses ./cmd/percli && go build -trimpath \
  -ldflags "-s -w -X $pv.Version=${PERSES_VERSION#v} -X $pv.Branch=release -X $pv.Revision=module" \
  -o "$work/bin/" ./cmd/perses ./cmd/percli)

# Plugins --------------------------------------------------------------------------------
say "plugins (npm ci, rsbuild, percli plugin build)"
ws="$src/plugins"
mkdir -p "$ws"
cp "$here/plugins/package.json" "$here/plugins/package-lock.json" "$here/plugins/tsconfig.base.json" "$ws/"
# rsbuild.config.ts copies the monorepo root's LICENSE into each plugin: the plugin's own.
cp "$(moddir github.com/perses/plugins/prometheus)/LICENSE" "$ws/LICENSE"
plugins=(prometheus timeserieschart statchart)
for p in "${plugins[@]}"; do
  cp -r "$(moddir "github.com/perses/plugins/$p")" "$ws/$p"
done
chmod -R u+w "$ws"
# `percli plugin build` vendors a plugin's CUE dependencies from CUE's module cache: the
# perses/cue module of the Perses built above, under the version the plugins name.
cue_cache="$work/cue-cache"
mkdir -p "$cue_cache/mod/extract/github.com/perses/perses"
cp -r "$src/perses/cue" "$cue_cache/mod/extract/github.com/perses/perses/cue@$PERSES_VERSION"
(cd "$ws" && npm_ci)
for p in "${plugins[@]}"; do
  # The plugins' module.cue names a release candidate of perses/cue; the one here is the
  # release.
  sed -i -E "s|^(\s*v:\s*)\"v0\.51\.0-rc\.[0-9]+\"|\1\"$PERSES_VERSION\"|" "$ws/$p/cue.mod/module.cue"
  (cd "$ws/$p" && npx rsbuild build >/dev/null \
    && CUE_CACHE_DIR="$cue_cache" "$work/bin/percli" plugin build \
      --skip.npm-install --skip.npm-build >/dev/null)
  mv "$ws/$p"/*.tar.gz "$work/plugins/"
done

rm -rf "$src" "$cue_cache"
rm -rf "$out" && mv "$work" "$out"
say "$(ls "$out/plugins" | tr '\n' ' ')in $((SECONDS - t)) s -> $out"
