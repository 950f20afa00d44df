"""Tests tolerate company (issue 14): two runs of the suite, or any other program, on one machine.

Fault model: another process on the machine (a second run of this suite, a user's own etcd cluster,
a course notebook) keeps folders in the system temporary folder at the same time. Invariant: no test
and no process the suite starts reads or writes the machine's shared temporary folder; each run has
its own, inside its pytest base folder. Goal: counts and sweeps over "the temporary folder" (etcd
cluster folders, scratch workspaces) see only this run's folders.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from kernel_lib._support.workdirs import make_workdir, remove_tree


def test_the_suite_has_its_own_temporary_folder(tmp_path_factory, own_system_temp):
    base = tmp_path_factory.getbasetemp().resolve()
    here = Path(tempfile.gettempdir()).resolve()
    assert here == own_system_temp.resolve()
    assert base in here.parents, f"{here} is not inside this session's base folder {base}"
    assert os.environ["TMPDIR"] == str(own_system_temp)


def test_processes_the_suite_starts_inherit_it(own_system_temp):
    out = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert Path(out).resolve() == own_system_temp.resolve()


def test_kernel_work_folders_land_in_it(own_system_temp):
    work = make_workdir(prefix="kl-company-")
    try:
        assert own_system_temp.resolve() in work.resolve().parents
    finally:
        remove_tree(work)
