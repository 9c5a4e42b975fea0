"""Spare pods: the rules of the wait and of the handover (pure:
syncreplicas_runtime.launch.sparerules).

Who may hand a spare a replica's identity (401), what a request may be (400, 413), what an
assignment may set (no LD_PRELOAD, no PYTHONPATH, none of the spare's own variables) and
must set, checked as the replica would check it, the answer once assigned (409), and the
file that keeps an assignment across a container restart.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from syncreplicas_runtime.foundation.endpoints import ASSIGN_PATH
from syncreplicas_runtime.launch import sparerules as spare
from syncreplicas_runtime.launch.sparerules import Refusal, SettingsError

TOKEN = "0123456789abcdef" * 4
CLUSTER = {"ps": ["ps0:2222"], "chief": ["c:2222"], "worker": ["w0:2222", "w1:2222"]}
JOB = {"replicasToAggregate": 2, "workers": 2, "parameterServers": 1}
BASE = {
    "SYNCREPLICAS_SPARE_TOKEN": TOKEN,
    "SYNCREPLICAS_SPARE_STATE": "/tmp/syncreplicas-spare-assignment.json",
    "SYNCREPLICAS_METRICS_PORT": "9090",
    "SYNCREPLICAS_JOB_NAME": "j",
    "PATH": "/usr/bin",
}


def replica_env(role: str = "worker", index: int = 1, **extra: str) -> dict[str, str]:
    out = {"TF_CONFIG": json.dumps({"cluster": CLUSTER, "task": {"type": role, "index": index}}),
           "SYNCREPLICAS_JOB": json.dumps(JOB), "SYNCREPLICAS_INCARNATION": "1700000000123"}
    out.update(extra)
    return out


def body(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def refused(status: int, data: bytes, base: dict[str, str] = BASE) -> str:
    with pytest.raises(Refusal) as err:
        spare.parse_assignment(data, base)
    assert err.value.status == status
    assert "\n" not in err.value.message
    return err.value.message


# --- the spare's own variables ----------------------------------------------------------


def test_the_secret_makes_a_spare() -> None:
    assert spare.is_spare(BASE)
    assert not spare.is_spare(replica_env())


def test_settings() -> None:
    got = spare.parse_settings(BASE)
    assert got == spare.Settings(token=TOKEN, state_file=BASE[spare.STATE_ENV], port=9090)
    unset = {k: v for k, v in BASE.items() if k != spare.STATE_ENV}
    assert spare.parse_settings(unset).state_file == spare.DEFAULT_STATE_FILE
    assert spare.DEFAULT_STATE_FILE == "/tmp/syncreplicas-spare-assignment.json"
    assert spare.parse_settings({**BASE, spare.STATE_ENV: ""}).state_file == ""


@pytest.mark.parametrize(
    ("changes", "names"),
    [
        ({spare.TOKEN_ENV: ""}, spare.TOKEN_ENV),
        ({spare.TOKEN_ENV: "ab" * 15}, spare.TOKEN_ENV),  # 30 characters
        ({spare.TOKEN_ENV: "z" * 40}, spare.TOKEN_ENV),  # not hex
        ({spare.PORT_ENV: ""}, spare.PORT_ENV),
        ({spare.PORT_ENV: "0"}, spare.PORT_ENV),
        ({spare.PORT_ENV: "http"}, spare.PORT_ENV),
        ({spare.PORT_ENV: "70000"}, spare.PORT_ENV),
    ],
)
def test_bad_settings_name_their_variable(changes: dict[str, str], names: str) -> None:
    with pytest.raises(SettingsError, match=names):
        spare.parse_settings({**BASE, **changes})


# --- who may assign, and how much ------------------------------------------------------------


@pytest.mark.parametrize("header", [f"Bearer {TOKEN}", f"bearer {TOKEN}", f"  Bearer  {TOKEN} "])
def test_the_secret_authorizes(header: str) -> None:
    spare.authorize(header, TOKEN)


@pytest.mark.parametrize(
    "header",
    [None, "", "Bearer", "Bearer ", f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN[:-1]}",
     f"Bearer {TOKEN}0", f"Bearer {TOKEN.upper()}", "Bearer ünïcödé", f"Bearer {TOKEN} x"],
)  # fmt: skip
def test_anything_else_is_401(header: str | None) -> None:
    with pytest.raises(Refusal) as err:
        spare.authorize(header, TOKEN)
    assert err.value.status == 401
    assert TOKEN not in err.value.message


@pytest.mark.parametrize(
    ("content_length", "status"),
    [(None, 400), ("", 400), ("ten", 400), ("-1", 400), (str(spare.MAX_BODY_BYTES + 1), 413)],
)
def test_the_body_needs_a_length_within_the_limit(content_length: str | None,
                                                  status: int) -> None:  # fmt: skip
    with pytest.raises(Refusal) as err:
        spare.body_length(content_length)
    assert err.value.status == status


def test_a_body_within_the_limit() -> None:
    assert spare.MAX_BODY_BYTES == 1 << 20
    assert spare.body_length("0") == 0
    assert spare.body_length(str(spare.MAX_BODY_BYTES)) == spare.MAX_BODY_BYTES


def test_once_assigned_409() -> None:
    refusal = spare.already_assigned("ps-0")
    assert (refusal.status, refusal.message) == (409, "already assigned: this pod is ps-0")


# --- what an assignment may and must set -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "allowed"),
    [
        ("TF_CONFIG", True),
        ("SYNCREPLICAS_JOB", True),
        ("SYNCREPLICAS_INCARNATION", True),
        ("SYNCREPLICAS_WARM_RESTARTS", True),
        ("SYNCREPLICAS_JOB_NAME", True),
        ("SYNCREPLICAS_METRICS_PORT", True),
        ("LD_PRELOAD", False),
        ("LD_LIBRARY_PATH", False),
        ("PYTHONPATH", False),
        ("PYTHONSTARTUP", False),
        ("PATH", False),
        ("HOME", False),
        ("TF_CONFIG_EXTRA", False),
        ("tf_config", False),
        ("syncreplicas_job", False),
        ("SYNCREPLICAS_", False),
        ("SYNCREPLICAS_SPARE_TOKEN", False),
        ("SYNCREPLICAS_SPARE_STATE", False),
        ("SYNCREPLICAS_SPARE_ANYTHING", False),
        ("SYNCREPLICAS_A=B", False),
        ("SYNCREPLICAS_A B", False),
        ("", False),
    ],
)
def test_allowed_names(name: str, allowed: bool) -> None:
    assert spare.allowed_name(name) is allowed


def test_a_good_assignment() -> None:
    env = replica_env("ps", 0, SYNCREPLICAS_WARM_RESTARTS="OnFailure",
                      SYNCREPLICAS_WARM_RESTART_LIMIT="6")  # fmt: skip
    got = spare.parse_assignment(body({"env": env}), BASE)
    assert (got.role, got.index, got.replica) == ("ps", 0, "ps-0")
    assert got.incarnation == 1700000000123 and got.warm_restarts
    assert dict(got.env) == env
    assert json.loads(spare.answer(got)) == {"assigned": "ps-0"}
    cold = spare.parse_assignment(body({"env": replica_env()}), BASE)
    assert cold.replica == "worker-1" and not cold.warm_restarts


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"", "body: not JSON"),
        (b"{", "body: not JSON"),
        (b"\xff\xfe\xfd", "body: not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "body: not JSON"),
        (body([]), "body: must be a JSON object, got list"),
        (body({}), "body.env: is missing"),
        (body({"env": replica_env(), "assigned": "ps-0"}), "body.assigned: unknown key"),
        (body({"env": "TF_CONFIG=x"}), "body.env: must be an object of name -> string"),
        (body({"env": {**replica_env(), "LD_PRELOAD": "/tmp/evil.so"}}),
         "body.env.LD_PRELOAD: not allowed"),
        (body({"env": {**replica_env(), "PYTHONPATH": "/tmp"}}),
         "body.env.PYTHONPATH: not allowed"),
        (body({"env": {**replica_env(), "SYNCREPLICAS_SPARE_TOKEN": "f" * 64}}),
         "body.env.SYNCREPLICAS_SPARE_TOKEN: not allowed"),
        (body({"env": {"bad\nname": "x"}}), "body.env.'bad\\nname': not allowed"),
        (body({"env": {**replica_env(), "SYNCREPLICAS_INCARNATION": 7}}),
         "body.env.SYNCREPLICAS_INCARNATION: must be a string, got int"),
        (body({"env": {**replica_env(), "SYNCREPLICAS_JOB_NAME": "a\0b"}}),
         "body.env.SYNCREPLICAS_JOB_NAME: holds a NUL character"),
        (body({"env": {k: v for k, v in replica_env().items() if k != "TF_CONFIG"}}),
         "body.env.TF_CONFIG: is missing"),
        (body({"env": {k: v for k, v in replica_env().items() if k != "SYNCREPLICAS_JOB"}}),
         "body.env.SYNCREPLICAS_JOB: is missing"),
        (body({"env": {k: v for k, v in replica_env().items()
                       if k != "SYNCREPLICAS_INCARNATION"}}),
         "body.env.SYNCREPLICAS_INCARNATION: is missing"),
        (body({"env": {**replica_env(), "SYNCREPLICAS_INCARNATION": " "}}),
         "body.env.SYNCREPLICAS_INCARNATION: is missing"),
        # As the replica would read it: what would exit 64 leaves the spare a spare.
        (body({"env": replica_env("worker", 5)}),
         "body.env: bad configuration: TF_CONFIG.task.index: 5 is out of range"),
        (body({"env": replica_env("evaluator", 0)}),
         "body.env: bad configuration: TF_CONFIG.task.type: unknown role"),
        (body({"env": {**replica_env(), "SYNCREPLICAS_INCARNATION": "soon"}}),
         "body.env: bad configuration: SYNCREPLICAS_INCARNATION: must be a positive integer"),
        (body({"env": {**replica_env(), "SYNCREPLICAS_JOB": "{}"}}),
         "body.env: bad configuration: replicasToAggregate"),
        (body({"env": {**replica_env(), "SYNCREPLICAS_WARM_RESTARTS": "Always",
                       "SYNCREPLICAS_WARM_RESTART_LIMIT": "6"}}),
         "body.env: bad configuration: SYNCREPLICAS_WARM_RESTARTS: 'Always'"),
    ],
)  # fmt: skip
def test_a_bad_body_is_400_naming_the_part(data: bytes, says: str) -> None:
    assert refused(400, data).startswith(says)


def test_the_replica_never_sees_the_spares_variables() -> None:
    env = replica_env(SYNCREPLICAS_METRICS_PORT="9191")
    got = spare.replica_environ(BASE, env)
    assert not [k for k in got if k.startswith("SYNCREPLICAS_SPARE_")]
    assert got["PATH"] == "/usr/bin" and got["SYNCREPLICAS_JOB_NAME"] == "j"
    assert got["SYNCREPLICAS_METRICS_PORT"] == "9191"  # the assignment's, over the spare's
    assert {k: got[k] for k in env} == env


# --- the file ------------------------------------------------------------------------------------


def test_the_file_round_trip() -> None:
    env = replica_env("chief", 0, SYNCREPLICAS_WARM_RESTARTS="ExitCode",
                      SYNCREPLICAS_WARM_RESTART_LIMIT="3")  # fmt: skip
    assignment = spare.parse_assignment(body({"env": env}), BASE)
    text = spare.file_text(assignment)
    assert json.loads(text) == {"assigned": "chief-0", "env": env}
    assert spare.parse_file(text, BASE) == assignment


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "body: not JSON"),
        ('{"assigned": "ps-0"', "body: not JSON"),
        (json.dumps({"assigned": "ps-0", "env": {"LD_PRELOAD": "x"}}), "body.env.LD_PRELOAD"),
        (json.dumps({"assigned": "ps-0", "env": {"TF_CONFIG": "{}"}}), "body.env.SYNCREPLICAS_JOB"),
    ],
)
def test_a_bad_file_is_no_assignment(text: str, says: str) -> None:
    with pytest.raises(Refusal, match=says):
        spare.parse_file(text, BASE)


# --- what it says -------------------------------------------------------------------------


def test_metrics_and_lines() -> None:
    text = spare.metrics_text().decode()
    assert "# HELP syncreplicas_spare A spare pod waiting for a replica's identity\n" in text
    assert "# TYPE syncreplicas_spare gauge\n" in text
    assert "\nsyncreplicas_spare 1\n" in text
    assert spare.READY_BODY == b"spare\n"
    assignment = spare.parse_assignment(body({"env": replica_env("ps", 0)}), BASE)
    assert spare.assigned_line(assignment) == "spare assigned: ps-0 (incarnation 1700000000123)"
    assert spare.assigned_line(assignment, "/tmp/f").startswith(
        "spare assigned: ps-0 (incarnation 1700000000123) again, from /tmp/f")
    assert "spare" in spare.stopped_reason("SIGTERM")


def test_both_sides_name_the_same_things() -> None:
    from syncreplicas_operator.core import naming

    if not hasattr(naming, "ENV_SPARE_TOKEN"):
        pytest.skip("the operator does not make spare pods in this tree")
    assert naming.ENV_SPARE_TOKEN == spare.TOKEN_ENV
    assert naming.ENV_SPARE_STATE == spare.STATE_ENV
    assert naming.SPARE_ASSIGN_PATH == ASSIGN_PATH
    assert naming.ENV_METRICS_PORT == spare.PORT_ENV
