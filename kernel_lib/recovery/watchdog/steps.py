"""A trajectory log folded into the watchdog's steps S_t = <s_t, a_t, o_t> (Failure Recovery,
"Semantic Watchdog Timers": the state tuple each invariant of table 6 reads).

:func:`watch_steps` reads a log's events in sequence order (our own log, or what
:mod:`kernel_lib.importers` made of a SWE-agent, tau-bench, Who&When or OpenAI-messages file: the
same event families) and returns one :class:`~kernel_lib.recovery.watchdog.model.WatchStep` per
action. Pure: no I/O, no clock; the same events always give the same steps.

**Actions** (``a_t``)

* a ``ToolIntent`` is a ``kind="tool"`` step (position: the intent's sequence number); its
  ``ToolResult`` is the observation (``failed``/``timeout``/``unreachable`` results are errors, and
  so is an unmarked text that :func:`~kernel_lib.recovery.observations.is_error_text` reads as one);
  the model's reply of that turn is the step's ``model_text``. A later attempt of the same
  operation (the runtime retrying, or resuming an attempt a crash left in doubt) is the same step,
  not a new action, and its result replaces an earlier attempt's error;
* a model reply with no tool call is the agent addressing someone: when the next input is the
  user's (tau-bench, OpenAI messages) it is a ``kind="question"`` step whose observation is the
  user's answer, otherwise a ``kind="message"`` step;
* a multi-agent transcript turn (Who&When: a ``ModelReplied`` whose proposal names its ``agent``)
  is a ``kind="message"`` step by that agent, ``tool="message:<agent>"``, ``arguments={"text":
  ...}`` (plus ``"to"`` when the turn is addressed to another agent). A message that reports a
  browser or file action and then what the agent saw ("I clicked 'Details'.\\n\\nHere is a
  screenshot of [title](url)...", a file surfer's "Address: ...") is split: the report line is the
  action, the rest the observation. Otherwise the observation is the next turn of another speaker
  (or a non-model input: a code executor's output). Turns marked ``(thought)`` are not actions:
  their text is kept as the agent's ``model_text`` for its next action.

**Mutative or not.** A step may change the environment (``mutative``) unless its tool reads only:
an intent declared ``read_only``; a tool whose name starts with a reading verb (``get_``,
``search_``, ``list_``, ``find_``, ``calculate``, ``think``; SWE-agent's ``open``, ``goto``,
``scroll_*``, ``search_*``, ``find_file``) or a shell command that starts with one (``ls``, ``cat``,
``grep``, ``pwd``, ...) and writes no file (no ``>``, ``tee``, ``sed -i``); a message between agents.
Writing verbs (``book_``, ``update_``, ``cancel_``, ``edit``, ``create``, ``rm``, ``submit``, ...) and
browser actions are mutative; anything else (``python x.py``, a test run) is unknown (``None``,
which the detectors treat as mutative).

**State** (``s_t``)

* ``state_source="workspace"``: the log records the workspace (``WorkspaceChanged`` result trees,
  ``Checkpoint`` tree digests). The state after a step is the last tree recorded before the next
  step's action.
* ``state_source="log"``: no workspace is recorded (every imported log). The state is then what
  the log *reveals* of the environment, kept as a map resource -> digest and hashed (SHA-256 of its
  canonical JSON) after every step. Only a step that may change the environment and whose
  observation is not an error updates it (a read leaves the environment as it was; a refused
  action changed nothing that the log shows):

  - a file window a tool printed (SWE-agent's ``[File: path (N lines total)]`` listing) sets
    ``file:<path>`` to the digest of that window; ``rm path`` removes it;
  - a JSON object naming an entity (``reservation_id``, ``order_id``, ``user_id``, any ``*_id``)
    sets ``<key>=<value>`` to the digest of the object (tau-bench's updated reservation);
  - a browser report sets ``browser:<agent>`` to the page address and scroll position
    (Who&When's WebSurfer; a file surfer's address, title and viewport);
  - anything else sets ``out:<action signature>`` to the digest of the normalized output (a
    script's or a test run's output: running the same thing again with the same output is no
    change).

  What a log-derived state misses, said here once (:data:`LOG_STATE_MISSES`): files changed by a
  command that printed nothing about them (a script that writes files, ``sed -i``), the parts of a
  file no window showed, effects of an action whose observation was an error (a partial write),
  changes made by someone else (another process, the user, a server-side timer), and state the
  agent never asked about (a reservation it changed but never read back). It also sees *more*
  change than there is when two outputs differ only in noise that normalization keeps (a random
  id in a message): both make the state detector miss loops, never invent one, since a cycle needs
  an exact repeat of every revealed resource.

**Metrics** (``m_t``): from a structured outcome (``passed``/``failed``/``errors`` of a test run,
or a ``metrics`` object) and from text: a pytest summary line (``3 failed, 12 passed``), a linter
listing (SWE-agent's ``- E999 SyntaxError`` lines), compiler diagnostics (``file:12:5: error:``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import xxhash

from kernel_lib.core.action_signature import action_signature
from kernel_lib.core.events import Event
from kernel_lib.errors import WatchInputError
from kernel_lib.recovery.observations import is_error_text
from kernel_lib.recovery.signatures import normalize
from kernel_lib.recovery.watchdog.model import WatchStep

__all__ = ["LOG_STATE_MISSES", "log_format", "is_mutative", "metrics_from_text", "watch_steps", "StepFold",
           "step_signature"]

#: What a state derived from the log (``state_source="log"``) cannot see (module docstring).
LOG_STATE_MISSES = (
    "files changed by a command that printed nothing about them (a script writing files, sed -i)",
    "the parts of a file that no printed window showed",
    "effects of an action whose observation was an error (a partial write)",
    "changes made by someone else (another process, the user, a server-side timer)",
    "state the agent never read back (an entity changed but never shown again)",
)

_NON_FINAL = frozenset({"accepted", "running"})
_ERROR_STATUSES = frozenset({"failed", "timeout", "unreachable"})
_SILENT_ROLES = frozenset({"system"})
_USER_ROLES = frozenset({"user", "human"})

_READ_VERBS = frozenset({
    "get", "search", "list", "find", "read", "view", "open", "show", "lookup", "look", "query", "describe",
    "calculate", "think", "goto", "scroll", "ls", "cat", "head", "tail", "grep", "pwd", "file", "wc", "less",
    "more", "stat", "which", "whoami", "env", "printenv", "diff", "tree", "du", "df", "ps", "echo", "printf",
    "history", "rg", "ag", "fd", "type", "man", "help", "date", "id", "uname", "hostname", "cd", "filemap",
})
_WRITE_VERBS = frozenset({
    "book", "update", "cancel", "create", "delete", "edit", "write", "insert", "remove", "set", "add", "submit",
    "send", "modify", "post", "put", "patch", "move", "rename", "apply", "rm", "mv", "cp", "mkdir", "touch",
    "rmdir", "chmod", "ln", "transfer", "exchange", "return", "reserve", "pay", "refund", "str_replace_editor",
    "append", "replace", "undo", "reset", "install", "commit", "push", "merge", "deploy", "upload",
})
_GIT_READS = frozenset({"status", "diff", "log", "show", "branch", "blame", "grep", "ls-files", "rev-parse"})
_SHELL_WRITES = re.compile(r"(?<![<>&|0-9])>{1,2}(?!&)|\btee\b|\bsed\s+-i|\bperl\s+-pi")
_WORD = re.compile(r"[A-Za-z_][\w.-]*")

_FILE_HEADER = re.compile(r"^\[File: (?P<path>[^\n]+?) \((?P<n>\d+) lines total\)\]\s*$", re.MULTILINE)
_NUMBERED = re.compile(r"^(?:\d+:|\(\d+ more lines (?:above|below)\))")
# "screenshot of [title](url)": found by a linear scan (:func:`_screenshot`), since one regex
# re-scanned the rest of the line from every "screenshot of [" left open (quadratic time)
_SCREENSHOT_HEAD = re.compile(r"screenshot of \[", re.IGNORECASE)
_SCREENSHOT_TAIL = re.compile(r"\]\((?P<url>[^)\s]*)\)")
_POSITIONED = re.compile(r"positioned (?P<where>at the (?:top|bottom) of the page|\d+% down from the top of the page)")
_ADDRESS = re.compile(r"^Address: (?P<address>\S+)[ \t]*$", re.MULTILINE)
_TITLE = re.compile(r"^Title: (?P<title>[^\n]*)$", re.MULTILINE)
_VIEWPORT = re.compile(r"^Viewport position: (?P<viewport>[^\n]*)$", re.MULTILINE)
_ACTION_REPORT = re.compile(
    r"^\s*(?P<action>I (?:clicked|typed|scrolled|input|opened|navigated|visited|went|pressed|hovered|selected|"
    r"searched|entered|moved|closed|downloaded|used|tried|returned|performed|answered|asked|paged|zoomed|"
    r"found|read)\b[^\n]*)\n\s*\n(?P<rest>.+)\Z", re.DOTALL)
_ENTITY_KEYS = ("reservation_id", "order_id", "user_id", "booking_id", "ticket_id", "id")

# a pytest summary line, "=== 1 failed, 3 passed in 0.52s (0:00:00) ===", is read in linear time: a
# line starting with "= " is split at one of its last " in " (the tail checked by a regex anchored
# there); one regex over the whole line with lazy parts took time quadratic in its length
_RULE_LINE = re.compile(r"^=+ [^\n]*", re.MULTILINE)
_SUMMARY_TAIL = re.compile(r" in [\d.]+\s*s(?:econds)?(?: \([^)]*\))? =+")
_SUMMARY_WORD = re.compile(r"\b(?:passed|failed|errors?)\b")
_PLAIN_SUMMARY = re.compile(r"^(?:\w+: )?(?P<plain>\d+ passed, \d+ failed(?:, \d+ skipped)?)\s*$", re.MULTILINE)
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|error)\b")
_LINT_LINE = re.compile(r"^- [EFWC]\d{3,4}\b", re.MULTILINE)
_COMPILER_LINE = re.compile(r"^[^\s:]+:\d+(?::\d+)?: (?:fatal )?error\b", re.MULTILINE)


# --- small readers ---------------------------------------------------------------------------------


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def step_signature(step: WatchStep, nonce_arguments: Iterable[str] | None = None) -> str:
    """h_tool(a_t) of a step: :func:`kernel_lib.core.action_signature.action_signature` of its tool
    and arguments (declared nonce arguments dropped). Arguments that canonical JSON refuses (a
    NaN, an integer beyond 2**53, a lone surrogate) are hashed from their sorted JSON text instead,
    so any recorded step has a signature. Raises :class:`~kernel_lib.errors.WatchInputError` for
    arguments that no JSON text holds (nested deeper than the interpreter recurses, a key that
    is not text in a nested object)."""
    try:
        return action_signature(step.tool, step.arguments, nonce_arguments=nonce_arguments)
    except Exception:   # rfc8785's CanonicalizationError and friends: hash the plain sorted JSON instead
        try:
            text = _canonical({"tool": step.tool, "arguments": step.arguments})
        except (TypeError, ValueError, RecursionError) as exc:
            raise WatchInputError(f"the arguments of the step at #{step.position} are not JSON data "
                                  f"({type(exc).__name__}: {str(exc)[:120]})", field="arguments") from None
        return xxhash.xxh64_hexdigest(text.encode("utf-8", "surrogatepass"))


def log_format(events: Sequence[Any]) -> str:
    """The source format of a log: the ``import:source`` input's ``format`` (``swe-agent``,
    ``tau-bench``, ``who-and-when``, ``openai-messages``), else ``"kernel_lib"`` (our own log)."""
    for e in events[:4]:
        value = e.payload.value if e.event_type == "RuntimeInput" else None
        if isinstance(value, Mapping) and e.payload.name == "import:source":
            fmt = value.get("format")
            if isinstance(fmt, str):
                return fmt
    return "kernel_lib"


def _first_word(text: str) -> str:
    m = _WORD.search(text or "")
    return m.group(0).lower() if m else ""


def is_mutative(tool: str, arguments: Mapping[str, Any] | None = None,
                repeat_contract: str | None = None) -> bool | None:
    """Whether an action may change the environment (module docstring): False for a declared
    ``read_only`` intent, a reading tool or a reading shell command that writes no file; True for
    a writing tool or a shell command that writes; None when unknown. Never raises."""
    if repeat_contract == "read_only":
        return False
    args = arguments if isinstance(arguments, Mapping) else {}
    command = args.get("command") if isinstance(args.get("command"), str) else None
    verb = _first_word(tool).split("_", 1)[0] if tool else ""
    if command is not None:
        line = command.strip().splitlines()[0] if command.strip() else ""
        if _SHELL_WRITES.search(line):
            return True
        words = line.split()
        head = words[0].lower() if words else verb
        if head == "git" and len(words) > 1:
            return False if words[1] in _GIT_READS else True
        verb = head.split("_", 1)[0]
    if verb in _READ_VERBS:
        return False
    if verb in _WRITE_VERBS:
        return True
    return None


def metrics_from_text(text: str) -> dict[str, float]:
    """Verifier metrics a text reports: ``tests_passed``/``tests_failed``/``tests_errors`` from a
    pytest summary line (or the plain ``N passed, N failed`` line), ``lint_findings`` from a
    linter listing (``- E999 ...`` lines), ``compiler_errors`` from ``file:12:5: error:`` lines.
    Empty when the text reports none."""
    out: dict[str, float] = {}
    if not isinstance(text, str) or not text:
        return out
    summaries = _summary_bodies(text)
    if summaries:
        body = summaries[-1][1]
        counts = {"passed": 0, "failed": 0, "errors": 0}
        for n, what in _COUNT.findall(body):
            key = "errors" if what.startswith("error") else what
            counts[key] += int(n)
        out.update(tests_passed=float(counts["passed"]), tests_failed=float(counts["failed"]),
                   tests_errors=float(counts["errors"]))
    lint = _LINT_LINE.findall(text)
    if lint and "ERRORS" in text:
        out["lint_findings"] = float(len(lint))
    compiler = _COMPILER_LINE.findall(text)
    if compiler:
        out["compiler_errors"] = float(len(compiler))
    return out


def _summary_bodies(text: str) -> list[tuple[int, str]]:
    """(offset, counts text) of every pytest summary in ``text``, in order: the ``=== ... in 0.5s
    ===`` lines and the plain ``N passed, N failed`` lines."""
    out = [(m.start(), m.group("plain")) for m in _PLAIN_SUMMARY.finditer(text)]
    for m in _RULE_LINE.finditer(text):
        line = m.group(0).rstrip()
        head = len(line) - len(line.lstrip("="))          # the "=" run; a space follows it
        end = len(line)
        for _ in range(3):                                 # the summary's own " in <t>s" is among the last
            at = line.rfind(" in ", head, end)
            if at < 0:
                break
            if _SUMMARY_TAIL.fullmatch(line, at):
                body = line[head + 1:at]
                if "=" not in body and _SUMMARY_WORD.search(body):
                    out.append((m.start(), body))
                break
            end = at
    return sorted(out)


def _metrics_from_outcome(outcome: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    given = outcome.get("metrics")
    if isinstance(given, Mapping):
        out.update({str(k): float(v) for k, v in given.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)})
    for key, name in (("passed", "tests_passed"), ("failed", "tests_failed"), ("errors", "tests_errors"),
                      ("tests_passed", "tests_passed"), ("tests_failed", "tests_failed"),
                      ("compiler_errors", "compiler_errors"), ("lint_findings", "lint_findings")):
        v = outcome.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[name] = float(v)
    return out


def _observation_text(outcome: Any, status: str) -> str:
    if isinstance(outcome, Mapping):
        obs = outcome.get("observation")
        if isinstance(obs, str):
            return obs
        if obs is not None:
            return _canonical(obs)
        return _canonical({k: v for k, v in outcome.items() if k != "state"})
    if outcome is None:
        return status
    return _canonical(outcome)


# --- revealed state (state_source = "log") --------------------------------------------------------


def _file_windows(text: str) -> dict[str, str]:
    """``file:<path>`` -> digest of each numbered file window a tool printed."""
    out: dict[str, str] = {}
    heads = list(_FILE_HEADER.finditer(text))
    for i, h in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        lines = [h.group(0).strip()]
        for ln in text[h.end():end].splitlines():
            if not ln.strip():
                continue
            if not _NUMBERED.match(ln):
                break
            lines.append(ln.rstrip())
        out[f"file:{h.group('path').strip()}"] = _sha256("\n".join(lines))
    return out


def _json_entities(text: str) -> dict[str, str] | None:
    s = text.strip()
    if not s or s[0] not in "{[":
        return None
    try:
        value = json.loads(s)
    except (ValueError, RecursionError):   # not JSON, or nested too deeply to read: no entity revealed
        return None
    if isinstance(value, Mapping):
        for key in _ENTITY_KEYS + tuple(k for k in value if isinstance(k, str) and k.endswith("_id")):
            v = value.get(key)
            if isinstance(v, (str, int)) and not isinstance(v, bool):
                return {f"{key}={v}": _sha256(_canonical(value))}
    return None


def _screenshot(text: str) -> re.Match[str] | None:
    """The first ``screenshot of [title](url)`` (a title holds no ``]`` and no newline), as the
    match of its ``](url)`` tail, in time linear in ``text``: every opening shares the end of its
    title (the next ``]`` or newline), which is looked up once."""
    stop, tail = -1, None
    for m in _SCREENSHOT_HEAD.finditer(text):
        if stop < m.end():
            close, newline = text.find("]", m.end()), text.find("\n", m.end())
            stop = min(close if close >= 0 else len(text), newline if newline >= 0 else len(text))
            tail = _SCREENSHOT_TAIL.match(text, stop) if stop < len(text) and text[stop] == "]" else None
        if tail is not None:
            return tail
    return None


def _browser_state(text: str, actor: str) -> dict[str, str] | None:
    shot = _screenshot(text)
    if shot:
        pos = _POSITIONED.search(text, shot.end())
        where = pos.group("where") if pos else ""
        return {f"browser:{actor}": _sha256(f"{shot.group('url')}|{where}")}
    addr = _ADDRESS.search(text)
    if addr:
        title = _TITLE.search(text)
        view = _VIEWPORT.search(text)
        key = "|".join((addr.group("address"), title.group("title") if title else "",
                        view.group("viewport") if view else ""))
        return {f"browser:{actor}": _sha256(key)}
    return None


def _removed_paths(step: WatchStep) -> list[str]:
    cmd = step.arguments.get("command") if isinstance(step.arguments.get("command"), str) else ""
    words = cmd.strip().split()
    if not words or words[0] != "rm":
        return []
    return [w for w in words[1:] if not w.startswith("-")]


def _revealed(step: WatchStep, signature: str) -> tuple[dict[str, str], list[str]]:
    """(resources set, paths removed) by one step's non-error observation."""
    text = step.observation or ""
    removed = _removed_paths(step)
    if removed:
        return {}, removed
    windows = _file_windows(text)
    if windows:
        return windows, []
    entities = _json_entities(text)
    if entities:
        return entities, []
    browser = _browser_state(text, step.actor)
    if browser:
        return browser, []
    return {f"out:{signature}": _sha256(normalize("text", "", text))}, []


