"""One role's pod template: ``spec.template`` with ``spec.<role>.template`` merged on top,
and which of its containers carries the runtime.

Users name the runtime's container the way they know it: ``syncreplicas`` (ours),
``tensorflow`` (the name Kubeflow's TFJob requires) or not at all, in a template with a
single container. Which container is the runtime's and which are sidecars is the API's
rule (``syncreplicas_api.containers``, the same as the CRD's CEL rules).

Each template's runtime containers are merged, in order, into one container named
``syncreplicas`` at the first one's position; then the role's template is merged over
``spec.template`` (objects recursively; containers, initContainers, volumes, env and ports
by ``name``, volumeMounts by ``mountPath``; other lists replaced).

Pure: inputs are never mutated; results are new objects.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Final

from syncreplicas_api.containers import (
    MAX_CONTAINER_NAME_LENGTH,
    MAX_CONTAINERS,
    RUNTIME_CONTAINER_NAMES,
    runtime_positions,
    sidecars_without_image,
)

from . import naming

__all__ = [
    "MAX_CONTAINERS",
    "MAX_CONTAINER_NAME_LENGTH",
    "RUNTIME_CONTAINER_NAMES",
    "containers",
    "merge_templates",
    "role_template",
    "runtime_positions",
    "sidecars_without_image",
]

# Lists merged item by item (by this key) when a per-role template overrides the base.
_MERGE_KEYS: Final = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "ports": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
}

Template = dict[str, Any]


def merge_templates(base: Mapping[str, Any], override: Mapping[str, Any]) -> Template:
    """``override`` merged over ``base`` (both untouched): a new dict."""
    merged: Template = copy.deepcopy(dict(base))
    for key, value in override.items():
        current = merged.get(key)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            merged[key] = merge_templates(current, value)
        elif key in _MERGE_KEYS and isinstance(current, list) and isinstance(value, list):
            merged[key] = _merge_named(current, value, _MERGE_KEYS[key])
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _merge_named(base: list[Any], override: list[Any], key: str) -> list[Any]:
    result = copy.deepcopy(base)
    positions = {item.get(key): i for i, item in enumerate(result) if isinstance(item, Mapping)}
    for item in override:
        name = item.get(key) if isinstance(item, Mapping) else None
        if name is not None and name in positions:
            result[positions[name]] = merge_templates(result[positions[name]], item)
        else:
            result.append(copy.deepcopy(item))
    return result


def containers(template: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The containers of a template (none when it has no ``spec.containers`` list)."""
    pod_spec = template.get("spec")
    found = pod_spec.get("containers") if isinstance(pod_spec, Mapping) else None
    if not isinstance(found, list):
        return []
    return [c for c in found if isinstance(c, Mapping)]


def _with_runtime_container(template: Mapping[str, Any], positions: Sequence[int]) -> Template:
    """A copy of ``template`` whose containers at ``positions`` are merged, in order, into
    one container named ``syncreplicas`` at the first one's position."""
    result: Template = copy.deepcopy(dict(template))
    if not positions:
        return result
    items = containers(result)  # the list ``positions`` index (spec.py rejects other items)
    runtime: Template = {}
    for position in positions:
        runtime = merge_templates(runtime, items[position])
    runtime["name"] = naming.CONTAINER_NAME
    result["spec"]["containers"] = [
        runtime if i == positions[0] else c for i, c in enumerate(items) if i not in positions[1:]
    ]
    return result


def role_template(base: Mapping[str, Any], override: Mapping[str, Any]) -> Template:
    """One role's PodTemplateSpec: ``override`` (``spec.<role>.template``) merged over
    ``base`` (``spec.template``), the runtime's container of each named ``syncreplicas``."""
    base_containers = containers(base)
    return merge_templates(
        _with_runtime_container(base, runtime_positions(base_containers)),
        _with_runtime_container(override, runtime_positions(containers(override), base_containers)),
    )
