"""Stable Keras layer names across graph rebuilds in one process.

Keras 3 names a layer (and so its variables, e.g. ``sequential/dense/kernel``) from a
process-global counter per prefix: the second ``Dense`` ever made is ``dense_1``. A replica
builds a new graph for every sync epoch (and once more at start-up to check the model), so
without a reset the second build asks the PS for ``sequential_1/dense_2/kernel``, which does
not exist there and is not in any checkpoint.

The counters live in ``keras.src.backend.common.global_state`` under ``object_name_uids``
(``keras.src.utils.naming.uniquify``). ``keras.backend.clear_session`` would also reset them,
but it throws away every other piece of Keras state and resets TensorFlow's default graph,
which is wrong inside a graph that is being built. So each build gets its own fresh counter
table, and the caller's table is put back afterwards: names depend on the model code only.
tests/runtime/test_keras_names.py fails if Keras stops naming this way.
"""

from __future__ import annotations

import collections
import contextlib
import sys
from collections.abc import Iterator

COUNTERS = "object_name_uids"


@contextlib.contextmanager
def stable_names() -> Iterator[None]:
    """Layers created inside are named as in a fresh process (``dense``, ``dense_1``, ...).

    Keras is not imported here (a model without Keras should not pay for its import): if
    the model imports it during the first build, the counters start empty anyway.
    """
    if "keras" not in sys.modules:
        yield
        return
    from keras.src.backend.common import global_state

    saved = global_state.get_global_attribute(COUNTERS)
    global_state.set_global_attribute(COUNTERS, collections.defaultdict(int))
    try:
        yield
    finally:
        global_state.set_global_attribute(COUNTERS, saved)