def _log_states(steps: list[_Draft]) -> None:
    """Fill ``state_hash`` from what the log reveals (module docstring, ``state_source="log"``)."""
    resources: dict[str, str] = {}
    started = False
    for d in steps:
        step = d.freeze()
        if step.mutative is not False:
            started = True
            if step.observation is not None and not step.observation_error:
                sets, removed = _revealed(step, step_signature(step))
                for path in removed:
                    for key in [k for k in resources if k.startswith("file:") and
                                (k[5:] == path or k[5:].endswith("/" + path.lstrip("./")))]:
                        del resources[key]
                resources.update(sets)
        if started:
            d.state_hash = _sha256(_canonical(resources))
            d.state_source = "log"


# --- the fold ---------------------------------------------------------------------------------------


@dataclass
class _Draft:
    """A step under construction (WatchStep is frozen)."""
    position: int
    kind: str
    actor: str
    tool: str
    arguments: dict[str, Any]
    observation: str | None = None
    observation_error: bool = False
    observation_position: int | None = None
    state_hash: str | None = None
    state_source: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    mutative: bool | None = None
    model_text: str = ""
    operation_id: str | None = None

    def observe(self, text: str, seq: int, *, error: bool = False, judge: bool = True) -> None:
        """Record the observation; ``error``: the source marked it failed; ``judge``: also read
        the text for an error (not for a person's answer)."""
        self.observation = text
        self.observation_position = seq
        self.observation_error = bool(error) or (judge and is_error_text(text))
        if judge and not self.metrics:
            self.metrics = metrics_from_text(text)

    def freeze(self) -> WatchStep:
        return WatchStep(position=self.position, kind=self.kind, actor=self.actor, tool=self.tool,  # type: ignore[arg-type]
                         arguments=self.arguments, observation=self.observation,
                         observation_error=self.observation_error, observation_position=self.observation_position,
                         state_hash=self.state_hash, state_source=self.state_source,  # type: ignore[arg-type]
                         metrics=dict(self.metrics), mutative=self.mutative, model_text=self.model_text)


