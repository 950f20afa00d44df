"""The course widgets (anywidget). Each lives in its own module; the names below are also
importable from ``widgets`` directly, loaded on first use so that importing one widget does not
import the others (and their dependencies)."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CadenceExplorer": "widgets.cadence_explorer",
    "CrashPanel": "widgets.crash_panel",
    "LogScrubber": "widgets.scrubber",
    "ReplicationPanel": "widgets.replication",
    "ResumeTimelineView": "widgets.resume_timeline",
    "RetentionPlanner": "widgets.retention_planner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'widgets' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
