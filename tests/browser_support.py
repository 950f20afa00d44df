"""Shared pieces of the real-browser tests: Debian chromium driven by Playwright, and a JupyterLab
server (autosave off) shared by every browser module of a test session, in which each test works on
its own temporary copy of notebooks/ (so committed notebooks are never written, and no test sees
another's files, tabs or kernels).

The fixtures ``browser``, ``lab_server`` and ``lab`` are made available to every test module by
tests/conftest.py. The server is session-scoped: under pytest-xdist each worker that runs a browser
test starts one, once (issue 15: a JupyterLab per module cost minutes of the suite), and tears it
down at the end of its session. The browser is module-scoped: Playwright's sync API keeps an event
loop running in the thread while it is started, so a session-long one would make every later test
of that worker that calls ``asyncio.run`` fail ("cannot be called from a running event loop");
launching chromium again per module costs about a second.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=2.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"server at {url} did not answer in {timeout_s} s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="module")
def browser():
    """One headless chromium per test module (see the module docstring for why not per session);
    each test opens its own pages, and every ``browser.new_page()`` is a fresh browser context (no
    cookies or storage shared)."""
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed; `make test` installs it "
                    "(apt-get install chromium), or install it yourself and re-run")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@dataclass(frozen=True)
class LabServer:
    """A running JupyterLab: its URL, token, root folder, process and log."""

    base: str
    token: str
    root: Path
    proc: subprocess.Popen
    log: Path

    def api(self, method: str, path: str) -> httpx.Response:
        return httpx.request(method, f"{self.base}/api/{path}", headers={"Authorization": f"token {self.token}"},
                             timeout=30.0)

    def check_running(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"JupyterLab exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")

    def shut_down_kernels(self) -> None:
        """End every session and kernel of this server (the previous test's notebooks)."""
        for s in self.api("GET", "sessions").json():
            self.api("DELETE", f"sessions/{s['id']}")
        for k in self.api("GET", "kernels").json():
            self.api("DELETE", f"kernels/{k['id']}")


@dataclass(frozen=True)
class Lab:
    """One test's own folder inside the shared JupyterLab: ``root`` (holding ``notebooks/``, a fresh
    copy of the course's notebooks unless the test made its own layout) is ``prefix`` under the
    server's root, so the test opens ``{prefix}/notebooks/...``."""

    base: str
    token: str
    root: Path
    prefix: str

    def tree(self, path: str, workspace: str | None = None) -> str:
        """The URL opening ``path`` (relative to this test's folder) in a fresh workspace: by default
        one named after the test's folder, else ``workspace`` after it, so no tab another test opened
        in this JupyterLab is restored."""
        own = self.prefix.split("/")[0]
        return (f"{self.base}/lab/workspaces/{own}{'-' + workspace if workspace else ''}/tree/{self.prefix}/{path}"
                f"?token={self.token}&reset")


def _write_lab_settings(settings: Path) -> None:
    for ext, name, body in (("docmanager-extension", "plugin", {"autosave": False}),
                            ("apputils-extension", "notification", {"fetchNews": "false"})):
        d = settings / "@jupyterlab" / ext
        d.mkdir(parents=True)
        (d / f"{name}.jupyterlab-settings").write_text(json.dumps(body))


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory):
    """One JupyterLab per test session (per xdist worker) for every real-browser module, with autosave
    off and no build check (the page would otherwise ask the server to check the JupyterLab build on
    every load, seconds of CPU each time). Tests never use its root directly: the ``lab`` fixture (or
    a module's own, such as the chapters' working copy) gives each test a folder of its own, and
    shuts down the kernels the test started."""
    root = tmp_path_factory.mktemp("lab")
    home = tmp_path_factory.mktemp("lab-home")
    _write_lab_settings(home / "settings")
    labconfig = home / "cfg" / "labconfig"
    labconfig.mkdir(parents=True)
    (labconfig / "page_config.json").write_text(json.dumps({"buildCheck": False, "buildAvailable": False}))
    token = "browser-test"
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(home / "cfg"), JUPYTER_RUNTIME_DIR=str(home / "rt"),
               IPYTHONDIR=str(home / "ipy"), JUPYTER_DATA_DIR=str(home / "data"))
    log = home / "lab.log"
    for attempt in range(5):
        # another xdist worker may take the same free port between our probe and the server's bind:
        # with no port retries the server then exits at once (instead of moving to a port nobody
        # polls, while we poll the other worker's server), and we start it again on a new port
        port = _free_port()
        with log.open("w") as out:
            proc = subprocess.Popen(
                [str(BIN / "jupyter"), "lab", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
                 "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
                 f"--LabApp.user_settings_dir={home / 'settings'}", f"--LabApp.workspaces_dir={home / 'ws'}",
                 "--LabApp.expose_app_in_browser=True"],
                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=root)
        base = f"http://127.0.0.1:{port}"
        try:
            _wait_http(f"{base}/api/status?token={token}", proc, log)
            break
        except AssertionError:
            _stop(proc)
            if attempt == 4 or "is already in use" not in log.read_text():
                raise
    try:
        yield LabServer(base, token, root, proc, log)
    finally:
        _stop(proc)


def own_folder(server: LabServer, request) -> tuple[Path, str]:
    """A new, empty folder for ``request``'s test under the server's root, and its path relative to
    that root (readable: the test's name, then a number that makes it unique)."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)[:60].strip("-") or "test"
    folder = Path(tempfile.mkdtemp(prefix=f"{stem}-", dir=server.root))
    return folder, folder.name


@contextlib.contextmanager
def kernels_shut_down_after(server: LabServer):
    """Check the server runs, and end the kernels a test started once it is done with them."""
    server.check_running()
    server.shut_down_kernels()          # nothing of an earlier test (say, one that failed half way)
    try:
        yield
    finally:
        if server.proc.poll() is None:
            server.shut_down_kernels()


@pytest.fixture
def lab(lab_server, request):
    """This test's own copy of notebooks/ in the shared JupyterLab (see :class:`Lab`)."""
    folder, prefix = own_folder(lab_server, request)
    shutil.copytree(ROOT / "notebooks", folder / "notebooks")
    with kernels_shut_down_after(lab_server):
        yield Lab(lab_server.base, lab_server.token, folder, prefix)


# JavaScript helpers evaluated in the JupyterLab page (window.jupyterapp is exposed by the server flag)
_KERNEL_IDLE = """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle' && w.content && w.content.widgets.length > 0; }"""
_ERROR_OUTPUTS = """() => Array.from(document.querySelectorAll(
  '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')).filter(
  e => /Traceback|Error/.test(e.textContent)).map(e => e.textContent.slice(0, 500))"""