def _is_thought(role: str) -> bool:
    return "(thought)" in role.lower()


def _transcript_step(seq: int, actor: str, role: str, to: str | None, text: str) -> _Draft:
    """One agent turn of a multi-agent transcript as an action (module docstring)."""
    m = _ACTION_REPORT.match(text)
    if m and m.group("rest").strip():
        d = _Draft(seq, "message", actor, f"message:{actor}", {"text": m.group("action").strip()}, mutative=True)
        d.observe(m.group("rest"), seq)
        return d
    addr = _ADDRESS.search(text)
    if addr and text.lstrip().startswith("Address:"):
        d = _Draft(seq, "message", actor, f"message:{actor}", {"text": f"Address: {addr.group('address')}"},
                   mutative=True)
        d.observe(text, seq)
        return d
    args: dict[str, Any] = {"text": text}
    if to:
        args["to"] = to
    return _Draft(seq, "message", actor, f"message:{actor}", args, mutative=False, model_text=text)


class _Fold:
    """The walk over the events (see :func:`watch_steps`)."""

    def __init__(self) -> None:
        self.steps: list[_Draft] = []
        self.by_op: dict[str, _Draft] = {}
        self.reply: tuple[int, str, str] | None = None   # (seq, text, actor) of a reply whose calls may follow
        self.open: _Draft | None = None                   # the step still waiting for its observation
        self.thoughts: dict[str, list[str]] = {}
        self.trees: list[tuple[int, str]] = []
        self.retried: set[str] = set()                      # operations whose last result was an error

    # a reply with no call: a message, or a question once the user answers it
    def reply_draft(self, answer: tuple[int, str] | None = None) -> _Draft:
        """The step the pending reply is (the fold is not changed)."""
        assert self.reply is not None
        seq, text, actor = self.reply
        kind = "question" if answer is not None else "message"
        d = _Draft(seq, kind, actor, f"message:{actor}", {"text": text}, mutative=False, model_text=text)
        if answer is not None:
            d.observe(answer[1], answer[0], judge=False)       # a person's answer is not an error report
        return d

    def _settle_reply(self, answer: tuple[int, str] | None = None) -> None:
        if self.reply is None:
            return
        d = self.reply_draft(answer)
        self.reply = None
        self.steps.append(d)

    def model_replied(self, seq: int, p: Any) -> None:
        prop = p.proposal if isinstance(p.proposal, Mapping) else {}
        agent = prop.get("agent")
        text = p.reply if isinstance(p.reply, str) else ""
        if isinstance(agent, str):                          # a transcript turn (Who&When)
            role = str(prop.get("source_role", agent))
            if self.open is not None and self.open.actor != agent and not _is_thought(role):
                self.open.observe(text, seq)
                self.open = None
            if _is_thought(role):
                self.thoughts.setdefault(agent, []).append(text)
                return
            to = prop.get("addressed_to") if isinstance(prop.get("addressed_to"), str) else None
            d = _transcript_step(seq, agent, role, to, text)
            thoughts = self.thoughts.pop(agent, [])
            if thoughts:
                d.model_text = "\n".join([*thoughts, d.model_text]).strip()
            self.steps.append(d)
            self.open = d if d.observation is None else None
            return
        self._settle_reply()
        thought = prop.get("thought") if isinstance(prop.get("thought"), str) else ""
        self.reply = (seq, text or thought, "agent")

    def tool_intent(self, seq: int, p: Any) -> None:
        if p.operation_id in self.by_op:    # another attempt of the same operation: the same step
            self.open = None
            return
        text = ""
        if self.reply is not None:
            text = self.reply[1]
            self.reply = None
        args = dict(p.arguments) if isinstance(p.arguments, Mapping) else {}
        d = _Draft(seq, "tool", "agent", str(p.tool), args, mutative=is_mutative(str(p.tool), args, p.repeat_contract),
                   model_text=text, operation_id=p.operation_id)
        self.steps.append(d)
        self.by_op[p.operation_id] = d
        self.open = None

    def tool_result(self, seq: int, p: Any) -> None:
        d = self.by_op.get(p.operation_id)
        if d is None or p.status in _NON_FINAL:
            return
        if d.observation is not None:
            if p.operation_id not in self.retried:
                return
            d.metrics = {}                                  # a retry's result replaces the failed attempt's
        outcome = p.outcome if isinstance(p.outcome, Mapping) else {}
        d.observe(_observation_text(p.outcome, p.status), seq, error=p.status in _ERROR_STATUSES)
        if p.status in _ERROR_STATUSES:
            self.retried.add(p.operation_id)                # a later attempt may still succeed
        else:
            self.retried.discard(p.operation_id)
        measured = _metrics_from_outcome(outcome)
        if measured:
            d.metrics = measured

    def runtime_input(self, seq: int, p: Any) -> None:
        if p.kind != "order" or not isinstance(p.value, Mapping):
            return
        v = p.value
        role = str(v.get("role", "")).lower()
        name = v.get("name")
        content = v.get("content")
        if role in _SILENT_ROLES or not isinstance(content, str):
            return
        if role in _USER_ROLES and not isinstance(name, str):
            if self.reply is not None:
                self._settle_reply((seq, content))
            elif self.open is not None:
                self.open.observe(content, seq, judge=False)
                self.open = None
            return
        target = self.open
        if target is None and self.steps and self.steps[-1].observation is None:
            target = self.steps[-1]
        if target is not None:                               # an executor's or environment's output
            target.observe(content, seq)
            self.open = None

    def event(self, e: Any) -> None:
        t, p, seq = e.event_type, e.payload, e.sequence_number
        if t == "ModelReplied":
            self.model_replied(seq, p)
        elif t == "ToolIntent":
            self.tool_intent(seq, p)
        elif t == "ToolResult":
            self.tool_result(seq, p)
        elif t == "RuntimeInput":
            self.runtime_input(seq, p)
        elif t == "WorkspaceChanged":
            self.trees.append((seq, p.result_tree_sha256))
        elif t == "Checkpoint" and getattr(p, "workspace_tree_sha256", None):
            self.trees.append((seq, p.workspace_tree_sha256))


