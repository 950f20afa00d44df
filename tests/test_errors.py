"""The exception taxonomy (issue 13): one tree in kernel_lib/errors.py, faults vs refusals, and
the ``retryable`` flag that backoff and breakers key on.

Invariants: no exception class is defined outside kernel_lib/errors.py (the one control-flow
exception private to the segment store excepted); the module docstring's tree is the real class
tree; ``retryable`` is True on exactly the five "nothing applied, try again later" classes; a
refusal is not a fault (``except KernelError`` does not catch it) and the CLI turns one into a
single ``refused:`` line with exit code 2.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import inspect
import re
from pathlib import Path

import pytest

import kernel_lib
import kernel_lib.cli as cli
import kernel_lib.errors as errors
from kernel_lib.errors import (
    AdmissionDenied,
    BackpressureError,
    CoordinatorUnavailableError,
    DispatchWithheld,
    KernelError,
    KernelException,
    LeaseHeldError,
    QuorumUnavailableError,
    Refusal,
    StoreBusyError,
)

PACKAGE = Path(kernel_lib.__file__).parent
ERRORS_PY = PACKAGE / "errors.py"
#: private control-flow signals that never leave their module: the segment reader's unsupported frame,
# and core.canonical's "this value needs the reference RFC 8785 encoder"
ALLOWED_ELSEWHERE = {("log/segment.py", "_Unsupported"), ("core/canonical.py", "_Slow"),
                     ("checkpoint/restore.py", "_DamageFoundLate"),   # private control flow, never raised out
                     ("recovery/synthesis/harness.py", "_Stop")}      # a trajectory's end state, caught in run()

RETRYABLE = {StoreBusyError, QuorumUnavailableError, CoordinatorUnavailableError, LeaseHeldError, BackpressureError}


def _error_classes() -> list[type[BaseException]]:
    return [c for c in vars(errors).values()
            if inspect.isclass(c) and issubclass(c, BaseException) and c.__module__ == errors.__name__]


def _base_name(node: ast.expr) -> str:
    """``Foo`` for ``Foo``, ``mod.Foo`` and ``Foo[...]``."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def test_every_exception_class_of_kernel_lib_is_defined_in_errors_py():
    classes = []    # (relative path, class name, base names) of every class in the package
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.ClassDef):
                classes.append((rel, node.name, {_base_name(b) for b in node.bases}))
    # derived from Exception: a class derived from BaseException alone (a simulated SIGKILL that no
    # handler of ordinary errors may catch) is a crash, not an error a caller handles
    exception_names = {n for n, v in vars(builtins).items() if inspect.isclass(v) and issubclass(v, Exception)}
    exception_names |= {c.__name__ for c in _error_classes()}
    changed = True
    while changed:          # a class deriving from an exception class is one, wherever it is defined
        changed = False
        for _rel, name, bases in classes:
            if name not in exception_names and (bases & exception_names or any(
                    b.endswith(("Error", "Exception")) and b != "BaseException" for b in bases)):
                exception_names.add(name)
                changed = True
    elsewhere = {(rel, name) for rel, name, _ in classes if name in exception_names and rel != "errors.py"}
    assert elsewhere - ALLOWED_ELSEWHERE == set(), "define these in kernel_lib/errors.py"
    assert ALLOWED_ELSEWHERE <= elsewhere, "the allowance names a class that no longer exists: drop it"
    # the walk sees errors.py itself (so the test cannot pass by finding nothing)
    assert {name for rel, name, _ in classes if rel == "errors.py"} >= {"KernelError", "Refusal", "ImportFormatError"}


def test_the_docstring_tree_is_the_class_tree():
    doc = errors.__doc__
    block = doc[doc.index("    KernelException\n"):]
    block = block[:block.index("\n\n")]
    seen, stack = [], []
    for line in block.splitlines():
        depth = (len(line) - len(line.lstrip(" "))) // 4 - 1
        name = line.split()[0]
        cls = getattr(errors, name)
        stack[depth:] = [cls]
        if depth:
            assert cls.__bases__[0] is stack[depth - 1], f"{name} is drawn under {stack[depth - 1].__name__}"
        also = re.search(r"\(also ([^)]*)\)", line)
        assert [b.__name__ for b in cls.__bases__[1:]] == (also.group(1).split(", ") if also else []), name
        assert ("[retryable]" in line) == cls.retryable, name
        seen.append(name)
    assert sorted(seen) == sorted(c.__name__ for c in _error_classes())


def test_retryable_is_true_exactly_for_nothing_applied_try_later():
    assert KernelException.retryable is False
    # the five, and the subclasses that inherit the flag (LeaseWaitTimeoutError: nothing granted)
    assert {c for c in _error_classes() if c.retryable} == {c for c in _error_classes()
                                                            if issubclass(c, tuple(RETRYABLE))}
    assert RETRYABLE <= set(_error_classes())
    assert all(isinstance(c.__dict__.get("retryable", False), bool) for c in _error_classes())
    # one raise site whose failure waiting cannot clear says so on its instance
    assert CoordinatorUnavailableError("closed", retryable=False).retryable is False
    assert StoreBusyError("busy").retryable is True and str(StoreBusyError("busy")) == "busy"


