"""The checked claims of SYSTEM_MODEL.md §6, computed from the figure CSVs (never typed by hand).

Every check is a function of figure tables (lists of CSV rows) and returns :class:`ClaimResult`
rows: the claim, the criterion applied, the measured numbers behind it, and PASS or FAIL (N/A
when the run did not produce the table). :func:`check_dir` reads the CSVs of a run directory.
The paper's findings are relative; the criteria below say how each one is read, with
tolerances stated where the paper says "about".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

PASS, FAIL, NA = "PASS", "FAIL", "N/A"
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
    from scipy.stats import spearmanr

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
    if 0 < abs(v) < 10 ** -d:  # small values keep two significant digits
        d = min(6, 1 - int(math.floor(math.log10(abs(v)))))
    if math.isfinite(lo) and math.isfinite(hi):
        return f"{v:.{d}f} [{lo:.{d}f}, {hi:.{d}f}]"
    return f"{v:.{d}f}"


def _na(cid, claim, criterion, source, why="table not produced by this run") -> ClaimResult:
    return ClaimResult(cid, claim, criterion, why, NA, source)


# ----------------------------------------------------------------------------- claim 1: modes


def check_beats_baselines(rows: list[dict], source: str = "fig2_goodput_vs_devices.csv", id_prefix: str = "1") \
        -> list[ClaimResult]:
    """Adaptive beats all-UL, all-DL and random at every K and P^dl/P^ul (one row per baseline)."""
    out = []
    for letter, base, name in (("a", "all_ul", "all-UL"), ("b", "all_dl", "all-DL"), ("c", "random", "random")):
        m = f"gom_vs_{base}_pct"
        claim = f"Adaptive mode selection beats {name} at every K and power ratio"
        crit = f"gain of mean goodputs {m} > 0 on every (K, P^dl/P^ul) row"
        rs = [r for r in rows if _fin(r.get(m))]
        if not rs:
            out.append(_na(f"{id_prefix}{letter}", claim, crit, source))
            continue
        worst = min(rs, key=lambda r: _f(r[m]))
        losing = [r for r in rs if not _f(r[m]) > 0]
        where = lambda r: (f"K={r.get('devices', 20)}, P^dl/P^ul={_f(r.get('pdl_ratio')):g}")  # noqa: E731
        measured = (f"smallest gain {_ci(worst, m)}% at {where(worst)}; gain ≤ 0 on {len(losing)}/{len(rs)} rows"
                    + (": " + "; ".join(f"{where(r)}: {_f(r[m]):.1f}%" for r in losing[:4]) if losing else ""))
        out.append(ClaimResult(f"{id_prefix}{letter}", claim, crit, measured, PASS if not losing else FAIL, source))
    return out


def check_all_dl_degrades(rows: list[dict], source: str = "fig2_goodput_vs_devices.csv") -> ClaimResult:
    claim = "All-DL degrades as K grows when P^dl is scarce"
    crit = (f"at P^dl/P^ul = {LOW_RATIO} the gain of adaptive over all-DL grows with K (Spearman ρ > 0 and "
            f"larger at the largest K than at the smallest), and at the largest K it is larger than at "
            f"P^dl/P^ul = {HIGH_RATIO}")
    low = sorted([r for r in rows if _f(r.get("pdl_ratio")) == LOW_RATIO and _fin(r.get("gom_vs_all_dl_pct"))],
                 key=lambda r: _f(r["devices"]))
    high = sorted([r for r in rows if _f(r.get("pdl_ratio")) == HIGH_RATIO and _fin(r.get("gom_vs_all_dl_pct"))],
                  key=lambda r: _f(r["devices"]))
    if len(low) < 3:
        return _na("2", claim, crit, source)
    rho = spearman([r["devices"] for r in low], [r["gom_vs_all_dl_pct"] for r in low])
    a, b = low[0], low[-1]
    ok = rho > 0 and _f(b["gom_vs_all_dl_pct"]) > _f(a["gom_vs_all_dl_pct"])
    measured = (f"P^dl/P^ul={LOW_RATIO}: gain over all-DL {_ci(a, 'gom_vs_all_dl_pct')}% at K={a['devices']} → "
                f"{_ci(b, 'gom_vs_all_dl_pct')}% at K={b['devices']}, ρ={rho:.2f}")
    hb = _at(high, "devices", b["devices"])
    if hb is not None:
        ok = ok and _f(b["gom_vs_all_dl_pct"]) > _f(hb["gom_vs_all_dl_pct"])
        measured += f"; at P^dl/P^ul={HIGH_RATIO}, K={b['devices']}: {_ci(hb, 'gom_vs_all_dl_pct')}%"
    return ClaimResult("2", claim, crit, measured, PASS if ok else FAIL, source)


def check_all_ul_capped(rows: list[dict], source: str = "fig2_goodput_vs_devices.csv") -> ClaimResult:
    claim = "All-UL is capped by per-device UL power"
    crit = (f"all-UL gains nothing from P^dl, so the gain of adaptive over all-UL is larger at P^dl/P^ul = "
            f"{HIGH_RATIO} than at {LOW_RATIO}, at every K ≥ 10 of the sweep")
    lo_rows = {int(_f(r["devices"])): r for r in rows if _f(r.get("pdl_ratio")) == LOW_RATIO and _fin(r.get("gom_vs_all_ul_pct"))}
    hi_rows = {int(_f(r["devices"])): r for r in rows if _f(r.get("pdl_ratio")) == HIGH_RATIO and _fin(r.get("gom_vs_all_ul_pct"))}
    ks = sorted(k for k in set(lo_rows) & set(hi_rows) if k >= 10)
    if not ks:
        return _na("3", claim, crit, source)
    bad = [k for k in ks if not _f(hi_rows[k]["gom_vs_all_ul_pct"]) > _f(lo_rows[k]["gom_vs_all_ul_pct"])]
    k0 = 20 if 20 in ks else ks[-1]
    measured = (f"K={k0}: gain over all-UL {_ci(lo_rows[k0], 'gom_vs_all_ul_pct')}% at {LOW_RATIO} vs "
                f"{_ci(hi_rows[k0], 'gom_vs_all_ul_pct')}% at {HIGH_RATIO}; all-UL goodput "
                f"{_ci(lo_rows[k0], 'goodput_all_ul')} vs {_ci(hi_rows[k0], 'goodput_all_ul')} tokens/s; "
                f"holds at {len(ks) - len(bad)}/{len(ks)} K" + (f" (not at K={bad})" if bad else ""))
    return ClaimResult("3", claim, crit, measured, PASS if not bad else FAIL, source)


# ----------------------------------------------------------------------------- claims 2-3 of §6: P^dl sweep


def check_dl_share(rows: list[dict], source: str = "fig1_mode_split.csv", cid: str = "4") -> list[ClaimResult]:
    claim = "As P^dl grows, more rejected devices switch to DL, but not all of them"
    crit = ("DL fraction rises with P^dl/P^ul (Spearman ρ > 0, last > first) and stays below 1 at the largest "
            "P^dl (upper 95% bound < 1)")
    out = []
    for preset, rs in _by(rows, "preset").items():
        rs = sorted([r for r in rs if _fin(r.get("dl_fraction"))], key=lambda r: _f(r["pdl_ratio"]))
        pid = f"{cid} ({PAIR_SHORT.get(preset, preset)})"
        if len(rs) < 3:
            out.append(_na(pid, claim, crit, source, "fewer than three P^dl points with rejections"))
            continue
        rho = spearman([r["pdl_ratio"] for r in rs], [r["dl_fraction"] for r in rs])
        a, b = rs[0], rs[-1]
        top = _f(b.get("dl_fraction_hi")) if _fin(b.get("dl_fraction_hi")) else _f(b["dl_fraction"])
        ok = rho > 0 and _f(b["dl_fraction"]) > _f(a["dl_fraction"]) and top < 1.0
        measured = (f"DL fraction {_ci(a, 'dl_fraction', 2)} at P^dl/P^ul={_f(a['pdl_ratio']):g} → "
                    f"{_ci(b, 'dl_fraction', 2)} at {_f(b['pdl_ratio']):g}, ρ={rho:.2f}")
        out.append(ClaimResult(pid, claim, crit, measured, PASS if ok else FAIL, source))
    return out


def check_draft_length_trend(rows: list[dict], source: str = "fig1_mode_split.csv", cid: str = "5") \
        -> list[ClaimResult]:
    claim = "The optimal draft length grows with P^dl (roughly from 2–3 to 5–7 tokens)"
    lo_band = (GAMMA_LOW[0] - GAMMA_TOL, GAMMA_LOW[1] + GAMMA_TOL)
    hi_band = (GAMMA_HIGH[0] - GAMMA_TOL, GAMMA_HIGH[1] + GAMMA_TOL)
    crit = (f"mean γ (all devices) rises with P^dl/P^ul (Spearman ρ > 0 over the sweep), is in "
            f"[{lo_band[0]:g}, {lo_band[1]:g}] at P^dl/P^ul = {LOW_RATIO} and in [{hi_band[0]:g}, {hi_band[1]:g}] "
            f"at {HIGH_RATIO}")
    out = []
    for preset, rs in _by(rows, "preset").items():
        rs = sorted(rs, key=lambda r: _f(r["pdl_ratio"]))
        pid = f"{cid} ({PAIR_SHORT.get(preset, preset)})"
        lo, hi = _at(rs, "pdl_ratio", LOW_RATIO), _at(rs, "pdl_ratio", HIGH_RATIO)
        if lo is None or hi is None or len(rs) < 3:
            out.append(_na(pid, claim, crit, source, f"P^dl/P^ul = {LOW_RATIO} or {HIGH_RATIO} not in the sweep"))
            continue
        rho = spearman([r["pdl_ratio"] for r in rs], [r["gamma_mean"] for r in rs])
        gl, gh = _f(lo["gamma_mean"]), _f(hi["gamma_mean"])
        ok = rho > 0 and lo_band[0] <= gl <= lo_band[1] and hi_band[0] <= gh <= hi_band[1]
        measured = (f"mean γ {_ci(lo, 'gamma_mean')} at {LOW_RATIO}, {_ci(hi, 'gamma_mean')} at {HIGH_RATIO} "
                    f"(sweep {_f(rs[0]['gamma_mean']):.1f} at {_f(rs[0]['pdl_ratio']):g} → "
                    f"{_f(rs[-1]['gamma_mean']):.1f} at {_f(rs[-1]['pdl_ratio']):g}), ρ={rho:.2f}")
        out.append(ClaimResult(pid, claim, crit, measured, PASS if ok else FAIL, source))
    return out


# ----------------------------------------------------------------------------- claim 4 of §6: draft schemes


def _scheme_claim(rows, metric, band, name, cid, source) -> list[ClaimResult]:
    lo_b, hi_b = band[0] * (1 - ABOUT), band[1] * (1 + ABOUT)
    claim = f"Greedy per-device draft lengths beat {name} by about {band[0]:g}–{band[1]:g}%"
    crit = (f"gain {metric} > 0 at every P^dl/P^ul, and its mean over the sweep in [{lo_b:g}, {hi_b:g}]% "
            f"(the paper's band ±{int(ABOUT * 100)}%)")
    out = []
    for preset, rs in _by(rows, "preset").items():
        rs = sorted([r for r in rs if _fin(r.get(metric))], key=lambda r: _f(r["pdl_ratio"]))
        pid = f"{cid} ({PAIR_SHORT.get(preset, preset)})"
        if not rs:
            out.append(_na(pid, claim, crit, source))
            continue
        g = [_f(r[metric]) for r in rs]
        mean = float(np.mean(g))
        ok = min(g) > 0 and lo_b <= mean <= hi_b
        worst = rs[int(np.argmin(g))]
        measured = (f"mean over sweep {mean:.1f}%, range {min(g):.1f}–{max(g):.1f}% (lowest "
                    f"{_ci(worst, metric)}% at P^dl/P^ul={_f(worst['pdl_ratio']):g})")
        out.append(ClaimResult(pid, claim, crit, measured, PASS if ok else FAIL, source))
    return out


def check_beats_uniform(rows, source="fig3_draft_schemes.csv", cid="6") -> list[ClaimResult]:
    return _scheme_claim(rows, "gom_vs_best_uniform_pct", UNIFORM_BAND, "the best uniform length", cid, source)


def check_beats_computation_only(rows, source="fig3_draft_schemes.csv", cid="7") -> list[ClaimResult]:
    return _scheme_claim(rows, "gom_vs_computation_only_pct", COMP_BAND, "computation-only control", cid, source)


# ----------------------------------------------------------------------------- defaults


def check_defaults(settings: dict[str, Any], source: str = "settings.csv") -> ClaimResult:
    claim = ("Defaults: K = 20, B = 10 MHz, P^ul = 10 dBm, P^dl/P^ul ∈ {4, 16} (also swept), per-task acceptance "
             "in about 0.82–0.95 over 4 tasks, N_SAA = 1000")
    crit = "the run's default scenario and grids use these values"
    if not settings:
        return _na("8", claim, crit, source)
    checks = {
        "K": (_f(settings.get("devices")) == 20, f"K={settings.get('devices')}"),
        "B": (_f(settings.get("bandwidth_mhz")) == 10, f"B={settings.get('bandwidth_mhz')} MHz"),
        "P^ul": (_f(settings.get("p_ul_dbm")) == 10, f"P^ul={settings.get('p_ul_dbm')} dBm"),
        "ratios": ({4, 16} <= {int(_f(x)) for x in str(settings.get("pdl_ratios", "")).split() if _fin(x)},
                   f"P^dl/P^ul swept over {settings.get('pdl_ratios')}"),
        "acceptance": (0.82 - 1e-9 <= _f(settings.get("acceptance_min")) and _f(settings.get("acceptance_max")) <= 0.95 + 1e-9
                       and _f(settings.get("tasks")) == 4,
                       f"acceptance {settings.get('acceptance_min')}–{settings.get('acceptance_max')} over "
                       f"{settings.get('tasks')} tasks (assumed values)"),
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
        out += [_na("1", "Adaptive mode selection beats all-UL, all-DL and random", "", TABLES["fig2"]),
                _na("2", "All-DL degrades as K grows when P^dl is scarce", "", TABLES["fig2"]),
                _na("3", "All-UL is capped by per-device UL power", "", TABLES["fig2"])]
    modes = tables.get("fig1")
    if modes:
        out += check_dl_share(modes)
        out += check_draft_length_trend(modes)
    else:
        out += [_na("4", "More rejected devices switch to DL as P^dl grows, not all", "", TABLES["fig1"]),
                _na("5", "The optimal draft length grows with P^dl", "", TABLES["fig1"])]
    drafts = tables.get("fig3")
    if drafts:
        out += check_beats_uniform(drafts)
        out += check_beats_computation_only(drafts)
    else:
        out += [_na("6", "Greedy beats the best uniform length by about 8–15%", "", TABLES["fig3"]),
                _na("7", "Greedy beats computation-only control by about 5–10%", "", TABLES["fig3"])]
    out.append(check_defaults(settings or {}))
    return out


def read_settings(path: Path) -> dict[str, Any]:
    from multispin.experiments.reproduce.columns import read_csv

    if not path.exists():
        return {}
    return {r["key"]: r["value"] for r in read_csv(path)}


def check_dir(out: Path) -> list[ClaimResult]:
    """Read the figure CSVs and settings.csv of a run directory and check every claim."""
    from multispin.experiments.reproduce.columns import read_csv

    out = Path(out)
    tables = {k: read_csv(out / f) for k, f in TABLES.items() if (out / f).exists()}
    return check_all(tables, read_settings(out / "settings.csv"))


def claims_for_setting(rows: list[dict]) -> dict[str, str]:
    """Status of the claims that a calibration setting (one NF and P^ul, K = 20) can test."""
    res: dict[str, str] = {}
    mode_rows = [r for r in rows if _fin(r.get("gom_vs_all_ul_pct"))]
    if mode_rows:
        for c in check_beats_baselines(mode_rows, "fig7_calibration.csv"):
            res[c.id] = c.status
    for c in check_dl_share(rows, "fig7_calibration.csv"):
        res["4"] = c.status
    for c in check_draft_length_trend(rows, "fig7_calibration.csv"):
        res["5"] = c.status
    for c in check_beats_uniform(rows, "fig7_calibration.csv"):
        res["6"] = c.status
    for c in check_beats_computation_only(rows, "fig7_calibration.csv"):
        res["7"] = c.status
    return res


Check = Callable[..., Any]
