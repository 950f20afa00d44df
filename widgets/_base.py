"""What every course widget shares: its front-end files, the JavaScript helpers, and the Python side
of the button protocol.

Front-end files. Each widget's JavaScript and CSS live in ``widgets/static/<name>.js`` and
``widgets/static/<name>.css``; a widget names its files with the class keyword ``static``::

    class LogScrubber(KernelWidget, static="scrubber"): ...

The helpers every widget repeats (keyboard isolation, filling a table from rows, the command
protocol below) are in ``widgets/static/_shared.js``, one ``const dal = {...}`` object. anywidget
loads ``_esm`` as a single ES module, and a module loaded from a string or blob URL cannot import
its neighbour file by a relative path, so :class:`KernelWidget` builds ``_esm`` at class creation by
putting ``_shared.js`` in front of the widget's own file (:func:`bundle_esm`). One module without
imports is what every front end runs the same way: JupyterLab, VS Code's notebook renderer (whose
webview may refuse ``data:`` imports) and marimo, and it needs no network. ``_css`` is the widget's
CSS file's text.

Hot reload. With ``ANYWIDGET_HMR=1`` (anywidget's own switch) and the ``watchfiles`` package, a
change to any file under ``widgets/static`` is pushed to every live widget; without ``watchfiles``
call :func:`reload_static` after an edit. Either way the notebook keeps its kernel and its state.

The command protocol (:class:`CommandWidget`): a button writes ``command = {"action", ..., "n"}``;
the kernel sets ``busy``, runs the action (one of ``ACTIONS``), puts a refusal's reason in ``error``
(bad input never raises into the notebook), re-publishes its state with :meth:`CommandWidget.refresh`,
clears ``busy`` and sets ``completed = n``. The JavaScript half is ``dal.commander`` and
``dal.showBusy``.
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import anywidget
import traitlets

from kernel_lib.errors import ConfigError, KernelError

__all__ = ["STATIC_DIR", "SHARED_JS", "KernelWidget", "CommandWidget", "bundle_esm", "widget_css", "clip", "as_whole",
           "reload_static"]

#: Where the widgets' JavaScript and CSS files live (shipped as package data).
STATIC_DIR = Path(__file__).resolve().with_name("static")
#: The helper module put in front of every widget's own JavaScript.
SHARED_JS = "_shared.js"

#: The errors a button's action may end in: shown in ``error``, never raised into the notebook.
REFUSED = (KernelError, ValueError, TypeError, OSError)


def as_whole(v: Any) -> int | None:
    """``v`` as a whole number when it is one (an int, an integral float, digits in a string, as a
    page or a slider sends them); None otherwise (a bool is not a number here)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v.strip())
    return None


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters (saying how long it was), so huge input stays readable."""
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


def _static_file(filename: str) -> Path:
    path = STATIC_DIR / filename
    if not path.is_file():
        raise ConfigError(f"widget front-end file {filename!r} is missing from {STATIC_DIR}")
    return path


def bundle_esm(name: str) -> str:
    """The ES module of widget ``name``: ``_shared.js`` then ``static/<name>.js``, as one text.
    Raises ConfigError when a file is missing (e.g. a package built without its package data)."""
    shared = _static_file(SHARED_JS).read_text(encoding="utf-8")
    own = _static_file(f"{name}.js").read_text(encoding="utf-8")
    return f"{shared}\n// ---- {name}.js ----\n{own}"


def widget_css(name: str) -> str:
    """The text of ``static/<name>.css``; ConfigError when it is missing."""
    return _static_file(f"{name}.css").read_text(encoding="utf-8")


_CLASSES: dict[str, list[type[KernelWidget]]] = {}
_LIVE: weakref.WeakSet[KernelWidget] = weakref.WeakSet()
_watching = threading.Lock()
_watch_started = False


class KernelWidget(anywidget.AnyWidget):
    """A course widget whose front end is read from ``widgets/static`` (see the module docstring).

    Subclass with ``static="<name>"`` to load ``static/<name>.js`` (after ``_shared.js``) and
    ``static/<name>.css``. Every widget has an ``error`` trait: why the last input was refused
    ("" when it was not). A trait assigned a value of the wrong type from code is refused the
    same way (:meth:`type_refusal`), never with a raw ``TraitError``.
    """

    static_name: ClassVar[str | None] = None
    error = traitlets.Unicode("").tag(sync=True)

    def __init_subclass__(cls, static: str | None = None, **kw: Any) -> None:
        if static is not None:
            cls.static_name = static
            cls._esm = bundle_esm(static)
            cls._css = widget_css(static)
            _CLASSES.setdefault(static, []).append(cls)
        super().__init_subclass__(**kw)

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        if self.static_name is not None:
            _LIVE.add(self)
            if os.environ.get("ANYWIDGET_HMR") == "1":
                _watch_static()


    def __setattr__(self, name: str, value: Any) -> None:
        """A trait set from code to a value of the wrong type (``scrubber.position = "5"``,
        ``planner.preset = 3``) is refused with this widget's own message in ``error`` and keeps
        its value, instead of raising traitlets' ``TraitError`` into the notebook."""
        try:
            super().__setattr__(name, value)
        except traitlets.TraitError:
            if name.startswith("_") or not self.has_trait(name):
                raise
            message = self.type_refusal(name, value)
            self.error = message
            self.__dict__["_type_refusal"] = (name, message)
            return
        refused = self.__dict__.get("_type_refusal")
        if refused is not None and refused[0] == name:     # a good value now: the old message is stale
            self.__dict__["_type_refusal"] = None
            if self.error == refused[1]:
                self.error = ""

    def set_givens(self, givens: dict[str, Any], names: Any) -> bool:
        """Set several of an explorer's givens (``names``: the trait names it takes), then recompute
        once: the widget's ``_recompute()`` runs after the last one, with ``_ready`` False until then.
        Unknown names set ``error`` and nothing changes. Returns what ``_recompute()`` returns
        (True when the givens were accepted; otherwise the reason is in ``error``)."""
        unknown = sorted(set(givens) - set(names))
        if unknown:
            self.error = f"unknown given(s) {unknown}: choose from {sorted(names)}"
            return False
        self._ready = False
        try:
            with self.hold_trait_notifications():
                for name, value in givens.items():
                    setattr(self, name, value)
        finally:
            self._ready = True
        return self._recompute()

    def type_refusal(self, name: str, value: Any) -> str:
        """The ``error`` text for trait ``name`` set to ``value`` of a type it does not take."""
        trait = self.traits()[name]
        return clip(f"{type(self).__name__}.{name} = {clip(repr(value), 60)} was refused: {name} takes "
                    f"{trait.info()}, not {type(value).__name__}; it stays {clip(repr(getattr(self, name)), 60)}",
                    400)


