"""The three judges of a SyncReplicasJob manifest, in-process where they can be, and their
verdicts in one form: the field paths each refusal names (``spec.training.batchSize``,
``spec.template.spec.containers[1].image``, ``metadata.name``), empty when accepted.

* ``syncreplicas validate``: ``resources.manifestfile.parse_documents``, the function the
  CLI calls once it has read the file; its lines are ``<file>: <path>: <reason>``.
* The runtime: ``syncreplicas_runtime.foundation.config.parse_job`` on ``SYNCREPLICAS_JOB`` built
  from the manifest's raw fields as the operator builds it (``core/tfconfig.job_settings``:
  the contract's keys of the stored, defaulted spec, ``minReplicasToAggregate`` defaulting
  to R) but without the operator's validation, so an invalid value reaches the parser; its
  ``ConfigError`` names one field, relative to the settings (``training.batchSize``).
* The API server (the cluster test sends the requests): a Status whose causes carry a
  field and a message; a CEL rule without ``fieldPath`` reports the node it sits on and
  names the field in its message (``minReplicasToAggregate must be <= ...`` on ``spec``),
  read back here against the CRD's schema; strict field validation lists unknown fields
  in the Status's message.

What the runtime sees at all: only the contract's keys (``RUNTIME_KEYS``: the cluster's
shape, model, training, metrics). Everything else (``metadata``, ``runPolicy``, the
templates, ``image``, ``stallTimeoutSeconds``, unknown keys of ``spec``) never reaches it
and is judged by two. Its verdict is compared with validate's (and, in the cluster test,
the API server's) on the ``projection``: the manifest with only those keys.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError
from syncreplicas_api import resource
from syncreplicas_api.contract import JobSettings, SettingsModel
from syncreplicas_api.fields_walk import fields
from syncreplicas_api.types import JobSpec
from syncreplicas_operator.core import naming
from syncreplicas_operator.resources.manifestfile import Document, parse_documents
from syncreplicas_runtime.foundation import config as cluster

from tests.unit.test_crd import SCHEMA, apply_defaults

LABEL: Final = "case.yaml"
SPEC_SCHEMA: Final = SCHEMA["properties"]["spec"]
RUNTIME_KEYS: Final = tuple(view.key for view in fields(JobSettings))


# --- validate ---------------------------------------------------------------------------


def validate_lines(manifest: Any) -> list[str]:
    """``syncreplicas validate``'s lines for ``manifest`` (none: valid)."""
    _, lines = parse_documents([Document(LABEL, manifest)])
    return lines


def paths_of_validate_lines(lines: list[str], label: str = LABEL) -> list[str]:
    """``<label>: <path>: <reason>`` -> path."""
    prefix = f"{label}: "
    out = []
    for line in lines:
        assert line.startswith(prefix), line
        out.append(line.removeprefix(prefix).split(": ", 1)[0])
    return out


def validate_paths(manifest: Any) -> list[str]:
    return paths_of_validate_lines(validate_lines(manifest))


# --- the runtime ------------------------------------------------------------------------


def prune_nulls(schema: Mapping[str, Any], value: Any) -> Any:
    """The API server's pruning before defaulting: a ``null`` property the schema declares
    is absent (free-form parts keep theirs)."""
    if isinstance(value, dict) and "properties" in schema:
        properties = schema["properties"]
        return {
            k: prune_nulls(properties[k], v) if k in properties else v
            for k, v in value.items()
            if not (v is None and k in properties)
        }
    if isinstance(value, list) and "items" in schema:
        return [prune_nulls(schema["items"], v) for v in value]
    return value


def stored_spec(manifest: Mapping[str, Any]) -> Any:
    """``spec`` as the API server would store it: nulls pruned, defaults applied."""
    return apply_defaults(SPEC_SCHEMA, prune_nulls(SPEC_SCHEMA, manifest.get("spec")))


def reaches_runtime(manifest: Any) -> bool:
    """Whether the operator would have any field to tell the runtime: a spec object."""
    return isinstance(manifest, Mapping) and isinstance(manifest.get("spec"), Mapping)


