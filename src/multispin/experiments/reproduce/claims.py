"""The checked claims of docs/system-model.md §6, computed from the figure CSVs (never typed by hand).

Every check is a function of figure tables (lists of CSV rows) and returns `ClaimResult`
rows: the claim, the criterion applied, the measured numbers behind it, and a status. A claim
PASSes only where the 95% confidence intervals exclude the opposite, FAILs where they exclude the
claim, and is INCONCLUSIVE in between (an interval spanning zero, a trend inside the noise, a
band that the interval straddles); N/A when the run did not produce the table (or, for the
defaults, in ``--quick``). Exact ties (both policies chose the same plan in every drop: a gain of
0 with a zero-width interval) are reported and are neither wins nor losses. Sweep means are taken
over the paper's two power ratios only (P^dl/P^ul = 4 and 16). `check_dir` reads the CSVs
of a run directory. Claims 6 and 7 are checked for the shipped search and for the paper's
two-phase greedy side by side (ids 6p, 7p).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from multispin.experiments.reproduce.columns import read_csv

PASS, FAIL, INCONCLUSIVE, NA = "PASS", "FAIL", "INCONCLUSIVE", "N/A"
PAPER_RATIOS = (4, 16)
LOW_RATIO, HIGH_RATIO = 4, 16  # the paper's two P^dl/P^ul settings: "low" and "high" P^dl in claim 4
GAMMA_LOW, GAMMA_HIGH, GAMMA_TOL = (2.0, 3.0), (5.0, 7.0), 0.5
ABOUT = 0.25  # "about a–b%": the band [a·(1 − 0.25), b·(1 + 0.25)]
UNIFORM_BAND, COMP_BAND = (8.0, 15.0), (5.0, 10.0)
PAIR_SHORT = {"paper-qwen": "Qwen", "paper-r1": "R1"}


@dataclass(frozen=True)
class ClaimResult:
    id: str
    claim: str
    criterion: str
    measured: str
    status: str
    source: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def _f(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def _fin(v: Any) -> bool:
    return math.isfinite(_f(v))


def spearman(x, y) -> float:
    """Rank correlation (ties averaged); nan with fewer than three finite pairs."""
    pairs = [(a, b) for a, b in zip(x, y) if _fin(a) and _fin(b)]
    if len(pairs) < 3:
        return float("nan")
    a, b = zip(*pairs)
    if len(set(b)) == 1 or len(set(a)) == 1:
        return 0.0
    return float(spearmanr(a, b).statistic)


def _by(rows, key):
    out: dict[Any, list[dict]] = {}
    for r in rows:
        out.setdefault(r.get(key), []).append(r)
    return out


def _at(rows, key, value):
    for r in rows:
        if _f(r.get(key)) == float(value):
            return r
    return None


def _ci(r, m, d=1):
    v, lo, hi = _f(r.get(m)), _f(r.get(m + "_lo")), _f(r.get(m + "_hi"))
    if not math.isfinite(v):
        return "n/a"
    if 0 < abs(v) < 10**-d:  # small values keep two significant digits
        d = min(6, 1 - int(math.floor(math.log10(abs(v)))))
    if math.isfinite(lo) and math.isfinite(hi):
        return f"{v:.{d}f} [{lo:.{d}f}, {hi:.{d}f}]"
    return f"{v:.{d}f}"


def _interval(r, m) -> tuple[float, float, float]:
    """(value, low, high) of metric m; a missing interval is the point itself."""
    v = _f(r.get(m))
    lo, hi = _f(r.get(m + "_lo")), _f(r.get(m + "_hi"))
    return v, (lo if math.isfinite(lo) else v), (hi if math.isfinite(hi) else v)


def _sign(r, m) -> int | None:
    """+1 if the 95% CI of m lies above 0, −1 below 0, 0 if it spans 0; None for an exact tie."""
    v, lo, hi = _interval(r, m)
    if v == 0 and lo == 0 and hi == 0:
        return None
    return 1 if lo > 0 else -1 if hi < 0 else 0


def _in_band(lo: float, hi: float, band: tuple[float, float]) -> str:
    """PASS if [lo, hi] lies inside the band, FAIL if it misses it, INCONCLUSIVE if it straddles an edge."""
    if band[0] <= lo and hi <= band[1]:
        return PASS
    if hi < band[0] or lo > band[1]:
        return FAIL
    return INCONCLUSIVE


def _worst(*statuses: str) -> str:
    for st in (FAIL, INCONCLUSIVE, NA):
        if st in statuses:
            return st
    return PASS


def _na(cid, claim, criterion, source, why="table not produced by this run") -> ClaimResult:
    return ClaimResult(cid, claim, criterion, why, NA, source)


# ----------------------------------------------------------------------------- claim 1: modes


def check_beats_baselines(
    rows: list[dict], source: str = "fig2_goodput_vs_devices.csv", id_prefix: str = "1"
) -> list[ClaimResult]:
    """Adaptive beats all-UL, all-DL and random at every K and P^dl/P^ul (one row per baseline)."""
    out = []
    for letter, base, name in (("a", "all_ul", "all-UL"), ("b", "all_dl", "all-DL"), ("c", "random", "random")):
        m = f"gom_vs_{base}_pct"
        claim = f"Adaptive mode selection beats {name} at every K and power ratio"
        crit = (
            f"gain of mean goodputs {m}: 95% CI above 0 on every (K, P^dl/P^ul) row (a row whose CI is "
            "below 0 fails the claim; one spanning 0 leaves it inconclusive; exact ties do not count)"
        )
        rs = [r for r in rows if _fin(r.get(m))]
        if not rs:
            out.append(_na(f"{id_prefix}{letter}", claim, crit, source))
            continue
        signs = [_sign(r, m) for r in rs]
        judged = [(r, sg) for r, sg in zip(rs, signs) if sg is not None]
        losing = [r for r, sg in judged if sg < 0]
        unsure = [r for r, sg in judged if sg == 0]
        ties = len(rs) - len(judged)
        where = lambda r: f"K={r.get('devices', 20)}, P^dl/P^ul={_f(r.get('pdl_ratio')):g}"  # noqa: E731
        worst = min(rs, key=lambda r: _f(r[m]))
        measured = (
            f"smallest gain {_ci(worst, m)}% at {where(worst)}; CI below 0 on {len(losing)}/{len(rs)} rows, "
            f"spanning 0 on {len(unsure)}, exact ties on {ties}"
            + (": " + "; ".join(f"{where(r)}: {_ci(r, m)}%" for r in (losing + unsure)[:4]) if losing or unsure else "")
        )
        status = FAIL if losing else INCONCLUSIVE if unsure or not judged else PASS
        out.append(ClaimResult(f"{id_prefix}{letter}", claim, crit, measured, status, source))
    return out


def _above(r1, r2, m) -> str:
    """Is m larger in row r1 than in r2? PASS if their 95% CIs are apart that way, FAIL if apart the
    other way, INCONCLUSIVE if they overlap."""
    _, lo1, hi1 = _interval(r1, m)
    _, lo2, hi2 = _interval(r2, m)
    return PASS if lo1 > hi2 else FAIL if hi1 < lo2 else INCONCLUSIVE


def check_all_dl_degrades(rows: list[dict], source: str = "fig2_goodput_vs_devices.csv") -> ClaimResult:
    claim = "All-DL degrades as K grows when P^dl is scarce"
    crit = (
        f"at P^dl/P^ul = {LOW_RATIO} the gain of adaptive over all-DL grows with K (Spearman ρ > 0, and "
        f"the 95% CIs at the largest and the smallest K apart), and at the largest K it is larger than at "
        f"P^dl/P^ul = {HIGH_RATIO} (CIs apart)"
    )
    low = sorted(
        [r for r in rows if _f(r.get("pdl_ratio")) == LOW_RATIO and _fin(r.get("gom_vs_all_dl_pct"))],
        key=lambda r: _f(r["devices"]),
    )
    high = sorted(
        [r for r in rows if _f(r.get("pdl_ratio")) == HIGH_RATIO and _fin(r.get("gom_vs_all_dl_pct"))],
        key=lambda r: _f(r["devices"]),
    )
    if len(low) < 3:
        return _na("2", claim, crit, source)
    m = "gom_vs_all_dl_pct"
    rho = spearman([r["devices"] for r in low], [r[m] for r in low])
    a, b = low[0], low[-1]
    statuses = [_above(b, a, m), PASS if rho > 0 else FAIL]
    measured = (
        f"P^dl/P^ul={LOW_RATIO}: gain over all-DL {_ci(a, m)}% at K={a['devices']} → "
        f"{_ci(b, m)}% at K={b['devices']}, ρ={rho:.2f}"
    )
    hb = _at(high, "devices", b["devices"])
    if hb is not None:
        statuses.append(_above(b, hb, m))
        measured += f"; at P^dl/P^ul={HIGH_RATIO}, K={b['devices']}: {_ci(hb, m)}%"
    return ClaimResult("2", claim, crit, measured, _worst(*statuses), source)


def check_all_ul_capped(rows: list[dict], source: str = "fig2_goodput_vs_devices.csv") -> ClaimResult:
    claim = "All-UL is capped by per-device UL power"
    crit = (
        f"all-UL drafts (mean γ > 0) and gains nothing from P^dl, so the gain of adaptive over all-UL is "
        f"larger at P^dl/P^ul = {HIGH_RATIO} than at {LOW_RATIO} (95% CIs apart), at every K ≥ 10 of the "
        "sweep; where all-UL does not draft the cap is trivial: inconclusive"
    )
    m = "gom_vs_all_ul_pct"
    lo_rows = {int(_f(r["devices"])): r for r in rows if _f(r.get("pdl_ratio")) == LOW_RATIO and _fin(r.get(m))}
    hi_rows = {int(_f(r["devices"])): r for r in rows if _f(r.get("pdl_ratio")) == HIGH_RATIO and _fin(r.get(m))}
    ks = sorted(k for k in set(lo_rows) & set(hi_rows) if k >= 10)
    if not ks:
        return _na("3", claim, crit, source)
    # all-UL must be seen drafting (a table without its γ cannot show that): otherwise inconclusive
    drafting = {k: all(_f(r.get("gamma_all_ul")) > 0 for r in (lo_rows[k], hi_rows[k])) for k in ks}
    per_k = {k: _above(hi_rows[k], lo_rows[k], m) if drafting[k] else INCONCLUSIVE for k in ks}
    k0 = 20 if 20 in ks else ks[-1]
    not_drafting = [k for k in ks if not drafting[k]]
    measured = (
        f"K={k0}: gain over all-UL {_ci(lo_rows[k0], m)}% at {LOW_RATIO} vs {_ci(hi_rows[k0], m)}% at "
        f"{HIGH_RATIO}; all-UL goodput {_ci(lo_rows[k0], 'goodput_all_ul')} vs "
        f"{_ci(hi_rows[k0], 'goodput_all_ul')} tokens/s, mean γ of all-UL "
        f"{_ci(lo_rows[k0], 'gamma_all_ul')}; holds at {sum(v == PASS for v in per_k.values())}/{len(ks)} K"
        + (f"; all-UL does not draft at K={not_drafting}" if not_drafting else "")
    )
    return ClaimResult("3", claim, crit, measured, _worst(*per_k.values()), source)


# ----------------------------------------------------------------------------- claims 2-3 of §6: P^dl sweep


def check_dl_share(rows: list[dict], source: str = "fig1_mode_split.csv", cid: str = "4") -> list[ClaimResult]:
    claim = "As P^dl grows, more rejected devices switch to DL, but not all of them"
    crit = (
        "DL fraction rises with P^dl/P^ul (Spearman ρ > 0, and the 95% CIs at the largest and the smallest "
        "P^dl apart) and stays below 1 at the largest P^dl (upper 95% bound < 1)"
    )
    out = []
    for preset, rs in _by(rows, "preset").items():
        rs = sorted([r for r in rs if _fin(r.get("dl_fraction"))], key=lambda r: _f(r["pdl_ratio"]))
        pid = f"{cid} ({PAIR_SHORT.get(preset, preset)})"
        if len(rs) < 3:
            out.append(_na(pid, claim, crit, source, "fewer than three P^dl points with rejections"))
            continue
        rho = spearman([r["pdl_ratio"] for r in rs], [r["dl_fraction"] for r in rs])
        a, b = rs[0], rs[-1]
        _, low_top, top = _interval(b, "dl_fraction")
        status = _worst(
            PASS if rho > 0 else FAIL,
            _above(b, a, "dl_fraction"),
            PASS if top < 1.0 else FAIL if low_top >= 1.0 else INCONCLUSIVE,
        )
        measured = (
            f"DL fraction {_ci(a, 'dl_fraction', 2)} at P^dl/P^ul={_f(a['pdl_ratio']):g} → "
            f"{_ci(b, 'dl_fraction', 2)} at {_f(b['pdl_ratio']):g}, ρ={rho:.2f}"
        )
        out.append(ClaimResult(pid, claim, crit, measured, status, source))
    return out


def _drafting(r) -> str:
    """The share of devices that draft, next to every reported mean γ (a mean of zeros and nines is
    not a draft length of four)."""
    f = _f(r.get("frac_no_draft"))
    return f"{100 * (1 - f):.0f}% of devices draft" if math.isfinite(f) else "drafting share n/a"


def check_draft_length_trend(
    rows: list[dict], source: str = "fig1_mode_split.csv", cid: str = "5"
) -> list[ClaimResult]:
    claim = "The optimal draft length grows with P^dl (roughly from 2–3 to 5–7 tokens)"
    lo_band = (GAMMA_LOW[0] - GAMMA_TOL, GAMMA_LOW[1] + GAMMA_TOL)
    hi_band = (GAMMA_HIGH[0] - GAMMA_TOL, GAMMA_HIGH[1] + GAMMA_TOL)
    crit = (
        f"mean γ (all devices) rises with P^dl/P^ul (Spearman ρ > 0 over the sweep, 95% CIs at "
        f"{LOW_RATIO} and {HIGH_RATIO} apart), and its 95% CI lies in [{lo_band[0]:g}, {lo_band[1]:g}] at "
        f"P^dl/P^ul = {LOW_RATIO} and in [{hi_band[0]:g}, {hi_band[1]:g}] at {HIGH_RATIO}"
    )
    out = []
    for preset, rs in _by(rows, "preset").items():
        rs = sorted(rs, key=lambda r: _f(r["pdl_ratio"]))
        pid = f"{cid} ({PAIR_SHORT.get(preset, preset)})"
        lo, hi = _at(rs, "pdl_ratio", LOW_RATIO), _at(rs, "pdl_ratio", HIGH_RATIO)
        if lo is None or hi is None or len(rs) < 3:
            out.append(_na(pid, claim, crit, source, f"P^dl/P^ul = {LOW_RATIO} or {HIGH_RATIO} not in the sweep"))
            continue
        rho = spearman([r["pdl_ratio"] for r in rs], [r["gamma_mean"] for r in rs])
        _, l4, h4 = _interval(lo, "gamma_mean")
        _, l16, h16 = _interval(hi, "gamma_mean")
        status = _worst(
            PASS if rho > 0 else FAIL,
            _above(hi, lo, "gamma_mean"),
            _in_band(l4, h4, lo_band),
            _in_band(l16, h16, hi_band),
        )
        measured = (
            f"mean γ {_ci(lo, 'gamma_mean')} at {LOW_RATIO} ({_drafting(lo)}), {_ci(hi, 'gamma_mean')} at "
            f"{HIGH_RATIO} ({_drafting(hi)}); sweep {_f(rs[0]['gamma_mean']):.1f} at "
            f"{_f(rs[0]['pdl_ratio']):g} → {_f(rs[-1]['gamma_mean']):.1f} at {_f(rs[-1]['pdl_ratio']):g}, "
            f"ρ={rho:.2f}"
        )
        out.append(ClaimResult(pid, claim, crit, measured, status, source))
    return out


# ----------------------------------------------------------------------------- claim 4 of §6: draft schemes


def _scheme_claim(rows, metric, band, name, cid, source, who="Greedy per-device") -> list[ClaimResult]:
    lo_b, hi_b = band[0] * (1 - ABOUT), band[1] * (1 + ABOUT)
    claim = f"{who} draft lengths beat {name} by about {band[0]:g}–{band[1]:g}%"
    crit = (
        f"{metric} at the paper's P^dl/P^ul = {PAPER_RATIOS[0]} and {PAPER_RATIOS[1]}: each 95% CI above 0, and "
        f"the CI of their mean inside [{lo_b:g}, {hi_b:g}]% (the paper's band ±{int(ABOUT * 100)}%)"
    )
    out = []
    for preset, rs in _by(rows, "preset").items():
        pid = f"{cid} ({PAIR_SHORT.get(preset, preset)})"
        at = [_at([r for r in rs if _fin(r.get(metric))], "pdl_ratio", x) for x in PAPER_RATIOS]
        if any(r is None for r in at):
            out.append(_na(pid, claim, crit, source, f"P^dl/P^ul = {PAPER_RATIOS} not both in the sweep"))
            continue
        vals = [_interval(r, metric) for r in at]
        mean, lo, hi = (float(np.mean([v[i] for v in vals])) for i in range(3))
        signs = [_sign(r, metric) for r in at]
        positive = (
            FAIL
            if any(sg is not None and sg < 0 for sg in signs)
            else PASS
            if all(sg == 1 for sg in signs)
            else INCONCLUSIVE
        )
        status = _worst(positive, _in_band(lo, hi, (lo_b, hi_b)))
        measured = (
            f"mean {mean:.1f}% [{lo:.1f}, {hi:.1f}] over P^dl/P^ul = {PAPER_RATIOS[0]}, {PAPER_RATIOS[1]}: "
            + ", ".join(f"{_ci(r, metric)}% at {x}" for r, x in zip(at, PAPER_RATIOS))
        )
        out.append(ClaimResult(pid, claim, crit, measured, status, source))
    return out


def check_beats_uniform(rows, source="fig3_draft_schemes.csv", cid="6") -> list[ClaimResult]:
    """Claim 6 for the shipped search (6) and for the paper's two-phase greedy (6p)."""
    return _scheme_claim(
        rows,
        "gom_vs_best_uniform_pct",
        UNIFORM_BAND,
        "the best uniform length",
        cid,
        source,
        "The shipped search's per-device",
    ) + _scheme_claim(
        rows,
        "gom_paper_vs_best_uniform_pct",
        UNIFORM_BAND,
        "the best uniform length",
        f"{cid}p",
        source,
        "The paper's two-phase greedy",
    )


