"""Real child processes without paying interpreter start-up and imports for each one.

A crash sweep starts two processes per position (a worker it kills with ``SIGKILL``, then a
recovery process). Started with ``python -m ...`` each costs 0.6-1.0 s here, nearly all of it
imports, so a sweep of 76 positions spends two minutes importing. :class:`PreforkLauncher` uses
the standard library's ``forkserver`` start method instead: one server process imports the
modules named in ``preload`` once, and every child is ``fork()``-ed from it. Each child is still
its own process (its own pid, its own session, its own file descriptors), dies by a real
``SIGKILL`` and keeps nothing in memory that its parent can see afterwards, which is all a crash
test needs from it.

:meth:`PreforkLauncher.popen` returns a :class:`ForkedProcess`, which answers the part of
:class:`subprocess.Popen` the live controllers use (``pid``, ``poll``, ``wait``, ``returncode``),
so :func:`kernel_lib._support.procs.kill_group` works on it unchanged. Where ``forkserver`` is not
available the launcher falls back to ``subprocess`` (``python -m module argv...``).
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

__all__ = ["PreforkLauncher", "ForkedProcess"]


def _child(module: str, function: str, argv: list[str], stdout_path: str, stderr_path: str,
           env: dict[str, str]) -> None:
    """The body of a forked child: its own session, stdin from /dev/null, stdout and stderr to the
    given files (appended), ``env`` added to its environment, then ``module.function(argv)``; its
    return value is the exit status."""
    os.setsid()
    os.environ.update(env)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for fd, path in ((1, stdout_path), (2, stderr_path)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(target, fd)
        os.close(target)
    os.close(devnull)
    sys.stdout = open(1, "w", closefd=False, buffering=1)   # noqa: SIM115 - the child's own stdout until exit
    sys.stderr = open(2, "w", closefd=False, buffering=1)   # noqa: SIM115
    code = getattr(importlib.import_module(module), function)(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code or 0)


class ForkedProcess:
    """A child started by :meth:`PreforkLauncher.popen` (the ``subprocess.Popen`` subset the live
    controllers use). ``returncode``: None while it runs, its exit status, or ``-signal``."""

    def __init__(self, proc: "multiprocessing.process.BaseProcess", args: list[str]):
        self._proc = proc
        self.args = args
        self.pid: int = proc.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._proc.exitcode
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit; raises :class:`subprocess.TimeoutExpired` after ``timeout`` seconds."""
        self._proc.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode  # type: ignore[return-value]


class PreforkLauncher:
    """Start ``python -m MODULE ARGV`` children, forked from a server that imported ``preload`` once.

    Args:
        preload: modules the fork server imports before its first fork (the children's own imports
            then cost nothing).
        use_fork: False (or no ``forkserver`` on this platform) starts each child with
            ``subprocess`` instead.
    """

    def __init__(self, preload: Sequence[str] = (), *, use_fork: bool = True):
        self.preload = list(preload)
        self._ctx = None
        if use_fork and "forkserver" in multiprocessing.get_all_start_methods():
            self._ctx = multiprocessing.get_context("forkserver")
            self._ctx.set_forkserver_preload(self.preload)

    @property
    def forks(self) -> bool:
        """True when children are forked from the server, False when each is a fresh interpreter."""
        return self._ctx is not None

    def popen(self, module: str, argv: Sequence[str], *, stdout: Path, stderr: Path,
              env: Mapping[str, str] | None = None, function: str = "main") -> "ForkedProcess | subprocess.Popen":
        """Start ``module.function(argv)`` in a new process in its own session, stdout and stderr
        appended to the given files. Returns a handle with ``pid``, ``poll()`` and ``wait()``."""
        env = dict(env or {})
        argv = [str(a) for a in argv]
        if self._ctx is None:
            with open(stdout, "ab") as out, open(stderr, "ab") as err:
                return subprocess.Popen([sys.executable, "-m", module, *argv], stdout=out, stderr=err,
                                        stdin=subprocess.DEVNULL, env={**os.environ, **env}, start_new_session=True)
        proc = self._ctx.Process(target=_child, args=(module, function, argv, str(stdout), str(stderr), env),
                                 name=f"{module} {' '.join(argv[:2])}", daemon=True)
        proc.start()
        return ForkedProcess(proc, [module, *argv])

    def run(self, module: str, argv: Sequence[str], *, stdout: Path, stderr: Path,
            env: Mapping[str, str] | None = None, timeout_s: float | None = None) -> int:
        """Start a child and wait for its exit status; raises :class:`subprocess.TimeoutExpired`
        (after killing its process group) when it runs past ``timeout_s``."""
        from kernel_lib._support.procs import kill_group

        proc = self.popen(module, argv, stdout=stdout, stderr=stderr, env=env)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            return proc.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_group(proc)  # type: ignore[arg-type]
            raise
