"""The live gateway lab (kernel_lib.live.gateway_lab; Failure Recovery, "Tool Circuit Breakers",
tables 8-10): a real loopback service process whose latency and error rate are dialed at run time,
real worker threads calling it through one shared pool or through the gateway's bulkheads and
breaker.

Fault model: the service stalls past the client timeout for a while, then recovers. Invariants:
on one shared pool the local file tool waits behind the stalled calls (its latency measured); with
bulkheads it keeps its own threads; the breaker trips, probes with one canary, reopens, and closes
after the recovery; calls the gateway refused never reach the service (counted by the service
itself). Short phases (a few seconds in all).
"""

from __future__ import annotations

import os
import time

import pytest

from kernel_lib.errors import HerdConfigError
from kernel_lib.live.gateway_lab import DialService, LabConfig, Phase, compare_gateway_lab, lab_domains, run_gateway_lab

TIMEOUT_S = 0.3
CFG = LabConfig(call_timeout_s=TIMEOUT_S, breaker_cooldown_s=0.2,
                phases=(Phase("nominal", 0.5, 0.005), Phase("degraded", 1.5, 2.0), Phase("recovered", 1.5, 0.005)))


@pytest.fixture(scope="module")
def service():
    with DialService(seed=1) as svc:
        yield svc


@pytest.fixture(scope="module")
def lab(service):
    out = compare_gateway_lab(CFG, service=service)
    service.dial(latency_s=0.005, error_rate=0.0)
    return out


def test_the_service_is_a_process_whose_dials_turn_at_run_time(service):
    assert service.alive() and service.pid != os.getpid()
    service.dial(latency_s=0.15, error_rate=0.0)
    t0 = time.perf_counter()
    assert service.call(2.0)["status"] == 200
    assert time.perf_counter() - t0 >= 0.15
    service.dial(latency_s=0.0, error_rate=1.0)
    assert service.call(2.0)["status"] == 503
    service.dial(latency_s=0.5, error_rate=0.0)
    with pytest.raises(TimeoutError):
        service.call(0.1)
    service.dial(latency_s=0.005, error_rate=0.0)
    s = service.stats()
    assert s["received"] >= 3 and s["answered_error"] >= 1 and s["latency_s"] == 0.005
    with pytest.raises(HerdConfigError, match="error_rate"):
        service.dial(error_rate=1.5)


def test_a_stopped_service_is_gone(tmp_path):
    svc = DialService(tmp_path / "svc")
    pid = svc.pid
    svc.close()
    assert not svc.alive()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_on_one_shared_pool_the_local_tool_starves_while_the_index_stalls(lab):
    shared = lab["shared_pool"]["phases"]
    # the file tool waits behind calls that each hold a thread until the client timeout
    assert shared["degraded"]["local_p50_ms"] >= 50
    assert shared["degraded"]["local_p50_ms"] >= 3 * shared["nominal"]["local_p50_ms"]
    occ = [o for o in lab["shared_pool"]["occupancy"] if o["phase"] == "degraded"]
    assert max(o["running"] for o in occ) == CFG.pool_threads
    assert shared["degraded"]["external_codes"].get("ERR_TIMEOUT", 0) > 0


def test_with_bulkheads_the_local_tool_keeps_its_threads(lab):
    bulk, shared = lab["bulkheads"]["phases"], lab["shared_pool"]["phases"]
    assert bulk["degraded"]["local_p99_ms"] < shared["degraded"]["local_p50_ms"]
    assert bulk["degraded"]["local_calls"] > 0
    assert all(r["ok"] for r in lab["bulkheads"]["local"])
    domains = lab_domains(CFG)
    occ = lab["bulkheads"]["occupancy"]
    assert max(o["external_api_running"] for o in occ) <= domains["external_api"].max_concurrent
    assert max(o["local_running"] for o in occ) < domains["local"].max_concurrent


def test_the_breaker_trips_probes_and_closes_after_recovery(lab):
    trs = lab["bulkheads"]["breaker_transitions"]
    to = [t["to_state"] for t in trs]
    assert to[0] == "open" and trs[0]["reason"] == "failure_rate"
    assert "half_open" in to and to[-1] == "closed" and trs[-1]["reason"] == "canary_succeeded"
    degraded_at = next(d["t_s"] for d in lab["bulkheads"]["dials"] if d["phase"] == "degraded")
    recovered_at = next(d["t_s"] for d in lab["bulkheads"]["dials"] if d["phase"] == "recovered")
    assert degraded_at < trs[0]["t_s"] < recovered_at
    assert trs[-1]["t_s"] >= recovered_at
    reopened = [t for t in trs if t["reason"] == "canary_failed"]
    for t in reopened:                              # a failed canary doubles the cooldown (capped)
        assert t["cooldown_s"] >= 2 * CFG.breaker_cooldown_s - 1e-9
    assert lab["bulkheads"]["occupancy"][-1]["breaker"] == "closed"


def test_what_the_gateway_refused_never_reached_the_service(lab):
    for mode in ("shared_pool", "bulkheads"):
        run = lab[mode]
        sent = sum(1 for r in run["external"] if r["dispatched"])
        assert run["service_received"] == run["dispatched"] >= sent   # counted by the service process itself
    bulk = lab["bulkheads"]
    refused = [r for r in bulk["external"] if not r["dispatched"]]
    assert refused and {r["code"] for r in refused} <= {"ERR_CIRCUIT_OPEN", "ERR_BULKHEAD_FULL",
                                                        "ERR_RESOURCE_EXHAUSTED"}
    assert any(r["code"] == "ERR_CIRCUIT_OPEN" for r in refused)
    assert bulk["phases"]["recovered"]["external_ok"] > 0


def test_bad_input_is_refused(service):
    with pytest.raises(HerdConfigError, match="mode"):
        run_gateway_lab("one_pool", CFG, service=service)
    with pytest.raises(HerdConfigError) as e:
        LabConfig(external_threads=12, pool_threads=12)
    assert e.value.field == "external_threads"
    with pytest.raises(HerdConfigError, match="phase"):
        LabConfig(phases=(Phase("x", 0.0, 1.0),))


def test_a_widget_can_drive_the_lab_step_by_step(service):
    from kernel_lib.live.gateway_lab import GatewayLab

    cfg = LabConfig(call_timeout_s=0.2, breaker_cooldown_s=0.2, agents=6, phases=(Phase("start", 1.0, 0.005),))
    with GatewayLab("bulkheads", cfg, service) as lab:
        time.sleep(0.3)
        first = lab.snapshot()
        lab.dial(error_rate=1.0, label="errors")
        time.sleep(0.8)
        later = lab.snapshot(since_s=first["t_s"])
        report = lab.stop()
    service.dial(latency_s=0.005, error_rate=0.0)
    assert first["local"] and first["external"] and first["phase"] == "start"
    assert later["phase"] == "errors" and all(r["t_s"] > first["t_s"] for r in later["external"])
    assert [d["phase"] for d in report["dials"]] == ["start", "errors"] and report["dials"][1]["error_rate"] == 1.0
    errors = report["phases"]["errors"]["external_codes"]
    assert errors.get("ERR_SERVER", 0) > 0                  # 503s, counted as failures by the breaker
    assert any(t["to_state"] == "open" for t in report["breaker_transitions"])
    assert lab.stop() is report
