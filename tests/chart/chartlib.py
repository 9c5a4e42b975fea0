"""Run the real helm, promtool and Prometheus binaries for the chart tests.

One job: locate the tools and the chart, run them, and hand back parsed output. The tests
assert; nothing here decides what is right.
"""

from __future__ import annotations

import copy
import functools
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.support.groups import stop_group

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "syncreplicas"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
ALERTS_FILE = CHART / "files" / "alerts.yaml"
DASHBOARDS = sorted((CHART / "files" / "dashboards").glob("*.json"))
MONITORING_API = "monitoring.coreos.com/v1"
MONITORING_GROUP = "monitoring.coreos.com"
RELEASE = "srj"
NAMESPACE = "syncreplicas-system"


def tool(name: str) -> str:
    """Path of a tool: the repository's .tools/bin first (make tools), then PATH."""
    local = REPO / ".tools" / "bin" / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed: run `make tools`")
    return found


def run(
    args: list[str], *, timeout: float = 60, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure with check=True raise with its output in the message."""
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return proc


def helm_args(
    *,
    values: list[Path] | None = None,
    sets: list[str] | None = None,
    api_versions: list[str] | None = None,
) -> list[str]:
    args: list[str] = []
    for v in values or []:
        args += ["-f", str(v)]
    for s in sets or []:
        args += ["--set", s]
    for a in api_versions or []:
        args += ["--api-versions", a]
    return args


def helm_template(
    *,
    values: list[Path] | None = None,
    sets: list[str] | None = None,
    api_versions: list[str] | None = None,
    include_crds: bool = False,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    args = [tool("helm"), "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    if include_crds:
        args.append("--include-crds")
    return run(args + helm_args(values=values, sets=sets, api_versions=api_versions), check=check)


def render(
    *,
    values: list[Path] | None = None,
    sets: list[str] | None = None,
    api_versions: list[str] | None = None,
    include_crds: bool = False,
) -> list[dict[str, Any]]:
    """The objects `helm template` renders (empty documents dropped).

    Renders are cached per argument set: helm is the slow part, and the chart does not
    change during a test run. Callers get their own copy to modify.
    """
    key = (tuple(values or ()), tuple(sets or ()), tuple(api_versions or ()), include_crds)
    return copy.deepcopy(_render_cached(key))


@functools.cache
def _render_cached(
    key: tuple[tuple[Path, ...], tuple[str, ...], tuple[str, ...], bool],
) -> list[dict[str, Any]]:
    values, sets, api_versions, include_crds = key
    text = helm_template(
        values=list(values),
        sets=list(sets),
        api_versions=list(api_versions),
        include_crds=include_crds,
    ).stdout
    return [doc for doc in yaml.safe_load_all(text) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o.get("kind") == kind]


AGGREGATE_LABELS = tuple(f"rbac.authorization.k8s.io/aggregate-to-{role}"
                         for role in ("admin", "edit", "view"))


def is_user_role(obj: dict[str, Any]) -> bool:
    """One of the ClusterRoles aggregated into Kubernetes' admin, edit and view roles."""
    labels = obj.get("metadata", {}).get("labels") or {}
    return obj.get("kind") == "ClusterRole" and any(k in labels for k in AGGREGATE_LABELS)


def operator_objects(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Everything but the users' aggregated roles."""
    return [o for o in objects if not is_user_role(o)]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def alert_names(groups: list[dict[str, Any]]) -> list[str]:
    return [r["alert"] for g in groups for r in g["rules"] if "alert" in r]


def load_alert_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(ALERTS_FILE.read_text())["groups"]
    return groups


# --- Prometheus ------------------------------------------------------------------------------


class PrometheusAPI:
    """Prometheus's HTTP API at ``url``: a server this test runs, or one in the cluster."""

    def __init__(self, url: str) -> None:
        self.url = url

    def log(self) -> str:
        return ""

    def api(self, path: str, params: dict[str, str]) -> Any:
        """GET /api/v1/<path>; returns `data`, raises with Prometheus's error otherwise."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as err:
            body = json.loads(err.read() or b"{}")
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        result: list[dict[str, Any]] = self.api("query", params)["result"]
        return result

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api(
            "query_range",
            {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step}s"},
        )["result"]
        return result

    def targets(self) -> list[dict[str, Any]]:
        active: list[dict[str, Any]] = self.api("targets", {})["activeTargets"]
        return active


class Prometheus(PrometheusAPI):
    """A real Prometheus server on 127.0.0.1, its data in a temporary directory.

    Use as a context manager: the server is killed by PID (its own process group) on exit.
    """

    def __init__(
        self, config: dict[str, Any], workdir: Path, port: int, bin_dir: Path | None = None
    ) -> None:
        """``bin_dir``: where prometheus and promtool are (default: the tools on PATH)."""
        self.prometheus = str(bin_dir / "prometheus") if bin_dir else tool("prometheus")
        self.promtool = str(bin_dir / "promtool") if bin_dir else tool("promtool")
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = port
        super().__init__(f"http://127.0.0.1:{port}")
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = workdir / "prometheus.log"
        self.popen: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Prometheus:
        run([self.promtool, "check", "config", str(self.config_path)])
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                [
                    self.prometheus,
                    f"--config.file={self.config_path}",
                    f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--web.enable-lifecycle",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.popen is not None:
            stop_group(self.popen, timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.popen is not None
            if self.popen.poll() is not None:
                raise AssertionError(f"prometheus exited {self.popen.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready after {timeout}s:\n{self.log()}")

