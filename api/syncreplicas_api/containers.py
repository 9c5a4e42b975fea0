"""Which containers of a pod template carry the runtime, and which are sidecars.

Users name the runtime's container the way they know it: ``syncreplicas`` (ours),
``tensorflow`` (the name Kubeflow's TFJob requires) or not at all, in a template with a
single container. The same rules are the CRD's CEL rules (``types``):

* In ``spec.template``, the runtime's container is every container named ``syncreplicas``
  or ``tensorflow``; in a template with one container, that container.
* In ``spec.<role>.template``, also a container named like one of those of
  ``spec.template``; and the only container of a role template when ``spec.template`` has
  no containers.
* Every other container is a sidecar. A sidecar needs an image, unless it is a role
  template's container named like a container of ``spec.template`` (it is merged with it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

CONTAINER_NAME: Final = "syncreplicas"
# Kubeflow's TFJob requires this name for its main container.
TFJOB_CONTAINER_NAME: Final = "tensorflow"
RUNTIME_CONTAINER_NAMES: Final = (CONTAINER_NAME, TFJOB_CONTAINER_NAME)
# Bounds of what the CEL rules read (they keep the rules' estimated cost within the API
# server's budget). A container's name is a DNS label.
MAX_CONTAINERS: Final = 32
MAX_CONTAINER_NAME_LENGTH: Final = 63


def runtime_positions(
    items: Sequence[Mapping[str, Any]], base: Sequence[Mapping[str, Any]] | None = None
) -> list[int]:
    """Positions of the containers in ``items`` that carry the runtime. ``base`` is
    ``spec.template``'s containers when ``items`` are a role template's."""
    names: set[Any] = set(RUNTIME_CONTAINER_NAMES)
    if base is not None:
        names |= {base[i].get("name") for i in runtime_positions(base)}
    positions = [i for i, c in enumerate(items) if c.get("name") in names]
    if not positions and len(items) == 1 and not base:
        positions = [0]
    return positions


def sidecars_without_image(
    items: Sequence[Mapping[str, Any]], base: Sequence[Mapping[str, Any]] | None = None
) -> list[int]:
    """Positions of the sidecars in ``items`` that have no image and take none from a
    container of ``base`` (``spec.template``'s containers, for a role template) by name."""
    runtime = set(runtime_positions(items, base))
    base_names = {c.get("name") for c in base or ()}
    return [
        i
        for i, c in enumerate(items)
        if i not in runtime and c.get("image") is None and c.get("name") not in base_names
    ]
