"""``spec.tensorboard``: TensorBoard beside the chief, serving the summaries it writes.

The chief writes its TensorBoard summaries into ``training.checkpointDir``
(``training.summaryEverySteps``; its evaluations under ``eval/``). With ``tensorboard``
set, the chief's pod runs TensorBoard next to the runtime, as a native sidecar (an init
container that keeps running, so it neither delays the runtime nor keeps the pod up after
training ends), reading that directory through the same volume, read-only; the Service
``<job>-tensorboard`` selects it, and ``kubectl port-forward svc/<job>-tensorboard <port>``
opens it. The job's NetworkPolicy admits the port from pods of the job's namespace.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import Field

from . import resource
from .fields import ApiModel, Immutable, Int32, port_is_not

PORT: Final = 6006


class TensorBoard(ApiModel):
    """``spec.tensorboard``: TensorBoard in the chief's pod, on the chief's summaries."""

    cel_rules = (port_is_not(resource.TF_PORT, "tensorboard", "the gRPC port"),)
    port: Annotated[Int32, Immutable()] = Field(
        PORT,
        ge=1,
        le=resource.MAX_PORT,
        description="TensorBoard's port (container port 'tensorboard', and the Service "
        "<job>-tensorboard's). Immutable.",
    )
