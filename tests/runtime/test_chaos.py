"""Chaos: kill the chief (SIGKILL x5, SIGTERM x1), a worker, PS 1 and PS 0 during one run
(seeded: when, and which worker); and a chief SIGKILL with a backup replica, during which the
global step goes on.

Fixed seed, real processes. Every invariant is checked from the logs and from metrics
scraped during the run:
- the global step never goes back within a sync epoch, an epoch never starts below the last
  checkpoint, and a chief restart that finds the PS alive loses no step at all;
- a PS that comes back empty loses at most snapshotEverySteps global steps (the chief
  restores its in-memory snapshot, or a checkpoint when that is as fresh);
- the token queues never hold more than one step's tokens (plus initialTokens, here 0);
- a chief restart opens no sync epoch: the chief rejoins the running one and no worker's
  ``syncreplicas_sync_resets_total`` moves; only a PS loss opens one;
- after every chief return it trains again (hang guard; times are printed);
- the job reaches maxSteps and every last incarnation exits 0.
"""

from __future__ import annotations

import random
import re
import signal
import time
from pathlib import Path

import pytest

from tests.runtime.rtutil import StepDelay, linear_job, runtime_env
from tests.support.tfcluster import LocalCluster, metric_value, start_cluster

pytestmark = pytest.mark.slow

MAX_STEPS = 500
EVENTS = ["chief_kill", "chief_kill", "worker_kill", "chief_kill", "ps1_kill", "chief_term",
          "chief_kill", "ps_kill", "chief_kill"]
SNAPSHOT_EVERY = 10
TOKEN_BOUND = 3  # max(replicas, R) + initialTokens
HANG_GUARD = 120.0
# linear's 5 parameters as 5 variables: packing (on by default; packMinBytesPerPS 0 spreads
# even this tiny model) puts 3 in one PS variable on PS 0 and 2 in one on PS 1, so every
# kill, restore and snapshot goes through packed ones.
MODEL_ARGS = {"dim": 4, "variables": 5}
PACKED = "packing: 5 trainable variables in 2 packed PS variables (model on 2 of 2 PS)"

EPOCH_RE = re.compile(r"sync epoch ([0-9a-f]+): variables (\w+)[^,]*, global step (\d+)")
RESTORED_RE = re.compile(r"variables restored[^,]*, global step (\d+)")
STEP_RE = re.compile(r"global_step=(\d+) ")
CKPT_RE = re.compile(r"checkpoint at global step (\d+)|after writing model\.ckpt-(\d+)")
UP_RE = re.compile(r"started: .* at unix time ([\d.]+)")
GATE_RE = re.compile(r"gate open: sync epoch ([0-9a-f]+) .* at unix time ([\d.]+)")
JOIN_RE = re.compile(r"training in sync epoch ([0-9a-f]+) from global step \d+ at unix time "
                     r"([\d.]+)")


def worker_resets(cluster: LocalCluster, workers: int) -> dict[int, float]:
    """``syncreplicas_sync_resets_total`` of each worker training now (scraped, ready)."""
    out = {}
    for w in range(workers):
        text = cluster.try_metrics_text("worker", w)
        if text and metric_value(text, "syncreplicas_ready") == 1:
            out[w] = metric_value(text, "syncreplicas_sync_resets_total") or 0.0
    return out


