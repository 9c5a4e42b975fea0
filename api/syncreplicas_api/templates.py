"""Pod templates in the spec: free-form PodTemplateSpecs of which only the containers are
checked (a name each, an image for every sidecar: ``containers`` says which are)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Final

from pydantic import Field

from . import containers
from .fields import ApiModel, OpenModel, Rule, Str

MAX_IMAGE_LENGTH: Final = 1024

_POD_SPEC = (
    "PodSpec. Only its containers are checked here; the rest is checked when the pods are "
    "created."
)


class Container(OpenModel):
    """A container (core/v1 Container)."""

    name: Str = Field(
        max_length=containers.MAX_CONTAINER_NAME_LENGTH,
        description="The container's name (a DNS label), unique in the pod.",
    )
    image: Str | None = Field(
        None,
        min_length=1,
        max_length=MAX_IMAGE_LENGTH,
        description="Its image. The runtime's container defaults to spec.image (else the "
        "operator's runtime image); a sidecar must set one.",
    )


def as_dicts(items: Sequence[Container]) -> list[dict[str, Any]]:
    """Containers as ``containers`` reads them."""
    return [{"name": c.name, "image": c.image} for c in items]


_NAMES = str(list(containers.RUNTIME_CONTAINER_NAMES))


def _sidecars_need_an_image(items: list[Container]) -> list[tuple[str, str]]:
    not_runtime = "not named syncreplicas or tensorflow, nor the template's only container"
    return [
        (f"[{i}].image", f"is required: container {items[i].name!r} is a sidecar ({not_runtime})")
        for i in containers.sidecars_without_image(as_dicts(items))
    ]


# CEL: the container `c` has an image or is named like the runtime's.
RUNTIME_OR_IMAGE = f"has(c.image) || c.name in {_NAMES}"
TEMPLATE_CONTAINERS_RULE: Rule[list[Container]] = Rule(
    f"size(self) == 1 || self.all(c, {RUNTIME_OR_IMAGE})",
    "spec.template.spec.containers: every sidecar needs an image (a container not named "
    "syncreplicas or tensorflow, in a template with more than one)",
    _sidecars_need_an_image,
    message_expression="'spec.template.spec.containers[%d].image is required: the container "
    "is a sidecar (not named syncreplicas or tensorflow, nor the only container of the "
    f"template)'.format([self.map(c, size(self) == 1 || {RUNTIME_OR_IMAGE}).indexOf(false)])",
)


class PodSpec(OpenModel):
    containers: Annotated[list[Container], TEMPLATE_CONTAINERS_RULE] | None = Field(
        None,
        max_length=containers.MAX_CONTAINERS,
        description="The runtime's container is every container named syncreplicas or "
        "tensorflow (Kubeflow TFJob's name), or the only container; it is named syncreplicas "
        "in the pods. Every other container is a sidecar, kept as it is, and needs an image.",
    )


class RolePodSpec(OpenModel):
    containers: list[Container] | None = Field(
        None,
        max_length=containers.MAX_CONTAINERS,
        description="Merged with spec.template's by name. The runtime's container is every "
        "container named syncreplicas, tensorflow or like the runtime's container of "
        "spec.template, or the only container when spec.template has none. Every other "
        "container is a sidecar and needs an image, unless it is named like a container of "
        "spec.template.",
    )


class PodTemplate(OpenModel):
    spec: PodSpec | None = Field(None, description=_POD_SPEC)


class RolePodTemplate(OpenModel):
    spec: RolePodSpec | None = Field(None, description=_POD_SPEC)


class RoleSpec(ApiModel):
    """``spec.ps``, ``spec.chief``, ``spec.worker``: one role's overrides."""

    template: RolePodTemplate | None = Field(
        None,
        description="PodTemplateSpec merged over spec.template (containers, volumes and env "
        "by name).",
    )
