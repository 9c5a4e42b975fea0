"""The job the fault tests train through: the linear example (1 PS, a chief, 2 workers,
R = 2 with minReplicasToAggregate 1; backoffLimit 0, so any loss counted as a failure fails
it), each role placed by a node label (jobwatch.place_selector), every step slowed by a
delay read from a file, so that faults land while it trains and lifting the delay ends it
at once. The file sits in a directory of the machine that every node mounts (as a shared
volume would be), with the chief's checkpoints and PS 0's record of its updates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.cluster import kube
from tests.cluster.jobwatch import ROLES, place_selector

SHARED = "/var/lib/syncreplicas/shared"
DELAY_FILE = "step-delay-ms"
UPDATES_FILE = "updates"
SNAPSHOT_EVERY = 10
# The pace of every job that only has to be training while a test acts on it: each of its 3
# gradient replicas sleeps 100 ms before a step (R = 2: at most about 15 updates/s). A job of
# 1 PS, a chief and 2 workers takes 0.44 of a core at 100 ms (8.1 steps/s), 0.93 at 25 ms
# and 1.50 (up to 1.78, the whole machine) at none (bench/jobpace.py, CONTRIBUTING.md).
DELAY_MS = 100
# The pace of a job that trains for the whole of a test that only watches it (the
# dashboard's and the alerts' tests: maxSteps out of reach, the number of steps proves
# nothing there): fewer steps for as long as the test runs, and less CPU (bench/jobpace.py:
# 0.31 cores at 200 ms against 0.44 at 100; the CPU of a step grows as the steps thin out).
WATCHED_DELAY_MS = 300
STEP_DELAY_ENV = "SYNCREPLICAS_DEBUG_STEP_DELAY_MS"
# The job that a whole sequence of faults hits (manifest() below) goes four times slower,
# with a quarter of the steps: at most about 3.75 updates/s, so 3000 steps still take 13
# minutes however fast the machine, but once the last fault is over and the delay lifted,
# a quarter as many steps are left to run at full speed (each costs CPU however it is
# paced: 12000 steps at 100 ms left thousands for the end, minutes of both cores).
FAULT_DELAY_MS = 400
MAX_STEPS = 3000
CHECKPOINT_EVERY = 25  # a checkpoint every 7-10 s at that pace (the faults wait for a few)


def shared_dir(tmp_path: Path, delay_ms: int = FAULT_DELAY_MS) -> Path:
    """The shared directory (checkpoints inside), writable by the pods' user, the delay set
    (the fault pace: every job that reads its delay from here has it lifted at the end)."""
    shared = tmp_path / "shared"
    (shared / "checkpoints").mkdir(parents=True)
    for path in (shared, shared / "checkpoints"):
        path.chmod(0o777)
    (shared / DELAY_FILE).write_text(str(delay_ms))
    return shared


def step_delay(value: int | str) -> dict[str, str]:
    """The container variable that makes the runtime sleep before each step: ``value`` ms,
    or as many as the file ``@PATH`` says at each step."""
    return {"name": STEP_DELAY_ENV, "value": str(value)}


def paced_template(ms: int) -> dict[str, Any]:
    """A job's pod template whose runtime container sleeps ``ms`` before each step."""
    return {"spec": {"containers": [{"name": "syncreplicas", "env": [step_delay(ms)]}]}}


def delayed(container: dict[str, Any], shared: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``container`` reading its step delay from the shared directory, and the volume."""
    env = [e for e in container.get("env", []) if e["name"] != STEP_DELAY_ENV]
    env.append(step_delay(f"@{SHARED}/{DELAY_FILE}"))
    mounts = [*container.get("volumeMounts", []), {"name": "shared", "mountPath": SHARED}]
    volume = {"name": "shared", "hostPath": {"path": str(shared), "type": "Directory"}}
    return {**container, "env": env, "volumeMounts": mounts}, volume


def lift_delay(shared: Path) -> None:
    (shared / DELAY_FILE).write_text("0")


def manifest(name: str, shared: Path, max_steps: int = MAX_STEPS) -> dict[str, Any]:
    job = yaml.safe_load((kube.REPO / "examples" / "linear.yaml").read_text())
    job["metadata"]["name"] = name
    job["spec"].update({"workers": 2, "replicasToAggregate": 2, "parameterServers": 1,
                        "minReplicasToAggregate": 1})  # fmt: skip
    job["spec"]["training"].update(
        {"maxSteps": max_steps, "checkpointEverySteps": CHECKPOINT_EVERY,
         "snapshotEverySteps": SNAPSHOT_EVERY, "logEverySteps": 500,
         "evalEverySteps": 0, "checkpointDir": f"{SHARED}/checkpoints"}
    )
    job["spec"]["runPolicy"] = {"restartPolicy": "OnFailure", "backoffLimit": 0}
    container, volume = delayed({"name": "syncreplicas"}, shared)
    volumes = [volume]
    # PS 0 records every update (time, step, gradients) there too.
    ps = {**container, "env": [*container["env"], {"name": "SYNCREPLICAS_DEBUG_UPDATES_FILE",
                                                   "value": f"{SHARED}/{UPDATES_FILE}"}]}
    for role in ROLES:
        job["spec"][role] = {"template": {"spec": {
            "nodeSelector": place_selector(role), "containers": [ps if role == "ps" else container],
            "volumes": volumes,
        }}}  # fmt: skip
    return dict(job)
