"""The documentation's pictures of a job, taken as a user would see it: `make screenshots`.

A user's job (examples/digits-cnn.yaml as shipped, in a namespace of its own, with one
backup replica, elastic workers and TensorBoard; a small job of the same namespace in a
Kueue queue beside it) trains on the running test
cluster (`make cluster KUEUE=1 MONITORING=1`) for several minutes; then its chief pod is
deleted, it is resized from 2 to 3 workers, and its parameter server pod is deleted, each
after the last recovery has had a minute of training. After each moment Perses draws the
chart's dashboard over the whole run in Chromium (docs/images/dashboard-<moment>.png), and
at the end the chief's TensorBoard is drawn (docs/images/tensorboard.png). When each event
happened, and when the job was back, is written to docs/images/captions.txt, which
docs/monitoring.md's captions quote. Every panel must be drawn with data, as
tests/cluster/test_dashboard_browser.py asserts; a picture of a half-drawn page is not kept.

    make screenshots          # about 15 minutes on this machine, the cluster up
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cluster import boardlib, kube, perseslib  # noqa: E402
from tests.cluster.test_dashboard_browser import grafana_titles  # noqa: E402
from tests.cluster.test_failures import recovered, status  # noqa: E402
from tests.cluster.test_queues import namespace_queue, queued_job  # noqa: E402

NAMESPACE = "vision"
JOB = "digits-cnn"
IMAGES = ROOT / "docs" / "images"


def manifest() -> dict[str, Any]:
    """The shipped example, as a user would adapt it to run for a while and be resized."""
    job: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "digits-cnn.yaml").read_text())
    job["spec"].update({"workers": 2, "replicasToAggregate": 2, "parameterServers": 1,
                        "elasticPolicy": {"minWorkers": 1, "maxWorkers": 3},
                        "tensorboard": {}})  # fmt: skip
    job["spec"]["training"].update({"maxSteps": 1_000_000, "evalEverySteps": 200,
                                    "logEverySteps": 200, "snapshotEverySteps": 10})
    return job


def sweep() -> dict[str, Any]:
    """A small job of the same team in its Kueue queue, for the dashboard's queue row. (The
    big job stays outside the queue: scaled up beyond its admission, Kueue would admit it
    again at the new size, a stop and a start from its last checkpoint, which the default
    emptyDir loses with the chief's pod.)"""
    return queued_job("linear-sweep", None, None, 300)


