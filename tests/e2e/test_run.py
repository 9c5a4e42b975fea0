"""`syncreplicas run` end to end: manifest -> operator's Pods -> real runtime processes.

Every test starts the real command in its own process group, with its own work directory,
and checks afterwards that no process of that run is left (found by the work directory in
each process's environment, so other runtime processes on the machine never count).
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SYNCREPLICAS = [sys.executable, "-m", "syncreplicas_operator.cli"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOTS = (
    "loss.png",
    "accuracy.png",
    "steps_per_second.png",
    "staleness.png",
    "token_queue.png",
    "replicas.png",
)

pytestmark = pytest.mark.slow


def env() -> dict[str, str]:
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}


def manifest(path: Path, name: str, run_policy: dict[str, Any] | None = None,
             **training: Any) -> Path:  # fmt: skip
    """examples/linear.yaml, smaller: a PS, the chief and one worker (R=2), renamed."""
    body = yaml.safe_load((ROOT / "examples/linear.yaml").read_text())
    body["metadata"]["name"] = name
    body["spec"]["workers"] = 1
    body["spec"]["training"].update(training)
    if run_policy is not None:
        body["spec"]["runPolicy"] = run_policy
    path.write_text(yaml.safe_dump(body))
    return path


def processes_of(workdir: Path) -> list[int]:
    """PIDs whose environment mentions ``workdir`` (the replicas of that run)."""
    needle = str(workdir).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "environ").read_bytes():
                found.append(int(entry.name))
    return found


def assert_no_process_left(workdir: Path) -> None:
    deadline = time.monotonic() + 10  # the kernel reaps zombies of a dead runner quickly
    while processes_of(workdir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_of(workdir) == [], "replica processes outlived `syncreplicas run`"


def run(args: list[str], workdir: Path, timeout: float,
        extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [*SYNCREPLICAS, "run", *args, "--workdir", str(workdir), "--plain"],
            env={**env(), **(extra_env or {})}, capture_output=True, text=True,
            timeout=timeout, cwd=ROOT, check=False,
        )
    finally:
        kill_leftovers(workdir)


def kill_leftovers(workdir: Path) -> None:
    for pid in processes_of(workdir):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def details(result: subprocess.CompletedProcess[str], workdir: Path) -> str:
    logs = "\n".join(
        f"----- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
        for p in sorted((workdir / "logs").glob("*.log"))
    )
    return f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}\n{logs}"


def assert_png(path: Path) -> None:
    import matplotlib.image
    from PIL import Image

    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE), f"{path.name} is not a PNG"
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.size[0] >= 300 and image.size[1] >= 200
    assert matplotlib.image.imread(path).ndim == 3


# --- the examples are valid for kubectl apply -------------------------------------------


def _crd_checker() -> Any:
    spec = importlib.util.spec_from_file_location("crd_checks", ROOT / "tests/unit/test_crd.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.crd_problems


@pytest.mark.parametrize("example", ["linear.yaml", "digits.yaml", "digits-cnn.yaml",
                                     "digits-cnn-finetune.yaml", "elastic.yaml",
                                     "port/port.yaml"])  # fmt: skip
def test_examples_are_valid_for_the_api_server_and_validate(example: str) -> None:
    path = ROOT / "examples" / example
    assert _crd_checker()(yaml.safe_load(path.read_text())) == []
    result = subprocess.run([*SYNCREPLICAS, "validate", str(path)], env=env(),
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("valid:")


def test_digits_example_shape() -> None:
    spec = yaml.safe_load((ROOT / "examples/digits.yaml").read_text())["spec"]
    assert (spec["replicasToAggregate"], spec["workers"], spec["parameterServers"]) == (3, 3, 2)


# --- one code path: what render prints is what run starts -------------------------------


def _compare_with_render(pods: list[dict[str, Any]], started: dict[str, dict[str, str]],
                         argvs: dict[str, list[str]], workdir: Path) -> None:
    """Each started process has its Pod's command and env; only the local parts differ."""
    assert sorted(started) == sorted(
        f"{p['metadata']['labels']['syncreplicas.io/replica-type']}-"
        f"{p['metadata']['labels']['syncreplicas.io/replica-index']}" for p in pods
    )
    ports: set[str] = set()
    for pod in pods:
        labels = pod["metadata"]["labels"]
        key = f"{labels['syncreplicas.io/replica-type']}-{labels['syncreplicas.io/replica-index']}"
        (container,) = [c for c in pod["spec"]["containers"] if c["name"] == "syncreplicas"]
        argv = argvs[key]
        assert Path(argv[0]).name.startswith("python")
        assert argv[1:] == container["command"][1:] + container.get("args", [])
        rendered = {e["name"]: e["value"] for e in container["env"]}
        env_ = started[key]
        for name, value in rendered.items():
            if name.startswith("SYNCREPLICAS_WARM_RESTART"):
                # The runner restarts its processes itself (local/processes.py).
                assert name not in env_, f"{key}: {name} passed to a local process"
                continue
            assert name in env_, f"{key}: {name} from the rendered Pod was not passed"
            if name == "TF_CONFIG":
                want, got = json.loads(value), json.loads(env_[name])
                assert got["task"] == want["task"]
                assert {t: len(a) for t, a in got["cluster"].items()} == {
                    t: len(a) for t, a in want["cluster"].items()}
                for t, addresses in got["cluster"].items():
                    if isinstance(addresses, dict):  # sparse: the same task indices
                        assert set(addresses) == set(want["cluster"][t])
                        addresses = list(addresses.values())
                    assert all(a.startswith("127.0.0.1:") for a in addresses)
                    ports.update(addresses)
            elif name == "SYNCREPLICAS_JOB":
                want, got = json.loads(value), json.loads(env_[name])
                assert got["training"].pop("checkpointDir") == str(workdir / "checkpoints")
                want["training"].pop("checkpointDir")
                assert got == want
            else:
                assert env_[name] == value, f"{key}: {name} differs from the rendered Pod"
        assert env_["SYNCREPLICAS_METRICS_PORT"].isdigit()
    assert len(ports) == len(pods), "every replica has its own gRPC port"