def raw_settings(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """``SYNCREPLICAS_JOB`` as ``tfconfig.job_settings`` builds it, from the raw fields."""
    spec = stored_spec(manifest)
    settings = {k: copy.deepcopy(spec[k]) for k in RUNTIME_KEYS if k in spec}
    if "minReplicasToAggregate" not in settings and "replicasToAggregate" in settings:
        settings["minReplicasToAggregate"] = settings["replicasToAggregate"]
    return settings


def runtime_field(field: str) -> str:
    """A runtime ``ConfigError``'s field as a manifest path."""
    return f"spec.{field}" if field else "spec"


def runtime_paths(settings: Mapping[str, Any]) -> list[str]:
    """What the runtime's parser says of ``settings`` (sent as JSON, as in a pod)."""
    try:
        cluster.parse_job(json.dumps(settings))
    except cluster.ConfigError as error:
        return [runtime_field(error.field)]
    return []


def contract_defaulted(manifest: Mapping[str, Any]) -> bool:
    """Whether the manifest leaves out ``spec.model`` or ``spec.model.entrypoint``: required
    in a manifest, optional in SYNCREPLICAS_JOB (``contract.JobSettings``: a hand-written
    job gets the built-in linear model). Such a manifest never reaches a runtime (the API
    server and validate refuse it); a raw build has no value to send, so the runtime's
    default applies, and the projection carries it too. The cases are counted."""
    model = manifest["spec"].get("model")
    return model is None or (isinstance(model, Mapping) and model.get("entrypoint") is None)


def projection(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest with only what the runtime is told (a valid envelope and name), and the
    contract's default model where it has none (``contract_defaulted``)."""
    spec = {k: copy.deepcopy(v) for k, v in manifest["spec"].items() if k in RUNTIME_KEYS}
    if contract_defaulted(manifest):
        model = spec.get("model") or {}
        spec["model"] = {**model, "entrypoint": SettingsModel().entrypoint}
    return {
        "apiVersion": naming.API_VERSION,
        "kind": naming.KIND,
        "metadata": {"name": "projection"},
        "spec": spec,
    }


# --- the API server ---------------------------------------------------------------------

_PATH_TOKEN = re.compile(r"^([A-Za-z][\w]*(?:\.[\w]+|\[\d+\])*)(?=[\s:]|$)")
_UNKNOWN = re.compile(r'unknown field "([^"]+)"')
_VERSION = re.compile(r'in version "([^"]*)" cannot be handled')
# A metadata field of the wrong JSON type fails Go's decoding of ObjectMeta.
_GO_FIELD = re.compile(r"Go struct field ObjectMeta\.(\w+)")
_INVALID_VALUE = re.compile(r'^(?:Invalid value|Unsupported value|Required value)'
                            r'(?:: (?:"[^"]*"|\S+))?: ')  # fmt: skip


def _in_schema(path: str) -> bool:
    """Whether ``path`` (``spec.a.b[1].c``, ``metadata.name``) is a field of the CRD."""
    if path == "metadata.name":
        return True
    node: Any = SCHEMA
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        node = node.get("items") if part.startswith("[") else node.get("properties", {}).get(part)
        if node is None:
            return False
    return True


def _declared(unknown: str) -> str:
    """An unknown field as the field at fault: strict decoding calls the keys of an object
    written where the schema wants an array or a scalar unknown fields of it
    (``containers.name`` for ``containers: {name: x}``); the fault is the declared field."""
    parts = unknown.lstrip(".").split(".")
    node: Any = SCHEMA
    for i, part in enumerate(parts):
        if node.get("type") not in (None, "object"):
            return ".".join(parts[:i])
        node = node.get("properties", {}).get(part)
        if node is None:
            break
    return ".".join(parts)


def named_by_message(field: str, message: str) -> str:
    """The field a cause names: its message's leading field path when it has one (a rule
    on a parent or the root names the field in its message, relative to ``spec`` or in
    full), else the cause's field."""
    text = _INVALID_VALUE.sub("", message, count=1)
    token = _PATH_TOKEN.match(text)
    if token:
        word = token.group(1)
        for candidate in (word, f"spec.{word}"):
            nested = "." in candidate or "[" in candidate
            if nested and candidate.startswith(("spec.", "metadata.")) and _in_schema(candidate):
                return candidate
    return field


# Not a problem of the manifest but the API server saying it skipped the CEL rules.
_SKIPPED_RULES = "some validation rules were not checked"


def api_paths(status: Mapping[str, Any]) -> list[str]:
    """The field paths of an API server's refusal (a Status object)."""
    message = str(status.get("message", ""))
    causes = (status.get("details") or {}).get("causes") or []
    out: list[str] = []
    for cause in causes:
        text = str(cause.get("message", ""))
        if _SKIPPED_RULES in text:
            continue
        field = str(cause.get("field", ""))
        if field.startswith("."):
            field = field[1:]
        if cause.get("reason") == "FieldValueInvalid" or field:
            out.append(named_by_message(field, text))
        out += [_declared(u) for u in _UNKNOWN.findall(text)]
    if not causes:
        version = _VERSION.search(message)
        go_field = _GO_FIELD.search(message)
        if (version and version.group(1) != resource.VERSION) or "API version" in message:
            # A version it does not serve: the server reads the body without our schema.
            out.append("apiVersion")
        elif go_field:
            out.append(f"metadata.{go_field.group(1)}")
        else:
            out += [_declared(u) for u in _UNKNOWN.findall(message)]
    return [p for p in out if p] or ([] if not message else ["(unnamed)"])


def stopped_early(status: Mapping[str, Any]) -> bool:
    """Whether the API server left checks out: it could not decode the body (400: unknown
    fields, a version it does not serve), or it skipped the CEL rules after a field of the
    wrong type."""
    return status.get("code") == 400 or _SKIPPED_RULES in json.dumps(status)


# --- allowances -------------------------------------------------------------------------

# Object metadata besides the name (labels, annotations, finalizers, generateName, fields
# ObjectMeta does not have) is judged by the API server's validation of every Kubernetes
# object, which validate does not repeat: it judges the job (its name, its spec). Where
# the verdicts differ only there, the case is counted, not failed. A manifest with
# generateName and no name is refused by validate (its children are named after the job,
# so render and run need the name); the API server names it.
OBJECT_METADATA: Final = "object metadata besides the name"


def object_metadata_only(manifest: Any, validate: list[str], api: list[str],
                         api_stopped: bool, fields_valid: bool) -> bool:  # fmt: skip
    """Whether the verdicts differ only where OBJECT_METADATA says: they agree once it is
    taken out, or the API server stopped at the metadata (it could not decode it) and
    judged nothing else."""
    metadata = manifest.get("metadata") if isinstance(manifest, Mapping) else None
    generated = isinstance(metadata, Mapping) and "name" not in metadata and bool(
        metadata.get("generateName")
    )

    def ours(path: str) -> bool:
        named = path == "metadata.name" and not generated
        return named or not path.startswith("metadata.")

    v, a = [p for p in validate if ours(p)], [p for p in api if ours(p)]
    if len(a) < len(api) and not a and api_stopped:
        return True
    return (v, a) != (validate, api) and disagreement(v, a, api_stopped, fields_valid) is None


# --- agreement --------------------------------------------------------------------------


def _envelope(path: str) -> str:
    """apiVersion and kind say together what the document is: with both wrong, validate
    names the kind (a document of another kind is not read further), the API server the
    version (it cannot decode a version it does not serve)."""
    return "apiVersion/kind" if path in ("apiVersion", "kind") else path


def _any_item(path: str) -> str:
    return re.sub(r"\[\d+\]", "[]", path)


def disagreement(validate: list[str], api: list[str], api_stopped: bool,
                 fields_valid: bool) -> str | None:  # fmt: skip
    """Why ``validate``'s and the API server's verdicts on one manifest disagree, or None.

    Both accept, or both refuse naming the same fields. The API server may name more: it
    checks the rules across fields even when a field is out of range (validate checks them
    once every field is valid). Validate may name more only when the API server stopped
    early (``stopped_early``), or other items of a list a rule's one message names one of."""
    v, a = {_envelope(p) for p in validate}, {_envelope(p) for p in api}
    if not v and not a:
        return None
    if not v or not a:
        return f"validate {'accepts' if not v else 'refuses'}, the API server " \
               f"{'accepts' if not a else 'refuses'}"  # fmt: skip
    if not v & a:
        return "they name different fields"
    # A CEL rule over a list reports one message, naming the first item at fault
    # (``containers[0].image``); validate names every item.
    items = {_any_item(p) for p in a}
    only_validate = {p for p in v - a if _any_item(p) not in items}
    if only_validate and not api_stopped:
        return f"only validate names {sorted(only_validate)}"
    if a - v and fields_valid:
        return f"only the API server names {sorted(a - v)}"
    return None


def runtime_disagreement(runtime: list[str], projected: list[str]) -> str | None:
    """Why the runtime's verdict on its part of a manifest differs from validate's verdict on
    the ``projection``, or None: both accept, or both refuse naming the same field (the
    runtime names its first problem only)."""
    if not projected:
        return f"the runtime refuses naming {runtime}, validate accepts its part" if runtime \
            else None  # fmt: skip
    if not runtime:
        return f"the runtime accepts, validate refuses its part naming {projected}"
    if runtime[0] not in projected:
        return f"the runtime names {runtime[0]}, validate {projected}"
    return None


def fields_valid(manifest: Any) -> bool:
    """Whether every field of the spec is valid on its own, so that validate checked the
    rules across fields too."""
    if not reaches_runtime(manifest):
        return False
    try:
        JobSpec.model_validate(manifest["spec"], by_alias=True, by_name=False)
    except ValidationError:
        return False
    return True