def check_beats_computation_only(rows, source="fig3_draft_schemes.csv", cid="7") -> list[ClaimResult]:
    """Claim 7 for the shipped search (7) and for the paper's two-phase greedy (7p)."""
    return _scheme_claim(
        rows,
        "gom_vs_computation_only_pct",
        COMP_BAND,
        "computation-only control",
        cid,
        source,
        "The shipped search's per-device",
    ) + _scheme_claim(
        rows,
        "gom_paper_vs_computation_only_pct",
        COMP_BAND,
        "computation-only control",
        f"{cid}p",
        source,
        "The paper's two-phase greedy",
    )


# ----------------------------------------------------------------------------- defaults


def check_defaults(settings: dict[str, Any], source: str = "settings.csv") -> ClaimResult:
    claim = (
        "Defaults: K = 20, B = 10 MHz, P^ul = 10 dBm, P^dl/P^ul ∈ {4, 16} (also swept), per-task acceptance "
        "in about 0.82–0.95 over 4 tasks, N_SAA = 1000"
    )
    crit = "the run's default scenario and grids use these values"
    if not settings:
        return _na("8", claim, crit, source)
    if str(settings.get("quick")).lower() in ("true", "1"):
        return _na("8", claim, crit, source, "a --quick run uses reduced grids and drops by design")
    checks = {
        "K": (_f(settings.get("devices")) == 20, f"K={settings.get('devices')}"),
        "B": (_f(settings.get("bandwidth_mhz")) == 10, f"B={settings.get('bandwidth_mhz')} MHz"),
        "P^ul": (_f(settings.get("p_ul_dbm")) == 10, f"P^ul={settings.get('p_ul_dbm')} dBm"),
        "ratios": (
            {4, 16} <= {int(_f(x)) for x in str(settings.get("pdl_ratios", "")).split() if _fin(x)},
            f"P^dl/P^ul swept over {settings.get('pdl_ratios')}",
        ),
        "acceptance": (
            0.82 - 1e-9 <= _f(settings.get("acceptance_min"))
            and _f(settings.get("acceptance_max")) <= 0.95 + 1e-9
            and _f(settings.get("tasks")) == 4,
            f"acceptance {settings.get('acceptance_min')}–{settings.get('acceptance_max')} over "
            f"{settings.get('tasks')} tasks (assumed values)",
        ),
        "N_SAA": (_f(settings.get("n_saa")) == 1000, f"N_SAA={settings.get('n_saa')}"),
    }
    bad = [k for k, (ok, _) in checks.items() if not ok]
    measured = "; ".join(t for _, t in checks.values()) + (f" — differs: {', '.join(bad)}" if bad else "")
    return ClaimResult("8", claim, crit, measured, PASS if not bad else FAIL, source)


