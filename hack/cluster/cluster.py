#!/usr/bin/env python3
"""Start and stop a single-node Kubernetes cluster built from upstream sources.

One node on this machine, every component a process of its own, as in a real cluster:
etcd, kube-apiserver (TLS, service-account keys, Node and RBAC authorization),
kube-controller-manager (with the garbage collector), kube-scheduler, containerd + runc
with the CNI bridge plugin, kubelet, kube-proxy (iptables) and CoreDNS (the kubernetes
plugin, serving cluster.local at the node's address).

    cluster.py up       start it (idempotent: a running cluster is left as it is)
    cluster.py down     stop it and remove every process, mount, rule and interface
    cluster.py status   say what runs
    cluster.py is-up    exit 0 when it runs and its node is Ready
    cluster.py leftovers  list what a stopped cluster left behind (exit 1 if anything)

Binaries come from build-kubernetes.sh (cached under ~/.cache/syncreplicas); images from
images.sh. Run state (certificates, etcd data, logs, the kubelet's pods) lives in one
directory, /tmp/syncreplicas-cluster; only containerd's image store is kept between runs
(in the cache) so that a second `up` does not import the images again. Standard library
only: it runs with any Python 3.11.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def _versions() -> dict[str, str]:
    pins = {}
    for line in (HERE / "versions.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            pins[key.strip()] = value.strip()
    return pins


VERSIONS = _versions()
CACHE = Path(
    os.environ.get("SYNCREPLICAS_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "syncreplicas"
)
BIN = CACHE / f"kubernetes-{VERSIONS['KUBERNETES_VERSION']}" / "bin"
ETCD = CACHE / f"etcd-{VERSIONS['ETCD_VERSION']}" / "bin" / "etcd"
COREDNS = CACHE / f"coredns-{VERSIONS['COREDNS_VERSION']}" / "bin" / "coredns"
RUN = Path(os.environ.get("SYNCREPLICAS_CLUSTER_DIR", "/tmp/syncreplicas-cluster"))
KUBECONFIG_LINK = REPO / ".cluster" / "kubeconfig"
CONTAINERD_ROOT = CACHE / "containerd"
CONTAINERD_SOCK = RUN / "containerd" / "containerd.sock"

# Addresses. The node's address is the gateway of the pods' bridge: the API server, the
# kubelet and CoreDNS listen there, so nothing listens on the machine's own interfaces and
# no packet of the cluster leaves the machine (no masquerade, no DNS forwarding).
NODE_NAME = "syncreplicas-node"
BRIDGE = "srj0"
POD_CIDR = "10.244.0.0/24"
NODE_IP = "10.244.0.1"
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
APISERVER = f"https://{NODE_IP}:6443"
ETCD_CLIENT = "http://127.0.0.1:12379"
ETCD_PEER = "http://127.0.0.1:12380"
CLUSTER_DOMAIN = "cluster.local"
# Chains of kube-proxy (KUBE-*) and of the CNI plugins (CNI-*), and our own.
OWN_CHAIN = "SYNCREPLICAS-CLUSTER"
CHAIN_PREFIXES = ("KUBE-", "CNI-", OWN_CHAIN)

COMPONENTS = (
    "containerd",
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
    "coredns",
)


class ClusterError(RuntimeError):
    """The cluster could not be brought to the state asked for."""


def log(message: str) -> None:
    print(f"cluster: {message}", flush=True)


def run(*argv: str | Path, check: bool = True, quiet: bool = True, **kw: object) -> str:
    result = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, check=False, **kw  # type: ignore[call-overload]
    )
    if check and result.returncode != 0:
        raise ClusterError(
            f"{' '.join(str(a) for a in argv)} exited {result.returncode}: "
            f"{(result.stderr or result.stdout).strip()[-2000:]}"
        )
    if not quiet and result.stdout:
        print(result.stdout, end="")
    return str(result.stdout)


def wait_for(what: str, ready: Callable[[], bool], timeout: float, log_name: str = "") -> None:
    started = time.monotonic()
    while time.monotonic() < started + timeout:
        with contextlib.suppress(Exception):
            if ready():
                return
        if log_name and log_name in COMPONENTS and running_pid(log_name) is None:
            what += " exited and is"
            break
        time.sleep(0.5)
    tail = ""
    if log_name:
        path = RUN / "logs" / f"{log_name}.log"
        if path.exists():
            tail = "\n" + "\n".join(path.read_text(errors="replace").splitlines()[-30:])
    raise ClusterError(f"{what} not ready after {time.monotonic() - started:.0f} s{tail}")


# --- certificates ------------------------------------------------------------------------


def _openssl(*args: str | Path) -> None:
    run("openssl", *args)


def make_pki(pki: Path) -> None:
    """A CA, the API server's serving certificate, one client certificate per component."""
    pki.mkdir(parents=True, exist_ok=True)
    ca_key, ca_crt = pki / "ca.key", pki / "ca.crt"
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", ca_key)
    _openssl(
        "req", "-x509", "-new", "-key", ca_key, "-sha256", "-days", "30",
        "-subj", "/CN=syncreplicas-cluster-ca", "-out", ca_crt,
    )  # fmt: skip
    # The service-account signing key (RSA: every client library verifies RS256).
    _openssl("genrsa", "-out", pki / "sa.key", "2048")
    _openssl("rsa", "-in", pki / "sa.key", "-pubout", "-out", pki / "sa.pub")

    def issue(
        name: str, subject: str, sans: list[str] | None = None, server: bool = False,
        ca: str = "ca",
    ) -> None:
        key, csr, crt = pki / f"{name}.key", pki / f"{name}.csr", pki / f"{name}.crt"
        _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key)
        _openssl("req", "-new", "-key", key, "-subj", subject, "-out", csr)
        ext = pki / f"{name}.ext"
        lines = [
            "basicConstraints=CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            f"extendedKeyUsage={'serverAuth' if server else 'clientAuth'}",
        ]
        if sans:
            lines.append("subjectAltName=" + ",".join(sans))
        ext.write_text("\n".join(lines) + "\n")
        _openssl(
            "x509", "-req", "-in", csr, "-CA", pki / f"{ca}.crt", "-CAkey", pki / f"{ca}.key",
            "-CAcreateserial",
            "-days", "30", "-sha256", "-extfile", ext, "-out", crt,
        )  # fmt: skip
        csr.unlink()
        ext.unlink()

    issue(
        "apiserver",
        "/CN=kube-apiserver",
        [
            f"IP:{NODE_IP}",
            f"IP:{KUBERNETES_SERVICE_IP}",
            "IP:127.0.0.1",
            "DNS:localhost",
            "DNS:kubernetes",
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            f"DNS:kubernetes.default.svc.{CLUSTER_DOMAIN}",
        ],
        server=True,
    )
    issue("kubelet-serving", f"/CN={NODE_NAME}", [f"IP:{NODE_IP}", f"DNS:{NODE_NAME}"], server=True)
    # Client identities: the user and groups RBAC and the Node authorizer see.
    issue("admin", "/O=system:masters/CN=syncreplicas-admin")
    issue("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client")
    issue("kube-controller-manager", "/CN=system:kube-controller-manager")
    issue("kube-scheduler", "/CN=system:kube-scheduler")
    issue("kubelet", f"/O=system:nodes/CN=system:node:{NODE_NAME}")
    issue("kube-proxy", "/CN=system:kube-proxy")
    issue("coredns", "/CN=system:coredns")
    # The aggregation layer's front proxy: its own CA, as kubeadm does.
    front_key = pki / "front-proxy-ca.key"
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", front_key)
    _openssl(
        "req", "-x509", "-new", "-key", front_key, "-sha256", "-days", "30",
        "-subj", "/CN=front-proxy-ca", "-out", pki / "front-proxy-ca.crt",
    )  # fmt: skip
    issue("front-proxy-client", "/CN=front-proxy-client", ca="front-proxy-ca")


