"""Tables as a student reads them: :func:`table` wraps a polars DataFrame for display.

A view only: the numbers come from kernel_lib (or were measured and labelled so); this module
decides how they are written, nothing else. The rules:

* money (a column named ``..._usd``, ``... (USD)``, ``... ($)``, or listed in ``money=``) is
  written as dollars: ``$12.35`` and ``$1,234.57`` from one dollar up; below one dollar three
  significant digits with at least two decimals (``$0.10``, ``$0.0331``, ``$0.0000331``); never
  ``3.31e-05``. :func:`money_text` is the rule on its own.
* other floats keep ``digits`` significant digits (3 unless told, per column with a dict):
  ``2.13``, ``0.000123``, ``12,346`` (a float that reaches ``10**digits`` is rounded to a whole
  number with thousands separators); magnitudes below 10^-6 or from 10^15 up use a
  ``1.23×10⁻⁷`` power of ten, never ``e`` notation. :func:`number_text` is the rule on its own.
* integers are written whole, with separators from 10,000 up (``sequence`` and ``*_id`` /
  ``*number`` columns stay bare, since they are names, not quantities).
* strings are written without quotes and never cut; ``None`` is ``—``; ``True``/``False`` are
  ``yes``/``no``; lists are joined with ``, ``; structs are ``key: value`` pairs.
* headers: ``headers="human"`` (the default) turns ``p50_ms`` into ``p50 (ms)`` and
  ``cost_usd`` into ``cost ($)``; ``names=`` renames any column outright; ``headers="raw"``
  keeps the frame's names.
* layout: the HTML table sits in a box that scrolls sideways when it is wider than the output
  area, its cells wrap long text instead of clipping it, numbers are right-aligned, and every row
  up to ``max_rows`` (50) is shown; a line under the table says how many more there are.

The returned :class:`Table` displays itself in JupyterLab, VS Code and marimo (``_repr_html_``),
and prints as aligned plain text (``repr``/``str``), which is what stored notebook outputs and
tests compare.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Table", "table", "use_for_polars", "money_text", "number_text", "cell_text", "human_header"]

_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
#: Unit suffixes a header may end in (units last in names), and how the header writes them.
UNITS: dict[str, str] = {
    "usd": "$", "s": "s", "ms": "ms", "us": "µs", "ns": "ns", "min": "min", "h": "h", "mo": "months",
    "bytes": "bytes", "b": "B", "kb": "KB", "mb": "MB", "gb": "GB", "tb": "TB", "pct": "%", "percent": "%",
    "turns": "turns", "tokens": "tokens", "events": "events", "x": "×",
}
def _is_money_name(name: str) -> bool:
    """A column whose name says dollars: a ``usd`` word (``cost_usd``, ``usd_per_trajectory``,
    ``held (USD)``) or a ``$``."""
    return "$" in name or "usd" in re.split(r"[^a-z0-9]+", name.lower())
_BARE_INT_NAME = re.compile(r"(^|_| )(id|sequence|seq|number|epoch|turn|position|year|port|n|index|ordinal)$",
                            re.IGNORECASE)


def _plain_float(x: float, digits: int) -> str:
    """``x`` to ``digits`` significant digits in positional notation (no exponent)."""
    if x == 0:
        return "0"
    exp = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - exp)
    text = f"{x:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def number_text(x: float | int | None, digits: int = 3) -> str:
    """A number as a reader should see it (see the module docstring): ``digits`` significant
    digits for floats, whole numbers with separators from ``10**digits`` up, a ``×10ⁿ`` power
    of ten outside 10^-6 .. 10^15, ``—`` for None, and ``nan`` / ``∞`` spelled out."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}" if abs(x) >= 10_000 else str(x)
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    if x == 0:
        return "0"
    mag = abs(x)
    if mag < 1e-6 or mag >= 1e15:
        mantissa, exp = f"{x:.{digits - 1}e}".split("e")
        mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
        return f"{mantissa}×10{str(int(exp)).translate(_SUPERSCRIPT)}"
    if mag >= 10 ** digits:
        return f"{round(x):,}"
    return _plain_float(x, digits)


def money_text(usd: float | int | None) -> str:
    """Dollars as money: ``$1,234.57`` from one dollar up; below it three significant digits and
    at least two decimals (``$0.10``, ``$0.0000331``); ``$0`` for zero, ``-$0.12`` when
    negative, ``—`` for None. Never exponent notation."""
    if usd is None:
        return "—"
    x = float(usd)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "∞ $" if x > 0 else "-∞ $"
    if x == 0:
        return "$0"
    sign = "-" if x < 0 else ""
    mag = abs(x)
    if mag >= 1:
        return f"{sign}${mag:,.2f}"
    exp = math.floor(math.log10(mag))
    decimals = max(2, 2 - exp)          # three significant digits
    text = f"{mag:.{decimals}f}"
    whole, frac = text.split(".")
    frac = frac.rstrip("0")
    frac = frac + "0" * (2 - len(frac)) if len(frac) < 2 else frac
    return f"{sign}${whole}.{frac}"