# ----------------------------------------------------------------------------- all


TABLES = {"fig1": "fig1_mode_split.csv", "fig2": "fig2_goodput_vs_devices.csv", "fig3": "fig3_draft_schemes.csv"}


def check_all(tables: dict[str, list[dict]], settings: dict[str, Any] | None = None) -> list[ClaimResult]:
    """Every claim from the figure tables ``{"fig1": rows, "fig2": rows, "fig3": rows}``."""
    out: list[ClaimResult] = []
    users = tables.get("fig2")
    if users:
        out += check_beats_baselines(users)
        out.append(check_all_dl_degrades(users))
        out.append(check_all_ul_capped(users))
    else:
        out += [
            _na("1", "Adaptive mode selection beats all-UL, all-DL and random", "", TABLES["fig2"]),
            _na("2", "All-DL degrades as K grows when P^dl is scarce", "", TABLES["fig2"]),
            _na("3", "All-UL is capped by per-device UL power", "", TABLES["fig2"]),
        ]
    modes = tables.get("fig1")
    if modes:
        out += check_dl_share(modes)
        out += check_draft_length_trend(modes)
    else:
        out += [
            _na("4", "More rejected devices switch to DL as P^dl grows, not all", "", TABLES["fig1"]),
            _na("5", "The optimal draft length grows with P^dl", "", TABLES["fig1"]),
        ]
    drafts = tables.get("fig3")
    if drafts:
        out += check_beats_uniform(drafts)
        out += check_beats_computation_only(drafts)
    else:
        out += [
            _na("6", "Per-device draft lengths beat the best uniform length by about 8–15%", "", TABLES["fig3"]),
            _na("7", "Per-device draft lengths beat computation-only control by about 5–10%", "", TABLES["fig3"]),
        ]
    out.append(check_defaults(settings or {}))
    return out


