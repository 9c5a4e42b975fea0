"""The optimizer's own settings in ``spec.training``: which optimizer each applies to, and
its value when the manifest leaves it out (the TensorFlow optimizers' defaults, but
momentum's 0.9, the rate this product always used).

A setting given for an optimizer that has no such setting is refused by name (a CEL rule in
the CRD, the same ``Rule`` in Python) rather than ignored.
"""

from __future__ import annotations

from typing import Any, Final

from .enums import Optimizer
from .fields import only_with

# Setting (manifest name, Python name) -> the optimizers it applies to.
APPLIES_TO: Final = {
    ("momentum", "momentum"): (Optimizer.MOMENTUM, Optimizer.RMSPROP),
    ("nesterov", "nesterov"): (Optimizer.MOMENTUM,),
    ("beta1", "beta1"): (Optimizer.ADAM,),
    ("beta2", "beta2"): (Optimizer.ADAM,),
    ("epsilon", "epsilon"): (Optimizer.ADAM, Optimizer.RMSPROP),
}
# The value of a setting left out, per optimizer.
DEFAULTS: Final = {
    (Optimizer.MOMENTUM, "momentum"): 0.9,
    (Optimizer.RMSPROP, "momentum"): 0.0,
    (Optimizer.MOMENTUM, "nesterov"): False,
    (Optimizer.ADAM, "beta1"): 0.9,
    (Optimizer.ADAM, "beta2"): 0.999,
    (Optimizer.ADAM, "epsilon"): 1e-8,
    (Optimizer.RMSPROP, "epsilon"): 1e-10,
}


def setting(training: Any, name: str) -> Any:
    """The value of ``name`` for ``training.optimizer``: as written, or its default."""
    value = getattr(training, name)
    return DEFAULTS[(training.optimizer, name)] if value is None else value


# The default optimizer (sgd) has none of these settings.
RULES: Final = tuple(only_with(field, attribute, "optimizer", optimizers, "training")
                     for (field, attribute), optimizers in APPLIES_TO.items())