class StepFold:
    """:func:`watch_steps` as the log grows: :meth:`add` the new events, :meth:`steps` gives what
    :func:`watch_steps` gives for every event added so far. Each event is read once (its
    observation judged once), so a watchdog that looks after every step of a live trajectory
    costs one pass over the new events plus the state assignment, not a fold from the start.

    Pure (no I/O, no clock). A reply still waiting for its call is shown as a message step and
    stays pending (a tool call that follows it takes its text, as in the batch fold)."""

    def __init__(self) -> None:
        self._fold = _Fold()
        self.last_position = 0

    def add(self, events: Iterable[Any]) -> "StepFold":
        """Fold ``events`` (in sequence order); events at or before :attr:`last_position`, already
        folded, are skipped. Returns self. Raises WatchInputError for an item that is not an Event."""
        fold = self._fold
        for e in events:
            _check_event(e)
            if e.sequence_number <= self.last_position:
                continue
            fold.event(e)
            self.last_position = e.sequence_number
        return self

    def steps(self) -> list[WatchStep]:
        """The steps of the events added so far (module docstring for the mapping)."""
        fold = self._fold
        drafts = list(fold.steps)
        if fold.reply is not None:
            drafts.append(fold.reply_draft())
        for d in drafts:
            d.state_hash, d.state_source = None, None
        if fold.trees:
            _workspace_states(drafts, fold.trees)
        else:
            _log_states(drafts)
        return [d.freeze() for d in drafts]


