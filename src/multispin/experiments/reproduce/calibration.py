"""Figure 7 and the calibration study: where each claim holds as the noise figure (and P^ul) vary.

The paper does not give its noise level. The study sweeps the receiver noise figure (NF) at the
preset P^ul, across P^dl/P^ul, on the main model pair, with common random numbers (every NF
sees the same drops), fewer drops per point and N_SAA = 200. Because rates depend on powers only
through P/N0, raising P^ul and P^dl by x dB at a fixed P^dl/P^ul is the same as lowering the NF by
x dB: the P^ul axis collapses onto the NF axis. Two check rows (P^ul + 10 dB with NF + 10 dB at
the preset NF) must reproduce the preset rows exactly, and the report says whether they do.

The draft-length target of the paper (mean γ about 2–3 at low P^dl rising to 5–7) is read at
the paper's two settings, P^dl/P^ul = 4 (low) and 16 (high); :func:`best_match` is the NF whose
mean γ is closest to (2.5, 6) there.
"""

from __future__ import annotations

import math
from pathlib import Path

from multispin.experiments.reproduce._figure import pyplot, ratio_axis, run_as_script, save, select

NAME = "fig7_calibration"
TITLE = "Calibration: noise figure × P^dl/P^ul, and where each claim holds"
STUDIES = ("calibration",)
PARAMS = ("preset", "noise_figure_db", "p_ul_dbm", "pdl_ratio")
METRICS = ("gamma_mean", "gamma_mean_drafting", "frac_no_draft", "dl_fraction", "goodput", "g_ratio",
           "gom_vs_best_uniform_pct", "gom_vs_computation_only_pct", "gom_vs_all_ul_pct", "gom_vs_all_dl_pct",
           "gom_vs_random_pct", "greedy_shortfall_pct")
TARGET = {4: 2.5, 16: 6.0}
CLAIM_IDS = ("1a", "1b", "1c", "4", "5", "6", "7")
SETTINGS_CSV = "fig7_calibration_settings.csv"


def table(summaries: dict[str, list[dict]]) -> list[dict]:
    return select(summaries["calibration"], PARAMS, METRICS)


def _settings(rows: list[dict]) -> dict[tuple[float, float], list[dict]]:
    out: dict[tuple[float, float], list[dict]] = {}
    for r in rows:
        out.setdefault((float(r["noise_figure_db"]), float(r["p_ul_dbm"])), []).append(r)
    return out


def settings_table(rows: list[dict]) -> list[dict]:
    """One row per (NF, P^ul): mean γ at the paper's two ratios, distance to the target, claim statuses."""
    from multispin.experiments.reproduce.claims import claims_for_setting

    out = []
    for (nf, pul), rs in sorted(_settings(rows).items()):
        row = {"noise_figure_db": nf, "p_ul_dbm": pul, "p_ul_minus_nf_db": pul - nf}
        dist = 0.0
        for ratio, target in TARGET.items():
            r = next((x for x in rs if float(x["pdl_ratio"]) == ratio), None)
            g = float(r["gamma_mean"]) if r is not None else float("nan")
            row[f"gamma_mean_at_{ratio}"] = g
            dist += abs(g - target)
        row["target_distance"] = dist
        statuses = claims_for_setting(rs)
        for cid in CLAIM_IDS:
            row[f"claim_{cid}"] = statuses.get(cid, "N/A")
        out.append(row)
    return out


SETTINGS_DOCS = {
    "noise_figure_db": "receiver noise figure (dB)",
    "p_ul_dbm": "P^ul (dBm); P^dl = P^ul + 10·log10(P^dl/P^ul)",
    "p_ul_minus_nf_db": "P^ul − NF (dB): the one radio parameter the results depend on at fixed P^dl/P^ul",
    "gamma_mean_at_4": "mean draft length at P^dl/P^ul = 4",
    "gamma_mean_at_16": "mean draft length at P^dl/P^ul = 16",
    "target_distance": "|γ̄(4) − 2.5| + |γ̄(16) − 6|: distance to the paper's draft-length trend",
    **{f"claim_{c}": f"status of claim {c} at this setting (K = 20; claims 2, 3 and 8 need the K sweep / defaults)"
       for c in CLAIM_IDS},
}


def best_match(settings: list[dict], p_ul_dbm: float | None = None) -> dict | None:
    """The setting (at the preset P^ul) closest to the paper's draft-length trend."""
    cands = [s for s in settings if (p_ul_dbm is None or s["p_ul_dbm"] == p_ul_dbm)
             and math.isfinite(s["target_distance"])]
    return min(cands, key=lambda s: (s["target_distance"], s["noise_figure_db"])) if cands else None