def write_kubeconfig(path: Path, user: str, server: str = APISERVER) -> None:
    pki = RUN / "pki"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "syncreplicas",
                "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(pki / f"{user}.crt"),
                    "client-key": str(pki / f"{user}.key"),
                },
            }
        ],
        "contexts": [
            {"name": "syncreplicas", "context": {"cluster": "syncreplicas", "user": user}}
        ],
        "current-context": "syncreplicas",
    }
    # JSON is YAML: every component reads it.
    path.write_text(json.dumps(config, indent=2) + "\n")


# --- configuration files -----------------------------------------------------------------


def containerd_config() -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{CONTAINERD_ROOT}"
state = "{RUN / "containerd" / "state"}"

[grpc]
  address = "{CONTAINERD_SOCK}"

[ttrpc]
  address = "{RUN / "containerd" / "containerd.sock.ttrpc"}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{RUN / "containerd" / "opt"}"

[{cri}]
  sandbox_image = "registry.k8s.io/pause:{VERSIONS["PAUSE_VERSION"]}"
  enable_selinux = false
  disable_apparmor = true
  # This host withholds CAP_SYS_RESOURCE: a sandbox may not lower its OOM score below
  # containerd's own (the kubelet asks for -998).
  restrict_oom_score_adj = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{RUN / "runc"}"
  [{cri}.cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{RUN / "cni"}"
"""


def cni_config() -> str:
    return json.dumps(
        {
            "cniVersion": "0.4.0",
            "name": "syncreplicas",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    # Pods talk to each other and to the node, never beyond: no masquerade.
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(RUN / "cni-ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        },
        indent=2,
    )


def kubelet_config() -> str:
    pki = RUN / "pki"
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
        # This host has cgroup v1 and no systemd: the release's default refuses v1.
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCK}",
        "clusterDNS": [NODE_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        # Pods see the cluster's DNS only (no search domains or resolvers of this host).
        "resolvConf": str(RUN / "kubelet-resolv.conf"),
        "staticPodPath": "",
        "serializeImagePulls": False,
        # Images are loaded by hand and cannot be pulled again: never collect them, and
        # evict pods only when the machine is really out of room.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "200Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "maxPods": 250,
        "podPidsLimit": -1,
        "protectKernelDefaults": False,
        "makeIPTablesUtilChains": False,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "shutdownGracePeriod": "0s",
        "localStorageCapacityIsolation": True,
    }
    return json.dumps(config, indent=2)


def kube_proxy_config() -> str:
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clusterCIDR": POD_CIDR,
        "hostnameOverride": NODE_NAME,
        "bindAddress": "127.0.0.1",
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "clientConnection": {"kubeconfig": str(RUN / "kube-proxy.kubeconfig")},
        # Leave the host's conntrack table sizes alone.
        "conntrack": {"maxPerCore": 0, "min": 0},
        "iptables": {"masqueradeAll": False, "localhostNodePorts": False},
        "nodePortAddresses": ["primary"],
    }
    return json.dumps(config, indent=2)


def corefile() -> str:
    return f""".:53 {{
    bind {NODE_IP}
    errors
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {RUN / "coredns.kubeconfig"} syncreplicas
        pods insecure
        ttl 5
        fallthrough in-addr.arpa ip6.arpa
    }}
}}
"""


# RBAC that a real cluster's add-ons bring along: CoreDNS reads services and endpoints.
BOOTSTRAP_RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
  - apiGroups: [""]
    resources: [endpoints, services, pods, namespaces]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:coredns"}
"""


