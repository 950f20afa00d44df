"""The course widgets (anywidget). Each lives in its own module; the names below are also
importable from ``widgets`` directly, loaded on first use so that importing one widget does not
import the others (and their dependencies).

A widget's JavaScript and CSS are files in ``widgets/static`` (``<name>.js``, ``<name>.css``);
``widgets/static/_shared.js`` holds the helpers they all use, and :mod:`widgets._base` holds the
Python base classes that load those files and run the button protocol. Views own no state and
compute no figure: the state lives in kernel_lib (e.g. :class:`kernel_lib.live.session.WorksheetSession`,
:class:`kernel_lib.quorum.session.ReplicationSession`) and the figures come from it."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BreakerDashboard": "widgets.breaker_dashboard",
    "CadenceExplorer": "widgets.cadence_explorer",
    "CrashPanel": "widgets.crash_panel",
    "LifelineStepper": "widgets.lifeline_stepper",
    "LogScrubber": "widgets.scrubber",
    "PolicyExplorer": "widgets.policy_explorer",
    "ReplicationPanel": "widgets.replication",
    "ResumeTimelineView": "widgets.resume_timeline",
    "RetentionPlanner": "widgets.retention_planner",
    "SagaStepper": "widgets.saga_stepper",
    "WatchdogView": "widgets.watchdog_view",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'widgets' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
