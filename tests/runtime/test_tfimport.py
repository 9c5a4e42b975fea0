"""The runtime's TensorFlow import leaves out what the pinned TensorFlow and Keras import
only because it is installed (scikit-learn, SciPy; Matplotlib where it is installed), and
those import as usual afterwards: in a fresh process, as every replica starts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("sklearn")

PROBE = """
import json, sys
from syncreplicas_runtime.process.tfimport import import_tensorflow
tf = import_tensorflow()
left_out = [m for m in ("sklearn", "scipy", "matplotlib") if m in sys.modules]
from keras.src.wrappers import fixes
import_tensorflow_again = import_tensorflow() is tf
from sklearn.datasets import load_digits
print(json.dumps({"loaded": left_out, "keras_saw_sklearn": fixes.sklearn is not None,
                  "again": import_tensorflow_again, "digits": len(load_digits().target),
                  "finders": [type(f).__name__ for f in sys.meta_path]}))
"""


@pytest.mark.timeout(300)
def test_tensorflow_is_imported_without_scikit_learn_which_imports_after() -> None:
    # A plain `import tensorflow` here imports scikit-learn through Keras' wrappers
    # (keras.src.wrappers.fixes: `import sklearn` if it can) and SciPy through TensorFlow's
    # legacy Keras (training_v1: `from scipy.sparse import issparse` if it can).
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=240, check=True)  # fmt: skip
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["loaded"] == [], found
    assert found["keras_saw_sklearn"] is False, found
    assert found["again"] is True and found["digits"] == 1797, found
    assert "_NotNow" not in found["finders"], found
