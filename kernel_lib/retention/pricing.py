"""Pricing a retention policy: bytes per artifact class, their storage bill, and the promises kept.

Chapter source: Durable Execution, §11.8 (Log Retention and State Compaction): §11.8.1 separates three
retention lifetimes (current recovery, historical replay, optional diagnostics); §11.8.2 keeps
envelopes small and puts payloads in content-addressed storage, which is what makes the bill easy to
split by artifact class; Napkin Math 11.2 prices keeping every recovery input of the repair trajectory
for a year. §11.12 exercise 7 applies the same arithmetic to the research agent
(:mod:`kernel_lib.course.exercises.ex11_7`).

Units (stated once, used everywhere here):

* sizes are decimal (SI): 1 KB = 1000 B, 1 MB = 10^6 B, 1 GB = 10^9 B. This is the project's
  convention (:mod:`kernel_lib.course.exercises.ex11_2` uses it for §11.4.2), and the one under which the
  chapter's own figures hold: 30 x (4 + 128) KB is the printed 3.96 MB only if 1 KB = 1000 B (in
  binary units it is 3.87 MiB). Binary units (KiB, MiB, GiB = 2^30 B) appear only where a function
  says so, as the alternative a reader might take;
* storage is priced in USD per GB-month, GB = 10^9 B; lifetimes are counted in months, and a year is
  12 months (no day counts enter);
* a cost "per trajectory" is the bill for one trajectory's bytes over their whole retention lifetime;
  a fleet's yearly bill is that times the trajectories started per year (by Little's law the same
  figure is the steady-state yearly bill when that many start every year).

Every function checks its arguments: a negative, NaN or infinite amount, a count that is not a whole
number, or a bool where a number belongs raises :class:`kernel_lib.errors.ConfigError` naming the
argument.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from kernel_lib.errors import ConfigError

BYTES_PER_KB = 1000
BYTES_PER_MB = 1000 ** 2
BYTES_PER_GB = 1000 ** 3
BYTES_PER_KIB = 1024
BYTES_PER_MIB = 1024 ** 2
BYTES_PER_GIB = 1024 ** 3
MONTHS_PER_YEAR = 12

#: The artifact classes the bill is split into (§11.8.2): compact event envelopes (control events,
#: intents, digests, the input manifests), delivered bounded observations (the bytes the model
#: actually received), raw tool output before bounding (here: fetched pages), and workspace snapshots.
ARTIFACT_CLASSES = ("envelopes", "observations", "raw_pages", "workspace")

#: The three retention lifetimes of §11.8.1.
PROMISES = ("current_recovery", "historical_replay", "diagnostics")


# --- argument checks ------------------------------------------------------------------------------


def _amount(name: str, value: Any, *, positive: bool = False) -> float:
    """``value`` as a finite float >= 0 (> 0 with ``positive``); ConfigError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    try:
        v = float(value)
    except OverflowError:
        raise ConfigError(f"{name} is too large to represent as a float, got {_short(value)}") from None
    if not math.isfinite(v):
        raise ConfigError(f"{name} must be finite, got {value!r}")
    if v < 0 or (positive and v == 0):
        raise ConfigError(f"{name} must be {'> 0' if positive else '>= 0'}, got {value!r}")
    return v


def _short(value: Any) -> str:
    """``repr(value)`` cut to a readable length (a 400-digit int is not a useful message)."""
    r = repr(value)
    return r if len(r) <= 40 else f"{r[:20]}...({len(r)} characters)"


def _finite(name: str, compute: Any) -> float:
    """The float ``compute()`` returns, refused with ConfigError naming ``name`` when it overflows.

    Finite arguments can still multiply to infinity (1e308 x 1e308); such a result is not a bill."""
    try:
        v = float(compute())
    except OverflowError:
        v = math.inf
    if not math.isfinite(v):
        raise ConfigError(f"{name} overflows: the arguments are too large for a finite result")
    return v


