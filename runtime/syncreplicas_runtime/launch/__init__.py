"""How a pod's process comes to life before it is a replica, in one place.

``python -m syncreplicas_runtime`` (``__main__.py``) calls :mod:`.entry`, which decides
from the environment the operator set how the replica starts. Each start mode is a module,
its pure rules beside it:

- :mod:`.plain`: this process becomes the replica and ends with it;
- :mod:`.supervisor`: warm restarts in the container (:mod:`.restartrules` decides each);
- :mod:`.spare`: a spare pod waiting to be handed a replica's identity (:mod:`.sparerules`);
- :mod:`.warmstart`: a fork server for local runs and tests,
  ``python -m syncreplicas_runtime.launch.warmstart SOCKET``.

The modes that keep TensorFlow imported ahead of the replica share :mod:`.preloaded`. This
package is the runtime's top floor: nothing below it imports it (an import-linter contract
in the root ``pyproject.toml``).
"""