class Watcher:
    """Scrapes the chief and PS 0 (the sync loop); remembers every token queue depth seen."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.depths: list[float] = []
        self.restarts_seen = 0.0

    def scrape(self) -> str | None:
        ps0 = self.cluster.try_metrics_text("ps", 0)
        depth = metric_value(ps0, "syncreplicas_token_queue_depth") if ps0 else None
        if depth is not None:
            self.depths.append(depth)
        text = self.cluster.try_metrics_text("chief", 0)
        if text:
            self.restarts_seen = max(self.restarts_seen, metric_value(
                text, "syncreplicas_chief_restarts_total") or 0)
        return text

    def wait_joins(self, count: int) -> None:
        """Until the chief has joined a sync epoch ``count`` times (every incarnation)."""
        deadline = time.monotonic() + HANG_GUARD
        while len(JOIN_RE.findall(self.cluster.log("chief", 0))) < count:
            self.scrape()
            assert time.monotonic() < deadline, self.cluster.logs()
            assert all(c is None for c in self.cluster.poll().values()), self.cluster.logs()
            time.sleep(0.2)

    def wait_steps(self, steps: int) -> None:
        """Let this chief process run ``steps`` more local steps."""
        deadline = time.monotonic() + HANG_GUARD
        start = None
        while True:
            text = self.scrape()
            local = metric_value(text, "syncreplicas_local_step") if text else None
            if local is not None:
                start = local if start is None else start
                if local >= start + steps:
                    return
            assert time.monotonic() < deadline, self.cluster.logs()
            time.sleep(0.05)


def check_invariants(chief_log: str) -> list[str]:
    """Walk the chief's log in order; returns the epoch starts (for the report)."""
    last_ckpt = 0
    last_step = 0
    epoch_steps: list[int] = []
    starts = []
    for line in chief_log.splitlines():
        if m := EPOCH_RE.search(line):
            how, step = m[2], int(m[3])
            starts.append(f"{how}@{step}")
            assert step >= last_ckpt, f"epoch started at {step} below checkpoint {last_ckpt}"
            if how == "kept":
                assert step >= last_step, f"a restart lost steps: {last_step} -> {step}"
            epoch_steps = [step]
            last_step = step
        elif m := STEP_RE.search(line):
            step = int(m[1])
            assert not epoch_steps or step >= epoch_steps[-1], f"step went back: {line}"
            epoch_steps.append(step)
            last_step = max(last_step, step)
        if m := CKPT_RE.search(line):
            last_ckpt = max(last_ckpt, int(m[1] or m[2]))
    return starts


