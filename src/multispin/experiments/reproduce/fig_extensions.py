"""Figure 5 (our additions): gain of the optimised bandwidth split and of the lattice codec over the
paper's setting (equal split, sparse top-1024 payload), across P^dl/P^ul, on the main model pair.

The optimised split is evaluated at the adaptive plan's draft lengths (re-planning with it costs
~20× more; the gain shown is therefore a lower bound of what re-planning would give). The
lattice codec (QSV, ℓ = 1024) is re-planned. Exactness (docs/system-model.md §4): in UL mode every
codec is exact; in DL mode the lattice codec is an approximation unless the sampling policy keeps
the target row exactly representable (see ``multispin.speculative.codecs``).
"""

from __future__ import annotations

from pathlib import Path

from multispin.experiments.reproduce._figure import band, fmt_ci, legend, pdl_axis, pyplot, save, select, with_pdl_dbm

NAME = "fig5_extensions"
TITLE = "Gain of the optimised bandwidth split and of the lattice codec (our additions)"
STUDIES = ("extensions",)
PARAMS = ("preset", "pdl_ratio", "p_dl_dbm")
METRICS = (
    "goodput",
    "goodput_opt_split",
    "goodput_lattice",
    "gom_opt_split_pct",
    "gom_lattice_pct",
    "gamma_mean",
    "gamma_mean_lattice",
    "payload_bits_sparse",
    "payload_bits_lattice",
)


def table(summaries: dict[str, list[dict]]) -> list[dict]:
    return select(with_pdl_dbm(summaries["extensions"]), PARAMS, METRICS)


_PAPER_STYLE = dict(color="C0", marker="o", linestyle="-", filled=True)
SPLIT = dict(color="C1", marker="s", linestyle="--")
LATTICE = dict(color="C2", marker="^", linestyle="-.")


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    rows = with_pdl_dbm(rows)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), layout="constrained")
    band(axes[0], rows, "p_dl_dbm", "goodput", "paper: equal split, sparse payload", style=_PAPER_STYLE)
    band(axes[0], rows, "p_dl_dbm", "goodput_opt_split", "optimised bandwidth split", style=SPLIT)
    band(axes[0], rows, "p_dl_dbm", "goodput_lattice", "lattice codec", style=LATTICE)
    axes[0].set_ylabel("sum goodput (tokens/s)")
    axes[0].set_ylim(bottom=0)
    band(axes[1], rows, "p_dl_dbm", "gom_opt_split_pct", "optimised bandwidth split", style=SPLIT)
    band(axes[1], rows, "p_dl_dbm", "gom_lattice_pct", "lattice codec", style=LATTICE)
    axes[1].axhline(0, color="k", linewidth=0.8)
    axes[1].set_ylabel("gain over the paper's setting (%, of mean goodputs)")
    for ax in axes:
        pdl_axis(ax, rows)
        ax.grid(alpha=0.3)
        legend(ax)
    fig.suptitle("Our extensions vs the paper's setting (95% CI over drops)", fontsize=10)
    save(fig, path)


def describe(rows: list[dict]) -> str:
    if not rows:
        return ""
    a, b = rows[0], rows[-1]
    return (
        f"The optimised bandwidth split gains {fmt_ci(a, 'gom_opt_split_pct')}% at P^dl/P^ul = {a['pdl_ratio']:g} "
        f"and {fmt_ci(b, 'gom_opt_split_pct')}% at {b['pdl_ratio']:g} (at unchanged draft lengths); the lattice "
        f"codec ({b['payload_bits_lattice']:.0f} instead of {b['payload_bits_sparse']:.0f} bits per distribution) "
        f"gains {fmt_ci(a, 'gom_lattice_pct')}% and {fmt_ci(b, 'gom_lattice_pct')}%."
    )
