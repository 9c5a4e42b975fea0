#!/usr/bin/env python3
"""Puts a Go module's dependencies at the versions the Kubernetes build selects, so that
`go build` takes the packages both compile from the build cache instead of compiling them
again at another version.

Go caches a compiled package by its source and its dependencies' compiled forms; a module
at another version (or replaced by another version) is another package, and so is every
package that imports it. kube-router, CoreDNS, Prometheus, etcd and the Prometheus
Operator each pulled their own versions of client-go, x/net, gRPC, protobuf and their
neighbours, and a build from empty caches compiled those five or six times over.
Minimal version selection never goes below what a module requires, so an add-on keeps
any version newer than Kubernetes' (and the packages above it are compiled again).

  go-align.py DIR [PACKAGE...]
      DIR's go.mod requires every module of its build list that the Kubernetes build
      (hack/cluster/kubernetes) also selects, at Kubernetes' version; with PACKAGEs, only
      the modules that the k8s.io packages they import are built from (an add-on whose
      own code needs its newer versions of the rest: Prometheus' prometheus/common).
      Kubernetes' go.sum lines are added to DIR's go.sum (they hold those versions).
  go-align.py --tidy DIR
      for our own modules (hack/cluster/<name>/go.mod): as above, and the indirect
      requirements that Kubernetes' build does not select dropped (a newer one there can
      hold a shared module above Kubernetes' version), then `go mod tidy`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

KUBERNETES = Path(__file__).resolve().parent / "kubernetes"
ENV = {**os.environ, "GOFLAGS": "-mod=mod -buildvcs=false", "CGO_ENABLED": "0"}


def go(cwd: Path, *args: str) -> str:
    return subprocess.run(["go", *args], cwd=cwd, env=ENV, check=True, text=True,
                          stdout=subprocess.PIPE).stdout


def selected(cwd: Path) -> dict[str, str]:
    """Each module of the build list, at the version built (a replacement's, if any)."""
    out = go(cwd, "list", "-m", "-f",
             "{{.Path}} {{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}", "all")
    return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)


def k8s_closure(cwd: Path, packages: list[str]) -> set[str]:
    """The modules of the k8s.io packages that ``packages`` import, and of their imports."""
    out = go(cwd, "list", "-deps", "-f",
             "{{.ImportPath}}|{{with .Module}}{{.Path}}{{end}}|{{join .Deps \" \"}}", *packages)
    module, deps = {}, {}
    for line in out.splitlines():
        path, mod, imports = line.split("|")
        module[path], deps[path] = mod, imports.split()
    roots = [p for p, m in module.items() if m.startswith(("k8s.io/", "sigs.k8s.io/"))]
    return {module[p] for r in roots for p in (r, *deps[r]) if module.get(p)}


def requirements(cwd: Path, packages: list[str]) -> list[str]:
    kubernetes, own = selected(KUBERNETES), selected(cwd)
    wanted = k8s_closure(cwd, packages) if packages else set(own)
    return [f"-require={m}@{kubernetes[m]}" for m in sorted(wanted)
            if m in kubernetes and m in own and own[m] != kubernetes[m]
            and not m.startswith("syncreplicas.io/")]


def merge_sums(cwd: Path) -> None:
    lines = set((cwd / "go.sum").read_text().splitlines())
    lines |= set((KUBERNETES / "go.sum").read_text().splitlines())
    (cwd / "go.sum").write_text("".join(f"{line}\n" for line in sorted(lines) if line))


def drop_unshared(cwd: Path) -> None:
    kubernetes = selected(KUBERNETES)
    text = (cwd / "go.mod").read_text()
    drop = [f"-droprequire={m}" for m in re.findall(r"^\t(\S+) v\S+ // indirect$", text, re.M)
            if m not in kubernetes]
    if drop:
        go(cwd, "mod", "edit", *drop)


def main(argv: list[str]) -> int:
    tidy = argv[:1] == ["--tidy"]
    args = argv[1:] if tidy else argv
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    cwd, packages = Path(args[0]).resolve(), args[1:]
    if tidy:
        drop_unshared(cwd)
    required = requirements(cwd, packages)
    if required:
        go(cwd, "mod", "edit", *required)
    merge_sums(cwd)
    if tidy:
        go(cwd, "mod", "tidy")
    print(f"go-align: {cwd.name}: {len(required)} module(s) at Kubernetes' versions")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