# What the API server records: every request of the operator's ServiceAccount (metadata
# only), so that its API traffic for a job can be counted (bench/cluster.py); nothing else.
AUDIT_POLICY = """
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: ["system:serviceaccount:syncreplicas-system:syncreplicas-operator"]
  - level: None
"""


# --- processes ---------------------------------------------------------------------------


def pid_file(name: str) -> Path:
    return RUN / "pids" / f"{name}.pid"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


def running_pid(name: str) -> int | None:
    path = pid_file(name)
    if not path.exists():
        return None
    pid = int(path.read_text())
    return pid if alive(pid) else None


def start(name: str, argv: list[str | Path]) -> None:
    if running_pid(name):
        return
    (RUN / "logs").mkdir(parents=True, exist_ok=True)
    (RUN / "pids").mkdir(parents=True, exist_ok=True)
    with open(RUN / "logs" / f"{name}.log", "ab") as out:
        process = subprocess.Popen(
            [str(a) for a in argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=RUN,
        )
    pid_file(name).write_text(str(process.pid))


def stop(name: str, timeout: float = 15) -> None:
    pid = running_pid(name)
    if pid is None:
        pid_file(name).unlink(missing_ok=True)
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
        while alive(pid):
            time.sleep(0.1)
    pid_file(name).unlink(missing_ok=True)


# --- health ------------------------------------------------------------------------------


def _tls_context() -> ssl.SSLContext:
    pki = RUN / "pki"
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return context


def api_get(path: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(
        APISERVER + path, context=_tls_context(), timeout=timeout
    ) as response:
        return str(response.read().decode())


def http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as response:
        return bool(response.status == 200)


def kubectl(*args: str, check: bool = True, input: str | None = None) -> str:
    return run(kubectl_path(), "--kubeconfig", RUN / "admin.kubeconfig", *args,
               check=check, input=input)  # fmt: skip


def kubectl_path() -> str:
    tool = REPO / ".tools" / "bin" / "kubectl"
    return str(tool) if tool.exists() else "kubectl"


def node_ready() -> bool:
    node = json.loads(api_get(f"/api/v1/nodes/{NODE_NAME}"))
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"]
    )


def is_up() -> bool:
    if any(running_pid(c) is None for c in COMPONENTS):
        return False
    try:
        return api_get("/readyz") == "ok" and node_ready()
    except Exception:
        return False


# --- up ----------------------------------------------------------------------------------


def _sysctl(key: str, value: str) -> None:
    path = Path("/proc/sys") / key.replace(".", "/")
    saved = RUN / "sysctl.json"
    before = json.loads(saved.read_text()) if saved.exists() else {}
    if key not in before:
        before[key] = path.read_text().strip()
        saved.write_text(json.dumps(before))
    path.write_text(value)


def check_host() -> None:
    if os.geteuid() != 0:
        raise ClusterError("the cluster runs its node as root (kubelet, containerd, bridges)")
    binaries = [BIN / c for c in COMPONENTS if c.startswith("kube")] + [ETCD, COREDNS]
    missing = [b.name for b in binaries if not b.exists()]
    if missing:
        raise ClusterError(f"not built: {', '.join(missing)} (run hack/cluster/build-binaries.sh)")
    for tool in ("containerd", "runc", "ctr", "openssl", "iptables", "ip"):
        if shutil.which(tool) is None:
            raise ClusterError(f"{tool} is not installed (run hack/cluster/install-host.sh)")
    if not Path("/proc/sys/net/bridge/bridge-nf-call-iptables").exists():
        raise ClusterError("this kernel has no br_netfilter: services would not reach pods")


def setup_network() -> None:
    _sysctl("net.ipv4.ip_forward", "1")
    _sysctl("net.bridge.bridge-nf-call-iptables", "1")
    if run("ip", "link", "show", BRIDGE, check=False).strip() == "":
        run("ip", "link", "add", BRIDGE, "type", "bridge")
        run("ip", "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE)
        run("ip", "link", "set", BRIDGE, "up")
    # A service address that kube-proxy has not (yet) translated must not follow the
    # default route off this machine: route the whole service range to the bridge.
    if SERVICE_CIDR not in run("ip", "route", "show", SERVICE_CIDR):
        run("ip", "route", "add", SERVICE_CIDR, "dev", BRIDGE)
    # Nothing from the pods is forwarded anywhere but the bridge.
    if run("iptables", "-w", "-S", OWN_CHAIN, check=False) == "":
        run("iptables", "-w", "-N", OWN_CHAIN)
        run("iptables", "-w", "-A", OWN_CHAIN, "-o", BRIDGE, "-j", "RETURN")
        run("iptables", "-w", "-A", OWN_CHAIN, "-s", POD_CIDR, "-j", "DROP")
        run("iptables", "-w", "-I", "FORWARD", "1", "-j", OWN_CHAIN)


def write_configs() -> None:
    for sub in ("pki", "etcd", "cni", "cni-ipam", "kubelet", "containerd", "logs", "pids"):
        (RUN / sub).mkdir(parents=True, exist_ok=True)
    if not (RUN / "pki" / "ca.crt").exists():
        make_pki(RUN / "pki")
    for user in ("admin", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy",
                 "coredns"):  # fmt: skip
        write_kubeconfig(RUN / f"{user}.kubeconfig", user)
    (RUN / "containerd" / "config.toml").write_text(containerd_config())
    (RUN / "cni" / "10-syncreplicas.conflist").write_text(cni_config())
    (RUN / "kubelet.yaml").write_text(kubelet_config())
    (RUN / "kube-proxy.yaml").write_text(kube_proxy_config())
    (RUN / "Corefile").write_text(corefile())
    (RUN / "audit-policy.yaml").write_text(AUDIT_POLICY)
    (RUN / "kubelet-resolv.conf").write_text("")
    KUBECONFIG_LINK.parent.mkdir(exist_ok=True)
    shutil.copy(RUN / "admin.kubeconfig", KUBECONFIG_LINK)


def start_control_plane() -> None:
    pki = RUN / "pki"
    CONTAINERD_ROOT.mkdir(parents=True, exist_ok=True)
    start("containerd", ["containerd", "--config", RUN / "containerd" / "config.toml"])
    start("etcd", [
        ETCD, "--name", "syncreplicas", "--data-dir", RUN / "etcd",
        "--listen-client-urls", ETCD_CLIENT, "--advertise-client-urls", ETCD_CLIENT,
        "--listen-peer-urls", ETCD_PEER, "--initial-advertise-peer-urls", ETCD_PEER,
        "--initial-cluster", f"syncreplicas={ETCD_PEER}",
        "--listen-metrics-urls", "http://127.0.0.1:12381",
        "--quota-backend-bytes", str(2 * 1024**3), "--log-level", "warn",
    ])  # fmt: skip
    wait_for("etcd", lambda: http_ok("http://127.0.0.1:12381/health"), 60, "etcd")
    start("kube-apiserver", [
        BIN / "kube-apiserver",
        "--etcd-servers", ETCD_CLIENT,
        "--bind-address", NODE_IP, "--advertise-address", NODE_IP, "--secure-port", "6443",
        "--service-cluster-ip-range", SERVICE_CIDR,
        "--tls-cert-file", pki / "apiserver.crt", "--tls-private-key-file", pki / "apiserver.key",
        "--client-ca-file", pki / "ca.crt",
        "--kubelet-client-certificate", pki / "apiserver-kubelet-client.crt",
        "--kubelet-client-key", pki / "apiserver-kubelet-client.key",
        "--kubelet-certificate-authority", pki / "ca.crt",
        "--kubelet-preferred-address-types", "InternalIP",
        "--service-account-issuer", f"https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
        "--service-account-key-file", pki / "sa.pub",
        "--service-account-signing-key-file", pki / "sa.key",
        "--authorization-mode", "Node,RBAC",
        "--requestheader-client-ca-file", pki / "front-proxy-ca.crt",
        "--requestheader-allowed-names", "front-proxy-client",
        "--requestheader-username-headers", "X-Remote-User",
        "--requestheader-group-headers", "X-Remote-Group",
        "--requestheader-extra-headers-prefix", "X-Remote-Extra-",
        "--proxy-client-cert-file", pki / "front-proxy-client.crt",
        "--proxy-client-key-file", pki / "front-proxy-client.key",
        "--anonymous-auth=false",
        "--allow-privileged=true",
        "--profiling=false",
        "--audit-policy-file", RUN / "audit-policy.yaml",
        "--audit-log-path", RUN / "logs" / "audit.log",
        "--audit-log-format", "json", "--audit-log-maxsize", "200",
        "--v", "1",
    ])  # fmt: skip
    wait_for("kube-apiserver", lambda: api_get("/readyz") == "ok", 120, "kube-apiserver")
    start("kube-controller-manager", [
        BIN / "kube-controller-manager",
        "--kubeconfig", RUN / "kube-controller-manager.kubeconfig",
        "--authentication-kubeconfig", RUN / "kube-controller-manager.kubeconfig",
        "--authorization-kubeconfig", RUN / "kube-controller-manager.kubeconfig",
        "--bind-address", "127.0.0.1",
        "--cluster-signing-cert-file", pki / "ca.crt",
        "--cluster-signing-key-file", pki / "ca.key",
        "--root-ca-file", pki / "ca.crt",
        "--service-account-private-key-file", pki / "sa.key",
        "--use-service-account-credentials=true",
        "--service-cluster-ip-range", SERVICE_CIDR,
        "--leader-elect=false",
        "--v", "1",
    ])  # fmt: skip
    start("kube-scheduler", [
        BIN / "kube-scheduler",
        "--kubeconfig", RUN / "kube-scheduler.kubeconfig",
        "--authentication-kubeconfig", RUN / "kube-scheduler.kubeconfig",
        "--authorization-kubeconfig", RUN / "kube-scheduler.kubeconfig",
        "--bind-address", "127.0.0.1",
        "--leader-elect=false",
        "--v", "1",
    ])  # fmt: skip
    kubectl("apply", "-f", "-", input=BOOTSTRAP_RBAC)


def start_node() -> None:
    wait_for("containerd", CONTAINERD_SOCK.exists, 30, "containerd")
    start("kubelet", [
        BIN / "kubelet",
        "--config", RUN / "kubelet.yaml",
        "--kubeconfig", RUN / "kubelet.kubeconfig",
        "--root-dir", RUN / "kubelet",
        "--hostname-override", NODE_NAME,
        "--node-ip", NODE_IP,
        "--v", "1",
    ])  # fmt: skip
    start("kube-proxy", [BIN / "kube-proxy", "--config", RUN / "kube-proxy.yaml", "--v", "1"])
    start("coredns", [COREDNS, "-conf", RUN / "Corefile"])
    wait_for("the node", node_ready, 120, "kubelet")


def up() -> None:
    started = time.monotonic()
    check_host()
    if is_up():
        log(f"already up ({APISERVER}); kubeconfig: {KUBECONFIG_LINK}")
        return
    RUN.mkdir(parents=True, exist_ok=True)
    setup_network()
    write_configs()
    start_control_plane()
    start_node()
    log(f"up in {time.monotonic() - started:.0f} s: {APISERVER}, node {NODE_NAME}")
    log(f"kubeconfig: {KUBECONFIG_LINK}")


# --- down --------------------------------------------------------------------------------


def _k8s_tasks() -> list[str]:
    out = run("ctr", "--address", CONTAINERD_SOCK, "-n", "k8s.io", "tasks", "ls", "-q",
              check=False)  # fmt: skip
    return [line for line in out.split() if line]


def remove_pods() -> None:
    """Let the kubelet stop every pod, so that the CNI plugins release their addresses."""
    if running_pid("kube-apiserver") is None or running_pid("kubelet") is None:
        return
    stop("kube-controller-manager")
    stop("kube-scheduler")
    kubectl("delete", "pods", "--all", "--all-namespaces", "--grace-period=1", "--wait=false",
            check=False)  # fmt: skip
    with contextlib.suppress(ClusterError):
        wait_for("the pods to stop", lambda: not _k8s_tasks(), 90)


def sweep_containers() -> None:
    """Whatever the kubelet left: kill and delete the tasks and containers by hand."""
    if running_pid("containerd") is None:
        return
    ctr = ["ctr", "--address", str(CONTAINERD_SOCK), "-n", "k8s.io"]
    for task in _k8s_tasks():
        run(*ctr, "tasks", "kill", "-s", "SIGKILL", task, check=False)
    with contextlib.suppress(ClusterError):
        wait_for("killed tasks", lambda: not _k8s_tasks(), 20)
    for task in _k8s_tasks():
        run(*ctr, "tasks", "delete", "-f", task, check=False)
    for container in run(*ctr, "containers", "ls", "-q", check=False).split():
        run(*ctr, "containers", "delete", container, check=False)


def our_mounts() -> list[str]:
    prefixes = (str(RUN) + "/", "/run/netns/cni-", "/var/run/netns/cni-",
                "/run/containerd/io.containerd", str(CONTAINERD_ROOT) + "/")  # fmt: skip
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4].replace("\\040", " ")
        if target.startswith(prefixes) or target == str(RUN):
            mounts.append(target)
    return mounts


def our_processes() -> list[tuple[int, str]]:
    names = {*COMPONENTS, "containerd-shim-runc-v2", "containerd-shim", "pause", "etcd"}
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            exe = os.readlink(proc / "exe")
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        base = Path(exe.split(" ")[0]).name
        mentions_run = str(RUN).encode() in b" ".join(cmdline)
        ours = base in names or base.startswith("containerd-shim")
        if exe.startswith(str(CACHE)) or (ours and mentions_run) or in_pod_cgroup(proc):
            found.append((int(proc.name), exe))
    return found


def in_pod_cgroup(proc: Path) -> bool:
    """A container's process (its cgroup is under the kubelet's kubepods), whatever its
    executable is called inside its own root."""
    try:
        return "/kubepods" in (proc / "cgroup").read_text()
    except OSError:
        return False


def pod_cgroups() -> list[Path]:
    """The kubelet's cgroup trees (one per controller), deepest first."""
    found = []
    for top in Path("/sys/fs/cgroup").glob("*/kubepods"):
        found += [p for p in top.rglob("*") if p.is_dir()] + [top]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def our_chains() -> list[str]:
    leftovers = []
    for save in ("iptables-save", "ip6tables-save"):
        if shutil.which(save) is None:
            continue
        for line in run(save, check=False).splitlines():
            if any(prefix in line for prefix in CHAIN_PREFIXES):
                leftovers.append(f"{save}: {line}")
    return leftovers


def our_interfaces() -> list[str]:
    names = []
    for line in run("ip", "-o", "link", "show").splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name == BRIDGE or (name.startswith("veth") and f"master {BRIDGE}" in line):
            names.append(name)
    return names


def clean_iptables() -> None:
    """Delete every rule that jumps to, and every chain named like, kube-proxy's, the CNI
    plugins' or ours, in every table."""
    for save, binary in (("iptables-save", "iptables"), ("ip6tables-save", "ip6tables")):
        if shutil.which(save) is None:
            continue
        table = ""
        rules: list[tuple[str, str]] = []
        chains: list[tuple[str, str]] = []
        for line in run(save, check=False).splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":"):
                chain = line[1:].split()[0]
                if chain.startswith(CHAIN_PREFIXES):
                    chains.append((table, chain))
            elif line.startswith("-A ") and any(p in line for p in CHAIN_PREFIXES):
                rules.append((table, line))
        for table, rule in rules:
            chain = rule.split()[1]
            if not chain.startswith(CHAIN_PREFIXES):
                spec = rule.split()[2:]
                run(binary, "-w", "-t", table, "-D", chain, *spec, check=False)
        for table, chain in chains:
            run(binary, "-w", "-t", table, "-F", chain, check=False)
        for table, chain in chains:
            run(binary, "-w", "-t", table, "-X", chain, check=False)


