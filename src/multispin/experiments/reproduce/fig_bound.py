"""Figure 6 (our addition): G/G_max, how close the adaptive policy comes to the free-communication
bound, versus P^dl/P^ul (per model pair, study ``pdl``) and versus K (study ``users``)."""

from __future__ import annotations

from pathlib import Path

from multispin.experiments.reproduce._figure import PAIR_LABEL, band, by, pyplot, ratio_axis, run_as_script, save, \
    select

NAME = "fig6_bound"
TITLE = "G / G_max: distance to the free-communication bound (our addition)"
STUDIES = ("pdl", "users")
PARAMS = ("sweep", "preset", "pdl_ratio", "devices", "n_saa")
METRICS = ("g_ratio", "goodput", "g_max", "e_t_comm_ms", "t_comp_ms")


def table(summaries: dict[str, list[dict]]) -> list[dict]:
    a = [{**r, "sweep": "pdl", "devices": 20} for r in summaries.get("pdl", [])]
    b = [{**r, "sweep": "devices"} for r in summaries.get("users", [])]
    return select(a, PARAMS, METRICS) + select(b, PARAMS, METRICS)


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    pdl = [r for r in rows if r["sweep"] == "pdl"]
    for i, (preset, rs) in enumerate(by(pdl, "preset").items()):
        band(axes[0], rs, "pdl_ratio", "g_ratio", PAIR_LABEL.get(preset, preset), f"C{i}")
    ratio_axis(axes[0])
    users = [r for r in rows if r["sweep"] == "devices"]
    for i, (ratio, rs) in enumerate(by(users, "pdl_ratio").items()):
        band(axes[1], rs, "devices", "g_ratio", f"P$^{{dl}}$/P$^{{ul}}$ = {ratio:g}", f"C{i + 2}")
    axes[1].set_xlabel("number of devices K")
    for ax in axes:
        ax.set_ylabel("G / G$_{max}$")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Adaptive goodput relative to the free-communication bound (95% CI over drops)", fontsize=10)
    save(fig, path)


def describe(rows: list[dict]) -> str:
    pdl = [r for r in rows if r["sweep"] == "pdl"]
    users = [r for r in rows if r["sweep"] == "devices"]
    out = []
    if pdl:
        lo = min(pdl, key=lambda r: r["g_ratio"])
        hi = max(pdl, key=lambda r: r["g_ratio"])
        out.append(f"Over the P^dl sweep G/G_max ranges from {lo['g_ratio']:.2f} ({lo['preset']}, P^dl/P^ul = "
                   f"{lo['pdl_ratio']:g}) to {hi['g_ratio']:.2f} ({hi['preset']}, {hi['pdl_ratio']:g}).")
    if users:
        lo = min(users, key=lambda r: r["g_ratio"])
        out.append(f"Over the K sweep its lowest value is {lo['g_ratio']:.2f} (K = {lo['devices']}, "
                   f"P^dl/P^ul = {lo['pdl_ratio']:g}): communication costs more as more devices share the band.")
    return " ".join(out)


if __name__ == "__main__":
    run_as_script(__name__)