def read_settings(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    return {r["key"]: r["value"] for r in read_csv(path)}


def check_dir(out: Path) -> list[ClaimResult]:
    """Read the figure CSVs and settings.csv of a run directory and check every claim."""
    out = Path(out)
    tables = {k: read_csv(out / f) for k, f in TABLES.items() if (out / f).exists()}
    return check_all(tables, read_settings(out / "settings.csv"))


SETTING_CLAIMS = ("1a", "1b", "1c", "3", "4", "5", "6", "6p", "7", "7p")


def claims_for_setting(rows: list[dict], source: str = "fig7_identification.csv") -> dict[str, ClaimResult]:
    """The claims one identification setting can test (one model pair, K = 20, a P^dl sweep), by id;
    claim 2 (a K sweep) and 8 (defaults) are not functions of one setting."""
    rows = [{"devices": 20, **r} for r in rows]
    found: list[ClaimResult] = []
    if any(_fin(r.get("gom_vs_all_ul_pct")) for r in rows):
        found += check_beats_baselines([r for r in rows if _fin(r.get("gom_vs_all_ul_pct"))], source)
        found.append(check_all_ul_capped(rows, source))
    found += check_dl_share(rows, source) + check_draft_length_trend(rows, source)
    found += check_beats_uniform(rows, source) + check_beats_computation_only(rows, source)
    return {c.id.split(" ")[0]: c for c in found}
