"""What every CSV column means (the report prints these tables), and CSV reading/writing."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from multispin.experiments.reproduce.csi import CSI_POLICIES
from multispin.experiments.reproduce.long_form import KNOWLEDGE, column, gain_column
from multispin.vocabulary import POLICY_TABLE, REFERENCE, policies_in

# the policies whose columns the docs below describe by rule: the capacity study's and the
# channel-knowledge study's (vocabulary.POLICY_TABLE)
_CAPACITY = tuple(p.name for p in policies_in(kind="capacity"))
_CSI_BASELINES = tuple(p for p in CSI_POLICIES if p != REFERENCE)

PARAM_DOCS: dict[str, str] = {
    "preset": "model pair (scenario preset): paper-qwen (Qwen2.5-0.5B → 14B) or paper-r1 (R1-Distill 1.5B → 32B)",
    "pdl_ratio": "P^dl / P^ul (server DL power budget over the device's maximum UL power)",
    "devices": "number of devices K",
    "sweep": "which sweep the row belongs to (fig4: bandwidth or radius; fig6: pdl or devices; fig8: speed or pilot_snr)",
    "speed_kmh": "device speed (km/h): Doppler f_D = v·f_c/c at 3.5 GHz, fading correlation ρ = J0(2π f_D Δt) between rounds",
    "pilot_snr_db": "pilot SNR (dB): the channel estimate's error variance is 10^(−SNR/10) of the mean fading power",
    "bandwidth_mhz": "total OFDMA bandwidth B (MHz)",
    "radius_m": "cell radius: device distances uniform in [100 m, radius]",
    "noise_figure_db": "receiver noise figure added to N0 = −174 dBm/Hz (dB)",
    "p_dl_dbm": "server DL power budget P^dl (dBm) = P^ul + 10·log10(pdl_ratio) (the x axis of the P^dl figures)",
    "p_ul_dbm": "device maximum UL power P^ul (dBm); P^dl = P^ul + 10·log10(pdl_ratio)",
    "t_ver_tok_ms": "verification cost per batch token T_ver^tok (ms) of the identification setting",
    "acceptance": "per-task acceptance table of the identification setting: low (0.82–0.86), mid (the preset's), high (0.91–0.95)",
    "channel": "channel model of the identification setting: rayleigh (block fading) or path_loss_only",
    "n_drops": "number of independent drops averaged on this row",
    "n_saa": "SAA outcome samples per drop on this row",
}

METRIC_DOCS: dict[str, str] = {
    **{
        column(f"capacity_{o}", p): f"fig9: devices served with p95 TPOT ≤ 200 ms, {p.replace('_', '-')} modes, "
        f"{o.replace('_', '-')} objective (the largest K with every K' ≤ K served)"
        for p in _CAPACITY
        for o in ("sum", "proportional_fair")
    },
    "goodput": "sum goodput G of the adaptive policy (shipped greedy draft lengths, optimal UL/DL modes), tokens/s",
    "g_max": "free-communication bound G_max at the same draft lengths, tokens/s",
    "g_ratio": "G / G_max(γ) at the plan's own draft lengths (1 wherever nobody drafts: not a bound)",
    "g_bound": "free-communication bound max_γ G_max(γ): the best goodput of any draft lengths when communication is free, tokens/s",
    "g_ratio_bound": "G / max_γ G_max(γ): the adaptive goodput against the free-communication bound (≤ 1)",
    "g_comm_bound": "communication-aware bound on max_γ G(γ) on the drop's own SAA samples (docs: the optimiser's certificate; with the exact table up to K = 12, the single-device bound above, which is looser than `optimize`'s), tokens/s",
    "gap_comm_bound_pct": "the certificate: 100·(1 − G / g_comm_bound), how much better than the plan any draft lengths could be on the drop's samples (%)",
    "e_t_comm_ms": "expected communication latency E[T_comm] per round (ms)",
    "t_comp_ms": "computation latency T_comp per round (ms)",
    "tokens_per_round": "expected tokens per round Σ_k E[N_k]",
    "gamma_mean": "mean draft length over all devices (γ = 0 included)",
    "gamma_mean_drafting": "mean draft length over the devices that draft (γ > 0)",
    "frac_no_draft": "fraction of devices with γ = 0 (the server generates their token)",
    "rejected_mean": "expected number of rejected devices per round E|R|",
    "dl_fraction": "fraction of rejected devices served in DL mode (E[#DL] / E[#rejected] over the SAA outcomes)",
    "goodput_best_uniform": "G of the best uniform draft length (exhaustive 0..20), optimal modes, tokens/s",
    "goodput_computation_only": "G of computation-only draft lengths (max G_max), optimal modes, tokens/s",
    "goodput_greedy_paper": "G of the paper's pure two-phase greedy (from γ = 0, +1 moves), optimal modes, tokens/s",
    "gamma_best_uniform": "the best uniform draft length",
    "gamma_computation_only": "mean computation-only draft length",
    "gamma_greedy_paper": "mean draft length of the paper's greedy",
    "gain_vs_best_uniform_pct": "100·(G / G_best_uniform − 1), per drop then averaged (%)",
    "gain_vs_computation_only_pct": "100·(G / G_computation_only − 1), per drop then averaged (%)",
    "gain_vs_greedy_paper_pct": "100·(G / G_greedy_paper − 1), per drop then averaged (%)",
    "goodput_all_ul": "G with every rejected device in UL mode (its own optimised draft lengths), tokens/s",
    "goodput_all_dl": "G with every rejected device in DL mode (its own optimised draft lengths), tokens/s",
    "goodput_random": "G with random modes (each rejected device UL or DL with probability 1/2), tokens/s",
    "gamma_all_ul": "mean draft length of the all-UL baseline",
    "gamma_all_dl": "mean draft length of the all-DL baseline",
    "gamma_random": "mean draft length of the random-mode baseline",
    "gain_vs_all_ul_pct": "100·(G / G_all_ul − 1), per drop then averaged (%)",
    "gain_vs_all_dl_pct": "100·(G / G_all_dl − 1), per drop then averaged (%)",
    "gain_vs_random_pct": "100·(G / G_random − 1), per drop then averaged (%)",
    "goodput_best_known": "diagnostic: optimal modes evaluated at the best draft lengths any policy of this drop (and, in the P^dl sweep at P^dl/P^ul = 4 and 16, a slow reference search) found, tokens/s",
    "greedy_shortfall_pct": "diagnostic: 100·(goodput_best_known / G − 1): what the shipped search left on the table (%)",
    "goodput_opt_split": "G with the bandwidth split optimised jointly with DL power (extension), at the adaptive draft lengths, tokens/s",
    "gain_opt_split_pct": "100·(goodput_opt_split / G − 1) (%)",
    "goodput_lattice": "G with the lattice codec (QSV, ℓ = 1024) instead of the sparse top-1024 payload, re-planned, tokens/s",
    "gain_lattice_pct": "100·(goodput_lattice / G − 1) (%)",
    "gamma_mean_lattice": "mean draft length of the lattice-codec plan",
    "gom_vs_all_ul_pct": "gain of means: 100·(mean G / mean G_all_ul − 1) (%); CI by the paired delta method",
    "gom_vs_all_dl_pct": "gain of means: 100·(mean G / mean G_all_dl − 1) (%)",
    "gom_vs_random_pct": "gain of means: 100·(mean G / mean G_random − 1) (%)",
    "gom_vs_best_uniform_pct": "gain of means: 100·(mean G / mean G_best_uniform − 1) (%)",
    "gom_vs_computation_only_pct": "gain of means: 100·(mean G / mean G_computation_only − 1) (%)",
    "gom_vs_greedy_paper_pct": "gain of means: 100·(mean G / mean G_greedy_paper − 1) (%)",
    "gom_paper_vs_best_uniform_pct": "the paper's greedy against the best uniform γ: 100·(mean G_greedy_paper / mean G_best_uniform − 1) (%)",
    "gom_paper_vs_computation_only_pct": "the paper's greedy against computation-only: 100·(mean G_greedy_paper / mean G_computation_only − 1) (%)",
    "gom_opt_split_pct": "gain of means: 100·(mean goodput_opt_split / mean G − 1) (%)",
    "gom_lattice_pct": "gain of means: 100·(mean goodput_lattice / mean G − 1) (%)",
    "goodput_perfect": "fig8: adaptive G on the true channel, planned on it (perfect knowledge, the paper's assumption), tokens/s",
    "goodput_naive": "fig8: adaptive G on the true channel, planned on the estimate taken as exact, tokens/s",
    "goodput_robust": "fig8: adaptive G on the true channel, planned over posterior channel draws given the estimate, tokens/s",
    **{
        column(
            "goodput", b, k
        ): f"fig8: as goodput_{k}, with every rejected device in {POLICY_TABLE[b].links[0].upper()} mode, tokens/s"
        for k in KNOWLEDGE
        for b in _CSI_BASELINES
    },
    **{
        column("gamma", p, k): f"fig8: mean draft length of the {k} plan"
        + (f" ({p.replace('_', '-')})" if p != REFERENCE else " (adaptive)")
        for k in ("naive", "robust")
        for p in CSI_POLICIES
    },
    "rho": "fig8: correlation ρ = J0(2π f_D Δt) between the pilots' block and the round's",
    "round_ms": "fig8: Δt, the previous round's duration T_comp + E[T_comm] (ms), over which the channel ages",
    "posterior_var": "fig8: variance of the round's fading given the estimate, 1 − ρ²/(1 + σ²) (0: known, 1: nothing known)",
    "gom_naive_vs_perfect_pct": "fig8: 100·(mean G_naive / mean G_perfect − 1): goodput lost by planning on the estimate (%)",
    "gom_robust_vs_perfect_pct": "fig8: 100·(mean G_robust / mean G_perfect − 1) (%)",
    "gom_robust_vs_naive_pct": "fig8: 100·(mean G_robust / mean G_naive − 1): what robust planning recovers (%)",
    **{
        gain_column(
            b, k
        ): f"fig8: gain of adaptive over {b.replace('_', '-')} with {k} knowledge, 100·(mean G_{k} / mean G_{k}_{b} − 1) (%)"
        for k in KNOWLEDGE
        for b in _CSI_BASELINES
    },
    "payload_bits_sparse": "bits of one distribution, sparse top-V_eff (the paper's payload)",
    "payload_bits_lattice": "bits of one distribution, lattice codec",
}

SUFFIX_DOCS = {
    "_lo": "lower end of the 95% confidence interval of the mean over drops (Student t for signed metrics; expanded-percentile bootstrap for non-negative ones; paired delta method for gom_*)",
    "_hi": "upper end of the 95% confidence interval",
    "_n": "number of drops in which the metric is defined",
}

DROP_DOCS = {
    "drop": "drop index within the point (0..n_drops−1)",
    "drop_seed": "the scenario seed of this drop (derived from the base seed, study, point and drop index)",
}


def doc_for(column: str) -> str:
    if column in PARAM_DOCS:
        return PARAM_DOCS[column]
    if column in METRIC_DOCS:
        return METRIC_DOCS[column]
    if column in DROP_DOCS:
        return DROP_DOCS[column]
    for suf, text in SUFFIX_DOCS.items():
        if column.endswith(suf) and column[: -len(suf)] in METRIC_DOCS:
            return f"{text} of {column[: -len(suf)]}"
    return ""


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if v.is_integer() and abs(v) < 1e15:
            return repr(v)
        return repr(v)
    return str(v)


def write_csv(path: Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    """Write rows (already sorted) with fixed columns; floats at full precision (repr)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow([_fmt(r.get(c, "")) for c in columns])


def _parse(v: str) -> Any:
    if v == "":
        return None
    if v in ("true", "false"):
        return v == "true"
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


def read_csv(path: Path) -> list[dict[str, Any]]:
    with open(path, newline="") as f:
        return [{k: _parse(v) for k, v in row.items()} for row in csv.DictReader(f)]


def ordered_columns(params: Iterable[str], rows: list[dict[str, Any]]) -> list[str]:
    """Parameter columns first (in the given order), then n_drops, then metrics with their CI columns."""
    params = list(params)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    metrics = sorted(k for k in keys if k in METRIC_DOCS)
    cols = [p for p in params if any(p in r for r in rows)] + (["n_drops"] if any("n_drops" in r for r in rows) else [])
    for m in metrics:
        cols.append(m)
        for suf in ("_lo", "_hi", "_n"):
            if any(m + suf in r for r in rows):
                cols.append(m + suf)
    cols += [k for k in keys if k not in cols and k not in params]
    return cols
