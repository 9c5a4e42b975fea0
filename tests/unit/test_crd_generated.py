"""The checked-in CRD files are the ones generated from the API types (``make crds``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import yaml
from syncreplicas_api.crd import build_crd

ROOT = Path(__file__).resolve().parents[2]


def gencrd() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gencrd", ROOT / "hack" / "gencrd.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_checked_in_crds_are_generated() -> None:
    module = gencrd()
    text = module.render()
    for path in module.TARGETS:
        assert path.read_text() == text, f"{path.relative_to(ROOT)}: run make crds"
    assert module.main(["--check"]) == 0


def test_the_file_is_the_generated_object() -> None:
    assert yaml.safe_load(gencrd().render()) == build_crd()


def test_no_ref_anyof_or_title() -> None:
    """Structural: every type inlined, Optional fields simply absent."""
    text = gencrd().render()
    for word in ("$ref", "anyOf", "oneOf", "allOf", "title:", "nullable"):
        assert word not in text, word
