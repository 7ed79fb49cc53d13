"""report.md: assumptions, calibration, every figure with its PNG, the checked claims, CSV columns."""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType

from multispin.experiments.reproduce import calibration
from multispin.experiments.reproduce.columns import DROP_DOCS, doc_for, read_csv
from multispin.experiments.reproduce.config import RunConfig


def _md_escape(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_md_escape(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _num(v, d=2) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return "n/a" if math.isnan(f) else f"{f:.{d}f}"


def _assumptions(cfg: RunConfig, settings: dict) -> str:
    from multispin.system import get_preset

    lines = ["## Assumptions", ""]
    for preset in cfg.presets:
        sc = get_preset(preset)
        acc = ", ".join(f"{k} {v:g}" for k, v in sorted(sc.tasks.acceptance.items()))
        lines.append(f"- **{preset}**: per-task acceptance rates α (per token, i.i.d.) **assumed** inside the paper's "
                     f"range 0.82–0.95: {acc}; each device draws one task uniformly. Draft latency "
                     f"{1e3 * sc.devices.draft_latency_s_per_token:g} ms/token × U[1, {sc.devices.draft_latency_jitter_max:g}], "
                     f"T_ver^0 = {1e3 * sc.compute.t_ver0_s:g} ms, T_ver^1 = {1e3 * sc.compute.t_ver1_s:g} ms/device.")
    lines += [
        f"- **Noise figure**: {_num(settings.get('noise_figure_db'), 1)} dB on top of N0 = −174 dBm/Hz at both ends, "
        f"set explicitly on every point (calibrated, see *Calibration*; the scenario preset carries "
        f"{_num(settings.get('preset_noise_figure_db'), 1)} dB).",
        f"- **N_SAA** = {settings.get('n_saa')} SAA outcome samples per drop"
        + (" (reduced from the paper's 1000 for `--quick`)" if int(float(settings.get('n_saa', 1000))) != 1000 else "")
        + f"; figure 2 beyond K = 20 (outside the paper's range) uses N_SAA = {settings.get('users_beyond_n_saa')} to keep "
        "the run's cost down (a K = 50 drop costs ~10 s of CPU at 1000); the calibration study uses N_SAA = "
        f"{settings.get('calibration_n_saa')}. Each policy's goodput is its SAA value on the samples it was optimised "
        "on (slightly optimistic for every policy alike; the comparisons are paired on the same samples).",
        f"- **Drops**: {settings.get('drops_per_point')} independent drops per point of figures 1–6 "
        f"({settings.get('calibration_drops_per_point')} in the calibration study, with common random numbers across "
        "noise figures). A drop redraws device distances (uniform in [100, 500] m), tasks, draft latencies, "
        "Rayleigh fading and the SAA samples; its seed is a hash of (base seed "
        f"{settings.get('seed')}, study, point, drop index). Bands and brackets are 95% confidence "
        "intervals of the mean over drops: Student t for signed quantities, an expanded-percentile bootstrap for "
        "non-negative ones (goodputs, draft lengths, fractions: never below 0). Gains are gains of means, 100·(mean G / mean G_baseline − 1), over the "
        "same drops, with a paired delta-method interval (`gom_*`); per-drop gains are in `drops/`.",
        "- **One round per drop**: the optimiser plans round 0 of each drop (block fading: the channel is fixed "
        "within the round). Goodput is the SAA estimate of the ratio of expectations G of SYSTEM_MODEL.md §3.",
        f"- **Payload**: S = {settings.get('payload_bits')} bits (sparse top-1024, the paper's model); drafting uploads "
        "and correction ids are not counted (as in the paper). Equal bandwidth split unless said otherwise.",
        "- **Policies**: adaptive = the shipped planner (`multispin.optimize.plan`: multi-start greedy with ±1 moves, "
        "optimal UL/DL modes); every mode baseline gets its own draft lengths from the same planner on the same "
        "samples; draft-length baselines use optimal modes (SYSTEM_MODEL.md §5.3).",
        "- **Extensions** (figure 5): the optimised bandwidth split is evaluated at the adaptive plan's draft lengths "
        "(not re-planned: a lower bound on its gain); the lattice codec is re-planned. In DL mode the lattice codec "
        "is exact only when the target row is representable on the lattice (e.g. greedy sampling); otherwise it is "
        "an approximation (`multispin.spec.codecs`).",
        "",
    ]
    return "\n".join(lines)


def _calibration_section(out: Path, settings: dict) -> str:
    p = out / calibration.SETTINGS_CSV
    if not p.exists():
        return "## Calibration\n\nThe calibration study was not part of this run.\n"
    st = read_csv(p)
    rows = read_csv(out / f"{calibration.NAME}.csv")
    nf = float(settings.get("noise_figure_db", 0.0))
    base_pul = min(float(s["p_ul_dbm"]) for s in st)
    best = calibration.best_match(st, base_pul)
    eq = calibration.equivalence(rows)
    lines = ["## Calibration", "",
             "The paper does not publish its noise level, and its per-task acceptance rates only as a range. "
             "Everything else being the paper's, the noise figure decides how expensive a rejection is, and with "
             "it the draft lengths and the UL/DL split. We swept it (figure 7, table below; K = 20, "
             f"{settings.get('calibration_drops_per_point')} drops per point, N_SAA = {settings.get('calibration_n_saa')}, "
             "the same drops for every noise figure).", "",
             "**P^ul.** Rates depend on the powers only through P/N0, so at a fixed P^dl/P^ul raising P^ul (and P^dl) by "
             "x dB is exactly lowering the noise figure by x dB: the P^ul sweep is the same axis, `p_ul_minus_nf_db`."]
    if eq:
        ok = all(s for _, _, s in eq)
        lines.append(f"Check: the rows at P^ul + 10 dB with NF + 10 dB {'reproduce' if ok else 'do NOT reproduce'} "
                     f"the preset-P^ul rows ({sum(s for _, _, s in eq)}/{len(eq)} equal).")
    lines += ["",
              "**Choice.** The paper's draft-length trend (mean γ about 2–3 tokens at low P^dl rising to 5–7) is read at "
              "its two settings, P^dl/P^ul = 4 and 16. Distance = |γ̄(4) − 2.5| + |γ̄(16) − 6|.", ""]
    header = ["NF (dB)", "P^ul (dBm)", "γ̄ at 4", "γ̄ at 16", "distance"] + [f"claim {c}" for c in calibration.CLAIM_IDS]
    body = []
    for s in st:
        mark = " ←" if float(s["noise_figure_db"]) == nf and float(s["p_ul_dbm"]) == base_pul else ""
        body.append([f"{_num(s['noise_figure_db'], 0)}{mark}", _num(s["p_ul_dbm"], 0), _num(s["gamma_mean_at_4"], 1),
                     _num(s["gamma_mean_at_16"], 1), _num(s["target_distance"], 1)]
                    + [s[f"claim_{c}"] for c in calibration.CLAIM_IDS])
    lines += [_table(header, body), ""]
    if best is not None:
        lines.append(f"In this run the closest setting is NF = {_num(best['noise_figure_db'], 0)} dB "
                     f"(γ̄ = {_num(best['gamma_mean_at_4'], 1)} at 4, {_num(best['gamma_mean_at_16'], 1)} at 16). "
                     f"The run used NF = {nf:g} dB (← in the table).")
    lines += ["", "Claims 2, 3 (K sweep) and 8 (defaults) are not functions of one calibration setting and are not "
              "repeated here. Where a claim fails under the defaults, the rows above show the settings under which it "
              "holds.", ""]
    return "\n".join(lines)


def _holds_at(out: Path) -> dict[str, str]:
    """Per claim id: the calibration noise figures (preset P^ul) at which it holds, from the settings CSV."""
    p = out / calibration.SETTINGS_CSV
    if not p.exists():
        return {}
    st = read_csv(p)
    base_pul = min(float(s["p_ul_dbm"]) for s in st)
    res = {}
    for cid in calibration.CLAIM_IDS:
        nfs = [f"{float(s['noise_figure_db']):g}" for s in st
               if float(s["p_ul_dbm"]) == base_pul and s.get(f"claim_{cid}") == "PASS"]
        res[cid] = ", ".join(nfs) if nfs else "none"
    return res


def _claims_section(claims, out: Path) -> str:
    n_pass = sum(c.status == "PASS" for c in claims)
    n_fail = sum(c.status == "FAIL" for c in claims)
    holds = _holds_at(out)
    pair = ""
    if holds:
        st = read_csv(out / calibration.SETTINGS_CSV)
        pair = f" ({read_csv(out / f'{calibration.NAME}.csv')[0]['preset']}, K = 20)" if st else ""

    def where(c) -> str:
        return holds.get(c.id.split(" ")[0], "—")

    header = ["id", "claim", "criterion", "measured", "status", "holds at NF (dB) in the calibration" + pair, "source"]
    lines = ["## Checked claims (SYSTEM_MODEL.md §6)", "",
             f"{n_pass} PASS, {n_fail} FAIL, {len(claims) - n_pass - n_fail} N/A. Computed by "
             "`multispin.experiments.reproduce.claims` from the CSVs of this directory (also in `claims.csv`); "
             "the last-but-one column comes from `fig7_calibration_settings.csv`.", "",
             _table(header, [[c.id, c.claim, c.criterion, c.measured, f"**{c.status}**", where(c), f"`{c.source}`"]
                             for c in claims]), ""]
    return "\n".join(lines)


def _optimiser_notes(out: Path) -> str:
    """How far the shipped draft-length search is from the best γ known in each drop."""
    lines = []
    for study, against in (("pdl", "every draft-length baseline's γ and a slow reference search (iterated local "
                                   "search from random points and kicks)"),
                           ("users", "every mode baseline's γ")):
        p = out / "drops" / f"{study}.csv"
        if not p.exists():
            continue
        d = [r for r in read_csv(p) if r.get("greedy_shortfall_pct") not in (None, "")]
        if not d:
            continue
        short = [float(r["greedy_shortfall_pct"]) for r in d]
        lines.append(f"- study `{study}` ({len(d)} drops), against {against}: shortfall > 0.5% in "
                     f"{sum(s > 0.5 for s in short)} drops, largest {max(short):.3g}%.")
    if not lines:
        return ""
    return "\n".join([
        "## Note on the draft-length search", "",
        "Diagnostic `greedy_shortfall_pct`: the optimal-mode goodput at the best draft lengths found in the same "
        "drop by any policy (and, where run, by a slow reference search), relative to the shipped plan. The "
        "shipped search starts from every baseline's γ, so it is never below them; a positive value means another "
        "search found a better local optimum.", "", *lines, ""])


def _columns_section(out: Path, modules: list[ModuleType]) -> str:
    lines = ["## CSV columns", "",
             "Every figure CSV has one row per point: its parameters, `n_drops`, and for each metric `m` the mean over "
             "drops `m` with its 95% confidence interval `m_lo`, `m_hi` (and `m_n`, the drops that define it, for "
             "metrics undefined in some drops). `drops/<study>.csv` has one row per drop with the same metric names "
             "(no `_lo`/`_hi`), plus:", ""]
    lines += [_table(["column", "meaning"], [[f"`{k}`", v] for k, v in DROP_DOCS.items()]), ""]
    for m in modules:
        p = out / f"{m.NAME}.csv"
        if not p.exists():
            continue
        with open(p) as f:
            cols = f.readline().strip().split(",")
        base = [c for c in cols if not (c.endswith("_lo") or c.endswith("_hi") or c.endswith("_n"))]
        lines += [f"### `{m.NAME}.csv`", "", _table(["column", "meaning"], [[f"`{c}`", doc_for(c)] for c in base]), ""]
    p = out / calibration.SETTINGS_CSV
    if p.exists():
        lines += [f"### `{calibration.SETTINGS_CSV}`", "",
                  _table(["column", "meaning"], [[f"`{k}`", v] for k, v in calibration.SETTINGS_DOCS.items()]), ""]
    lines += ["### `settings.csv`, `claims.csv`", "",
              "`settings.csv`: key/value pairs of the run's defaults (what claim 8 checks). `claims.csv`: the table "
              "above (id, claim, criterion, measured, status, source).", ""]
    return "\n".join(lines)


def write_report(out: Path, cfg: RunConfig, modules: list[ModuleType], claims, wall_s: float, command: str,
                 cpu_s: float | None = None) -> Path:
    from multispin.experiments.reproduce.claims import read_settings

    out = Path(out)
    settings = read_settings(out / "settings.csv")
    kind = "quick run (`--quick`: fewer drops and points, N_SAA 200; not the paper's statistics)" if cfg.quick \
        else "full run"
    nf = float(settings.get("noise_figure_db", 0.0))
    parts = [
        "# Multi-SPIN reproduction report", "",
        f"Command: `{command or 'multispin reproduce'}` — {kind}; wall time {wall_s / 60:.1f} min "
        f"({wall_s:.0f} s) with {cfg.workers} worker(s)"
        + (f"; the drops took {cpu_s:.0f} s of CPU in all (≈ {cpu_s / 60 / max(1, cfg.workers):.0f} min on "
           f"{cfg.workers} otherwise idle cores)" if cpu_s else "")
        + f". Model pairs: {', '.join(cfg.presets)}. Code version {settings.get('code_version')}.", "",
        "Everything below is generated from the CSVs in this directory. The paper's findings are relative; the "
        "checked-claims table says, claim by claim, what was measured and whether it holds.", "",
        _claims_section(claims, out),
        _assumptions(cfg, settings),
        _calibration_section(out, settings),
        "## Figures", "",
    ]
    for m in modules:
        csv_path = out / f"{m.NAME}.csv"
        if not csv_path.exists():
            continue
        rows = read_csv(csv_path)
        text = m.describe(rows, nf) if m is calibration else m.describe(rows)
        parts += [f"### {m.TITLE}", "", f"![{m.NAME}]({m.NAME}.png)", "", text, "",
                  f"Data: [`{m.NAME}.csv`]({m.NAME}.csv); regenerate with "
                  f"`python -m {m.__name__} --out {out} [--quick] [--export] [--plot]`.", ""]
    parts.append(_optimiser_notes(out))
    parts.append(_columns_section(out, modules))
    parts += ["## Reproduce", "",
              "- quick (CI): `multispin reproduce --quick --out reproduce-quick`",
              "- full: `multispin reproduce --out reproduce-full` (all cores; resumes from `OUT/cache/` after an "
              "interruption; a changed configuration or optimiser recomputes)", ""]
    path = out / "report.md"
    path.write_text("\n".join(parts))
    return path