def clock(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


class Run:
    def __init__(self, browser: perseslib.Browser, minutes: float) -> None:
        self.browser, self.minutes = browser, minutes
        self.base = perseslib.url()
        self.expected = grafana_titles()
        self.started = 0.0
        self.captions: list[str] = []

    def since(self) -> float:
        return time.time() - self.started

    def look(self) -> list[perseslib.Panel]:
        link = perseslib.dashboard_url(self.base, perseslib.DASHBOARD,
                                       {"namespace": NAMESPACE, "job": JOB},
                                       self.started - 30, time.time())  # fmt: skip
        return perseslib.settle(self.browser, link, len(self.expected))

    def picture(self, moment: str, caption: str) -> None:
        """Every panel drawn with data (looked at again until it is, 5 minutes at most);
        the page as dashboard-<moment>.png."""
        deadline = time.monotonic() + 300
        while True:
            bad = perseslib.problems(self.look(), self.expected)
            if not bad:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"{moment}: panels not drawn with data:\n" + "\n".join(bad))
            time.sleep(15)
        perseslib.screenshot(self.browser, IMAGES / f"dashboard-{moment}.png", self.look)
        self.captions.append(f"- `dashboard-{moment}.png` ({clock(self.since())} into the "
                             f"run): {caption}")
        print(self.captions[-1], flush=True)

    def wait(self, what: str, ok: Any, timeout: float) -> float:
        kube.eventually(what, ok, timeout, interval=1)
        return self.since()

    def replace(self, pod: str, replica: str) -> tuple[float, float]:
        """Delete ``pod``; when (into the run) it was deleted and its replica trained again."""
        at = time.time()
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at - 1))
        kube.kubectl("delete", "pod", pod, "-n", NAMESPACE, "--wait=false")
        last = kube.eventually(f"{replica}'s recovery is recorded",
                               lambda: recovered(NAMESPACE, replica, since, JOB), 300)  # fmt: skip
        back = datetime.fromisoformat(last["recoveredAt"]).timestamp()
        return at - self.started, back - self.started

    def go(self) -> None:
        kube.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
            [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
             *namespace_queue(NAMESPACE, "8", "16Gi")]))  # fmt: skip
        kube.kubectl("apply", "-n", NAMESPACE, "-f", "-",
                     input=yaml.safe_dump_all([manifest(), sweep()]))  # fmt: skip
        self.started = time.time()
        trained = self.wait("the job trains",
                            lambda: (status(NAMESPACE, JOB).get("globalStep") or 0) > 0, 600)
        print(f"training from {clock(trained)}", flush=True)
        time.sleep(max(0.0, self.minutes * 60 - self.since()))
        self.picture("steady", f"a 2-worker job (R=2 of 3 replicas: one backup), training "
                               f"steadily since {clock(trained)}.")
        at, back = self.replace(f"{JOB}-chief-0", "chief-0")
        time.sleep(60)
        self.picture("chief-deleted", f"the chief's pod deleted at {clock(at)}; the backup "
                                      f"kept the global step moving, and the new chief "
                                      f"trained again at {clock(back)}.")
        at = self.since()
        kube.kubectl("scale", f"srj/{JOB}", "--replicas=3", "-n", NAMESPACE)
        back = self.wait("3 workers train", lambda: status(NAMESPACE, JOB).get("workers") == 3, 300)
        up = (f'count(up{{namespace="{NAMESPACE}", syncreplicas_job="{JOB}", '
              'replica_type=~"chief|worker"} == 1) == 4')
        self.wait("Prometheus scrapes the chief and 3 workers",
                  lambda: perseslib.series(self.base, up) > 0, 120)  # fmt: skip
        time.sleep(60)
        self.picture("resized", f"`kubectl scale srj/{JOB} --replicas=3` at {clock(at)}; the "
                                f"operator reported 3 workers at {clock(back)}, Prometheus "
                                f"scraped 4 training replicas after.")
        at, back = self.replace(f"{JOB}-ps-0", "ps-0")
        time.sleep(60)
        self.picture("ps-deleted", f"the parameter server's pod deleted at {clock(at)}; its "
                                   f"replacement restored the chief's latest snapshot and "
                                   f"the job trained again at {clock(back)}.")
        self.write()

    def tensorboard(self) -> None:
        """The chief's TensorBoard (its own browser: one Playwright at a time)."""
        with boardlib.port_forward(NAMESPACE, f"{JOB}-tensorboard", 6006) as board:
            boardlib.loss_card(board, "tensorboard", images=IMAGES)
        self.captions.append(f"- `tensorboard.png` ({clock(self.since())} into the run): the "
                             "chief's TensorBoard, port-forwarded from its Service: the "
                             "summaries since the chief's replacement (the old pod's went "
                             "with its emptyDir).")
        self.write()

    def write(self) -> None:
        (IMAGES / "captions.txt").write_text(
            f"Job `{JOB}` in namespace `{NAMESPACE}` (examples/digits-cnn.yaml, 2 workers, "
            f"1 PS), one run of `make screenshots`, times from `kubectl apply`:\n\n"
            + "\n".join(self.captions) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=4.0,
                        help="steady training before the first event (default 4)")
    args = parser.parse_args()
    kube.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=120s",
                 timeout=150)  # fmt: skip
    try:
        with perseslib.chromium() as browser:
            run = Run(browser, args.minutes)
            run.go()
        run.tensorboard()
    finally:
        kube.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        kube.kubectl("delete", "clusterqueue", f"cq-{NAMESPACE}", "--wait=false", check=False)
    print(f"pictures and captions in {IMAGES}")


if __name__ == "__main__":
    main()