# Seven process restarts, each importing TensorFlow (5 s idle, up to a minute on a busy
# 2-core machine): a generous hang guard, not a performance bound.
@pytest.mark.timeout(1500)
def test_chaos(tmp_path: Path) -> None:
    rng = random.Random(20261122)
    # R = replicas (no backup): updates wait while the chief is down, so the run outlasts
    # the seven restarts (with a backup the others would reach maxSteps meanwhile; that
    # case is test_a_killed_chief_costs_only_its_own_gradients).
    job = linear_job(replicasToAggregate=3, model__args=MODEL_ARGS,
                     training__maxSteps=MAX_STEPS,
                     training__checkpointDir=str(tmp_path / "ckpt"),
                     training__checkpointEverySteps=20, training__logEverySteps=10,
                     training__snapshotEverySteps=SNAPSHOT_EVERY, training__packMinBytesPerPS=0,
                     training__chiefLostTimeoutSeconds=240, training__startupTimeoutSeconds=240)
    env = {**runtime_env(), "SYNCREPLICAS_DEBUG_STEP_DELAY_MS": "30"}
    with start_cluster(job, workers=2, ps=2, workdir=tmp_path, env=env) as cluster:
        watch = Watcher(cluster)
        joins = 1
        ps1_lost: tuple[float, int] | None = None  # (global step before the kill, restores)
        watch.wait_joins(joins)
        watch.wait_steps(rng.randint(5, 15))
        unmoved = 0
        for event in EVENTS:
            before = worker_resets(cluster, 2)
            if event == "chief_kill":
                cluster.restart("chief", 0)  # SIGKILL, then start again with the same env
            elif event == "chief_term":
                cluster.kill("chief", 0, signal.SIGTERM)
                assert cluster.wait_one("chief", 0, timeout=60) == 143, cluster.logs()
                cluster.restart("chief", 0)
            elif event == "worker_kill":
                cluster.restart("worker", rng.randrange(2))
            elif event == "ps1_kill":  # PS 0 notices, opens a new epoch; the chief restores
                text = cluster.try_metrics_text("chief", 0)
                step = metric_value(text, "syncreplicas_global_step") if text else None
                assert step is not None, cluster.logs()
                ps1_lost = (step, len(RESTORED_RE.findall(cluster.log("chief", 0))))
                cluster.restart("ps", 1)
            elif event == "ps_kill":
                cluster.restart("ps", 0)  # the new PS 0 opens a new epoch; the chief restores
            if event != "worker_kill":
                joins += 1
            watch.wait_joins(joins)
            if event.startswith("chief"):
                # The restarted chief joined the running epoch: no worker was reset.
                after = worker_resets(cluster, 2)
                for w in set(before) & set(after):
                    assert after[w] == before[w], (event, before, after, cluster.logs())
                    unmoved += 1
            watch.wait_steps(rng.randint(3, 15))
            time.sleep(rng.uniform(0, 0.3))
        deadline = time.monotonic() + HANG_GUARD * 2
        while time.monotonic() < deadline and cluster.poll()[("chief", 0)] is None:
            watch.scrape()
            time.sleep(0.2)
        codes = cluster.wait(timeout=HANG_GUARD)
        logs = cluster.logs()
    assert set(codes.values()) == {0}, logs
    chief_log = cluster.log("chief", 0)
    assert f"finished at global step {MAX_STEPS}" in chief_log, logs
    assert "stopped by SIGTERM after writing model.ckpt-" in chief_log, logs
    # Packed in every incarnation (MODEL_ARGS).
    packing = [line for line in chief_log.splitlines() if "packing:" in line]
    assert packing and all(line.endswith(PACKED) for line in packing), packing
    starts = check_invariants(chief_log)
    assert len(starts) == 1 + len(EVENTS) - 1, starts  # every chief start and the PS loss
    assert sum(s.startswith("restored") for s in starts) == 2, starts  # after each PS loss
    # PS 1's loss lost at most snapshotEverySteps steps (checkpoints: every 20).
    assert ps1_lost is not None
    before, restores = ps1_lost
    restored = int(RESTORED_RE.findall(chief_log)[restores])
    assert restored >= before - SNAPSHOT_EVERY, (before, restored, starts)
    # Sync epochs are opened by PS 0 only: at its first start, after PS 1's loss (PS 0
    # notices) and after its own restart.
    assert len(GATE_RE.findall(cluster.log("ps", 0))) == 3, cluster.log("ps", 0)
    assert unmoved >= 6, unmoved  # both workers compared around most chief restarts
    assert watch.depths and max(watch.depths) <= TOKEN_BOUND, watch.depths
    assert watch.restarts_seen >= 1
    # Recovery: from each restarted chief's server being up to it training again.
    back = []
    up = None
    for line in chief_log.splitlines():
        if m := UP_RE.search(line):
            up = float(m[1])
        elif (m := JOIN_RE.search(line)) and up is not None:
            back.append(float(m[2]) - up)
            up = None
    back = back[1:]  # skip the first start
    assert len(back) == 6, back
    print(f"epoch starts: {starts}; PS 1 lost at ~{before:.0f}, restored {restored}; "
          f"restarted chief up -> training, s: "
          f"{[round(r, 2) for r in back]}; max token depth {max(watch.depths)}")
    assert max(back) < HANG_GUARD