def test_a_closed_coordinator_and_a_batch_over_the_whole_budget_are_not_retryable(tmp_path):
    from kernel_lib.log import AckTier, MemoryStore
    from kernel_lib.ownership.leases import SQLiteOwnershipCoordinator
    from kernel_lib.retention.backpressure import BoundedStore
    from tests.helpers import ev, intent

    coord = SQLiteOwnershipCoordinator.open(tmp_path / "coord.db")
    coord.close()
    with pytest.raises(CoordinatorUnavailableError, match="closed") as info:
        coord.acquire("t", "w1", 10.0, now=0.0)
    assert info.value.retryable is False

    store = BoundedStore(MemoryStore(), 10, stall_timeout_s=0.0)
    with pytest.raises(BackpressureError, match="never fit") as info:
        store.append(ev(intent(), 1), AckTier.MEMORY)
    assert info.value.retryable is False


def test_an_unreachable_etcd_coordinator_passes_on_the_retryable_outage():
    """No member answers (connection refused): the store's QuorumUnavailableError is retryable, and
    the coordinator's CoordinatorUnavailableError made from it stays retryable."""
    import socket

    from kernel_lib.quorum.coordinator import EtcdOwnershipCoordinator

    with socket.socket() as s:      # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    co = EtcdOwnershipCoordinator([f"http://127.0.0.1:{port}"], timeout_s=0.5)
    try:
        with pytest.raises(CoordinatorUnavailableError) as info:
            co.acquire("dead", "w1", 1.0)
    finally:
        co.close()
    assert info.value.retryable is True and isinstance(info.value.__cause__, QuorumUnavailableError)


def test_refusals_are_not_faults():
    for cls in (AdmissionDenied, DispatchWithheld, errors.TrajectoryFrozenRefusal, errors.ActionMaskedRefusal):
        assert issubclass(cls, Refusal) and issubclass(cls, KernelException)
        assert not issubclass(cls, KernelError) and cls.retryable is False
    assert not issubclass(Refusal, KernelError) and not issubclass(KernelError, Refusal)
    assert [c for c in _error_classes() if issubclass(c, Refusal)] == [Refusal, AdmissionDenied, DispatchWithheld,
                                                                       errors.TrajectoryFrozenRefusal,
                                                                       errors.ActionMaskedRefusal,
                                                                       errors.TrajectoryQuarantinedRefusal,
                                                                       errors.ArtifactQuarantined,
                                                                       errors.ClearanceRefused,
                                                                       errors.EgressDenied]


def test_except_kernel_error_around_a_step_does_not_swallow_a_denial():
    from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ToolProposal, ToolReply
    from kernel_lib.log import MemoryStore, TrajectoryLog
    from tests.helpers import task

    gate = DispatchGate(TrajectoryLog(MemoryStore(), "t", must_survive="none"), AdmissionPolicy({"g": {"run_tests"}}))
    gate.start(task(ceiling=1.0))
    caught_as_fault = False
    with pytest.raises(AdmissionDenied, match="does not fit"):
        try:
            gate.run_tool(ToolProposal("op", "a1", "run_tests", {}, "g", 0.6), lambda _: ToolReply("completed"))
        except KernelError:
            caught_as_fault = True
    assert not caught_as_fault


def test_moved_classes_keep_their_bases_and_one_identity():
    import kernel_lib.history as history
    import kernel_lib.importers as importers
    import kernel_lib.quorum as quorum

    bases = {
        "ReplayMismatchError": ("KernelError",), "LiveCallDuringReplayError": ("KernelError",),
        "QuorumUnavailableError": ("StoreError",), "QuorumSetupError": ("KernelError",),
        "ImportFormatError": ("KernelError", "ValueError"), "UnknownImportFormatError": ("KernelError", "ValueError"),
        "SessionStateError": ("LiveError",), "UnrecoveredRunError": ("SessionStateError",),
        "NoWorkerRunningError": ("SessionStateError",),
    }
    for name, expected in bases.items():
        assert tuple(b.__name__ for b in getattr(errors, name).__bases__) == expected, name
    # the package facades re-export the same class objects
    assert quorum.QuorumUnavailableError is errors.QuorumUnavailableError
    assert quorum.QuorumSetupError is errors.QuorumSetupError
    assert importers.ImportFormatError is errors.ImportFormatError
    assert importers.UnknownImportFormatError is errors.UnknownImportFormatError
    assert history.ReplayMismatchError is errors.ReplayMismatchError
    assert history.LiveCallDuringReplayError is errors.LiveCallDuringReplayError
    err = errors.ReplayMismatchError("differs", kind="tool", key="op/a1", expected=None, actual={"x": 1})
    assert (err.kind, err.key, err.reason) == ("tool", "op/a1", "differs")
    assert str(err) == 'replay mismatch (tool op/a1): differs\n  recorded: nothing recorded\n  replayed: {"x": 1}'


def _fake_cli(monkeypatch, exc: BaseException) -> None:
    def build_parser(only: str | None = None) -> argparse.ArgumentParser:
        ap = argparse.ArgumentParser(prog="python -m kernel_lib")
        sub = ap.add_subparsers(dest="command")
        cmd = sub.add_parser("step")

        def run(_args):
            raise exc
        cmd.set_defaults(func=run)
        return ap
    monkeypatch.setattr(cli, "build_parser", build_parser)


@pytest.mark.parametrize("exc, prefix", [
    (AdmissionDenied("op: bounded liability 0.6 USD does not fit"), "refused: "),
    (DispatchWithheld("op withheld at the dispatch-time recheck: paused"), "refused: "),
    (errors.ConfigError("lag_events must be >= 1"), "error: "),
])
def test_the_cli_turns_a_refusal_or_a_fault_into_one_line_and_exit_2(monkeypatch, capsys, exc, prefix):
    _fake_cli(monkeypatch, exc)
    assert cli.main(["step"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == f"{prefix}{exc}\n"
