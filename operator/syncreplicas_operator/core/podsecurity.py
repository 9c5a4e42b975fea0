"""Security defaults of a replica's pod and container, and its writable directories: each
setting applies only where the pod template sets nothing (core/manifests.py says which).
Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

# The runtime image's user (runtime/Dockerfile); named here so that runAsNonRoot can be
# verified by the kubelet even for images whose USER is a name.
DEFAULT_UID: Final = 10001

Manifest = dict[str, Any]


def covers(mount_path: str, path: str) -> bool:
    """True when a volume mounted at ``mount_path`` holds ``path``."""
    mount = mount_path.rstrip("/") or "/"
    return path == mount or path.startswith(mount if mount.endswith("/") else mount + "/")


def secure_container(container: Manifest) -> None:
    context = container.setdefault("securityContext", {})
    context.setdefault("allowPrivilegeEscalation", False)
    context.setdefault("readOnlyRootFilesystem", True)
    context.setdefault("runAsNonRoot", True)
    context.setdefault("capabilities", {}).setdefault("drop", ["ALL"])


def secure_pod(pod_spec: Manifest) -> None:
    context = pod_spec.setdefault("securityContext", {})
    context.setdefault("runAsNonRoot", True)
    if "runAsUser" not in context:
        context["runAsUser"] = DEFAULT_UID
        context.setdefault("runAsGroup", DEFAULT_UID)
    context.setdefault("fsGroup", DEFAULT_UID)
    context.setdefault("seccompProfile", {"type": "RuntimeDefault"})
    pod_spec.setdefault("automountServiceAccountToken", False)
    pod_spec.setdefault("enableServiceLinks", False)


def writable_dirs(pod_spec: Manifest, container: Manifest, paths: Mapping[str, str]) -> None:
    """emptyDir volumes at ``paths`` ({volume name: path}) that no mount covers yet."""
    mounts = container.setdefault("volumeMounts", [])
    volumes = pod_spec.setdefault("volumes", [])
    for volume, path in paths.items():
        if any(covers(str(m.get("mountPath", "")), path) for m in mounts):
            continue
        mounts.append({"name": volume, "mountPath": path})
        # A volume of this name in the template (say a PVC) is used as it is.
        if not any(v.get("name") == volume for v in volumes):
            volumes.append({"name": volume, "emptyDir": {}})
