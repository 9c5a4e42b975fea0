#!/usr/bin/env bash
# Installs what the local cluster needs from Debian's packages, when it is missing:
# containerd and runc (the container runtime), the CNI plugins (bridge, host-local,
# loopback, portmap), buildah and mmdebstrap (images without a Docker engine), iptables
# and conntrack (kube-proxy), ipset (kube-router's network-policy controller), openssl (the cluster's certificates), gcc with a static libc
# (the pause binary). Go comes with the machine; everything else is built by
# build-binaries.sh.
set -euo pipefail
need=()
have() { command -v "$1" >/dev/null 2>&1; }
have containerd || need+=(containerd)
have runc || need+=(runc)
[[ -x /usr/lib/cni/bridge ]] || need+=(containernetworking-plugins)
have buildah || need+=(buildah)
have mmdebstrap || need+=(mmdebstrap)
have iptables || need+=(iptables)
have conntrack || need+=(conntrack)
have ipset || need+=(ipset)
have openssl || need+=(openssl)
have nsenter || need+=(util-linux)
have gcc || need+=(gcc)
[[ -f /usr/lib/x86_64-linux-gnu/libc.a ]] || need+=(libc6-dev)
have go || { echo "install-host: Go is not installed (the cluster's components build with it)" >&2; exit 1; }
if ((${#need[@]})); then
  echo "install-host: apt-get install ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
