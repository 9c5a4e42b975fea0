"""Certificates and kubeconfigs: a CA, the API server's serving certificate, a serving
certificate per kubelet, and a client certificate per component with the identity RBAC and
the Node authorizer expect (``system:node:<node>`` in ``system:nodes``, ...)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from .config import (
    APISERVER,
    CLUSTER_DOMAIN,
    CONTROL_PLANE_IP,
    KUBERNETES_SERVICE_IP,
    PKI,
    RUN,
    Node,
)
from .procs import run, write_config


def _openssl(*args: str | Path) -> None:
    run("openssl", *args)


def issue(name: str, subject: str, sans: list[str] | None = None, server: bool = False,
          ca: str = "ca") -> None:  # fmt: skip
    """A key and a certificate signed by ``ca`` (ECDSA P-256, 30 days)."""
    key, csr, crt = PKI / f"{name}.key", PKI / f"{name}.csr", PKI / f"{name}.crt"
    if crt.exists():
        return
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key)
    _openssl("req", "-new", "-key", key, "-subj", subject, "-out", csr)
    ext = PKI / f"{name}.ext"
    lines = [
        "basicConstraints=CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={'serverAuth' if server else 'clientAuth'}",
    ]
    if sans:
        lines.append("subjectAltName=" + ",".join(sans))
    ext.write_text("\n".join(lines) + "\n")
    _openssl(
        "x509", "-req", "-in", csr, "-CA", PKI / f"{ca}.crt", "-CAkey", PKI / f"{ca}.key",
        "-CAcreateserial", "-days", "30", "-sha256", "-extfile", ext, "-out", crt,
    )  # fmt: skip
    csr.unlink()
    ext.unlink()


def _self_signed(name: str, subject: str) -> None:
    key = PKI / f"{name}.key"
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key)
    _openssl(
        "req", "-x509", "-new", "-key", key, "-sha256", "-days", "30",
        "-subj", subject, "-out", PKI / f"{name}.crt",
    )  # fmt: skip


def make_pki() -> None:
    """The control plane's certificates (once per run directory)."""
    PKI.mkdir(parents=True, exist_ok=True)
    if (PKI / "ca.crt").exists():
        return
    _self_signed("ca", "/CN=syncreplicas-cluster-ca")
    # The service-account signing key (RSA: every client library verifies RS256).
    _openssl("genrsa", "-out", PKI / "sa.key", "2048")
    _openssl("rsa", "-in", PKI / "sa.key", "-pubout", "-out", PKI / "sa.pub")
    issue(
        "apiserver",
        "/CN=kube-apiserver",
        [
            f"IP:{CONTROL_PLANE_IP}",
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
    issue("admin", "/O=system:masters/CN=syncreplicas-admin")
    issue("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client")
    issue("kube-controller-manager", "/CN=system:kube-controller-manager")
    issue("kube-scheduler", "/CN=system:kube-scheduler")
    issue("kube-proxy", "/CN=system:kube-proxy")
    issue("coredns", "/CN=system:coredns")
    issue_kube_router()
    # The aggregation layer's front proxy: its own CA, as kubeadm does.
    _self_signed("front-proxy-ca", "/CN=front-proxy-ca")
    issue("front-proxy-client", "/CN=front-proxy-client", ca="front-proxy-ca")


def issue_kube_router() -> None:
    """kube-router's identity (its own ClusterRole), also for a cluster that started
    before it ran kube-router."""
    issue("kube-router", "/CN=system:kube-router")


def make_node_pki(node: Node) -> None:
    """A node's kubelet: its serving certificate (its address) and its client identity."""
    issue(f"{node.name}-serving", f"/CN={node.name}", [f"IP:{node.ip}", f"DNS:{node.name}"],
          server=True)  # fmt: skip
    issue(node.name, f"/O=system:nodes/CN=system:node:{node.name}")


def _inline(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, user: str, server: str = APISERVER,
                     embed: bool = False) -> None:  # fmt: skip
    """A kubeconfig for ``user``'s certificate; with ``embed`` the certificates and the key
    are in it (for a process that sees no other file of the run directory)."""
    cluster: dict[str, str] = {"server": server}
    credentials: dict[str, str] = {}
    if embed:
        cluster["certificate-authority-data"] = _inline(PKI / "ca.crt")
        credentials["client-certificate-data"] = _inline(PKI / f"{user}.crt")
        credentials["client-key-data"] = _inline(PKI / f"{user}.key")
    else:
        cluster["certificate-authority"] = str(PKI / "ca.crt")
        credentials["client-certificate"] = str(PKI / f"{user}.crt")
        credentials["client-key"] = str(PKI / f"{user}.key")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "syncreplicas", "cluster": cluster}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [
            {"name": "syncreplicas", "context": {"cluster": "syncreplicas", "user": user}}
        ],
        "current-context": "syncreplicas",
    }
    # JSON is YAML: every component reads it.
    write_config(path, json.dumps(config, indent=2) + "\n")


def kubeconfig(user: str) -> Path:
    return RUN / f"{user}.kubeconfig"