def _render(path: Path) -> list[dict[str, Any]]:
    result = subprocess.run([*SYNCREPLICAS, "render", str(path)], env=env(),
                            capture_output=True, text=True, timeout=60, check=True)
    return [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "Pod"]


def test_dry_run_starts_exactly_the_rendered_pods(tmp_path: Path) -> None:
    path = ROOT / "examples/digits.yaml"
    result = run([str(path), "--dry-run"], tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    planned = json.loads(result.stdout)
    _compare_with_render(
        _render(path),
        {p["name"]: p["env"] for p in planned},
        {p["name"]: p["argv"] for p in planned},
        tmp_path,
    )
    assert processes_of(tmp_path) == []


# --- a whole run ---------------------------------------------------------------------------


# The replicas that train: only they know (and so export) a global step; a PS does not.
TRAINING_REPLICAS = (("chief", 0), ("worker", 0), ("worker", 1))


def _step_series(replica_type: str, index: int) -> str:
    return (f'syncreplicas_global_step{{namespace="default",replica_index="{index}",'
            f'replica_type="{replica_type}",syncreplicas_job="linear"}}')


def _scrape_aggregated(lines: list[str], runner: subprocess.Popen[str]) -> str:
    """The aggregated endpoint's text once it shows every training replica's global step."""
    deadline = time.monotonic() + 150
    url = None
    while time.monotonic() < deadline and runner.poll() is None:
        url = url or next((line.split()[-1] for line in lines
                           if line.startswith("metrics of all replicas:")), None)
        if url:
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(url, timeout=5) as response:
                    text = response.read().decode()
                if all(_step_series(*replica) in text for replica in TRAINING_REPLICAS):
                    return text
        time.sleep(0.5)
    raise AssertionError(f"the aggregated endpoint never showed every replica: {lines}")


def test_linear_example_runs_to_completion_with_a_report(tmp_path: Path) -> None:
    workdir, report = tmp_path / "work", tmp_path / "report"
    runner = subprocess.Popen(
        [*SYNCREPLICAS, "run", str(ROOT / "examples/linear.yaml"), "--report", str(report),
         "--workdir", str(workdir), "--plain", "--metrics-port", "0"],
        env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(runner.stdout or ()), daemon=True)
    reader.start()
    try:
        text = _scrape_aggregated(lines, runner)
        runner.wait(timeout=240)
        reader.join(timeout=10)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
        kill_leftovers(workdir)
    output = "".join(lines)
    assert runner.returncode == 0, output
    assert_no_process_left(workdir)
    # Every replica's series, labelled by replica, in text a Prometheus accepts.
    assert 'syncreplicas_local_replica_up{namespace="default"' in text
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                               capture_output=True, timeout=60, check=False)
        assert "error" not in (check.stdout + check.stderr).lower(), check.stdout + check.stderr

    summary = json.loads((report / "summary.json").read_text())
    max_steps = yaml.safe_load((ROOT / "examples/linear.yaml").read_text())[
        "spec"]["training"]["maxSteps"]
    assert summary["outcome"] == "succeeded"
    assert summary["exit_code"] == 0
    assert summary["final_global_step"] >= max_steps
    assert summary["checkpoint_step"] >= max_steps
    assert summary["loss"] is not None and summary["loss"] < 1.0
    assert summary["eval_metric"] == "mse" and summary["eval_value"] is not None
    assert summary["restarts_total"] == 0
    assert summary["steps_per_second"] and summary["steps_per_second"] > 0
    assert summary["gradients_pushed"] > 0
    assert set(summary["exit_codes"]) == {"ps-0", "chief-0", "worker-0", "worker-1"}
    assert summary["exit_codes"]["chief-0"] == [0]
    for name in PLOTS:
        assert_png(report / name)
    assert "succeeded" in output
    # The chief's TensorBoard summaries, where the run's last lines say (as TensorBoard
    # reads them: the loss up to maxSteps, the final evaluation under eval/).
    checkpoints = workdir / "checkpoints"
    assert f"TensorBoard summaries: tensorboard --logdir {checkpoints}" in output, output
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = EventAccumulator(str(checkpoints))
    board.Reload()
    assert board.Scalars("loss")[-1].step >= max_steps
    evals = EventAccumulator(str(checkpoints / "eval"))
    evals.Reload()
    assert [e.step for e in evals.Scalars("mse")][-1] >= max_steps
    # The SavedModel of the last checkpoint, named by the run's last lines and its summary.
    export = checkpoints / "export" / str(summary["final_global_step"])
    assert (export / "saved_model.pb").is_file()
    assert f"SavedModel: {export} (global step {summary['final_global_step']})" in output
    assert (summary["export_path"], summary["export_step"]) == (str(export),
                                                                summary["final_global_step"])


