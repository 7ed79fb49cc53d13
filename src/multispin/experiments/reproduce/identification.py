"""Figure 7, the identification study: every claim scored over the settings the paper leaves unknown.

The paper publishes neither its noise level, nor whether verification cost grows with the batch's
tokens, nor its per-task acceptance rates (only the range 0.82–0.95), and it describes Rayleigh
fading without saying whether its curves average over it. The study scores every claim that one
setting can test (K = 20, a P^dl/P^ul sweep on the main pair) at each setting
(`multispin.experiments.reproduce.studies.identification_settings`), with the same drops
for every setting. It reports the map of claim statuses, the settings where every claim holds
(or that there are none), and which claims never hold together: a conflict is a finding, not a
reason to move a setting.
"""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

from multispin.experiments.reproduce._figure import pyplot, save, select
from multispin.experiments.reproduce.claims import SETTING_CLAIMS, claims_for_setting

NAME = "fig7_identification"
TITLE = "Identification: every claim over the unpublished settings (noise figure, T_ver^tok, acceptance, channel)"
STUDIES = ("identification",)
SETTING_KEYS = ("noise_figure_db", "t_ver_tok_ms", "acceptance", "channel")
PARAMS = ("preset", *SETTING_KEYS, "pdl_ratio")
METRICS = (
    "gamma_mean",
    "gamma_mean_drafting",
    "frac_no_draft",
    "dl_fraction",
    "goodput",
    "g_ratio",
    "gom_vs_best_uniform_pct",
    "gom_vs_computation_only_pct",
    "gom_paper_vs_best_uniform_pct",
    "gom_paper_vs_computation_only_pct",
    "gom_vs_all_ul_pct",
    "gom_vs_all_dl_pct",
    "gom_vs_random_pct",
    "gamma_all_ul",
    "goodput_all_ul",
    "greedy_shortfall_pct",
)
SETTINGS_CSV = "fig7_identification_settings.csv"
STATUS_SCORE = {"PASS": 1.0, "INCONCLUSIVE": 0.5, "FAIL": 0.0}


def table(summaries: dict[str, list[dict]]) -> list[dict]:
    return select(summaries["identification"], PARAMS, METRICS)


def _key(r: dict) -> tuple:
    return tuple(r[k] for k in SETTING_KEYS)


def _label(s: dict) -> str:
    parts = [f"NF {float(s['noise_figure_db']):g} dB"]
    if float(s["t_ver_tok_ms"]):
        parts.append(f"T_ver^tok {float(s['t_ver_tok_ms']):g} ms")
    if s["acceptance"] != "mid":
        parts.append(f"α {s['acceptance']}")
    if s["channel"] != "rayleigh":
        parts.append("no fading")
    return ", ".join(parts)


def settings_table(rows: list[dict]) -> list[dict]:
    """One row per setting: mean γ and the drafting share at the paper's two ratios, each claim's status."""
    groups: dict[tuple, list[dict]] = {}
    for r in sorted(
        rows, key=lambda r: (float(r["noise_figure_db"]), float(r["t_ver_tok_ms"]), r["acceptance"], r["channel"])
    ):
        groups.setdefault(_key(r), []).append(r)
    out = []
    for key, rs in groups.items():
        row = dict(zip(SETTING_KEYS, key))
        row["setting"] = _label(row)
        for ratio in (4, 16):
            r = next((x for x in rs if float(x["pdl_ratio"]) == ratio), None)
            row[f"gamma_mean_at_{ratio}"] = float(r["gamma_mean"]) if r else float("nan")
            row[f"drafting_share_at_{ratio}"] = 1.0 - float(r["frac_no_draft"]) if r else float("nan")
        res = claims_for_setting(rs)
        for cid in SETTING_CLAIMS:
            c = res.get(cid)
            row[f"claim_{cid}"] = c.status if c else "N/A"
            row[f"measured_{cid}"] = c.measured if c else ""
        out.append(row)
    return out


def _docs() -> dict[str, str]:
    return {
        "noise_figure_db": "receiver noise figure (dB), both ends",
        "t_ver_tok_ms": "verification cost per batch token T_ver^tok (ms)",
        "acceptance": "per-task acceptance table: low (0.82–0.86), mid (the preset's), high (0.91–0.95)",
        "channel": "rayleigh (block fading per round) or path_loss_only (no small-scale fading)",
        "setting": "short label",
        "gamma_mean_at_4": "mean draft length (all devices) at P^dl/P^ul = 4",
        "drafting_share_at_4": "share of devices with γ > 0 at P^dl/P^ul = 4",
        "gamma_mean_at_16": "mean draft length (all devices) at P^dl/P^ul = 16",
        "drafting_share_at_16": "share of devices with γ > 0 at P^dl/P^ul = 16",
        **{f"claim_{c}": f"status of claim {c} at this setting (K = 20)" for c in SETTING_CLAIMS},
        **{f"measured_{c}": f"what claim {c} measured at this setting" for c in SETTING_CLAIMS},
    }


