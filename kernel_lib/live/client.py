"""A small HTTP client for the executor's endpoints (§11.5.1 fencing, §11.5.3 inquiry by operation id).

:class:`ExecutorClient` wraps the endpoints :mod:`kernel_lib.live.executor` serves, so that a
notebook or a widget asks the executor questions through the kernel instead of speaking HTTP
itself:

* :meth:`~ExecutorClient.operation` — ``GET /operations/{operation_id}``: the job's status by
  logical operation id, with its signed completion record once finished;
* :meth:`~ExecutorClient.install_fence` — ``POST /fences``: a new owner installs its epoch;
* :meth:`~ExecutorClient.fences` — ``GET /fences/{trajectory_id}``: the epoch held, every refusal;
* :meth:`~ExecutorClient.submit` — ``POST /jobs``: send a job request (as a worker does), with its
  idempotency key as the ``Idempotency-Key`` header too, answer returned as it came, refusals
  included;
* :meth:`~ExecutorClient.wait_until_finished` — poll the status until the job is no longer
  ``running``, with a deadline and a typed error when it passes.

Loopback only, never through a proxy (``trust_env=False``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from kernel_lib.errors import ConfigError, OperationStillRunningError

__all__ = ["MAX_WAIT_S", "ExecutorClient", "JobAnswer"]

#: The longest wait :meth:`ExecutorClient.wait_until_finished` accepts (seconds).
MAX_WAIT_S = 3600.0


class JobAnswer(NamedTuple):
    """The executor's answer to ``POST /jobs``: HTTP ``status_code`` (200 accepted, 409 refused by a
    fence or a conflicting request, 422 malformed) and the JSON ``body`` (``reason`` names a refusal)."""

    status_code: int
    body: dict[str, Any]


def _check_seconds(name: str, value: object, high: float, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or value > high or (positive and value == 0):
        raise ConfigError(f"{name} must be a number of seconds in {'(0' if positive else '[0'}, {high:g}], "
                          f"got {value!r}")
    return float(value)


class ExecutorClient:
    """HTTP client of one executor service.

    Args:
        url: the executor's base URL (``WorksheetSession.executor_url``, ``ready.json``'s ``url``).
        timeout_s: per-request timeout (seconds, > 0, at most 600).
        transport: an ``httpx`` transport to use instead of the network (tests pass
            ``httpx.MockTransport``); default: a real loopback connection.

    Raises: ConfigError: an empty URL or a bad timeout. Requests raise ``httpx`` transport errors
    (``httpx.ConnectError`` when nothing listens) as they come: an unreachable executor is the
    caller's observation to report.
    """

    def __init__(self, url: str, *, timeout_s: float = 5.0, transport: Any = None):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"url must be the executor's http:// base URL, got {url!r}")
        import httpx

        self.url = url.rstrip("/")
        self._http = httpx.Client(timeout=_check_seconds("timeout_s", timeout_s, 600.0, positive=True),
                                  trust_env=False, transport=transport)

    # --- the endpoints -----------------------------------------------------------------------------
    def operation(self, operation_id: str) -> dict[str, Any]:
        """``GET /operations/{operation_id}``: ``{operation_id, status: running|completed|failed|unknown,
        job_handle, charged_usd, outcome, owner_epoch, submissions, record, signature}``."""
        return self._http.get(f"{self.url}/operations/{operation_id}").json()

    def contract(self) -> dict[str, Any]:
        """``GET /contract``: the endpoint contract the executor declares for its tool
        (:data:`kernel_lib.live.executor.ENDPOINT_CONTRACT`: ``{tool, repeat_contract, status_lookup,
        status_query, executor_id}``)."""
        return self._http.get(f"{self.url}/contract").json()

    def install_fence(self, trajectory_id: str, owner_epoch: int) -> dict[str, Any]:
        """``POST /fences``: install ``owner_epoch`` for the trajectory. Returns the executor's body
        (``{trajectory_id, owner_epoch, previous}`` when installed; ``{reason: "stale_owner_epoch",
        ...}`` when the executor already holds a newer epoch)."""
        return self._http.post(f"{self.url}/fences",
                               json={"trajectory_id": trajectory_id, "owner_epoch": owner_epoch}).json()

    def fences(self, trajectory_id: str) -> dict[str, Any]:
        """``GET /fences/{trajectory_id}``: ``{trajectory_id, owner_epoch, rejected}``."""
        return self._http.get(f"{self.url}/fences/{trajectory_id}").json()

    def submit(self, request: dict[str, Any], *, idempotency_key: str | None = None) -> JobAnswer:
        """``POST /jobs`` with ``request`` (e.g. :func:`kernel_lib.live.worker.job_request`).

        ``idempotency_key`` (default: ``request["idempotency_key"]``, the intent's key) is sent as
        the ``Idempotency-Key`` header; the executor deduplicates by it (§11.3.3)."""
        key = idempotency_key if idempotency_key is not None else request.get("idempotency_key")
        headers = {"Idempotency-Key": key} if isinstance(key, str) and key else {}
        r = self._http.post(f"{self.url}/jobs", json=request, headers=headers)
        return JobAnswer(r.status_code, r.json())

    def wait_until_finished(self, operation_id: str, *, timeout_s: float = 120.0, interval_s: float = 0.1,
                            clock: Callable[[], float] = time.monotonic,
                            sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
        """Poll :meth:`operation` until the job is not ``running`` any more; return that status.

        Args:
            timeout_s: the longest wait (seconds, 0 .. :data:`MAX_WAIT_S`).
            interval_s: pause between polls (seconds, > 0, at most 60).
            clock, sleep: injected for tests.

        Raises:
            OperationStillRunningError: still ``running`` after ``timeout_s`` (carries the last
                status and the seconds waited). ConfigError: a bad ``timeout_s`` or ``interval_s``.
        """
        timeout_s = _check_seconds("timeout_s", timeout_s, MAX_WAIT_S)
        interval_s = _check_seconds("interval_s", interval_s, 60.0, positive=True)
        start = clock()
        status = self.operation(operation_id)
        while status.get("status") == "running":
            now = clock()
            if now - start >= timeout_s:
                raise OperationStillRunningError(
                    f"{operation_id} is still running on the executor after {now - start:.3f} s "
                    f"(timeout_s={timeout_s:g}); it stays in doubt", operation_id=operation_id,
                    waited_s=now - start, last_status=status)
            sleep(min(interval_s, max(0.001, start + timeout_s - now)))
            status = self.operation(operation_id)
        return status

    # --- lifetime ----------------------------------------------------------------------------------
    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "ExecutorClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ExecutorClient({self.url!r})"
