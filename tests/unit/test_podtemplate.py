"""Which containers of a pod template carry the runtime, which are sidecars without an
image, and how a role's template merges over spec.template: tables over pure code."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from syncreplicas_operator.core import podtemplate


def named(*names: str, image: str | None = None) -> list[dict[str, Any]]:
    return [{"name": n, **({"image": image} if image else {})} for n in names]


@pytest.mark.parametrize(
    ("base", "override", "merged"),
    [
        ({}, {}, {}),
        ({"a": 1}, {"b": 2}, {"a": 1, "b": 2}),
        ({"a": {"x": 1, "y": 2}}, {"a": {"y": 3}}, {"a": {"x": 1, "y": 3}}),
        ({"args": ["a"]}, {"args": ["b"]}, {"args": ["b"]}),
        (
            {"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}]}]},
            {"containers": [{"name": "c", "env": [{"name": "B", "value": "2"}]}, {"name": "d"}]},
            {"containers": [
                {"name": "c", "image": "i",
                 "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                {"name": "d"}]},
        ),
        (
            {"volumeMounts": [{"name": "a", "mountPath": "/x"}]},
            {"volumeMounts": [{"name": "b", "mountPath": "/x"}]},
            {"volumeMounts": [{"name": "b", "mountPath": "/x"}]},
        ),
        ({"a": {"x": 1}}, {"a": None}, {"a": None}),
    ],
    ids=["empty", "keys", "nested", "plain-list", "containers-by-name", "mounts-by-path", "null"],
)  # fmt: skip
def test_merge_templates(
    base: dict[str, Any], override: dict[str, Any], merged: dict[str, Any]
) -> None:
    before = (copy.deepcopy(base), copy.deepcopy(override))
    assert podtemplate.merge_templates(base, override) == merged
    assert (base, override) == before


# (containers, spec.template's containers when these are a role's, runtime positions,
#  positions of sidecars without an image)
RULES = [
    pytest.param([], None, [], [], id="none"),
    pytest.param(named("syncreplicas"), None, [0], [], id="named-syncreplicas"),
    pytest.param(named("tensorflow"), None, [0], [], id="named-tensorflow"),
    pytest.param(named("trainer"), None, [0], [], id="only-container"),
    pytest.param(named("trainer", "side"), None, [], [0, 1], id="two-unnamed"),
    pytest.param(named("tensorflow") + named("side", image="s:1"), None, [0], [],
                 id="sidecar-with-image"),
    pytest.param(named("tensorflow", "side"), None, [0], [1], id="sidecar-without-image"),
    pytest.param(named("syncreplicas", "tensorflow"), None, [0, 1], [], id="both-names"),
    # A role's template over spec.template's containers.
    pytest.param(named("main"), [], [0], [], id="role-only-container-no-base"),
    pytest.param(named("main"), named("tensorflow"), [], [0], id="role-unknown-name"),
    pytest.param(named("trainer"), named("trainer"), [0], [], id="role-names-base-runtime"),
    pytest.param(named("tensorflow"), named("trainer"), [0], [], id="role-tensorflow"),
    pytest.param(named("log"), named("syncreplicas") + named("log", image="l:1"), [], [],
                 id="role-overrides-base-sidecar"),
    pytest.param(named("trainer", "side"), [], [], [0, 1], id="role-two-no-base"),
    pytest.param(named("side"), named("trainer", "log", image="i:1"), [], [0],
                 id="base-without-runtime"),
]  # fmt: skip


@pytest.mark.parametrize(("items", "base", "runtime", "missing"), RULES)
def test_runtime_containers_and_sidecars(
    items: list[dict[str, Any]],
    base: list[dict[str, Any]] | None,
    runtime: list[int],
    missing: list[int],
) -> None:
    assert podtemplate.runtime_positions(items, base) == runtime
    assert podtemplate.sidecars_without_image(items, base) == missing


def test_role_template_merges_each_runtime_container_into_one() -> None:
    base = {
        "metadata": {"labels": {"a": "b"}},
        "spec": {
            "containers": [
                {"name": "log", "image": "l:1"},
                {"name": "tensorflow", "env": [{"name": "A", "value": "1"}]},
                {"name": "syncreplicas", "env": [{"name": "B", "value": "2"}]},
            ]
        },
    }
    override = {"spec": {"containers": [{"name": "tensorflow", "resources": {"x": 1}}]}}
    before = copy.deepcopy((base, override))
    merged = podtemplate.role_template(base, override)
    assert merged == {
        "metadata": {"labels": {"a": "b"}},
        "spec": {
            "containers": [
                {"name": "log", "image": "l:1"},
                {
                    "name": "syncreplicas",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "resources": {"x": 1},
                },
            ]
        },
    }
    assert (base, override) == before