def reload_static() -> int:
    """Read every widget's files again and push them to the widget classes and to every live widget
    (the front end redraws with the new code). Returns how many live widgets were updated."""
    for name, classes in _CLASSES.items():
        esm, css = bundle_esm(name), widget_css(name)
        for cls in classes:
            cls._esm, cls._css = esm, css
    n = 0
    for w in list(_LIVE):
        if w.static_name is None:
            continue
        esm, css = bundle_esm(w.static_name), widget_css(w.static_name)
        if w._esm != esm:
            w._esm = esm
        if w._css != css:
            w._css = css
        n += 1
    return n


def _watch_static() -> None:
    """Start (once) a daemon thread that calls :func:`reload_static` whenever a static file changes."""
    global _watch_started
    with _watching:
        if _watch_started:
            return
        _watch_started = True
    try:
        from watchfiles import watch
    except ImportError:
        warnings.warn("ANYWIDGET_HMR=1 but watchfiles is not installed: the widgets do not reload by themselves; "
                      "call widgets._base.reload_static() after editing widgets/static", stacklevel=3)
        return

    def loop() -> None:
        for _changes in watch(STATIC_DIR):
            try:
                reload_static()
            except Exception as exc:   # noqa: BLE001 - a half-saved file must not end the watcher
                warnings.warn(f"widget reload failed: {exc}", stacklevel=1)

    threading.Thread(target=loop, name="widgets-static-reload", daemon=True).start()


class CommandWidget(KernelWidget):
    """A widget driven by buttons (the command / busy / completed protocol of the module docstring).

    Traits: ``command`` (the last command written by a button), ``status`` (what the last step did),
    ``busy`` (a command is running), ``completed`` (the ``n`` of the last finished command), and
    ``error``. A subclass lists its ``ACTIONS``, implements :meth:`refresh` (publish its state to
    its traits) and :meth:`dispatch` (run a command's action through :meth:`attempt`).
    """

    #: The actions a command may name.
    ACTIONS: ClassVar[tuple[str, ...]] = ()
    #: More command fields to name in the "malformed command" message, e.g. ``", 'member': <name>"``.
    COMMAND_FIELDS: ClassVar[str] = ""

    command = traitlets.Any({}).tag(sync=True)     # checked in _on_command: bad input becomes ``error``
    status = traitlets.Unicode("").tag(sync=True)
    busy = traitlets.Bool(False).tag(sync=True)
    completed = traitlets.Int(0).tag(sync=True)

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.observe(self._on_command, names="command")

    def refresh(self, keep_error: bool = False) -> None:
        """Publish the widget's state to its traits (``keep_error`` leaves ``error`` as it is)."""
        raise NotImplementedError

    def dispatch(self, command: dict[str, Any]) -> None:
        """Run a well-formed ``command`` (its ``action`` is a non-empty string), through :meth:`attempt`."""
        raise NotImplementedError

    def refusal(self, action: str, exc: Exception) -> str:
        """The ``error`` text for an action that raised ``exc`` (one of :data:`REFUSED`)."""
        return clip(f"{clip(str(action), 40)}: {exc}", 600)

    def attempt(self, action: str, step: Callable[[], object]) -> bool:
        """Run ``step`` for ``action`` with ``busy`` set: True on success (``error`` cleared); False
        when ``action`` is not one of ``ACTIONS`` or ``step`` raised one of :data:`REFUSED` (the reason
        in ``error``). Either way :meth:`refresh` runs (keeping the error) and ``busy`` is cleared."""
        self.busy = True
        try:
            if action not in self.ACTIONS:
                raise ConfigError(f"unknown action {clip(repr(action), 80)}: choose one of {list(self.ACTIONS)}")
            step()
            self.error = ""
            return True
        except REFUSED as exc:
            self.error = self.refusal(action, exc)
            return False
        finally:
            try:
                self.refresh(keep_error=True)
            finally:
                self.busy = False

    def _on_command(self, change: dict[str, Any]) -> None:
        cmd = change["new"] or {}
        if not isinstance(cmd, dict) or not isinstance(cmd.get("action"), str) or not cmd["action"]:
            self.error = clip(f"malformed command {clip(repr(cmd), 80)}: expected "
                              f"{{'action': <one of {list(self.ACTIONS)}>{self.COMMAND_FIELDS}}}", 400)
            self.completed += 1
            return
        try:
            self.dispatch(cmd)
        finally:
            n = cmd.get("n")
            self.completed = n if isinstance(n, int) and not isinstance(n, bool) else self.completed + 1