SETTINGS_DOCS = _docs()


def findings(settings: list[dict]) -> dict:
    """Where all claims hold, which never hold anywhere, and which pairs never hold together."""
    ids = [c for c in SETTING_CLAIMS if any(s.get(f"claim_{c}") not in (None, "N/A") for s in settings)]
    passes = {c: {i for i, s in enumerate(settings) if s.get(f"claim_{c}") == "PASS"} for c in ids}
    # claims 6p/7p are about the paper's algorithm: the region is asked of the shipped search's claims
    ours = [c for c in ids if not c.endswith("p")]
    region = [settings[i]["setting"] for i in range(len(settings)) if all(i in passes[c] for c in ours)]
    never = [c for c in ids if not passes[c]]
    conflicts = [(a, b) for a, b in combinations([c for c in ours if passes[c]], 2) if not passes[a] & passes[b]]
    return {
        "claims": ids,
        "region": region,
        "never": never,
        "conflicts": conflicts,
        "holds_at": {c: [settings[i]["setting"] for i in sorted(passes[c])] for c in ids},
    }


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    st = settings_table(rows)
    fig, axes = plt.subplots(1, 2, figsize=(15, max(4.0, 0.32 * len(st) + 1.5)), gridspec_kw={"width_ratios": [1.5, 1]})
    ax = axes[0]
    mat = [[STATUS_SCORE.get(s[f"claim_{c}"], float("nan")) for c in SETTING_CLAIMS] for s in st]
    ax.imshow(mat, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(SETTING_CLAIMS)), [f"claim {c}" for c in SETTING_CLAIMS], rotation=45, fontsize=8)
    ax.set_yticks(range(len(st)), [s["setting"] for s in st], fontsize=7)
    short = {"PASS": "pass", "FAIL": "fail", "INCONCLUSIVE": "?", "N/A": "n/a"}
    for i, s in enumerate(st):
        for j, c in enumerate(SETTING_CLAIMS):
            status = s[f"claim_{c}"]
            ax.text(
                j,
                i,
                short.get(status, ""),
                ha="center",
                va="center",
                fontsize=7,
                color="white" if status in ("PASS", "FAIL") else "black",
            )
    ax.set_title("claim status per setting (K = 20; 6p/7p: the paper's greedy)", fontsize=9)
    ax = axes[1]
    base = sorted(
        [s for s in st if s["acceptance"] == "mid" and s["channel"] == "rayleigh" and not float(s["t_ver_tok_ms"])],
        key=lambda s: float(s["noise_figure_db"]),
    )
    nf = [float(s["noise_figure_db"]) for s in base]
    for ratio, marker in ((4, "o"), (16, "s")):
        ax.plot(
            nf,
            [s[f"gamma_mean_at_{ratio}"] for s in base],
            marker=marker,
            label=rf"mean γ, $P^{{dl}}/P^{{ul}}$ = {ratio}",
        )
        ax.plot(
            nf,
            [10 * s[f"drafting_share_at_{ratio}"] for s in base],
            marker=marker,
            ls=":",
            label=f"10 × drafting share, {ratio}",
        )
    ax.axhspan(2, 3, color="grey", alpha=0.15)
    ax.axhspan(5, 7, color="grey", alpha=0.15)
    ax.set_xlabel("noise figure (dB)")
    ax.set_ylabel("tokens  (grey: the paper's 2–3 and 5–7)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("draft length and drafting share vs noise figure (other settings as the preset)", fontsize=9)
    fig.suptitle(
        r"Identification: every claim over the unpublished settings (noise figure, $T_{ver}^{tok}$, "
        "acceptance, channel)",
        fontsize=10,
    )
    save(fig, path)


def describe(rows: list[dict]) -> str:
    st = settings_table(rows)
    if not st:
        return ""
    f = findings(st)
    lines = [
        f"{len(st)} settings, K = 20, the same drops at every setting. "
        + (
            f"Every claim of the shipped search holds at: {'; '.join(f['region'])}."
            if f["region"]
            else "**No setting makes every claim hold.**"
        )
    ]
    if f["never"]:
        lines.append(f"Claims that hold at no setting: {', '.join(f['never'])}.")
    if f["conflicts"]:
        lines.append(
            "Claims that each hold somewhere but never together: "
            + ", ".join(f"{a} and {b}" for a, b in f["conflicts"])
            + "."
        )
    return " ".join(lines)
