"""The cadence explorer as a marimo app: `marimo run apps/cadence_explorer.py` (from the project root).

How far apart to put checkpoints (§11.4.2 eq. 3, §11.4.3 eq. 5 and eq. 6, Napkin Math 11.1): the
widget's sliders set the givens, kernel_lib.cadence evaluates them, and the charts and the readout
are what it computed. The app opens on Napkin Math 11.1's trace and givens.
"""

import marimo

__generated_with = "0.25.2"
app = marimo.App()


@app.cell
def _():
    import marimo as mo

    from kernel_lib.errors import KernelError
    from widgets.cadence_explorer import CadenceExplorer

    try:
        explorer, load_error = CadenceExplorer.napkin_11_1(), None
    except (KernelError, OSError) as exc:   # e.g. the chapter's givens cannot be read: say so on the page
        explorer, load_error = None, f"{type(exc).__name__}: {exc}"
    return explorer, load_error, mo


@app.cell
def _(mo):
    guide = mo.md("""
### Cadence explorer: how often to checkpoint (§11.4.3, Napkin Math 11.1)

**What to do.**

1. Move **stride k** away from the marked optimum, first by a factor of two each way, then much further.
2. Raise the **capture pause C**, then the **failure rate λ**, and watch where the optimum moves.
3. Bring **re-execution Re** down towards **reconstruction R**, then type a value into any box
   (a negative pause, an empty box) and press Enter.

**What to notice.**

- The curve is flat around its minimum: anywhere in the shaded band from half to twice the optimum
  costs little more than the optimum itself; the readout gives the factor at the current stride.
- The optimum follows the square root of C / (λR): quadrupling the pause only doubles the best stride.
- Logged turns (rebuilt at R per turn) allow a much longer stride than unlogged ones (re-run at Re);
  the readout states that gain.
- The crash trace's points are eq. 6 on one real sequence of crashes: its best stride need not be the
  formula's, because a handful of crashes is not an average.
- A refused value is marked in its box with the reason; the charts keep the last good givens.
""")
    guide  # noqa: B018  marimo displays a cell's last expression
    return


@app.cell
def _(explorer, load_error, mo):
    if load_error:
        widget = None
        page = mo.callout(mo.md(f"**Cannot open the explorer.** {load_error}"), kind="danger")
    else:
        widget = mo.ui.anywidget(explorer)
        page = widget
    page  # noqa: B018  marimo displays a cell's last expression
    return (widget,)


if __name__ == "__main__":
    app.run()