@pytest.mark.timeout(900)
def test_a_killed_chief_costs_only_its_own_gradients(tmp_path: Path) -> None:
    """Chief + 3 workers, R = 3: the global step goes on while the chief is dead, and the
    restarted chief joins the running epoch (no worker is reset)."""
    # 100 ms steps until the chief is gone, 1 s steps while the restarted chief imports
    # TensorFlow (5-60 s), then full speed to maxSteps.
    max_steps = 300
    job = linear_job(replicasToAggregate=3, training__maxSteps=max_steps,
                     training__checkpointDir=str(tmp_path / "ckpt"),
                     training__checkpointEverySteps=20, training__logEverySteps=50)
    delay = StepDelay(tmp_path / "delay", 100)
    env = {**runtime_env(), **delay.env}

    def scrape() -> tuple[float | None, float | None, float | None]:
        """(worker 0's global step, R and live replicas from PS 0)."""
        w0, ps0 = cluster.try_metrics_text("worker", 0), cluster.try_metrics_text("ps", 0)
        return (metric_value(w0, "syncreplicas_global_step") if w0 else None,
                metric_value(ps0, "syncreplicas_replicas_to_aggregate") if ps0 else None,
                metric_value(ps0, "syncreplicas_live_replicas") if ps0 else None)

    def wait_for(what: str, check: object) -> tuple[float, float, float]:
        deadline = time.monotonic() + HANG_GUARD * 2
        while True:
            step, r, live = scrape()
            if step is not None and r is not None and live is not None and \
                    check(step, r, live):  # type: ignore[operator]
                return step, r, live
            assert time.monotonic() < deadline, f"waiting for {what}\n{cluster.logs()}"
            assert all(c is None for k, c in cluster.poll().items() if k != ("chief", 0)), \
                cluster.logs()
            time.sleep(0.1)

    with start_cluster(job, workers=3, ps=1, workdir=tmp_path, env=env) as cluster:
        wait_for("training", lambda s, r, n: s >= 30 and n == 4)
        resets = worker_resets(cluster, 3)
        assert resets == {0: 0, 1: 0, 2: 0}, resets
        cluster.kill("chief", 0)
        assert cluster.wait_one("chief", 0, timeout=30) is not None
        killed_step, _, _ = scrape()
        assert killed_step is not None
        # The chief is dead: three replicas still bring R = 3 gradients per update.
        gone_step, r, _ = wait_for("steps without the chief",
                                   lambda s, r, n: s >= killed_step + 30 and n == 3)
        assert r == 3, r
        advanced = gone_step - killed_step
        delay.set(1000)
        cluster.restart("chief", 0)
        wait_for("the chief back", lambda s, r, n: n == 4)
        deadline = time.monotonic() + HANG_GUARD
        while len(JOIN_RE.findall(cluster.log("chief", 0))) < 2:
            assert time.monotonic() < deadline, cluster.logs()
            time.sleep(0.2)
        delay.set(0)
        assert worker_resets(cluster, 3) == resets, cluster.logs()
        codes = cluster.wait(timeout=HANG_GUARD * 2)
        logs = cluster.logs()
    assert set(codes.values()) == {0}, logs
    chief = cluster.log("chief", 0)
    assert f"finished at global step {max_steps}" in chief, logs
    first, second = JOIN_RE.findall(chief)
    assert first[0] == second[0], (first, second)  # the same sync epoch
    assert "variables kept" in chief.split("start #2 of chief-0")[1], chief
    rejoined_at = int(re.findall(r"training in sync epoch \w+ from global step (\d+)",
                                 chief)[1])
    assert rejoined_at < max_steps, chief
    # Checkpoints resumed with the chief.
    after = [int(m[1]) for m in CKPT_RE.finditer(chief.split("start #2 of chief-0")[1]) if m[1]]
    assert after and min(after) >= rejoined_at, chief
    assert len(GATE_RE.findall(cluster.log("ps", 0))) == 1
    print(f"global step advanced by {advanced:.0f} before the chief was started again and "
          f"by {rejoined_at - killed_step:.0f} until it rejoined the running epoch (killed at "
          f"~{killed_step:.0f}, rejoined at {rejoined_at})")


@pytest.mark.timeout(600)
def test_workers_exit_retry_when_the_chief_never_returns(tmp_path: Path) -> None:
    job = linear_job(training__maxSteps=10**6, training__chiefLostTimeoutSeconds=8,
                     metrics={"port": 0})
    with start_cluster(job, workers=1, ps=1, workdir=tmp_path, env=runtime_env()) as cluster:
        deadline = time.monotonic() + HANG_GUARD * 2
        while "first step done" not in cluster.log("worker", 0):
            assert time.monotonic() < deadline and cluster.poll()[("worker", 0)] is None, \
                cluster.logs()
            time.sleep(0.2)
        cluster.kill("chief", 0)
        lost_at = time.monotonic()
        code = cluster.wait_one("worker", 0, timeout=HANG_GUARD)
        waited = time.monotonic() - lost_at
        logs = cluster.logs()
    assert code == 75, logs
    assert "syncreplicas: RETRY (75): no token and no new sync epoch for 8s" in logs
    assert 8 <= waited < HANG_GUARD
