"""environment.yml (conda users) must describe the same environment as pyproject.toml.

The compared set is pyproject's ``[project] dependencies`` plus the ``test`` extra with the project's
own extras it names expanded (``durable-agents-lab[course]`` → the ``course`` extra, and so on),
against the requirement lines of environment.yml's ``pip:`` section. Names are compared after PEP 503
normalization; version specifiers, extras and markers must match.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
ENVIRONMENT = ROOT / "environment.yml"


def load_pyproject(path: Path = PYPROJECT) -> dict:
    with path.open("rb") as f:
        return tomllib.load(f)


def load_environment(path: Path = ENVIRONMENT) -> dict:
    with path.open() as f:
        return yaml.safe_load(f)


def pyproject_requirements(pyproject: dict) -> list[str]:
    """Runtime dependencies plus the ``test`` extra, as written in pyproject.toml, with every
    reference to the project's own extras replaced by that extra's requirements (each listed once)."""
    project = pyproject["project"]
    me = canonicalize_name(project["name"])
    extras = project["optional-dependencies"]
    out: list[str] = []
    seen_extras: set[str] = set()

    def add(lines: Iterable[str]) -> None:
        for line in lines:
            req = Requirement(line)
            if canonicalize_name(req.name) != me:
                if line not in out:
                    out.append(line)
                continue
            for extra in sorted(req.extras):
                if extra not in seen_extras:
                    seen_extras.add(extra)
                    add(extras[extra])

    add(project.get("dependencies", []))
    add(extras["test"])
    return out


def environment_sections(env: dict) -> tuple[list[str], list[str]]:
    """Split environment.yml's ``dependencies`` into (conda specs, pip lines)."""
    conda, pip = [], []
    for entry in env.get("dependencies") or []:
        if isinstance(entry, dict):
            pip.extend(entry.get("pip") or [])
        else:
            conda.append(str(entry))
    return conda, pip


def environment_requirements(env: dict) -> list[str]:
    """Requirement lines of the ``pip:`` section, without pip options such as ``-e .``."""
    _, pip = environment_sections(env)
    return [line for line in pip if not line.lstrip().startswith("-")]


def dependency_drift(expected: Iterable[str], actual: Iterable[str],
                     expected_name: str = "pyproject.toml",
                     actual_name: str = "environment.yml") -> list[str]:
    """Differences between two lists of PEP 508 requirement strings; empty when they agree.

    Names are PEP 503-normalized; a requirement present in both must have the same specifier
    set, extras and marker. A name listed twice on one side is reported too.
    """
    problems: list[str] = []

    def index(lines: Iterable[str], where: str) -> dict[str, Requirement]:
        out: dict[str, Requirement] = {}
        for line in lines:
            req = Requirement(line)
            key = canonicalize_name(req.name)
            if key in out:
                problems.append(f"{key}: listed twice in {where} ({out[key]!s}, {req!s})")
            out[key] = req
        return out

    left, right = index(expected, expected_name), index(actual, actual_name)
    for key in sorted(left.keys() - right.keys()):
        problems.append(f"{key}: in {expected_name} ({left[key]!s}) but missing from {actual_name}")
    for key in sorted(right.keys() - left.keys()):
        problems.append(f"{key}: in {actual_name} ({right[key]!s}) but missing from {expected_name}")
    for key in sorted(left.keys() & right.keys()):
        a, b = left[key], right[key]
        if (a.specifier, a.extras, a.marker) != (b.specifier, b.extras, b.marker):
            problems.append(f"{key}: {expected_name} has '{a!s}', {actual_name} has '{b!s}'")
    return problems


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    problems = dependency_drift(pyproject_requirements(load_pyproject()),
                                environment_requirements(load_environment()))
    assert not problems, (
        "environment.yml has drifted from pyproject.toml ([project] dependencies + test extra):\n  "
        + "\n  ".join(problems)
    )