def test_digits_cnn_example_reaches_its_accuracy(tmp_path: Path) -> None:
    """examples/digits-cnn.yaml (Keras layers, tf.data) with a chief and one worker (R=2) and
    fewer steps, to keep the run short: still >= 0.97 held-out accuracy."""
    body = yaml.safe_load((ROOT / "examples/digits-cnn.yaml").read_text())
    body["spec"].update(workers=1, replicasToAggregate=2)
    body["spec"]["training"].update(maxSteps=250, checkpointEverySteps=250)
    path = tmp_path / "digits-cnn.yaml"
    path.write_text(yaml.safe_dump(body))
    workdir, report = tmp_path / "work", tmp_path / "report"
    result = run([str(path), "--report", str(report), "--metrics-port", "0"], workdir,
                 timeout=600)
    assert result.returncode == 0, details(result, workdir)
    assert_no_process_left(workdir)
    summary = json.loads((report / "summary.json").read_text())
    assert summary["outcome"] == "succeeded" and summary["final_global_step"] >= 250
    assert summary["eval_metric"] == "accuracy", summary
    assert summary["eval_value"] >= 0.97, summary
    fine_tune_from(workdir / "checkpoints", tmp_path)


def fine_tune_from(pretrained: Path, tmp_path: Path) -> None:
    """examples/digits-cnn-finetune.yaml, pointed at a finished digits-cnn run's checkpoints
    as its comment says: it takes the convolutions and the hidden layer from there (and
    nothing else) and counts its own steps from 0. Its first loss is already a trained
    network's and its first evaluation past 0.97, where the same job started cold had
    1.521 and 0.891 (measured once, 2026-12-01: loss at step 25, accuracy at step 50)."""
    text = (ROOT / "examples/digits-cnn-finetune.yaml").read_text()
    body = yaml.safe_load(text.replace("/var/lib/syncreplicas/pretrained", str(pretrained)))
    body["spec"].update(workers=1, replicasToAggregate=2)
    path = tmp_path / "finetune.yaml"
    path.write_text(yaml.safe_dump(body))
    workdir, report = tmp_path / "finetune", tmp_path / "finetune-report"
    result = run([str(path), "--report", str(report), "--metrics-port", "0"], workdir,
                 timeout=600)  # fmt: skip
    assert result.returncode == 0, details(result, workdir)
    chief = (workdir / "logs" / "chief-0.log").read_text()
    assert f"initialized; 6 variables warm-started from {pretrained}/model.ckpt-250" in chief, \
        chief[-3000:]  # fmt: skip
    summary = json.loads((report / "summary.json").read_text())
    steps = body["spec"]["training"]["maxSteps"]
    assert summary["outcome"] == "succeeded" and summary["final_global_step"] == steps
    assert summary["eval_value"] >= 0.97, summary
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = EventAccumulator(str(workdir / "checkpoints"))
    board.Reload()
    first = board.Scalars("loss")[0]
    assert first.step == 25 and first.value < 0.1, board.Scalars("loss")
    evals = EventAccumulator(str(workdir / "checkpoints" / "eval"))
    evals.Reload()
    first_eval = evals.Scalars("accuracy")[0]
    assert first_eval.step == 50 and first_eval.value >= 0.97, evals.Scalars("accuracy")
    # Its best export by accuracy (the first evaluation's at least), as the report says.
    best = Path(summary["best_export_path"])
    assert best.parent == workdir / "checkpoints" / "export" / "best", summary
    saved = json.loads((best / "eval.json").read_text())
    assert saved["globalStep"] == summary["best_export_step"] >= 50, saved
    assert saved["metrics"]["accuracy"] >= first_eval.value - 1e-6, saved
    assert f"best SavedModel: {best} (global step {saved['globalStep']})" in result.stdout
    # Its schedule's rate at every logged step is the closed form at that step.
    from syncreplicas_api.schedules import LearningRateSchedule, rate_at

    from tests.runtime.rtutil import logged_rates

    training = body["spec"]["training"]
    schedule = LearningRateSchedule.model_validate(training["learningRateSchedule"])
    rates = logged_rates(chief)
    assert [step for step, _ in rates] == [25, 50, 75, 100], chief[-3000:]
    for step, logged in rates:
        assert logged == pytest.approx(rate_at(training["learningRate"], schedule, step),
                                       rel=1e-5), rates  # fmt: skip