def _count(name: str, value: Any) -> int:
    """``value`` as a whole number >= 0; ConfigError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a whole number, got {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise ConfigError(f"{name} must be a whole number, got {value!r}")
        value = int(value)
    if value < 0:
        raise ConfigError(f"{name} must be >= 0, got {value!r}")
    return int(value)


# --- unit conversions -----------------------------------------------------------------------------


def kb_to_bytes(kb: float) -> float:
    """Decimal kilobytes to bytes (1 KB = 1000 B)."""
    return _amount("kb", kb) * BYTES_PER_KB


def mb_to_bytes(mb: float) -> float:
    """Decimal megabytes to bytes (1 MB = 10^6 B)."""
    return _amount("mb", mb) * BYTES_PER_MB


def bytes_to_gb(nbytes: float) -> float:
    """Bytes to decimal gigabytes (1 GB = 10^9 B), the unit storage is priced in."""
    return _amount("nbytes", nbytes) / BYTES_PER_GB


def bytes_to_gib(nbytes: float) -> float:
    """Bytes to binary gibibytes (1 GiB = 2^30 B): only for showing the binary alternative."""
    return _amount("nbytes", nbytes) / BYTES_PER_GIB


# --- bytes per trajectory -------------------------------------------------------------------------


@dataclass(frozen=True)
class TrajectoryBytes:
    """Bytes one trajectory leaves behind, by artifact class (every field in bytes, SI)."""

    envelopes: float
    observations: float
    raw_pages: float = 0.0
    workspace: float = 0.0

    def __post_init__(self) -> None:
        for c in ARTIFACT_CLASSES:
            object.__setattr__(self, c, _amount(c, getattr(self, c)))
        _finite("total bytes of the trajectory", lambda: sum(self.by_class().values()))

    def by_class(self) -> dict[str, float]:
        """``{class: bytes}`` in the order of :data:`ARTIFACT_CLASSES`."""
        return {c: getattr(self, c) for c in ARTIFACT_CLASSES}

    @property
    def total(self) -> float:
        """All classes together, bytes."""
        return sum(self.by_class().values())

    @property
    def log(self) -> float:
        """Envelopes plus delivered observations: what Napkin Math 11.2 calls 'the log', bytes."""
        return self.envelopes + self.observations

    def share(self, artifact: str) -> float:
        """Fraction of all bytes in class ``artifact`` (0 when the trajectory holds no bytes)."""
        if artifact not in ARTIFACT_CLASSES:
            raise ConfigError(f"unknown artifact class {artifact!r}; known: {', '.join(ARTIFACT_CLASSES)}")
        return getattr(self, artifact) / self.total if self.total else 0.0

    def dominant(self) -> str:
        """The class holding the most bytes (the first in :data:`ARTIFACT_CLASSES` order on a tie)."""
        sizes = self.by_class()
        return max(ARTIFACT_CLASSES, key=lambda c: (sizes[c], -ARTIFACT_CLASSES.index(c)))


def trajectory_bytes(turns: int, envelope_kb_per_turn: float, observation_kb_per_turn: float, *,
                     pages: int = 0, page_kb_raw: float = 0.0, workspace_mb: float = 0.0) -> TrajectoryBytes:
    """Bytes of one trajectory by class (§11.8.2's split of envelopes, payloads and workspace).

    Args:
        turns: turns in the trajectory (a whole number >= 0).
        envelope_kb_per_turn: KB of event envelopes logged per turn.
        observation_kb_per_turn: KB of delivered (bounded) observations logged per turn; in Napkin
            Math 11.2 this is the repair trajectory's 128 KB per-turn payload.
        pages: raw tool outputs kept besides the delivered observations (the research agent's
            fetched pages), a whole number >= 0.
        page_kb_raw: mean KB of one raw page.
        workspace_mb: MB of workspace snapshots the trajectory needs (0 for an agent without one).

    Returns a :class:`TrajectoryBytes` in bytes (1 KB = 1000 B, 1 MB = 10^6 B).
    """
    n = _count("turns", turns)
    k = _count("pages", pages)
    env = _amount("envelope_kb_per_turn", envelope_kb_per_turn)
    obs = _amount("observation_kb_per_turn", observation_kb_per_turn)
    page = _amount("page_kb_raw", page_kb_raw)
    ws = _amount("workspace_mb", workspace_mb)
    return TrajectoryBytes(
        envelopes=_finite("envelope bytes (turns x envelope_kb_per_turn)", lambda: n * env * BYTES_PER_KB),
        observations=_finite("observation bytes (turns x observation_kb_per_turn)", lambda: n * obs * BYTES_PER_KB),
        raw_pages=_finite("raw page bytes (pages x page_kb_raw)", lambda: k * page * BYTES_PER_KB),
        workspace=_finite("workspace bytes (workspace_mb)", lambda: ws * BYTES_PER_MB))


# --- the bill -------------------------------------------------------------------------------------


def storage_cost_usd(nbytes: float, usd_per_gb_month: float, months: float) -> float:
    """USD to keep ``nbytes`` for ``months`` at ``usd_per_gb_month`` (GB = 10^9 B): linear in both.

    Napkin Math 11.2 prices a year of the repair trajectory this way: 0.054 GB x $0.023 x 12.
    """
    gb = bytes_to_gb(nbytes)
    price = _amount("usd_per_gb_month", usd_per_gb_month)
    m = _amount("months", months)
    return _finite("storage cost (GB x usd_per_gb_month x months)", lambda: gb * price * m)


def share_of_attempt(cost_usd: float, attempt_cost_usd: float) -> float:
    """``cost_usd`` as a fraction (not a percentage) of one attempt's cost."""
    c = _amount("cost_usd", cost_usd)
    a = _amount("attempt_cost_usd", attempt_cost_usd, positive=True)
    return _finite("share of attempt (cost_usd / attempt_cost_usd)", lambda: c / a)


def fleet_cost_usd(per_trajectory_usd: float, trajectories: int) -> float:
    """The bill for ``trajectories`` trajectories, each costing ``per_trajectory_usd`` over its lifetime.

    With ``trajectories`` started per year this is also the steady-state yearly bill (Little's law:
    bytes held = arrival rate x bytes x lifetime), whatever the lifetimes.
    """
    c = _amount("per_trajectory_usd", per_trajectory_usd)
    n = _count("trajectories", trajectories)
    return _finite("fleet cost (per_trajectory_usd x trajectories)", lambda: c * n)


@dataclass(frozen=True)
class RetentionPolicy:
    """How long each artifact class is kept after its trajectory ends, in months.

    A lifetime of 0 keeps the bytes durably while the run is live and until its open operations
    settle, then deletes them (the run's own hours are left out of the bill, as in Napkin Math 11.2).
    ``None`` means the class is never kept durably (for instance only its digest is logged).
    A class absent from ``lifetimes_months`` is treated as ``None``.
    """

    name: str
    lifetimes_months: Mapping[str, float | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ConfigError(f"policy name must be a string, got {self.name!r}")
        if not isinstance(self.lifetimes_months, Mapping):
            raise ConfigError(f"policy {self.name!r}: lifetimes_months must be a mapping of artifact class to "
                              f"months (or None), got {type(self.lifetimes_months).__name__}")
        unknown = sorted(set(self.lifetimes_months) - set(ARTIFACT_CLASSES), key=repr)
        if unknown:
            raise ConfigError(f"policy {self.name!r}: unknown artifact class {unknown[0]!r}; "
                              f"known: {', '.join(ARTIFACT_CLASSES)}")
        checked = {c: (None if v is None else _amount(f"lifetime of {c}", v))
                   for c, v in self.lifetimes_months.items()}
        object.__setattr__(self, "lifetimes_months", checked)

    def lifetime(self, artifact: str) -> float | None:
        """Months ``artifact`` is kept after the run (None: never kept durably)."""
        return self.lifetimes_months.get(artifact)


def full_retention(months: float, name: str = "full retention") -> RetentionPolicy:
    """Every artifact class kept for ``months`` (the single-timer policy §11.8.1 argues against)."""
    m = _amount("months", months)
    return RetentionPolicy(name, {c: m for c in ARTIFACT_CLASSES})


def split_lifetimes(replay_months: float, raw_page_months: float,
                    name: str = "split lifetimes") -> RetentionPolicy:
    """Envelopes, delivered observations and workspace kept for the replay promise; raw pages for a
    shorter diagnostic window (§11.8.1's separate schedules)."""
    r = _amount("replay_months", replay_months)
    return RetentionPolicy(name, {"envelopes": r, "observations": r, "workspace": r,
                                  "raw_pages": _amount("raw_page_months", raw_page_months)})


def policy_cost_usd(tb: TrajectoryBytes, policy: RetentionPolicy, usd_per_gb_month: float) -> dict[str, float]:
    """One trajectory's bill under ``policy``: ``{class: USD}`` for every class plus ``"total"``."""
    price = _amount("usd_per_gb_month", usd_per_gb_month)
    out = {c: storage_cost_usd(b, price, policy.lifetime(c) or 0.0) for c, b in tb.by_class().items()}
    out["total"] = _finite("policy total cost", lambda: sum(out.values()))
    return out


# --- promises -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Promise:
    """A retention promise: the classes it reads, kept for at least ``months`` after the run."""

    name: str
    classes: tuple[str, ...]
    months: float
    meaning: str


@dataclass(frozen=True)
class PromiseVerdict:
    """Whether a policy keeps a promise, and which classes fall short (expire too early or are never kept)."""

    promise: str
    kept: bool
    short: tuple[str, ...]
    months: float


def promises(replay_months: float, diagnostic_months: float, *, workspace: bool = False) -> tuple[Promise, ...]:
    """The three promises of §11.8.1 for a trajectory (with a workspace or without one).

    * current recovery: the checkpoint, the committed suffix and the operation table (envelopes),
      the delivered observations the fold and the rebuilt context read, and the workspace if any,
      kept durably while the run can still be resumed (window 0: deleting them at the end is allowed);
    * historical replay: the same classes, for ``replay_months`` after the run;
    * diagnostics: the raw tool output the model never received, for ``diagnostic_months``.
    """
    needed = ("envelopes", "observations") + (("workspace",) if workspace else ())
    return (
        Promise("current_recovery", needed, 0.0, "resume a crashed run from its checkpoint and suffix"),
        Promise("historical_replay", needed, _amount("replay_months", replay_months),
                "inspect or re-run history exactly as delivered"),
        Promise("diagnostics", ("raw_pages",), _amount("diagnostic_months", diagnostic_months),
                "look at raw output that was bounded away before the model saw it"),
    )


def promises_kept(policy: RetentionPolicy, wanted: tuple[Promise, ...]) -> dict[str, PromiseVerdict]:
    """For each promise, whether ``policy`` keeps every class it reads for at least its window.

    A digest kept in place of the bytes does not count: a class whose lifetime is None fails every
    promise that reads it, including current recovery.
    """
    out = {}
    for pr in wanted:
        short = tuple(c for c in pr.classes if policy.lifetime(c) is None or policy.lifetime(c) < pr.months)
        out[pr.name] = PromiseVerdict(pr.name, not short, short, pr.months)
    return out


# --- Napkin Math 11.2 -----------------------------------------------------------------------------

#: What Napkin Math 11.2 prints. ``givens`` are the inputs it states; the other entries are printed
#: results, used only as targets to compare with (and, for the two quantities the box leaves implicit,
#: the workspace size and the attempt cost, as the evidence they are inferred from).
NAPKIN_11_2_PRINTED: dict[str, Any] = {
    "givens": {"turns": 30, "envelope_kb_per_turn": 4, "payload_kb_per_turn": 128, "usd_per_gb_month": 0.023,
               "months": 12},
    "log_mb": 3.96,                          # "30 x (4 + 128) KB = 3.96 MB"
    "total_mb": 54,                          # "about 54 MB" with the workspace
    "total_gb": 0.054,                       # the figure the bill multiplies
    "cost_cents": 1.5,                       # "approximately 1.5 cents"
    "share_of_attempt_percent": 0.7,         # "about 0.7 percent of the attempt's cost"
    "log_share_of_attempt_percent": 0.05,    # "the log alone is 0.05 percent"
    "workspace_share_of_bytes_percent": 93,  # "the workspace snapshot ... is 93 percent of the bytes"
    "under_percent": 1,                      # "adds under 1 percent"
}

#: Half a unit in the last printed place of each rounded figure (the tolerance a printed value carries).
NAPKIN_11_2_HALF_UNIT: dict[str, float] = {
    "log_mb": 0.005, "total_mb": 0.5, "total_gb": 0.0005, "cost_cents": 0.05, "share_of_attempt_percent": 0.05,
    "log_share_of_attempt_percent": 0.005, "workspace_share_of_bytes_percent": 0.5,
}


@dataclass(frozen=True)
class NapkinCheck:
    """One printed figure of Napkin Math 11.2 against the recomputed one (``tolerance``: half a unit in
    the printed figure's last place). ``basis`` says whether the figure is an independent test
    (``"givens"``: computed from stated givens and inferred quantities fitted to other figures) or
    holds by construction (``"fitted"``: an implicit quantity was inferred from this very figure)."""

    figure: str
    printed: float
    computed: float
    tolerance: float
    ok: bool
    basis: str = "givens"


@dataclass(frozen=True)
class NapkinRetention:
    """Napkin Math 11.2 recomputed, with the two quantities it leaves implicit inferred.

    Fields (SI units; USD):
        log_bytes, log_bytes_binary_reading_mib: 30 x (4 + 128) KB with 1 KB = 1000 B, and the MiB figure
            a binary reading would print instead.
        workspace_mb: the workspace size inferred (a whole number of MB inside ``workspace_mb_range``).
        workspace_mb_range: [lo, hi) of workspace sizes consistent with both "about 54 MB" and "93 percent".
        total_bytes, cost_usd, log_cost_usd: the bill recomputed with ``workspace_mb``.
        attempt_cost_usd: the attempt cost inferred (the one that makes the headline share exactly the
            printed 0.7 percent); attempt_cost_usd_range: [lo, hi) consistent with both printed shares.
        share_of_attempt, log_share_of_attempt, workspace_share_of_bytes: fractions at the inferred values.
        checks: every printed figure against its recomputed value. notes: what was inferred and why.
    """

    log_bytes: float
    log_bytes_binary_reading_mib: float
    workspace_mb: float
    workspace_mb_range: tuple[float, float]
    total_bytes: float
    cost_usd: float
    log_cost_usd: float
    cost_usd_from_printed_total: float
    attempt_cost_usd: float
    attempt_cost_usd_range: tuple[float, float]
    share_of_attempt: float
    log_share_of_attempt: float
    workspace_share_of_bytes: float
    dominant: str
    checks: tuple[NapkinCheck, ...]
    notes: tuple[str, ...]

    @property
    def all_ok(self) -> bool:
        """Every printed figure reproduced within its rounding."""
        return all(c.ok for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["checks"] = [asdict(c) for c in self.checks]
        d["notes"] = list(self.notes)
        d["all_ok"] = self.all_ok
        return d


_NAPKIN_GIVENS = ("turns", "envelope_kb_per_turn", "payload_kb_per_turn", "usd_per_gb_month", "months")
_NAPKIN_FIGURES = ("log_mb", "total_mb", "total_gb", "cost_cents", "share_of_attempt_percent",
                   "log_share_of_attempt_percent", "workspace_share_of_bytes_percent", "under_percent")


def _napkin_printed(printed: Any) -> dict[str, Any]:
    """A custom ``printed`` table checked: every given and figure present and a finite number >= 0, and the
    figures the method divides by large enough that their rounding band excludes zero (ConfigError otherwise)."""
    if not isinstance(printed, Mapping):
        raise ConfigError(f"printed must be a mapping like NAPKIN_11_2_PRINTED, got {type(printed).__name__}")
    g = printed.get("givens")
    if not isinstance(g, Mapping):
        raise ConfigError(f"printed['givens'] must be a mapping with {', '.join(_NAPKIN_GIVENS)}, got {g!r}")
    missing = [f"givens.{k}" for k in _NAPKIN_GIVENS if k not in g] + [k for k in _NAPKIN_FIGURES if k not in printed]
    if missing:
        raise ConfigError(f"printed is missing {', '.join(missing)}")
    givens = {"turns": _count("printed givens.turns", g["turns"])}
    for k in _NAPKIN_GIVENS[1:]:
        givens[k] = _amount(f"printed givens.{k}", g[k], positive=k in ("usd_per_gb_month", "months"))
    if givens["turns"] == 0 or givens["envelope_kb_per_turn"] + givens["payload_kb_per_turn"] == 0:
        raise ConfigError("printed givens describe an empty log (turns or per-turn KB are 0): no share to infer from")
    out: dict[str, Any] = {"givens": givens}
    for k in _NAPKIN_FIGURES:
        out[k] = _amount(f"printed {k}", printed[k])
    half = NAPKIN_11_2_HALF_UNIT
    for k in ("share_of_attempt_percent", "log_share_of_attempt_percent"):
        if out[k] <= half[k]:
            raise ConfigError(f"printed {k} must be more than {half[k]} (half a unit in its last place) for an "
                              f"attempt cost to be inferred from it, got {out[k]!r}")
    if out["workspace_share_of_bytes_percent"] + half["workspace_share_of_bytes_percent"] >= 100:
        raise ConfigError(f"printed workspace_share_of_bytes_percent must be below "
                          f"{100 - half['workspace_share_of_bytes_percent']}, "
                          f"got {out['workspace_share_of_bytes_percent']!r}")
    return out


def napkin_11_2(printed: Mapping[str, Any] | None = None, *,
                other_attempt_cost_usd: float | None = None) -> NapkinRetention:
    """Recompute Napkin Math 11.2 and infer the workspace size and the attempt cost it does not state.

    Method. The log is computed from the stated givens. The workspace is what separates the log from the
    printed "about 54 MB"; since that total is rounded to a whole MB, any workspace in
    [53.5 - log, 54.5 - log) MB fits, and the "93 percent" share narrows nothing further (it admits
    [0.925, 0.935) of the total, a wider band); the whole-MB value inside is taken. The attempt cost is
    what turns the recomputed bill into the printed shares: "0.7 percent" admits (bill/0.0075, bill/0.0065],
    "0.05 percent" for the log alone admits (log bill/0.00055, log bill/0.00045]; their overlap is the
    range, and bill/0.007 the point taken. Every printed figure is then compared with its recomputed
    value, within half a unit of its last printed place.

    ``other_attempt_cost_usd`` (optional, e.g. the research agent's attempt in exercise 7) is named in the
    notes when it falls outside the inferred range, with the share the same bill would be of it.
    """
    if other_attempt_cost_usd is not None:
        other_attempt_cost_usd = _amount("other_attempt_cost_usd", other_attempt_cost_usd, positive=True)
    pr = _napkin_printed(NAPKIN_11_2_PRINTED if printed is None else printed)
    try:
        result = _napkin_11_2(pr, other_attempt_cost_usd)
    except (ZeroDivisionError, OverflowError) as ex:      # a safety net: the checks above should prevent these
        raise ConfigError(f"printed figures cannot be reconciled: {type(ex).__name__}: {ex}") from None
    bad = [k for k, v in asdict(result).items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        raise ConfigError(f"printed figures are too large for a finite result ({', '.join(bad)} overflow)")
    return result


def _napkin_11_2(pr: dict[str, Any], other_attempt_cost_usd: float | None) -> NapkinRetention:
    g = pr["givens"]
    half = NAPKIN_11_2_HALF_UNIT
    tb_log = trajectory_bytes(g["turns"], g["envelope_kb_per_turn"], g["payload_kb_per_turn"])
    log_b = tb_log.log
    log_mb = log_b / BYTES_PER_MB
    binary_log_mib = g["turns"] * (g["envelope_kb_per_turn"] + g["payload_kb_per_turn"]) * BYTES_PER_KIB / BYTES_PER_MIB

    # workspace: from the rounded total, then from the rounded share (ws / (ws + log) in [s_lo, s_hi))
    t, t_half = pr["total_mb"], half["total_mb"]
    from_total = (t - t_half - log_mb, t + t_half - log_mb)
    s = pr["workspace_share_of_bytes_percent"] / 100
    s_half = half["workspace_share_of_bytes_percent"] / 100
    from_share = (log_mb * (s - s_half) / (1 - s + s_half), log_mb * (s + s_half) / (1 - s - s_half))
    ws_range = (max(from_total[0], from_share[0]), min(from_total[1], from_share[1]))
    if not ws_range[0] < ws_range[1]:
        raise ConfigError(f"no workspace size fits both the printed total and share: {from_total} vs {from_share}")
    ws_mb = float(round(t - log_mb))
    if not ws_range[0] <= ws_mb < ws_range[1]:          # no whole MB inside: take the middle of the band
        ws_mb = (ws_range[0] + ws_range[1]) / 2

    tb = trajectory_bytes(g["turns"], g["envelope_kb_per_turn"], g["payload_kb_per_turn"], workspace_mb=ws_mb)
    price, months = g["usd_per_gb_month"], g["months"]
    cost = storage_cost_usd(tb.total, price, months)
    log_cost = storage_cost_usd(log_b, price, months)
    cost_printed_total = storage_cost_usd(pr["total_gb"] * BYTES_PER_GB, price, months)

    share_p, share_h = pr["share_of_attempt_percent"] / 100, half["share_of_attempt_percent"] / 100
    log_p, log_h = pr["log_share_of_attempt_percent"] / 100, half["log_share_of_attempt_percent"] / 100
    from_share_a = (cost / (share_p + share_h), cost / (share_p - share_h))
    from_log_a = (log_cost / (log_p + log_h), log_cost / (log_p - log_h))
    a_range = (max(from_share_a[0], from_log_a[0]), min(from_share_a[1], from_log_a[1]))
    if not a_range[0] < a_range[1]:
        raise ConfigError(f"no attempt cost fits both printed shares: {from_share_a} vs {from_log_a}")
    attempt = cost / share_p

    computed = {
        "log_mb": log_mb,
        "total_mb": tb.total / BYTES_PER_MB,
        "total_gb": bytes_to_gb(tb.total),
        "cost_cents": 100 * cost,
        "share_of_attempt_percent": 100 * cost / attempt,
        "log_share_of_attempt_percent": 100 * log_cost / attempt,
        "workspace_share_of_bytes_percent": 100 * tb.share("workspace"),
    }
    fitted = {"total_mb", "total_gb", "share_of_attempt_percent"}      # the workspace and attempt cost come from these
    checks = [NapkinCheck(k, float(pr[k]), v, half[k], abs(v - pr[k]) <= half[k] + 1e-12,
                          "fitted" if k in fitted else "givens") for k, v in computed.items()]
    checks.append(NapkinCheck("under_percent", float(pr["under_percent"]), 100 * cost / attempt, 0.0,
                              100 * cost / attempt < pr["under_percent"], "fitted"))
    notes = [
        (f"Units: the log is {log_mb:.2f} MB only with 1 KB = 1000 B; a binary reading (KiB, MiB) would print "
         f"{binary_log_mib:.3f} MiB. The box is decimal throughout, as this module is."),
        (f"Workspace (not stated): the printed total of about {t} MB less the {log_mb:.2f} MB log leaves "
         f"{t - log_mb:.2f} MB; the rounding of the total admits [{from_total[0]:.2f}, {from_total[1]:.2f}) MB and "
         f"the {pr['workspace_share_of_bytes_percent']} percent share admits [{from_share[0]:.2f}, "
         f"{from_share[1]:.2f}) MB, so the workspace is {ws_mb:g} MB."),
        (f"Attempt cost (not stated; the box refers to another chapter's equation for it): a bill of "
         f"{100 * cost:.4f} cents is {pr['share_of_attempt_percent']} percent of ${attempt:.3f}; the two printed "
         f"shares together admit ${a_range[0]:.3f} to ${a_range[1]:.3f}."
         + (f" An attempt of ${other_attempt_cost_usd:.2f} (the one compared with) does not fit: the same bill "
            f"would be {100 * cost / other_attempt_cost_usd:.2f} percent of it." if other_attempt_cost_usd is not None
            and not a_range[0] <= other_attempt_cost_usd < a_range[1] else "")),
        (f"The box multiplies its rounded {pr['total_gb']} GB ({100 * cost_printed_total:.4f} cents); with the "
         f"inferred {ws_mb:g} MB workspace the total is {tb.total / BYTES_PER_MB:.2f} MB and the bill "
         f"{100 * cost:.4f} cents. Both round to the printed {pr['cost_cents']} cents"
         + (", and every printed figure follows from the givens once the two implicit quantities are inferred."
            if all(c.ok for c in checks) else "; the figures that do not follow are marked in the checks.")),
    ]
    return NapkinRetention(
        log_bytes=log_b, log_bytes_binary_reading_mib=binary_log_mib, workspace_mb=ws_mb, workspace_mb_range=ws_range,
        total_bytes=tb.total, cost_usd=cost, log_cost_usd=log_cost, cost_usd_from_printed_total=cost_printed_total,
        attempt_cost_usd=attempt, attempt_cost_usd_range=a_range, share_of_attempt=cost / attempt,
        log_share_of_attempt=log_cost / attempt, workspace_share_of_bytes=tb.share("workspace"),
        dominant=tb.dominant(), checks=tuple(checks), notes=tuple(notes))