def test_environment_yml_installs_the_project_itself():
    _, pip = environment_sections(load_environment())
    assert "-e ." in [line.strip() for line in pip], "environment.yml's pip section lacks '-e .'"


def test_python_is_3_11_in_both_files():
    requires = SpecifierSet(load_pyproject()["project"]["requires-python"])
    assert "3.11" in requires and "3.10" not in requires, (
        f"pyproject requires-python should be >=3.11, is {requires}")
    conda, _ = environment_sections(load_environment())
    pythons = [spec.replace(" ", "") for spec in conda
               if re.fullmatch(r"python\s*([=<>!~].*)?", spec.strip())]
    assert pythons in (["python=3.11"], ["python==3.11"], ["python=3.11.*"]), (
        f"environment.yml should pin python=3.11, has {pythons or 'no python entry'}")
    assert "pip" in conda, "environment.yml must list pip for its pip: section to be installed"


# The comparison itself must be able to fail: feed it drifted pairs.

BASE = ["pydantic>=2.7", "PyYAML>=6.0", "crc32c>=2.4"]


def test_drift_accepts_names_that_differ_only_by_pep503_normalization():
    assert dependency_drift(BASE, ["Pydantic>=2.7", "pyyaml>=6.0", "CRC32C >= 2.4"]) == []
    assert dependency_drift(["typing_extensions>=4"], ["Typing.Extensions>=4"]) == []


@pytest.mark.parametrize("drifted, expected_fragment", [
    (["pydantic>=2.8", "PyYAML>=6.0", "crc32c>=2.4"],
     "pydantic: pyproject.toml has 'pydantic>=2.7', environment.yml has 'pydantic>=2.8'"),
    (["pydantic>=2.7", "PyYAML>=6.0"],
     "crc32c: in pyproject.toml (crc32c>=2.4) but missing from environment.yml"),
    (BASE + ["polars>=1.0"],
     "polars: in environment.yml (polars>=1.0) but missing from pyproject.toml"),
    (["pydantic", "PyYAML>=6.0", "crc32c>=2.4"],
     "pydantic: pyproject.toml has 'pydantic>=2.7', environment.yml has 'pydantic'"),
    (["pydantic[email]>=2.7", "PyYAML>=6.0", "crc32c>=2.4"],
     "environment.yml has 'pydantic[email]>=2.7'"),
    (BASE + ["pyyaml>=6.0"], "pyyaml: listed twice in environment.yml"),
])
def test_drift_is_reported(drifted, expected_fragment):
    problems = dependency_drift(BASE, drifted)
    assert any(expected_fragment in p for p in problems), problems


def test_the_make_environment_leaves_out_the_slow_iri_grammar():
    """Fault model: rfc3987-syntax, pulled in by jupyter-events, builds a Lark grammar when imported
    (about 2.8 s of CPU here), and jsonschema imports it whenever it is installed, so every kernel,
    CLI call and pytest process paid that. Invariant: the environment ``make`` builds does not have
    it, and jsonschema (hence nbformat's validation and altair) still works without it. Goal: a
    notebook kernel and a CLI call start without the grammar (Makefile, DROP_SLOW_IMPORTS)."""
    import importlib.util
    import subprocess
    import sys

    makefile = (ROOT / "Makefile").read_text()
    assert "uninstall -y -q rfc3987-syntax" in makefile and makefile.count("$(DROP_SLOW_IMPORTS)") == 2
    if Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        pytest.skip("not running in the environment `make` builds (.venv)")
    assert importlib.util.find_spec("rfc3987_syntax") is None, "make's environment still has rfc3987-syntax"
    code = ("import sys, jsonschema, nbformat; nb = nbformat.v4.new_notebook(); nbformat.validate(nb); "
            "jsonschema.validate({'a': 1}, {'type': 'object', 'properties': {'a': {'type': 'integer'}}}); "
            "print('rfc3987_syntax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