def human_header(name: str) -> str:
    """``p50_ms`` -> ``p50 (ms)``, ``cost_usd`` -> ``cost ($)``, ``bytes_per_turn`` ->
    ``bytes per turn``; a name with spaces or punctuation is taken as already written for people."""
    if not re.fullmatch(r"[A-Za-z0-9_]+", name) or "_" not in name:
        return name
    parts = name.split("_")
    unit = UNITS.get(parts[-1].lower()) if len(parts) > 1 else None
    parts = ["$" if p.lower() == "usd" else p for p in parts]
    if unit is not None and not (len(parts) > 2 and parts[-2].lower() == "per"):
        return f"{' '.join(parts[:-1])} ({unit})"
    return " ".join(parts)


def cell_text(value: Any, *, money: bool = False, digits: int = 3, bare_int: bool = False) -> str:
    """One cell's text by the module's rules (``money``: written as dollars; ``bare_int``: an
    integer written without separators, for identifiers and positions)."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if money and isinstance(value, (int, float)):
        return money_text(value)
    if isinstance(value, int):
        return str(value) if bare_int else number_text(value, digits)
    if isinstance(value, float):
        return number_text(value, digits)
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {cell_text(v, digits=digits)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(cell_text(v, money=money, digits=digits) for v in value)
    try:
        import numpy as np
        if isinstance(value, np.generic):
            return cell_text(value.item(), money=money, digits=digits, bare_int=bare_int)
        if isinstance(value, np.ndarray):
            return cell_text(value.tolist(), money=money, digits=digits)
    except ImportError:   # pragma: no cover - numpy comes with the analysis extra
        pass
    return str(value)


_NUMERIC = (int, float)
_BOX_STYLE = "overflow-x:auto;max-width:100%"
_TABLE_STYLE = "table-layout:auto;border-collapse:collapse;margin:0;width:auto"
_CELL_STYLE = ("padding:2px 10px;border-bottom:1px solid rgba(128,128,128,.3);vertical-align:top;"
               "white-space:normal;overflow-wrap:break-word;max-width:40em;text-overflow:clip;overflow:visible")
_HEAD_STYLE = _CELL_STYLE + ";font-weight:600;border-bottom:1px solid rgba(128,128,128,.8)"
#: the first column of a wide table stays in view while the reader scrolls right (its key: the
#: position, the operation); painted with the page's own background so scrolled cells pass under it
_STICKY_STYLE = ";position:sticky;left:0;z-index:1;background:var(--jp-layout-color0,Canvas)"
#: tables with more columns than this keep their first column in view
STICKY_FROM_COLUMNS = 5


@dataclass(frozen=True)
class Table:
    """A formatted table: ``headers`` and ``rows`` are the texts shown; ``numeric`` marks the
    right-aligned columns; ``hidden_rows`` counts the rows past ``max_rows``; ``frame`` is the
    polars DataFrame it came from (the numbers themselves, for code)."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...]
    hidden_rows: int
    caption: str
    frame: Any

    def _repr_html_(self) -> str:
        esc = html.escape

        sticky = len(self.headers) >= STICKY_FROM_COLUMNS

        def cell(tag: str, text: str, right: bool, first: bool) -> str:
            style = (_HEAD_STYLE if tag == "th" else _CELL_STYLE) + (";text-align:right" if right else
                                                                     ";text-align:left")
            if sticky and first:
                style += _STICKY_STYLE
            return f'<{tag} style="{style}">{esc(text)}</{tag}>'

        head = "".join(cell("th", h, n, i == 0) for i, (h, n) in enumerate(zip(self.headers, self.numeric)))
        body = "".join("<tr>" + "".join(cell("td", t, n, i == 0) for i, (t, n) in enumerate(zip(r, self.numeric)))
                       + "</tr>" for r in self.rows)
        caption = (f'<caption style="caption-side:top;text-align:left;padding:2px 0">{esc(self.caption)}</caption>'
                   if self.caption else "")
        more = (f'<div style="opacity:.7">… {self.hidden_rows:,} more row{"s" if self.hidden_rows != 1 else ""} '
                f"(the whole frame is in <code>.frame</code>)</div>" if self.hidden_rows else "")
        return (f'<div class="dal-table" style="{_BOX_STYLE}"><table style="{_TABLE_STYLE}">{caption}'
                f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}</div>")

    def __str__(self) -> str:
        cols = list(zip(self.headers, *self.rows)) if self.rows else [(h,) for h in self.headers]
        widths = [max(len(t) for t in col) for col in cols]

        def line(texts: Sequence[str]) -> str:
            return "  ".join(t.rjust(w) if n else t.ljust(w)
                             for t, w, n in zip(texts, widths, self.numeric)).rstrip()

        out = ([self.caption] if self.caption else []) + [line(self.headers),
                                                          "  ".join("-" * w for w in widths)]
        out += [line(r) for r in self.rows]
        if self.hidden_rows:
            out.append(f"… {self.hidden_rows:,} more rows")
        return "\n".join(out)

    def __repr__(self) -> str:
        return str(self)


