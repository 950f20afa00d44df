"""Gate 1 of D(Ω): the error taxonomy (Failure Recovery, figure 2, "Error Taxonomy and Diagnosability").

Fault model: the errors a runtime actually meets — our tool services' structured answers (401
with a revoked lease, 429 with Retry-After, 503, a final 409, a 500 after a partial effect), and
the free text of imported agents' logs (tracebacks, flake8 syntax reports around file listings,
shell errors, a tool's ``Error: ...``, a content-filter refusal). Invariant: each lands in the
class the chapter gives it, the rule and evidence are named, and what no rule covers is
``unclassified`` — never guessed transient. Goal: gate 1 can be trusted on real input.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_lib.errors import RecoveryPolicyError
from kernel_lib.recovery.taxonomy import ERROR_CLASSES, classify_error

DATA = Path("/work/shared/data/trajectories")


# --- our services' answers, produced by the services themselves ------------------------------------

@pytest.fixture
def twin():
    from kernel_lib._support.clock import ManualClock
    from kernel_lib.sim.services import BrokerLogic, ServiceTwin

    clock = ManualClock()
    broker = BrokerLogic(clock)
    return ServiceTwin("dns", clock, broker), broker


def _call(twin_and_broker, *, lease=None, fault=None, name="svc.example", **params):
    twin, broker = twin_and_broker
    token = lease if lease is not None else broker.issue("traj-1")["token"]
    if fault:
        twin.logic.inject("publish_dns", fault, **params)
    status, body = twin.call("publish_dns", {"name": name}, "op-1", "key-1", token)
    return {"http_status": status, **body}


def test_a_revoked_lease_is_fatal(twin):
    _, broker = twin
    token = broker.issue("traj-1")["token"]
    broker.revoke_all("traj-1")
    err = _call(twin, lease=token)
    assert err["http_status"] == 401 and err["reason"] == "lease_revoked"
    c = classify_error(err)
    assert (c.error_class, c.rule) == ("fatal", "credentials") and "lease_revoked" in c.evidence


def test_a_429_is_transient_and_keeps_its_retry_after(twin):
    c = classify_error(_call(twin, fault="rate_limited", retry_after_s=2.5))
    assert (c.error_class, c.rule, c.retry_after_s, c.http_status) == ("transient", "rate_limited", 2.5, 429)


def test_an_injected_503_is_transient(twin):
    c = classify_error(_call(twin, fault="server_error"))
    assert (c.error_class, c.rule, c.http_status) == ("transient", "server_unavailable", 503)


def test_a_final_409_is_semantic_not_lock_contention(twin):
    twin[0].logic.taken_name("taken.example")
    err = _call(twin, name="taken.example")
    assert err["http_status"] == 409 and err["retryable"] is False
    c = classify_error(err)
    assert (c.error_class, c.rule) == ("semantic", "validation")


def test_a_409_marked_retryable_is_contention():
    c = classify_error({"http_status": 409, "error": "row is being updated", "retryable": True})
    assert (c.error_class, c.rule) == ("transient", "lock_contention")


def test_a_partial_effect_is_not_guessed_transient(twin):
    err = _call(twin, fault="partial")
    assert err["http_status"] == 500 and err["partial"] is True
    c = classify_error(err)
    assert c.error_class == "unclassified" and c.rule == "partial_effect"


@pytest.mark.parametrize("err, expected", [
    ({"http_status": 422, "error": "arguments must be an object", "retryable": False}, ("semantic", "validation")),
    ({"http_status": 404, "error": "no action 'x' on dns", "retryable": False}, ("semantic", "not_found")),
    ({"http_status": 403, "error": "nope"}, ("fatal", "credentials")),
    ({"http_status": 504, "error": "held past the client's timeout (injected)"}, ("transient", "timeout")),
    ({"http_status": 429, "error": "You exceeded your current quota", "code": "insufficient_quota"},
     ("fatal", "resource_exhaustion")),
    ({"http_status": 400, "error": "The response was filtered", "code": "content_filter"},
     ("fatal", "policy_violation")),
    ({"http_status": 500, "error": "boom", "retryable": False}, ("unclassified", "final_server_error")),
    ({"http_status": 418, "error": "I'm a teapot"}, ("unclassified", "no_rule")),
    ({"http_status": 200}, ("unclassified", "not_an_error")),
])
def test_structured_errors(err, expected):
    c = classify_error(err)
    assert (c.error_class, c.rule) == expected, c


@pytest.mark.parametrize("text, expected", [
    ("TimeoutError: read timed out", ("transient", "timeout")),
    ("sqlite3.OperationalError: database is locked", ("transient", "lock_contention")),
    ("openai.RateLimitError: Error code: 429 - rate limit reached, retry after 20", ("transient", "rate_limited")),
    ("ConnectionRefusedError: [Errno 111] Connection refused", ("transient", "server_unavailable")),
    ("  File \"x.py\", line 3\n    def f(\n         ^\nSyntaxError: '(' was never closed",
     ("semantic", "syntax_error")),
    ("TypeError: f() missing 1 required positional argument: 'name'", ("semantic", "missing_parameter")),
    ("bash: pytset: command not found", ("semantic", "command_not_found")),
    ("FileNotFoundError: [Errno 2] No such file or directory: 'cfg.yaml'", ("semantic", "not_found")),
    ("ModuleNotFoundError: No module named 'sqlalchemy'", ("semantic", "code_error")),
    ("NameError: name 'sesion' is not defined", ("semantic", "code_error")),
    ("E   ImportError: cannot import name 'AsyncSession' from 'sqlalchemy.orm'", ("semantic", "code_error")),
    ("OSError: [Errno 28] No space left on device", ("fatal", "resource_exhaustion")),
    ("MemoryError", ("fatal", "resource_exhaustion")),
    ("PermissionError: [Errno 13] Permission denied: '/etc/shadow'", ("fatal", "sandbox_violation")),
    ("Error: payment method not found", ("semantic", "not_found")),
    ("Error: not enough seats on flight HAT290", ("semantic", "validation")),
    ("the weather is nice today", ("unclassified", "no_rule")),
    ("   \n", ("unclassified", "empty_error")),
])
def test_free_text_errors(text, expected):
    c = classify_error(text)
    assert (c.error_class, c.rule) == expected, c
    assert c.failure_class == f"{expected[0]}.{expected[1]}"


def test_an_exception_object_is_classified_by_its_type_and_message():
    assert classify_error(TimeoutError("no answer")).rule == "timeout"
    assert classify_error(KeyError("route")).error_class == "semantic"


def test_only_the_exception_line_decides_not_the_listing_around_it():
    """swe-agent shows the edit's file listing after the flake8 error: its code (a ``raise
    PermissionError``, a "timeout" argument) must not decide."""
    obs = ("Your proposed edit has introduced new syntax error(s).\n\nERRORS:\n- E999 IndentationError: unexpected "
           "indent\n\n[File: /repo/x.py (9 lines total)]\n1:def f(timeout):\n2:    raise PermissionError('no')\n")
    c = classify_error({"observation": obs})
    assert (c.error_class, c.rule) == ("semantic", "syntax_error")


def test_unsupported_inputs_are_a_typed_error():
    for bad in (None, 42, ["ImportError"], {"http_status": "409"}):
        with pytest.raises(RecoveryPolicyError):
            classify_error(bad)


def test_unclassified_is_never_transient_for_unknown_words():
    for text in ("something odd happened", "Error: the flux capacitor is misaligned", "exit code 3"):
        assert classify_error(text).error_class == "unclassified"
    assert set(ERROR_CLASSES) == {"transient", "semantic", "fatal", "unclassified"}


# --- real imported logs (read at test time from the shared data; skipped when absent) ---------------

def _swe(name: str) -> list[str]:
    path = DATA / "swe-agent" / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    return [s.get("observation", "") for s in json.loads(path.read_text())["trajectory"]]


def test_swe_agent_observations_are_classified():
    obs = _swe("pydicom__pydicom-1458.traj")
    c2 = classify_error(obs[2])       # a traceback ending in AttributeError
    assert (c2.error_class, c2.rule) == ("semantic", "code_error") and "AttributeError" in c2.evidence
    for i in (5, 6, 7):               # flake8 E999 SyntaxError: unmatched bracket
        c = classify_error(obs[i])
        assert (c.error_class, c.rule) == ("semantic", "syntax_error"), (i, c)
    ctf = classify_error(_swe("ctf_crypto_eps.traj")[0])
    assert (ctf.error_class, ctf.rule) == ("semantic", "not_found")


def test_tau_bench_tool_errors_are_semantic_never_transient():
    folder = DATA / "tau-bench-airline"
    if not folder.exists():
        pytest.skip(f"{folder} not present")
    seen = []
    for path in sorted(folder.glob("*.json")):
        for m in json.loads(path.read_text()).get("traj", []):
            if m.get("role") == "tool" and str(m.get("content", "")).startswith("Error:"):
                seen.append((path.name, m["content"], classify_error(m["content"])))
    assert len(seen) >= 20, len(seen)
    assert all(c.error_class == "semantic" for _, _, c in seen), [(n, t) for n, t, c in seen
                                                                  if c.error_class != "semantic"]


def test_who_and_when_content_filter_tracebacks_are_fatal():
    folder = DATA / "who-and-when-handcrafted"
    if not folder.exists():
        pytest.skip(f"{folder} not present")
    hits = []
    for path in sorted(folder.glob("*.json")):
        for m in json.loads(path.read_text()).get("history", []):
            text = str(m.get("content", ""))
            if "Traceback (most recent call last)" in text and "content_filter" in text:
                hits.append(classify_error(text))
    assert len(hits) >= 3
    assert {(c.error_class, c.rule) for c in hits} == {("fatal", "policy_violation")}
