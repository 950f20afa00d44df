"""Shared fixtures: stores of every kind on a real temporary directory."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import HealthCheck, settings

from kernel_lib.log import MemoryStore, SQLiteStore

try:
    from kernel_lib.log.segment import SegmentStore
except ImportError:  # pragma: no cover
    SegmentStore = None

# a shared, noisy 2-core machine: no per-example deadlines, no too_slow health check
settings.register_profile("lab", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("lab")

@pytest.fixture(scope="session", autouse=True)
def own_system_temp(tmp_path_factory):
    """The suite's system temporary folder is its own: ``TMPDIR`` and :data:`tempfile.tempdir` point
    at a folder inside this session's pytest base folder, for the suite and every process it starts
    (workers, executors, etcd members, notebook kernels, JupyterLab). Anything the kernel keeps in
    "the system temporary folder" (``kl-etcd-*`` cluster folders, scratch workspaces, bench folders)
    is then invisible to another run of the suite, or any other program, on the same machine."""
    own = tmp_path_factory.mktemp("system-temp", numbered=False)
    saved_env, saved_dir = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = str(own), str(own)
    yield own
    tempfile.tempdir = saved_dir
    if saved_env is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved_env


DURABLE_KINDS = ["sqlite"] + (["segment"] if SegmentStore else [])


def make_store(kind: str, tmp_path):
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SQLiteStore.open(tmp_path / "log.sqlite", create=True)
    return SegmentStore.open(tmp_path / "seglog", create=True)


@pytest.fixture(params=["memory"] + DURABLE_KINDS)
def any_store(request, tmp_path):
    s = make_store(request.param, tmp_path)
    yield s
    s.close()


@pytest.fixture(params=DURABLE_KINDS)
def durable_store_kind(request):
    return request.param


# real-browser fixtures (Debian chromium + Playwright; JupyterLab on a temp copy of notebooks/)
from tests.browser_support import browser, lab  # noqa: E402,F401
