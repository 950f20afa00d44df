"""Importing other agents' recorded trajectories into this project's event log (§11.6, §11.7).

Replay and divergence localization only need recorded evidence, so runs recorded by other
harnesses can be folded, inspected and compared here once their logs are translated into the
event families of table 1. Four readers exist (:data:`FORMATS`): SWE-agent ``.traj`` files,
tau-bench trajectories, Who&When failure-attribution logs, and plain OpenAI-style message
lists. Each reads a file *from a path* and keeps nothing else; the project never copies these
files.

API::

    import_file(format, path) -> ImportResult(events, trajectory_id, source, lacks, notes)

``events`` fold with :func:`kernel_lib.core.record.fold`; :meth:`ImportResult.to_jsonl` is the
JSON-lines log that ``python -m kernel_lib fold --log`` reads. Malformed input raises
:class:`ImportFormatError` (a :class:`~kernel_lib.errors.KernelError` and a ValueError) whose
message names the file and the place in it, e.g. ``trajectory[12].observation``.

How a foreign log becomes ours
------------------------------

Recorded evidence is kept as recorded:

* a model turn becomes ``ContextBuilt`` + ``ModelReplied``. The invocation id is the turn's
  position in the source list (``turn-0007`` for ``traj[7]``/``trajectory[7]``/``history[7]``), so
  two runs of the same task line up turn by turn. The delivered input is the canonical JSON of
  the messages the source shows before that turn (``{"messages": [...]}``); a source that does
  not show them (Who&When, an unmatched SWE-agent step) gets the sentinel
  :data:`NOT_RECORDED` in ``delivered_input_ref`` *and* in the digest field, which then names no
  digest. The reply keeps the text and, as the proposal, the calls with their arguments.
* a tool call becomes a ``ToolIntent`` whose operation id is again positional (``call-0007``,
  a second call in the same turn ``call-0007.1``); the source's own call id is kept as
  ``source_call_id`` in the proposal and the result's evidence. Its observation becomes a
  ``ToolResult`` with ``observation_complete=True`` and ``outcome={"observation": ...}``:
  ``completed``, or ``failed`` where the source marks a tool error. A call the source never
  answers stays in doubt after the fold, which is exactly what such a log proves.
* messages no model produced (the user, the system, a code executor) become
  ``RuntimeInput(kind="order", name="message:<json path>")`` at their place in the order.
* recorded spending becomes one ``BudgetSettled`` against no reservation (it counts as
  consumption and holds nothing); a recorded end of run becomes a final ``ControlChanged``.

What the source never recorded is said, not invented. No external agent log writes an intent
before dispatch, takes an authorization decision, holds a reservation or fences with epochs, so:

* a ToolIntent here is *reconstructed after the fact*: ``repeat_contract="unsafe"`` (nothing
  declares a re-run safe) and ``grant_id``, ``authorization_ref`` and ``reservation_ref`` all
  hold :data:`NOT_RECORDED`. There are no ``Authorized`` or ``BudgetReserved`` events, so the
  folded record holds no reservation; every event has owner and control epoch 0.
* the first event is ``TaskStarted`` (task id, objective and requester when recorded; the
  budget ceiling only where the source records a limit, else 0) and the second a
  ``RuntimeInput(kind="config", name="import:source")`` whose value holds the format, file name,
  SHA-256 and size of the source, the ``lacks`` list (keys of :data:`LACKS`, explained there) and
  the notes: labels and scores that are not agent evidence (Who&When mistake labels, tau-bench
  rewards and the user simulator's script), configuration, redactions, warnings.

Determinism: ids derive from the file's bytes (the trajectory id carries the first 12 hex digits
of its SHA-256) and from positions in it; nothing reads a clock. The same file always yields the
same events, byte for byte, so two imports compare equal by digest.

Secrets: the event schema refuses credential-looking values, and foreign logs may hold some.
Such values are replaced by ``[redacted]`` (see :func:`kernel_lib.core.events.redact_secrets`) before
the events are built, and the places are listed in ``notes["redacted"]``; delivered inputs are
hashed after redaction.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kernel_lib.errors import ImportFormatError, UnknownImportFormatError   # re-exported: import_file raises them
from kernel_lib.importers._common import ALWAYS_LACKS, LACKS, NOT_RECORDED, ImportResult
from kernel_lib.importers.openai_messages import import_openai_messages
from kernel_lib.importers.swe_agent import import_swe_agent
from kernel_lib.importers.tau_bench import import_tau_bench
from kernel_lib.importers.who_when import import_who_when

#: Format name → reader.
FORMATS: dict[str, Callable[[str | Path], ImportResult]] = {
    "swe-agent": import_swe_agent,
    "tau-bench": import_tau_bench,
    "who-and-when": import_who_when,
    "openai-messages": import_openai_messages,
}


def import_file(format: str, path: str | Path) -> ImportResult:
    """Read the trajectory file at ``path`` as ``format`` (a key of :data:`FORMATS`) and return
    its events and what the source lacks (§11.6, §11.7; table 1).

    Raises:
        UnknownImportFormatError: ``format`` is not one of :data:`FORMATS`.
        ImportFormatError: the file is missing, empty, not JSON, or not in that format; the
            message names the file and the JSON path of the first problem.
    """
    reader = FORMATS.get(format.strip().lower().replace("_", "-"))
    if reader is None:
        raise UnknownImportFormatError(f"unknown import format {format!r}; known: {', '.join(FORMATS)}")
    return reader(path)


__all__ = ["ALWAYS_LACKS", "FORMATS", "LACKS", "NOT_RECORDED", "ImportFormatError", "ImportResult",
           "UnknownImportFormatError", "import_file", "import_openai_messages", "import_swe_agent",
           "import_tau_bench", "import_who_when"]
