"""Shared pieces of the real-browser tests: Debian chromium driven by Playwright, and a JupyterLab
server on a temporary copy of notebooks/ (autosave off, so committed notebooks are never written).

The fixtures ``browser`` and ``lab`` are made available to every test module by tests/conftest.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
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


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on a copy of notebooks/ (autosave off); yields (base_url, token, root)."""
    root = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", root / "notebooks")
    settings = root / "settings" / "@jupyterlab" / "docmanager-extension"
    settings.mkdir(parents=True)
    (settings / "plugin.jupyterlab-settings").write_text(json.dumps({"autosave": False}))
    news = root / "settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))
    port, token = _free_port(), "browser-test"
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(root / "cfg"), JUPYTER_RUNTIME_DIR=str(root / "rt"),
               IPYTHONDIR=str(root / "ipy"), JUPYTER_DATA_DIR=str(root / "data"))
    log = root / "lab.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(BIN / "jupyter"), "lab", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
             f"--LabApp.user_settings_dir={root / 'settings'}", f"--LabApp.workspaces_dir={root / 'ws'}",
             "--LabApp.expose_app_in_browser=True"],
            env=env, stdout=out, stderr=subprocess.STDOUT, cwd=root)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{base}/api/status?token={token}", proc, log)
        yield base, token, root
    finally:
        _stop(proc)


# JavaScript helpers evaluated in the JupyterLab page (window.jupyterapp is exposed by the server flag)
_KERNEL_IDLE = """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle' && w.content && w.content.widgets.length > 0; }"""
_RUN_THROUGH = """async (last) => { const app = window.jupyterapp; const nb = app.shell.currentWidget.content;
  nb.activeCellIndex = last + 1;
  await app.commands.execute('notebook:run-all-above'); }"""
_RUN_REST = """async (first) => { const app = window.jupyterapp; const nb = app.shell.currentWidget.content;
  nb.activeCellIndex = first;
  await app.commands.execute('notebook:run-all-below'); }"""
_ERROR_OUTPUTS = """() => Array.from(document.querySelectorAll(
  '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')).filter(
  e => /Traceback|Error/.test(e.textContent)).map(e => e.textContent.slice(0, 500))"""
