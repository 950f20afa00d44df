"""The executor's endpoints through the kernel (kernel_lib.live.client) and the check start-up timing
(kernel_lib.live.checks), as notebook 11.9 uses them.

Fault model: a job that is still running when the caller stops waiting; an old owner re-sending a request
after a new epoch was installed. Invariants: a wait never runs past its deadline and fails with a typed
error that keeps the last status; answers (refusals included) come back as the executor gave them; the
start-up probe runs the executor's own check command and reports pytest's own time beside the wall time.
"""

from __future__ import annotations

import json

import httpx
import pytest

from kernel_lib.errors import ConfigError, LiveProcessError, OperationStillRunningError
from kernel_lib.live.checks import check_environment, pytest_reported_s, time_check_startup
from kernel_lib.live.client import ExecutorClient, JobAnswer

URL = "http://127.0.0.1:1"


class FakeExecutor:
    """Answers like kernel_lib.live.executor: the job runs for `polls` status queries, a fence of
    epoch 1 is installed, and a job stamped with an older epoch is refused with 409."""

    def __init__(self, polls: int):
        self.polls, self.fence, self.requests = polls, 0, []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.method, request.url.path))
        if request.url.path == "/operations/test_r18":
            self.polls -= 1
            status = "running" if self.polls > 0 else "completed"
            return httpx.Response(200, json={"operation_id": "test_r18", "status": status, "owner_epoch": 0})
        body = json.loads(request.content or b"{}")
        if request.url.path == "/fences":
            self.fence = body["owner_epoch"]
            return httpx.Response(200, json={"trajectory_id": body["trajectory_id"], "owner_epoch": self.fence,
                                             "previous": None})
        if request.url.path == "/jobs":
            if body.get("owner_epoch", 0) < self.fence:
                return httpx.Response(409, json={"reason": "stale_owner_epoch", "fence": self.fence})
            return httpx.Response(200, json={"job_handle": "job_tests_18", "status": "accepted"})
        if request.url.path.startswith("/fences/"):
            return httpx.Response(200, json={"owner_epoch": self.fence, "rejected": []})
        return httpx.Response(404, json={})


def test_waits_until_the_job_finishes_and_returns_that_status():
    fake = FakeExecutor(polls=4)
    slept = []
    with ExecutorClient(URL, transport=httpx.MockTransport(fake)) as ex:
        st = ex.wait_until_finished("test_r18", timeout_s=10, interval_s=0.05, sleep=slept.append)
    assert st["status"] == "completed" and len(slept) == 3 and all(s <= 0.05 for s in slept)


def test_a_wait_past_its_deadline_is_a_typed_error_with_the_last_status():
    now = [0.0]

    def sleep(s):
        now[0] += s

    with ExecutorClient(URL, transport=httpx.MockTransport(FakeExecutor(polls=10 ** 6))) as ex:
        with pytest.raises(OperationStillRunningError) as info:
            ex.wait_until_finished("test_r18", timeout_s=1.0, interval_s=0.3, clock=lambda: now[0], sleep=sleep)
    err = info.value
    assert err.operation_id == "test_r18" and err.last_status["status"] == "running"
    assert err.waited_s == pytest.approx(1.0)


def test_fence_then_a_stale_resend_is_answered_with_the_refusal():
    fake = FakeExecutor(polls=1)
    with ExecutorClient(URL, transport=httpx.MockTransport(fake)) as ex:
        assert ex.install_fence("traj_repair_r18", 1)["owner_epoch"] == 1
        answer = ex.submit({"operation_id": "test_r18", "owner_epoch": 0})
        assert answer == JobAnswer(409, {"reason": "stale_owner_epoch", "fence": 1})
        assert ex.submit({"operation_id": "test_r18", "owner_epoch": 1}).status_code == 200
        assert ex.fences("traj_repair_r18")["owner_epoch"] == 1
    assert ("POST", "/fences") in fake.requests


@pytest.mark.parametrize("kw", [{"timeout_s": -1}, {"timeout_s": float("inf")}, {"interval_s": 0}])
def test_bad_waits_are_typed_errors(kw):
    with ExecutorClient(URL, transport=httpx.MockTransport(FakeExecutor(polls=2))) as ex:
        with pytest.raises(ConfigError):
            ex.wait_until_finished("test_r18", **kw)


@pytest.mark.parametrize("url", ["", "127.0.0.1:80", None])
def test_a_bad_url_is_a_typed_error(url):
    with pytest.raises(ConfigError):
        ExecutorClient(url)


def test_pytest_reported_seconds_are_read_from_its_summary_line():
    assert pytest_reported_s("5 passed in 0.97s") == 0.97
    assert pytest_reported_s("1 failed, 4 passed in 12s") == 12.0
    with pytest.raises(ConfigError):
        pytest_reported_s("no tests ran")


def test_the_check_environment_drops_pytest_and_colour_settings(monkeypatch):
    monkeypatch.setenv("PYTEST_ADDOPTS", "-x")
    monkeypatch.setenv("FORCE_COLOR", "1")
    env = check_environment()
    assert "PYTEST_ADDOPTS" not in env and "FORCE_COLOR" not in env and env["PYTHONDONTWRITEBYTECODE"] == "1"


def test_the_startup_probe_runs_the_executors_check_on_one_empty_test(tmp_path):
    probe = time_check_startup(tmp_path)
    assert (tmp_path / "test_probe.py").exists() and "1 passed" in probe.summary
    assert probe.wall_s > probe.reported_s >= 0 and probe.startup_s == pytest.approx(probe.wall_s - probe.reported_s)
    assert probe.to_dict()["check"] == "pytest -q"


def test_the_startup_probe_refuses_bad_input(tmp_path):
    with pytest.raises(ConfigError):
        time_check_startup(tmp_path / "absent")
    with pytest.raises(ConfigError):
        time_check_startup(tmp_path, check="rm -rf /")
    with pytest.raises(ConfigError):
        time_check_startup(tmp_path, timeout_s=0)


def test_a_check_that_prints_no_summary_is_a_process_error(tmp_path, monkeypatch):
    import kernel_lib.live.checks as checks

    monkeypatch.setitem(checks.CHECKS, "pytest -q", ["-c", "print('no summary here')"])
    with pytest.raises(LiveProcessError, match="no summary"):
        time_check_startup(tmp_path)