def equivalence(rows: list[dict]) -> list[tuple[dict, dict, bool]]:
    """Pairs (P^ul + 10, NF + 10) vs (P^ul, NF) at the same ratio, and whether their numbers are equal."""
    sets = _settings(rows)
    base_pul = min(p for _, p in sets)
    out = []
    for (nf, pul), rs in sets.items():
        if pul == base_pul:
            continue
        ref = sets.get((nf - (pul - base_pul), base_pul))
        if not ref:
            continue
        for r in rs:
            twin = next((x for x in ref if x["pdl_ratio"] == r["pdl_ratio"]), None)
            if twin is None:
                continue
            same = all(abs(float(r[m]) - float(twin[m])) <= 1e-9 * max(1.0, abs(float(twin[m])))
                       for m in ("goodput", "gamma_mean") if m in r)
            out.append((r, twin, same))
    return out


def plot(rows: list[dict], path: Path, chosen_nf: float | None = None) -> None:
    plt = pyplot()
    import matplotlib as mpl

    base_pul = min(float(r["p_ul_dbm"]) for r in rows)
    main = [r for r in rows if float(r["p_ul_dbm"]) == base_pul]
    nfs = sorted({float(r["noise_figure_db"]) for r in main})
    cmap = mpl.colormaps["viridis"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4), gridspec_kw={"width_ratios": [1, 1, 0.8]})
    for i, nf in enumerate(nfs):
        rs = sorted([r for r in main if float(r["noise_figure_db"]) == nf], key=lambda r: r["pdl_ratio"])
        c = cmap(i / max(1, len(nfs) - 1))
        lw = 2.5 if chosen_nf is not None and nf == chosen_nf else 1.0
        lab = f"NF {nf:g} dB" + (" (this run)" if chosen_nf is not None and nf == chosen_nf else "")
        axes[0].plot([r["pdl_ratio"] for r in rs], [r["gamma_mean"] for r in rs], marker="o", ms=3, color=c, lw=lw,
                     label=lab)
        axes[1].plot([r["pdl_ratio"] for r in rs], [r["dl_fraction"] for r in rs], marker="o", ms=3, color=c, lw=lw,
                     label=lab)
    axes[0].axhspan(2, 3, xmin=0, xmax=1, color="grey", alpha=0.12)
    axes[0].axhspan(5, 7, color="grey", alpha=0.12)
    axes[0].set_ylabel("mean draft length γ (all devices)")
    axes[1].set_ylabel("fraction of rejected devices in DL")
    for ax in axes[:2]:
        ratio_axis(ax)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6, ncol=2)
    st = [s for s in settings_table(rows) if s["p_ul_dbm"] == base_pul]
    mat = [[{"PASS": 1.0, "FAIL": 0.0}.get(s[f"claim_{c}"], 0.5) for c in CLAIM_IDS] for s in st]
    axes[2].imshow(mat, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    axes[2].set_xticks(range(len(CLAIM_IDS)), [f"claim {c}" for c in CLAIM_IDS], rotation=45, fontsize=7)
    axes[2].set_yticks(range(len(st)), [f"NF {s['noise_figure_db']:g} dB" for s in st], fontsize=7)
    for i, s in enumerate(st):
        for j, c in enumerate(CLAIM_IDS):
            axes[2].text(j, i, s[f"claim_{c}"], ha="center", va="center", fontsize=6)
    axes[2].set_title("claims per noise figure (K = 20)", fontsize=9)
    fig.suptitle("Calibration of the unpublished noise level (grey bands: the paper's 2–3 and 5–7 tokens)",
                 fontsize=10)
    save(fig, path)


def describe(rows: list[dict], chosen_nf: float | None = None) -> str:
    st = settings_table(rows)
    base_pul = min(s["p_ul_dbm"] for s in st)
    best = best_match(st, base_pul)
    if best is None:
        return ""
    txt = (f"In this sweep the noise figure closest to the paper's draft-length trend is {best['noise_figure_db']:g} dB "
           f"(mean γ {best['gamma_mean_at_4']:.1f} at P^dl/P^ul = 4 and {best['gamma_mean_at_16']:.1f} at 16).")
    if chosen_nf is not None:
        cur = next((s for s in st if s["noise_figure_db"] == chosen_nf and s["p_ul_dbm"] == base_pul), None)
        if cur is not None:
            txt += (f" The noise figure of this run, {chosen_nf:g} dB, gives {cur['gamma_mean_at_4']:.1f} and "
                    f"{cur['gamma_mean_at_16']:.1f}.")
    return txt


if __name__ == "__main__":
    run_as_script(__name__)