def down() -> None:
    started = time.monotonic()
    if not RUN.exists() and not leftovers():
        log("not running")
        return
    remove_pods()
    for name in ("coredns", "kube-proxy", "kubelet", "kube-controller-manager", "kube-scheduler"):
        stop(name)
    sweep_containers()
    stop("containerd")
    stop("kube-apiserver")
    stop("etcd")
    # Shims and containers whose containerd is gone.
    for pid, _ in our_processes():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if (BIN / "kube-proxy").exists():
        run(BIN / "kube-proxy", "--cleanup", check=False)
    clean_iptables()
    for target in sorted(our_mounts(), key=len, reverse=True):
        run("umount", "-l", target, check=False)
    for netns in Path("/run/netns").glob("cni-*"):
        netns.unlink(missing_ok=True)
    for name in our_interfaces():
        run("ip", "link", "delete", name, check=False)
    run("ip", "route", "del", SERVICE_CIDR, check=False)
    for cgroup in pod_cgroups():
        with contextlib.suppress(OSError):
            cgroup.rmdir()
    saved = RUN / "sysctl.json"
    if saved.exists():
        for key, value in json.loads(saved.read_text()).items():
            (Path("/proc/sys") / key.replace(".", "/")).write_text(value)
    shutil.rmtree(RUN, ignore_errors=True)
    KUBECONFIG_LINK.unlink(missing_ok=True)
    log(f"down in {time.monotonic() - started:.0f} s")


def leftovers() -> list[str]:
    found = [f"process {pid} {exe}" for pid, exe in our_processes()]
    found += [f"mount {m}" for m in our_mounts()]
    found += [f"iptables {c}" for c in our_chains()]
    found += [f"interface {i}" for i in our_interfaces()]
    found += [f"cgroup {c}" for c in pod_cgroups()]
    if SERVICE_CIDR in run("ip", "route", "show", SERVICE_CIDR):
        found.append(f"route {SERVICE_CIDR}")
    if RUN.exists():
        found.append(f"directory {RUN}")
    return found


def status() -> dict[str, object]:
    return {
        "up": is_up(),
        "apiserver": APISERVER,
        "kubeconfig": str(KUBECONFIG_LINK),
        "runDir": str(RUN),
        "components": {c: running_pid(c) for c in COMPONENTS},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "down", "status", "is-up", "leftovers"])
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            up()
        elif args.command == "down":
            down()
        elif args.command == "is-up":
            return 0 if is_up() else 1
        elif args.command == "status":
            print(json.dumps(status(), indent=2))
        else:
            found = leftovers()
            for item in found:
                print(item)
            return 1 if found else 0
    except ClusterError as error:
        print(f"cluster: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
