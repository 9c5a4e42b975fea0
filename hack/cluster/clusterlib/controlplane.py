"""The control plane, on the host's own network stack: etcd, kube-apiserver (TLS,
service-account keys, Node and RBAC authorization, an audit log of the operator),
kube-controller-manager (the garbage collector and the node lifecycle controller at their
defaults, as a managed cluster runs them), kube-scheduler, CoreDNS for cluster.local, and a
kube-proxy so that the host (and the API server's webhooks) reach services. MultiKueue's
worker cluster (config.py) runs no kube-proxy on the host: its API server calls webhooks
at their endpoints' addresses, which the host routes to the nodes."""

from __future__ import annotations

import json
import ssl
import urllib.request

from .config import (
    APISERVER,
    BIN,
    CLUSTER_CIDR,
    CLUSTER_DOMAIN,
    CONTROL_PLANE_IP,
    COREDNS,
    ETCD,
    ETCD_CLIENT,
    ETCD_METRICS,
    ETCD_PEER,
    PKI,
    PROFILE,
    RUN,
    SERVICE_CIDR,
)  # fmt: skip
from .pki import kubeconfig
from .procs import http_ok, kubectl, start, wait_for, write_config

CONTROL_PLANE_NODE_NAME = "syncreplicas-control-plane"


def _add_on_role(user: str, rules: str) -> str:
    """A ClusterRole named like the add-on's user, with ``rules`` (YAML), bound to it."""
    return f"""---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: "{user}"}}
rules:
{rules.strip(chr(10))}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: "{user}"}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "{user}"}}
subjects:
  - {{apiGroup: rbac.authorization.k8s.io, kind: User, name: "{user}"}}
"""


# RBAC that a real cluster's add-ons bring along: CoreDNS reads services and endpoints;
# kube-router (--run-firewall only) starts informers of pods, namespaces, policies,
# services and endpoints, and reads its own Node.
BOOTSTRAP_RBAC = _add_on_role("system:coredns", """
  - apiGroups: [""]
    resources: [endpoints, services, pods, namespaces]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
""") + _add_on_role("system:kube-router", """
  - apiGroups: [""]
    resources: [namespaces, pods, services, endpoints, nodes]
    verbs: [get, list, watch]
  - apiGroups: [networking.k8s.io]
    resources: [networkpolicies]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
""")

# What the API server records: every request of the operator's ServiceAccount (metadata
# only), so that its API traffic for a job can be counted (bench/cluster.py), and of every
# ServiceAccount in namespace syncreplicas-rbac (the RBAC tests run operators under them and
# read each request's verb and response code); nothing else.
AUDIT_POLICY = """
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: ["system:serviceaccount:syncreplicas-system:syncreplicas-operator"]
  - level: Metadata
    userGroups: ["system:serviceaccounts:syncreplicas-rbac"]
  - level: None
"""


def tls_context() -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(PKI / "ca.crt"))
    context.load_cert_chain(str(PKI / "admin.crt"), str(PKI / "admin.key"))
    return context