def watch_steps(events: Sequence[Any]) -> list[WatchStep]:
    """The watchdog's steps of one log, in log order (module docstring for the mapping).

    ``events``: the log's :class:`~kernel_lib.core.events.Event` list (ours, or an importer's), in
    sequence order. Returns a list of :class:`~kernel_lib.recovery.watchdog.model.WatchStep`
    (empty for a log with no action). Pure; raises ``TypeError`` for something that is not an event
    sequence, :class:`~kernel_lib.errors.WatchInputError` for an item that is not an Event and for
    events that are not one trajectory in sequence order (a sequence number repeated or going
    back: a spliced or reordered log, whose positions would name no single event).
    (:class:`StepFold` gives the same steps for a log that grows.)"""
    if isinstance(events, (str, bytes)) or not isinstance(events, Sequence):
        raise TypeError(f"events must be a sequence of Event, not {type(events).__name__}")
    fold = StepFold()
    prev: Any = None
    for e in events:                  # every event as given (no skipping by position)
        _check_event(e)
        if prev is not None and (e.trajectory_id != prev.trajectory_id or e.sequence_number <= prev.sequence_number):
            what = (f"of trajectory {e.trajectory_id!r} after one of {prev.trajectory_id!r}"
                    if e.trajectory_id != prev.trajectory_id else
                    f"at sequence number {e.sequence_number} after #{prev.sequence_number}")
            raise WatchInputError(f"event {e.event_id!r} comes {what}: the watchdog reads one trajectory's log "
                                  "in sequence order", field="sequence_number")
        fold._fold.event(e)
        prev = e
    return fold.steps()


def _check_event(e: Any) -> None:
    if not isinstance(e, Event):
        raise WatchInputError(f"the watchdog reads kernel_lib Event objects (a log's or an importer's events), "
                              f"got {type(e).__name__}")


def _workspace_states(steps: list[_Draft], trees: list[tuple[int, str]]) -> None:
    """State after step i: the last tree recorded before step i+1's action (module docstring)."""
    trees = sorted(trees)
    j, current = 0, None
    for i, d in enumerate(steps):
        bound = steps[i + 1].position if i + 1 < len(steps) else float("inf")
        while j < len(trees) and trees[j][0] < bound:
            current = trees[j][1]
            j += 1
        if current is not None:
            d.state_hash, d.state_source = current, "workspace"
