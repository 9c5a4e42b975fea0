"""TensorFlow imported without the packages it and its Keras import only because they are
there.

``import tensorflow`` loads Keras 3's code at once (TensorFlow's ``__init__`` imports
``keras.src.optimizers``), and Keras imports scikit-learn for its scikit-learn wrappers
(``keras.src.wrappers``) and Matplotlib for its image gallery (``keras.src.visualization``)
whenever they are installed; TensorFlow's own legacy Keras imports SciPy to accept sparse
matrices in ``fit``. No replica uses any of them, and the runtime image has scikit-learn
and SciPy (the digits example reads its dataset from scikit-learn): about a third of every
replica's and spare's TensorFlow import (``bench/tfimport.py``). While TensorFlow is
imported here those are not found, so TensorFlow and Keras take them for absent (as when
they are not installed); afterwards they import as usual, for a model that uses them.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

DEFERRED = ("sklearn", "scipy", "matplotlib")


class _NotNow(importlib.abc.MetaPathFinder):
    """Finds DEFERRED's packages as missing."""

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:  # fmt: skip
        if fullname.partition(".")[0] in DEFERRED:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def import_tensorflow() -> ModuleType:
    """``tensorflow``, imported (once per process) without DEFERRED's packages."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    finder = _NotNow()
    sys.meta_path.insert(0, finder)
    try:
        import tensorflow
    finally:
        sys.meta_path.remove(finder)
    return tensorflow