# --- Ctrl-C, then resume ------------------------------------------------------------------


def _checkpoint_step(workdir: Path) -> int:
    try:
        text = (workdir / "checkpoints" / "checkpoint").read_text()
    except OSError:
        return 0
    line = next((x for x in text.splitlines() if x.startswith("model_checkpoint_path")), "")
    digits = line.rstrip('"').rsplit("-", 1)[-1]
    return int(digits) if digits.isdigit() else 0


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_ctrl_c_stops_everything_keeps_a_checkpoint_and_the_next_run_resumes(
    tmp_path: Path,
) -> None:
    workdir = tmp_path / "work"
    # Each replica a process of its own (no warm-start fork, whose /proc environ would be
    # the fork server's): what it was started with is read from /proc below.
    long_run = manifest(tmp_path / "long.yaml", "resume", {"warmRestarts": False},
                        maxSteps=1_000_000, checkpointEverySteps=20)
    runner = subprocess.Popen(
        [*SYNCREPLICAS, "run", str(long_run), "--workdir", str(workdir), "--plain"],
        env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 150
        while _checkpoint_step(workdir) < 20 and time.monotonic() < deadline:
            assert runner.poll() is None, runner.communicate()[0]
            time.sleep(0.5)
        assert _checkpoint_step(workdir) >= 20, "no checkpoint written in time"
        # While it runs: the processes are exactly the rendered Pods (one code path).
        started = {}
        for pid in processes_of(workdir):
            with contextlib.suppress(OSError):
                environ = _environ(pid)
                task = json.loads(environ["TF_CONFIG"])["task"]
                started[f"{task['type']}-{task['index']}"] = (environ, pid)
        argvs = {
            key: Path(f"/proc/{pid}/cmdline").read_bytes().decode().rstrip("\0").split("\0")
            for key, (_, pid) in started.items()
        }
        _compare_with_render(_render(long_run), {k: e for k, (e, _) in started.items()},
                             argvs, workdir)
        runner.send_signal(signal.SIGINT)
        output, _ = runner.communicate(timeout=120)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
        kill_leftovers(workdir)
    assert runner.returncode == 130, output
    assert "interrupted" in output
    assert_no_process_left(workdir)
    stopped_at = _checkpoint_step(workdir)
    assert stopped_at >= 20, output

    # The same job again, now to a near end: it starts from the checkpoint, not from 0.
    short = manifest(tmp_path / "short.yaml", "resume", maxSteps=stopped_at + 30,
                     checkpointEverySteps=20)
    report = tmp_path / "report"
    result = run([str(short), "--report", str(report)], workdir, timeout=180)
    assert result.returncode == 0, details(result, workdir)
    assert f"resuming from the checkpoint at global step {stopped_at}" in result.stdout
    summary = json.loads((report / "summary.json").read_text())
    assert summary["resumed_from_step"] == stopped_at
    assert summary["first_global_step_seen"] >= stopped_at, summary
    assert summary["final_global_step"] >= stopped_at + 30
    assert_no_process_left(workdir)


# --- chaos ---------------------------------------------------------------------------------


def test_chaos_kills_the_chief_twice_and_the_run_still_finishes(tmp_path: Path) -> None:
    workdir, report = tmp_path / "work", tmp_path / "report"
    path = manifest(tmp_path / "chaos.yaml", "chaos", maxSteps=240, checkpointEverySteps=20)
    # Kills at seeded steps 69 and 118 of 240: room to recover and finish after each.
    chaos = "chief:2,seed=5,window=0.1-0.5"
    result = run([str(path), "--chaos", chaos, "--report", str(report)], workdir, timeout=300)
    assert result.returncode == 0, details(result, workdir)
    summary = json.loads((report / "summary.json").read_text())
    kills = [k for k in summary["chaos"] if k["replica"] == "chief-0"]
    assert len(kills) == 2, summary["chaos"]
    assert all(k["signal"] == "KILL" for k in kills)
    # Two SIGKILLs (137), then the end; any other transient exit is restarted by policy.
    chief_exits = summary["exit_codes"]["chief-0"]
    assert chief_exits.count(137) == 2 and chief_exits[-1] == 0, chief_exits
    assert summary["chief_restarts"] == len(chief_exits) - 1
    assert summary["outcome"] == "succeeded"
    assert summary["final_global_step"] >= 240
    assert all(k["resumed"] for k in kills), summary["chaos"]
    assert "chaos: SIGKILL chief-0" in result.stdout
    # Each start of the chief had a larger incarnation than the last (the runner's own
    # record in its log), and PS 0 fenced none of them out: no process exited FENCED (77).
    chief_log = (workdir / "logs" / "chief-0.log").read_text()
    incarnations = [int(x) for x in re.findall(
        r"^--- syncreplicas run: start of chief-0 .*incarnation (\d+)\) ---$", chief_log,
        re.MULTILINE)]
    assert len(incarnations) == len(chief_exits), incarnations
    assert all(a < b for a, b in itertools.pairwise(incarnations)), incarnations
    assert not any(77 in codes for codes in summary["exit_codes"].values()), summary
    # Every start was forked from the run's warm-start server: TensorFlow was not imported
    # again (runPolicy.warmRestarts, the default). (A kill may land on a chief so new that
    # it said nothing yet: a restart is that quick.)
    imports = re.findall(r"started: tensorflow \S+ imported in ([\d.]+)s", chief_log)
    assert len(imports) >= 2 and all(float(t) < 1.0 for t in imports), imports
    assert_no_process_left(workdir)


# --- resize ---------------------------------------------------------------------------------


def test_resize_scales_the_workers_up_and_down_and_the_run_finishes(tmp_path: Path) -> None:
    """examples/elastic.yaml (2 workers, elasticPolicy 1..4) scaled to 4, then to 1, with 20 ms
    steps so that both resizes land while it trains."""
    workdir, report = tmp_path / "work", tmp_path / "report"
    body = yaml.safe_load((ROOT / "examples/elastic.yaml").read_text())
    body["spec"]["training"].update(maxSteps=1000, evalEverySteps=500)
    path = tmp_path / "elastic.yaml"
    path.write_text(yaml.safe_dump(body))
    result = run([str(path), "--resize", "50:4,500:1", "--report", str(report)], workdir,
                 timeout=600, extra_env={"SYNCREPLICAS_DEBUG_STEP_DELAY_MS": "20"})
    assert result.returncode == 0, details(result, workdir)
    summary = json.loads((report / "summary.json").read_text())
    assert summary["outcome"] == "succeeded" and summary["final_global_step"] >= 1000
    resizes = summary["resizes"]
    assert [(r["workers_from"], r["workers_to"]) for r in resizes] == [(2, 4), (4, 1)], resizes
    assert resizes[0]["replicas"] == ["worker-2", "worker-3"], resizes
    assert sorted(resizes[1]["replicas"]) == ["worker-1", "worker-2", "worker-3"], resizes
    assert all(r["done_after_seconds"] is not None for r in resizes), resizes
    assert resizes[1]["step_at_resize"] >= 500
    # Nobody failed and nobody was restarted: the workers scaled away left with exit 0.
    assert summary["restarts_total"] == 0
    codes = summary["exit_codes"]
    assert all(codes[f"worker-{i}"] == [0] for i in range(4)), codes
    assert codes["chief-0"] == [0] and codes["ps-0"] == [0], codes
    assert "resize: workers 2 -> 4 at step" in result.stdout
    assert "every new worker training after" in result.stdout
    assert "resize: workers 4 -> 1 at step" in result.stdout
    for i in (1, 2, 3):
        assert "left the job" in (workdir / "logs" / f"worker-{i}.log").read_text()
    for name in PLOTS:
        assert_png(report / name)
    assert_no_process_left(workdir)


# --- clear errors before anything starts ----------------------------------------------------


def test_errors_are_clear_and_nothing_starts(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    body = yaml.safe_load((ROOT / "examples/linear.yaml").read_text())
    body["spec"]["replicasToAggregate"] = 0
    bad.write_text(yaml.safe_dump(body))
    result = run([str(bad)], tmp_path / "w1", timeout=60)
    assert result.returncode == 2
    assert "spec.replicasToAggregate: must be >= 1" in result.stderr

    missing = tmp_path / "missing.yaml"
    body = yaml.safe_load((ROOT / "examples/linear.yaml").read_text())
    body["spec"]["model"]["entrypoint"] = "no_such_package.models:build"
    missing.write_text(yaml.safe_dump(body))
    result = run([str(missing)], tmp_path / "w2", timeout=120)
    assert result.returncode == 65, result.stderr
    # The runtime's own loader checks the model (python -m syncreplicas_runtime.model).
    assert "model.entrypoint 'no_such_package.models:build': cannot import" in result.stderr
    assert "ModuleNotFoundError" in result.stderr
    assert not (tmp_path / "w2" / "logs").exists() or not any((tmp_path / "w2" / "logs").iterdir())

    with contextlib.closing(__import__("socket").socket()) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run([str(ROOT / "examples/linear.yaml"), "--metrics-port", str(port)],
                     tmp_path / "w3", timeout=120)
    assert result.returncode == 2
    assert f"--metrics-port {port}: cannot bind" in result.stderr
    assert processes_of(tmp_path) == []

    result = run([str(ROOT / "examples/linear.yaml"), "--chaos", "boss:1"], tmp_path / "w4",
                 timeout=60)
    assert result.returncode == 2 and "--chaos: 'boss:1'" in result.stderr

    result = run([str(ROOT / "examples/elastic.yaml"), "--resize", "100:9"], tmp_path / "w5",
                 timeout=60)
    assert result.returncode == 2, result.stderr
    assert ("--resize: '100:9': spec.workers must be within spec.elasticPolicy "
            "[minWorkers 1, maxWorkers 4], got 9") in result.stderr
    result = run([str(ROOT / "examples/linear.yaml"), "--resize", "100:3"], tmp_path / "w6",
                 timeout=60)
    assert result.returncode == 2 and "spec.elasticPolicy is not set" in result.stderr

    suspended = tmp_path / "suspended.yaml"
    body = yaml.safe_load((ROOT / "examples/linear.yaml").read_text())
    body["spec"]["runPolicy"]["suspend"] = True
    suspended.write_text(yaml.safe_dump(body))
    result = run([str(suspended)], tmp_path / "w5", timeout=60)
    assert result.returncode == 2 and "is suspended" in result.stderr
