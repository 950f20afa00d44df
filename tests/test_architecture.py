"""The house rules of kernel_lib, checked on the source tree.

Fault model: a change that reaches across layers (an import from a higher layer, a cycle hidden by
an import inside a function, a private name borrowed from another module, a view imported by the
library, a course dependency needed by the kernel). Invariant: the layer map in pyproject.toml
(`[tool.importlinter]`) and the rules below hold for every module. Goal: a newcomer can name the
rooms of the house, and the second half of the book is written into it without tangles.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "kernel_lib"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path, name: str) -> list[tuple[int, str, str | None]]:
    """(line, module imported, name imported from it or None) for every import, at any depth."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out += [(node.lineno, target, a.name) for a in node.names]
    return out


def test_the_layer_contract_holds():
    """import-linter: layers, no view imported, a pure core, no cycle between sibling modules."""
    assert LINT_IMPORTS.exists(), f"import-linter is not installed in this environment ({LINT_IMPORTS})"
    run = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def test_no_module_imports_a_private_name_of_another():
    offenders = []
    for name, path in MODULES.items():
        for line, target, imported in imports_of(path, name):
            if not target.startswith("kernel_lib") or imported is None:
                continue
            if imported.startswith("_") and not imported.startswith("__") and f"{target}.{imported}" not in MODULES:
                offenders.append(f"{name}:{line} imports {target}.{imported}")
    assert not offenders, "\n".join(offenders)


def test_no_private_attribute_of_another_module_or_object_is_used():
    """``module._name`` through an imported kernel_lib module, or ``obj._method`` on something
    that is not ``self``/``cls``, reaches into another module's privates."""
    offenders = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        aliases = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
                   for a in n.names if a.name.startswith("kernel_lib")}
        aliases |= {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                    and (n.module or "").startswith("kernel_lib") for a in n.names
                    if f"{n.module}.{a.name}" in MODULES}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Name) and node.value.id in aliases):
                offenders.append(f"{name}:{node.lineno} uses {node.value.id}.{node.attr}")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Attribute) and node.func.attr.startswith("_")
                    and not node.func.attr.startswith("__") and isinstance(node.func.value.value, ast.Name)
                    and node.func.value.value.id == "self" and node.func.value.attr in {"gate", "log", "store"}):
                offenders.append(f"{name}:{node.lineno} calls self.{node.func.value.attr}.{node.func.attr}()")
    assert not offenders, "\n".join(offenders)


def test_no_import_cycle_between_modules():
    """A cycle of module imports anywhere (inside functions too; importing ``a.b.c`` imports
    ``a.b``), found with Tarjan's strongly connected components."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in MODULES.items():
        for _line, target, imported in imports_of(path, name):
            if not target.startswith("kernel_lib"):
                continue
            full = f"{target}.{imported}" if imported else target
            dest = full if full in MODULES else target
            parts = dest.split(".")
            for i in range(2, len(parts) + 1):
                parent = ".".join(parts[:i])
                if parent in MODULES and parent != name and not name.startswith(parent + "."):
                    graph[name].add(parent)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in MODULES:
        if v not in index:
            visit(v)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


PACKAGES = sorted(n for n, p in MODULES.items() if p.name == "__init__.py" and n != "kernel_lib")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_says_what_it_holds_and_offers(package):
    """Each package's ``__init__`` has a docstring (what lives there, what it may import) and,
    where it offers names, an ``__all__`` whose every entry resolves."""
    import importlib
    mod = importlib.import_module(package)
    assert (mod.__doc__ or "").strip(), f"{package} has no docstring"
    if package not in {"kernel_lib.recovery", "kernel_lib._support"}:
        assert getattr(mod, "__all__", None), f"{package} lists no public names in __all__"
    for public in getattr(mod, "__all__", ()):
        assert hasattr(mod, public), f"{package}.__all__ names {public!r}, which it does not define"
        assert public in dir(mod), f"{package} offers {public!r} but dir() does not list it"


def test_only_the_cli_parses_arguments():
    """argparse appears only in kernel_lib.cli and in the entry points of the live processes that
    the controller starts with ``python -m`` (a worker, the executor service, the tool services and
    broker, the saga worker, the looping agent's worker, the quarantine sandbox's processes, the
    gateway lab's dialable service, figure 5's worker, the fleet's worker)."""
    allowed = {"kernel_lib.live.worker", "kernel_lib.live.executor", "kernel_lib.live.services",
               "kernel_lib.live.saga_worker", "kernel_lib.live.looping_agent", "kernel_lib.live.quarantine_sandbox",
               "kernel_lib.live.gateway_lab", "kernel_lib.live.figure5", "kernel_lib.live.fleet_worker"}
    users = {name for name, path in MODULES.items()
             if any(t == "argparse" for _l, t, _n in imports_of(path, name))}
    stray = sorted(u for u in users if not u.startswith("kernel_lib.cli") and u not in allowed)
    assert not stray, f"argparse outside kernel_lib.cli: {stray}"


# The course, live, quorum and analysis extras: the kernel must import and its CLI start without them.
EXTRAS_ONLY = ("jupyterlab", "ipywidgets", "anywidget", "marimo", "altair", "vl_convert", "papermill", "nbval",
               "nbformat", "polars", "scipy", "numpy", "starlette", "uvicorn", "httpx")

_BLOCKER = """
import importlib.abc, sys
BLOCKED = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: not a kernel dependency)")
        return None
sys.meta_path.insert(0, Block())
"""


def test_the_kernel_works_without_the_extras():
    """Fault model: a practitioner installs the kernel alone (``pip install durable-agents-lab``).
    Goal: the kernel's layers import, a log folds, and ``python -m kernel_lib --help`` runs with
    every course/live/quorum/analysis package made unimportable."""
    code = _BLOCKER + """
import importlib
for layer in ("errors", "limits", "core", "log", "checkpoint", "gate", "ownership", "cadence", "resume",
              "history", "retention", "recovery", "importers", "sim", "verify"):
    importlib.import_module("kernel_lib." + layer)
from kernel_lib.core.record import fold, initial_record
from kernel_lib.sim.worksheet import worksheet_events
events = worksheet_events()
assert fold(initial_record(events[0].trajectory_id), events).last_sequence_number == len(events)
sys.argv = ["python -m kernel_lib", "--help"]
from kernel_lib.cli import main
try:
    main(["--help"])
except SystemExit as exc:
    assert exc.code == 0, exc.code
print("ok")
"""
    run = subprocess.run([sys.executable, "-c", code, ",".join(EXTRAS_ONLY)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-3000:]


def test_the_extras_are_declared_and_the_test_extra_installs_them_all():
    import tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    for name in ("analysis", "live", "quorum", "course", "test"):
        assert name in extras, f"no [{name}] extra"
    assert any(r.replace(" ", "").startswith("durable-agents-lab[course") for r in extras["test"])
    assert not {r.split(">")[0].split("=")[0].strip().lower() for r in project["dependencies"]} & {
        "jupyterlab", "anywidget", "marimo", "altair", "papermill", "nbval", "polars", "starlette", "uvicorn"}


def test_the_tree_is_tidy():
    """ruff, with the rule set in pyproject.toml ([tool.ruff]: line length, function length in
    statements, unused imports and names, likely bugs), finds nothing in the library, the views,
    the tools or the tests."""
    ruff = Path(sys.executable).with_name("ruff")
    assert ruff.exists(), f"ruff is not installed in this environment ({ruff})"
    run = subprocess.run([str(ruff), "check", "--no-cache", "kernel_lib", "widgets", "apps", "tools", "tests"],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-1000:]