def api_get(path: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(APISERVER + path, context=tls_context(),
                                timeout=timeout) as response:  # fmt: skip
        return str(response.read().decode())


def corefile() -> str:
    return f""".:53 {{
    bind {CONTROL_PLANE_IP}
    errors
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig("coredns")} syncreplicas
        pods insecure
        ttl 5
        fallthrough in-addr.arpa ip6.arpa
    }}
}}
"""


def kube_proxy_config(hostname: str, address: str) -> str:
    """kube-proxy in iptables mode, for the host or a node (each in its own namespace);
    node ports only on ``address`` (never on the machine's real interfaces)."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clusterCIDR": CLUSTER_CIDR,
        "hostnameOverride": hostname,
        "bindAddress": "127.0.0.1",
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "clientConnection": {"kubeconfig": str(kubeconfig("kube-proxy"))},
        # Leave the host's conntrack table sizes and timeouts alone.
        "conntrack": {
            "maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
        },
        "iptables": {"masqueradeAll": False, "localhostNodePorts": False},
        "nodePortAddresses": [f"{address}/32"],
    }
    return json.dumps(config, indent=2)


def write_configs() -> None:
    write_config(RUN / "Corefile", corefile())
    write_config(RUN / "audit-policy.yaml", AUDIT_POLICY)
    if PROFILE.host_proxy:
        proxy = kube_proxy_config(CONTROL_PLANE_NODE_NAME, CONTROL_PLANE_IP)
        write_config(RUN / "kube-proxy.yaml", proxy)


def start_control_plane() -> None:
    start("etcd", [
        ETCD, "--name", "syncreplicas", "--data-dir", RUN / "etcd",
        "--listen-client-urls", ETCD_CLIENT, "--advertise-client-urls", ETCD_CLIENT,
        "--listen-peer-urls", ETCD_PEER, "--initial-advertise-peer-urls", ETCD_PEER,
        "--initial-cluster", f"syncreplicas={ETCD_PEER}",
        "--listen-metrics-urls", ETCD_METRICS,
        "--quota-backend-bytes", str(2 * 1024**3), "--log-level", "warn",
    ])  # fmt: skip
    wait_for("etcd", lambda: http_ok(f"{ETCD_METRICS}/health"), 60, "etcd")
    start("kube-apiserver", [
        BIN / "kube-apiserver",
        "--etcd-servers", ETCD_CLIENT,
        "--bind-address", CONTROL_PLANE_IP, "--advertise-address", CONTROL_PLANE_IP,
        "--secure-port", "6443",
        "--service-cluster-ip-range", SERVICE_CIDR,
        "--tls-cert-file", PKI / "apiserver.crt", "--tls-private-key-file", PKI / "apiserver.key",
        "--client-ca-file", PKI / "ca.crt",
        "--kubelet-client-certificate", PKI / "apiserver-kubelet-client.crt",
        "--kubelet-client-key", PKI / "apiserver-kubelet-client.key",
        "--kubelet-certificate-authority", PKI / "ca.crt",
        "--kubelet-preferred-address-types", "InternalIP",
        "--service-account-issuer", f"https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
        "--service-account-key-file", PKI / "sa.pub",
        "--service-account-signing-key-file", PKI / "sa.key",
        "--authorization-mode", "Node,RBAC",
        "--requestheader-client-ca-file", PKI / "front-proxy-ca.crt",
        "--requestheader-allowed-names", "front-proxy-client",
        "--requestheader-username-headers", "X-Remote-User",
        "--requestheader-group-headers", "X-Remote-Group",
        "--requestheader-extra-headers-prefix", "X-Remote-Extra-",
        "--proxy-client-cert-file", PKI / "front-proxy-client.crt",
        "--proxy-client-key-file", PKI / "front-proxy-client.key",
        "--anonymous-auth=false",
        "--allow-privileged=true",
        "--profiling=false",
        "--audit-policy-file", RUN / "audit-policy.yaml",
        "--audit-log-path", RUN / "logs" / "audit.log",
        "--audit-log-format", "json", "--audit-log-maxsize", "200",
        f"--enable-aggregator-routing={str(not PROFILE.host_proxy).lower()}",
        "--v", "1",
    ])  # fmt: skip
    wait_for("kube-apiserver", lambda: api_get("/readyz") == "ok", 120, "kube-apiserver")
    start("kube-controller-manager", [
        BIN / "kube-controller-manager",
        "--kubeconfig", kubeconfig("kube-controller-manager"),
        "--authentication-kubeconfig", kubeconfig("kube-controller-manager"),
        "--authorization-kubeconfig", kubeconfig("kube-controller-manager"),
        "--bind-address", "127.0.0.1", "--secure-port", str(PROFILE.controller_manager_port),
        "--cluster-signing-cert-file", PKI / "ca.crt",
        "--cluster-signing-key-file", PKI / "ca.key",
        "--root-ca-file", PKI / "ca.crt",
        "--service-account-private-key-file", PKI / "sa.key",
        "--use-service-account-credentials=true",
        "--service-cluster-ip-range", SERVICE_CIDR,
        "--cluster-cidr", CLUSTER_CIDR,
        "--leader-elect=false",
        "--v", "1",
    ])  # fmt: skip
    start("kube-scheduler", [
        BIN / "kube-scheduler",
        "--kubeconfig", kubeconfig("kube-scheduler"),
        "--authentication-kubeconfig", kubeconfig("kube-scheduler"),
        "--authorization-kubeconfig", kubeconfig("kube-scheduler"),
        "--bind-address", "127.0.0.1", "--secure-port", str(PROFILE.scheduler_port),
        "--leader-elect=false",
        "--v", "1",
    ])  # fmt: skip
    kubectl("apply", "-f", "-", input=BOOTSTRAP_RBAC)
    if PROFILE.host_proxy:
        start("kube-proxy", [BIN / "kube-proxy", "--config", RUN / "kube-proxy.yaml", "--v", "1"])
    start("coredns", [COREDNS, "-conf", RUN / "Corefile"])

