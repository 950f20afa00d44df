"""Error signatures σ and the anti-spin bound (Failure Recovery, "The anti-spin invariant").

Fault model: a model's repair loop that cycles (the chapter's ImportError → AttributeError →
TypeError → ImportError trace, recreated here as real Python runs in throw-away folders) or that
keeps producing new errors; the same fault re-observed with other line numbers, temp paths,
addresses, PIDs, timestamps. Invariant: σ is equal for the same fault and different for a
different exception type or a different missing name; the guard stops at the first repeated σ
(naming the earlier iteration) and never allows more than K_repair repairs. Goal: the bound
stops spin loops on real output, including imported agents' logs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.errors import RecoveryPolicyError
from kernel_lib.recovery.signatures import (
    SpinGuard, error_signature, extract_signature_parts, first_stop, normalize, signature_of,
)

DATA = Path("/work/shared/data/trajectories")


# --- the chapter's spin loop, as real runs --------------------------------------------------------------

@pytest.fixture(scope="module")
def spin_trace(tmp_path_factory) -> list[str]:
    """The four pytest outputs of kernel_lib.live.import_cycle, each iteration in its own folder
    (so paths differ)."""
    from kernel_lib.live.import_cycle import import_cycle_trace
    return import_cycle_trace(tmp_path_factory.mktemp("spin"))


def test_the_real_trace_has_the_chapters_shape(spin_trace):
    types = [extract_signature_parts(t)[0] for t in spin_trace]
    assert types == ["ImportError", "AttributeError", "TypeError", "ImportError"]
    assert "cannot import name 'AsyncSession'" in extract_signature_parts(spin_trace[0])[2]
    assert spin_trace[0] != spin_trace[3]   # other folder, other line number: the raw texts differ


def test_the_guard_stops_the_chapters_loop_at_iteration_4_matching_iteration_1(spin_trace):
    sigmas = [signature_of(t) for t in spin_trace]
    assert len(set(sigmas)) == 3 and sigmas[0] == sigmas[3]
    v = first_stop(sigmas, step_id="T6")
    assert v is not None and not v.allowed
    assert (v.reason, v.iteration, v.matched_iteration, v.repairs_done) == ("repeated_signature", 4, 1, 3)


def test_the_chapter_trace_as_printed_stops_the_same_way():
    printed = ["ImportError: cannot import name 'AsyncSession' from 'sqlalchemy.orm'",
               "AttributeError: 'AsyncSession' object has no attribute 'sync_engine'",
               "TypeError: NoneType object cannot be interpreted as an integer",
               "ImportError: cannot import name 'AsyncSession' from 'sqlalchemy.orm'"]
    v = first_stop([signature_of(t) for t in printed])
    assert (v.reason, v.iteration, v.matched_iteration) == ("repeated_signature", 4, 1)


def test_a_repeat_stops_at_once_before_the_budget_is_spent():
    a, b = signature_of("SyntaxError: unmatched ')'"), signature_of("SyntaxError: unmatched ']'")
    v = first_stop([a, a])
    assert (v.reason, v.iteration, v.matched_iteration, v.repairs_done) == ("repeated_signature", 2, 1, 1)
    assert first_stop([b, a]) is None


def test_k_repair_bounds_new_errors_too():
    sigmas = [signature_of(f"NameError: name 'x{i}' is not defined") for i in range(6)]
    for k in (1, 2, 3):
        v = first_stop(sigmas, k_repair=k)
        assert (v.reason, v.iteration, v.repairs_done, v.k_repair) == ("repair_budget_exhausted", k + 1, k, k)


def test_the_window_is_fifo():
    a, b = signature_of("KeyError: 'a'"), signature_of("KeyError: 'b'")
    assert first_stop([a, b, a], window=1) is None            # a left the window before it came back
    assert first_stop([a, b, a], window=2).matched_iteration == 1


def test_the_guard_is_a_pure_fold():
    g0 = SpinGuard()
    g1 = g0.observe("T1", "s1", repaired=True)
    assert g0.verdict("T1", "s1").allowed and not g1.verdict("T1", "s1").allowed
    assert g1.verdict("T2", "s1").allowed                      # per sub-transaction
    rebuilt = SpinGuard.for_step("T1", 1, ["s1"])
    assert rebuilt.verdict("T1", "s1") == g1.verdict("T1", "s1")


@pytest.mark.parametrize("k", [0, 4, -1, "3", 2.0, True, None])
def test_k_repair_outside_1_to_3_is_refused(k):
    with pytest.raises(RecoveryPolicyError, match="k_repair"):
        SpinGuard(k_repair=k)


def test_a_window_shorter_than_one_is_refused():
    with pytest.raises(RecoveryPolicyError, match="window"):
        SpinGuard(window=0)


# --- normalization ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, expected", [
    ("at 0x7f3a2c1d9e80", "at <addr>"),
    ("id 5d41402a-bc4b-4a7e-9f0c-2a0c1d8e3f10", "id <uuid>"),
    ("at 2024-05-01T12:03:04.5Z", "at <ts>"),
    ("at 12:03:04", "at <ts>"),
    ("epoch 1714565000", "epoch <epoch>"),
    ("took 30.2s", "took <dur>"),
    ("took 1500 ms", "took <dur>"),
    ("pid 4242", "pid <n>"),
    ("to 127.0.0.1:8123", "to 127.0.0.1:<port>"),
    ("in /tmp/pytest-of-u/pytest-7/test_a0/x.py", "in <tmp>/x.py"),
    ("in /var/folders/zz/abc/T/tmpq1w2", "in <tmp>"),
    ("in /home/u/.venv/lib/python3.11/site-packages/sqlalchemy/orm/__init__.py", "in __init__.py"),
    ("app.py:17:5: E999", "app.py: E999"),
    ("line 17", "line <n>"),
    ("commit 3f2a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a", "commit <hex>"),
    ("a \n\t  b", "a b"),
    ("missing 2 required positional arguments", "missing 2 required positional arguments"),
    ("HTTP 409 conflict", "HTTP 409 conflict"),
])
def test_normalize_removes_noise_and_keeps_words(raw, expected):
    assert normalize("T", "", raw) == f"T\n\n{expected}"


def test_normalize_keeps_case_and_the_parts_apart():
    assert normalize("ImportError", "app.py", "x") != normalize("importerror", "app.py", "x")
    assert normalize("a b", "", "") != normalize("a", "b", "")


names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,11}", fullmatch=True)


@settings(max_examples=120, deadline=None)
@given(line1=st.integers(1, 99999), line2=st.integers(1, 99999), addr1=st.integers(2**20, 2**48),
       addr2=st.integers(2**20, 2**48), tmp1=st.from_regex(r"pytest-[0-9]{1,3}/test_[a-z]{1,8}[0-9]", fullmatch=True),
       tmp2=st.from_regex(r"pytest-[0-9]{1,3}/test_[a-z]{1,8}[0-9]", fullmatch=True), pid1=st.integers(2, 99999),
       pid2=st.integers(2, 99999), name=names)
def test_same_fault_same_sigma(line1, line2, addr1, addr2, tmp1, tmp2, pid1, pid2, name):
    def tb(line, addr, tmp, pid):
        return (f'Traceback (most recent call last):\n  File "/tmp/pytest-of-u/{tmp}/app.py", line {line}, in main\n'
                f"    x.{name}\nAttributeError: <Session object at {hex(addr)}> has no attribute '{name}' "
                f"(pid {pid})")
    assert signature_of(tb(line1, addr1, tmp1, pid1)) == signature_of(tb(line2, addr2, tmp2, pid2))


@settings(max_examples=120, deadline=None)
@given(a=names, b=names, line=st.integers(1, 9999))
def test_another_missing_name_or_type_is_another_sigma(a, b, line):
    def err(etype, name):
        return f'  File "/w/app.py", line {line}, in main\n{etype}: cannot import name \'{name}\' from \'orm\''
    assert (signature_of(err("ImportError", a)) == signature_of(err("ImportError", b))) == (a == b)
    assert signature_of(err("ImportError", a)) != signature_of(err("AttributeError", a))


def test_sigma_is_sha256_hex_of_the_normalized_triple():
    import hashlib
    assert error_signature("E", "s", "m 0x1f") == hashlib.sha256(b"E\ns\nm <addr>").hexdigest()


# --- extraction -----------------------------------------------------------------------------------------

def test_extraction_from_pytest_output():
    out = ("____ test_x ____\n\n    def test_x():\n>       import app\nE       ModuleNotFoundError: No module "
           "named 'orm'\n\ntests/test_x.py:3: ModuleNotFoundError\n=== short test summary info ===\n"
           "FAILED tests/test_x.py::test_x - ModuleNotFoundError: No module named 'orm'\n")
    assert extract_signature_parts(out) == ("ModuleNotFoundError", "", "No module named 'orm'")


def test_extraction_from_a_traceback_names_the_innermost_frame():
    tb = ('Traceback (most recent call last):\n  File "/a/main.py", line 3, in <module>\n    run()\n'
          '  File "/b/lib/engine.py", line 44, in connect\n    raise ValueError("bad url")\nValueError: bad url\n')
    assert extract_signature_parts(tb) == ("ValueError", "engine.py:connect", "bad url")


def test_extraction_from_service_errors_shell_and_exceptions():
    assert extract_signature_parts({"http_status": 409, "error": "owned", "reason": "domain_ownership",
                                    "tool": "publish_dns"}) == ("http_409:domain_ownership", "publish_dns", "owned")
    assert extract_signature_parts("bash: pytset: command not found") == ("command_not_found", "bash",
                                                                           "pytset: command not found")
    try:
        {}["route"]
    except KeyError as exc:
        etype, source, msg = extract_signature_parts(exc)
    assert (etype, msg) == ("KeyError", "'route'") and source.startswith("test_error_signatures.py:")


def test_extraction_refuses_what_is_not_an_error():
    for bad in (None, 3, ["x"], {"http_status": "500"}):
        with pytest.raises(RecoveryPolicyError):
            extract_signature_parts(bad)


# --- real imported logs -----------------------------------------------------------------------------------

def test_where_the_bound_stops_a_real_swe_agent_repair_loop():
    """pydicom-1458: three edits in a row are refused by flake8 (unmatched ']' then unmatched ')'
    twice). Replayed through the guard, the third error repeats the second: the bound stops at the
    third failed edit, trajectory step 7."""
    path = DATA / "swe-agent" / "pydicom__pydicom-1458.traj"
    if not path.exists():
        pytest.skip(f"{path} not present")
    steps = json.loads(path.read_text())["trajectory"]
    failed = [(i, s["observation"]) for i, s in enumerate(steps)
              if s["observation"].startswith("Your proposed edit has introduced new syntax error")]
    assert [i for i, _ in failed] == [5, 6, 7]
    v = first_stop([signature_of(o) for _, o in failed], step_id="edit numpy_handler.py")
    assert (v.reason, v.iteration, v.matched_iteration) == ("repeated_signature", 3, 2)
    assert failed[v.iteration - 1][0] == 7