def table(frame: Any, *, money: Iterable[str] = (), digits: int | Mapping[str, int] = 3,
          names: Mapping[str, str] | None = None, headers: str = "human", max_rows: int = 50,
          caption: str = "") -> Table:
    """``frame`` (a polars DataFrame, or anything ``polars.DataFrame(...)`` accepts, e.g. a list of
    dicts) as a :class:`Table` written by the module's rules.

    Args:
        money: columns written as dollars, besides those whose names say USD or $.
        digits: significant digits of float columns (one number, or per column name; 3 by default).
        names: column name -> header shown (wins over ``headers``).
        headers: "human" (``p50_ms`` -> ``p50 (ms)``) or "raw".
        max_rows: rows shown (the rest are counted under the table); caption: a line above it.

    Raises:
        ConfigError: an unknown column in ``money``/``digits``/``names``, ``headers`` not
            "human"/"raw", or ``max_rows`` below 1.
    """
    import polars as pl

    from kernel_lib.errors import ConfigError

    df = frame if isinstance(frame, pl.DataFrame) else pl.DataFrame(frame)
    cols = list(df.columns)
    money_cols = set(money)
    per_col_digits = dict(digits) if isinstance(digits, Mapping) else {}
    rename = dict(names or {})
    for what, given in (("money", money_cols), ("digits", per_col_digits), ("names", rename)):
        unknown = sorted(set(given) - set(cols))
        if unknown:
            raise ConfigError(f"table({what}=...) names columns {unknown} the frame does not have: {cols}")
    if headers not in ("human", "raw"):
        raise ConfigError(f"headers={headers!r}: choose 'human' or 'raw'")
    if not isinstance(max_rows, int) or max_rows < 1:
        raise ConfigError(f"max_rows={max_rows!r}: show at least one row")
    default_digits = digits if isinstance(digits, int) else 3
    money_cols |= {c for c in cols if _is_money_name(c) and df.schema[c].is_numeric()}
    shown = df.head(max_rows)
    numeric = tuple(df.schema[c].is_numeric() for c in cols)
    columns = []
    for c in cols:
        bare = _BARE_INT_NAME.search(c) is not None and "per" not in re.split(r"[_ ]", c.lower())
        d = per_col_digits.get(c, default_digits)
        columns.append([cell_text(v, money=c in money_cols, digits=d, bare_int=bare) for v in shown[c].to_list()])
    rows = tuple(zip(*columns)) if columns else ()
    shown_headers = tuple(rename.get(c, human_header(c) if headers == "human" else c) for c in cols)
    return Table(shown_headers, tuple(tuple(r) for r in rows), numeric, max(0, df.height - max_rows), caption, df)


def use_for_polars(*, money: Iterable[str] = (), digits: int = 3, max_rows: int = 50) -> bool:
    """Show every polars DataFrame a notebook cell returns through :func:`table` (its HTML and its
    plain text), in the running IPython kernel; a notebook calls this once in its imports cell.

    Args:
        money: more column names written as dollars wherever they appear (besides ``*_usd``, $).
        digits, max_rows: as for :func:`table`.

    Returns False (and changes nothing) outside IPython, e.g. in a script or under marimo.
    """
    try:
        from IPython import get_ipython
    except ImportError:      # pragma: no cover - IPython comes with the course extra
        return False
    ip = get_ipython()
    if ip is None:
        return False
    import polars as pl

    extra = frozenset(money)

    def show(df: Any) -> Table:
        return table(df, money=[c for c in df.columns if c in extra], digits=digits, max_rows=max_rows)

    formatters = ip.display_formatter.formatters
    formatters["text/html"].for_type(pl.DataFrame, lambda df: show(df)._repr_html_())
    formatters["text/plain"].for_type(pl.DataFrame, lambda df, p, cycle: p.text(str(show(df))))
    return True
