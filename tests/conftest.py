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
# CI: the same, derandomized (one fixed sequence of examples per test, no example database), so a
# red run is the same run on the next push; select it with `pytest --hypothesis-profile=ci`
settings.register_profile("ci", parent=settings.get_profile("lab"), derandomize=True, database=None,
                          print_blob=True)
settings.load_profile("lab")

@pytest.fixture(scope="session", autouse=True)
def own_system_temp(tmp_path_factory):
    """The suite's system temporary folder is its own: ``TMPDIR`` and :data:`tempfile.tempdir` point
    at a folder inside this session's pytest base folder, for the suite and every process it starts
    (workers, executors, etcd members, notebook kernels, JupyterLab). Anything the kernel keeps in
    "the system temporary folder" (``kl-etcd-*`` cluster folders, scratch workspaces, bench folders)
    is then invisible to another run of the suite, or any other program, on the same machine.

    Under pytest-xdist (``make test`` runs ``-n logical``) each worker is its own session with its
    own base folder (``<basetemp>/gw0``, ``<basetemp>/gw1``, ...), so each worker gets its own
    system temporary folder too: a sweep of stale ``kl-etcd-*`` folders in one worker never sees
    the clusters of the other (tests/test_suite_parallel.py checks this)."""
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


# real-browser fixtures (Debian chromium + Playwright; one JupyterLab per session, a folder per test)
from tests.browser_support import browser, lab, lab_server  # noqa: E402,F401


def _shared_scope_fixtures(item) -> list[str]:
    """Names of the fixtures of ``item`` that live longer than one test (module or class scope).
    pytest's own class fixture of every unittest.TestCase (hypothesis state machines) is left out:
    such a class holds one test, and grouping it would only tie unrelated machines to one worker."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    return [name for name, defs in info.name2fixturedefs.items()
            if defs and defs[-1].scope in ("module", "class") and not name.startswith("_unittest_")]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` (``make test``), the tests of one module that share a module- or
    class-scoped fixture (an etcd cluster, a marimo app, an executor, a recorded example) run on one
    worker, so that fixture is built once per run, not once per worker that happens to receive one
    of them. The other tests of the module are spread over the workers one by one. (The browser and
    the JupyterLab of the browser tests are session-scoped, one per worker: tests/browser_support.py.)
    Every ``quorum`` test (real etcd members with 50 ms heartbeats and 500 ms elections) runs on one
    worker, so two etcd clusters never compete for the cores: measured on this 2-core machine,
    test_replication_widget's leader check failed with clusters in both workers and passed alone.
    Runs before xdist's own hook, which turns these marks into the ``@group`` node ids."""
    for item in items:
        if any(True for _ in item.iter_markers("xdist_group")):
            continue
        if any(True for _ in item.iter_markers("quorum")):
            item.add_marker(pytest.mark.xdist_group("quorum-etcd"))
        elif _shared_scope_fixtures(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    items[:] = sorted(items, key=_long_first)   # stable: the order within each class is kept


#: Test-name fragments of the long runs (each 5-50 s on a quiet 2-core machine: a notebook under
#: nbval or papermill, a crash sweep, a real SIGKILL, JupyterLab): see :func:`_long_first`.
LONG_RUN_NAME_FRAGMENTS = ("nbval", "notebook_runs", "sweep", "sigkill", "jupyterlab", "run_all")


def _long_first(item) -> int:
    """0 for a long run, 1 for everything else. pytest-xdist hands work out in collection order,
    one test (or one ``xdist_group``) at a time to whichever worker runs low, so a long run that is
    collected last leaves the other core idle until it ends; collected first, the short tests fill
    in around it. Long: every ``browser`` and ``quorum`` test (the etcd group runs serially on one
    worker) and every test whose name holds a fragment of :data:`LONG_RUN_NAME_FRAGMENTS`."""
    if any(True for _ in item.iter_markers("browser")) or any(True for _ in item.iter_markers("quorum")):
        return 0
    name = getattr(item, "originalname", None) or item.name
    return 0 if any(f in name for f in LONG_RUN_NAME_FRAGMENTS) else 1


def _suffix_group_ids(config, items) -> None:
    """In an xdist worker under ``--dist loadgroup``, end each grouped test's node id with
    ``@<group>``, which is how the controller's scheduler recognises a group. pytest-xdist 3.8 does
    this by writing ``item._nodeid``, which pytest 9.2's structured node ids no longer read, so the
    groups are silently lost (pytest-dev/pytest-xdist#1386). This does the same on the structured
    id, and does nothing when xdist already did it (older pytest, or a fixed xdist)."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if not names:
            continue
        suffix = "@" + "_".join(names)
        if item.nodeid.endswith(suffix):
            continue
        grouped = item.nodeid + suffix
        if hasattr(item, "_id"):
            from _pytest.nodeid import NodeId
            item._id = NodeId.parse(grouped)
        else:       # pragma: no cover - pytest before structured node ids
            item._nodeid = grouped


class _GroupIdsAfterXdist:
    """Runs :func:`_suffix_group_ids` after every other collection hook, xdist's included."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        _suffix_group_ids(config, items)


def pytest_configure(config):
    if not config.pluginmanager.has_plugin("dal-xdist-group-ids"):
        config.pluginmanager.register(_GroupIdsAfterXdist(), "dal-xdist-group-ids")
