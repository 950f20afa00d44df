"""The crash panel as a marimo app: `marimo run apps/crash_panel.py` (from the project root).

Kill a real worker process with SIGKILL at any point of the repair trajectory, then let a new
process rebuild the record from the surviving log and reconcile test_r18 with the executor by its
operation id (§11.1, §11.3.3 table 3, §11.5.3). Everything runs for real on this machine: a worker,
an executor service on loopback running pytest against the snapshot ws_r18, and the replacement.
The session's helper processes stop by themselves when the app's kernel ends (they watch their
parent); marimo ends a kernel without running exit handlers, so its work directory under the system
temp folder may stay behind, and the next session sweeps it as stale. Set CRASH_PANEL_STORE to
``segment`` to use the segment log instead of SQLite.
"""

import marimo

__generated_with = "0.25.2"
app = marimo.App()


@app.cell
def _():
    import atexit
    import os

    import marimo as mo

    from kernel_lib.errors import KernelError
    from kernel_lib.live.session import WorksheetSession
    from widgets.crash_panel import CrashPanel

    STORE = os.environ.get("CRASH_PANEL_STORE", "sqlite")
    try:
        session, start_error = WorksheetSession(store_kind=STORE, seed=0, test_delay_s=1.0), None
        atexit.register(session.close)   # a normal interpreter exit tears the processes down
    except KernelError as exc:           # a bad CRASH_PANEL_STORE: say so on the page
        session, start_error = None, f"{type(exc).__name__}: {exc}"
    return CrashPanel, mo, session, start_error


@app.cell
def _(mo):
    guide = mo.md("""
### Crash panel: kill a real worker, rebuild from the log (§11.1, §11.5.3)

**What to do.**

1. Click **start**, then **crash now**: the worker is killed wherever it is. Click **crash now** right
   after **start** too, before it has written anything.
2. Or pick a position in the list and click **crash at**: the worker stops right after that event is
   durable and is killed there. Try *Authorized*, *BudgetReserved*, *ToolIntent* and *ToolResult*.
3. Click **recover** (a new process folds the surviving log), then **reconcile** (a new owner asks the
   executor about each in-doubt operation by its operation id).

**What to notice.**

- The status line says where the session stands; the bold line under it says what the last step found.
- After a kill before any event was durable, recover says the log is empty: there is nothing to rebuild.
- After *ToolIntent* or *ToolResult*, `test_r18` is in doubt (highlighted) and its reservation stays held:
  the replacement does not invent an outcome. Reconcile settles it only with a signed completion record.
- With *ToolIntent* the executor has never heard of the job, and `test_r18` still stays in doubt:
  not hearing of a request does not prove it was never sent.
- A click that cannot run (crash with no worker, start over an unread crash) shows its reason in red.
""")
    guide  # noqa: B018  marimo displays a cell's last expression
    return


@app.cell
def _(CrashPanel, mo, session, start_error):
    if start_error:
        panel = None
        page = mo.callout(mo.md(f"**Cannot start the worksheet session.** {start_error}\n\n"
                                "`CRASH_PANEL_STORE` must be `sqlite` or `segment`."), kind="danger")
    else:
        panel = mo.ui.anywidget(CrashPanel(session, reconcile_timeout_s=120))
        page = panel
    page  # noqa: B018  marimo displays a cell's last expression
    return (panel,)


if __name__ == "__main__":
    app.run()
