"""The study "UL, DL or neither": goodput and coupled share of the three-way plan against the
paper's adaptive plan, all-coupled, all-UL and all-DL, over P^ul, P^dl/P^ul and the cell radius
(paper-qwen, K = 20 by default), every point on the same drops (`multispin.experiments.sweep`).

    python -m multispin.experiments.coupled_study --drops 10 --out docs/data/coupled-study

writes ``<axis>.json`` (each sweep's table), ``summary.md`` (the three-way plan's paired gain over
adaptive and its coupled share per point) and ``coupled-study.png`` (goodput and coupled share per
axis). The coupled α is `multispin.system.coupled_alpha`'s assumption, stated in every output.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from multispin.experiments.reproduce._figure import STYLE, band, pyplot, save
from multispin.experiments.sweep import run_sweep
from multispin.system import get_preset
from multispin.system.coupled_alpha import ASSUMPTION

POLICIES = ("adaptive", "three_way", "all_coupled", "all_ul", "all_dl")

# axis name -> (the swept field, its values, fields held fixed per value: None or a function)
AXES = {
    "p_ul": ("radio.p_ul_dbm", [10.0, 0.0, -10.0], None),  # P^dl stays at the preset's 16 dBm
    "p_ul_ratio4": ("radio.p_ul_dbm", [10.0, 0.0, -10.0], lambda v: {"radio.p_dl_dbm": v + 6.0}),
    "p_dl": ("radio.p_dl_dbm", [10.0, 16.0, 22.0, 28.0], None),  # P^dl/P^ul = 1, 4, 16, 64
    "radius": ("devices.drop.max_distance_m", [300.0, 500.0, 800.0], None),
}


def run_axis(sc, axis: str, drops: int):
    """One axis of the study as sweep tables (one per held-fixed setting, or one over all values)."""
    field, values, fixed = AXES[axis]
    if fixed is None:
        return [run_sweep(sc, {field: values}, drops, POLICIES)]
    return [run_sweep(sc.override(fixed(v)), {field: [v]}, drops, POLICIES) for v in values]


def summary_lines(axis: str, tables) -> list[str]:
    """Markdown rows: the point, G of adaptive and three-way, the paired gain and the coupled share."""
    field = AXES[axis][0]
    out = []
    for t in tables:
        rows = {(r[field], r["policy"]): r for r in t.rows}
        for v in t.over[field]:
            a, w = rows[(v, "adaptive")], rows[(v, "three_way")]
            fixed = AXES[axis][2]
            where = f"{field} = {v:g}" + (
                f", {', '.join(f'{k} = {x:g}' for k, x in fixed(v).items())}" if fixed else ""
            )
            out.append(
                f"| {axis} | {where} | {a['goodput_tokens_per_s']:.1f} | {w['goodput_tokens_per_s']:.1f} | "
                f"{w['three_way_gain_pct']:+.1f}% [{w['three_way_gain_low']:+.1f}, {w['three_way_gain_high']:+.1f}] | "
                f"{w['coupled_share']:.2f} [{w['coupled_share_low']:.2f}, {w['coupled_share_high']:.2f}] | "
                f"{rows[(v, 'all_coupled')]['goodput_tokens_per_s']:.1f} | {rows[(v, 'all_ul')]['goodput_tokens_per_s']:.1f}"
                f" | {rows[(v, 'all_dl')]['goodput_tokens_per_s']:.1f} |"
            )
    return out


def plot_study(results: dict, path: Path) -> None:
    """Goodput (top) and coupled share (bottom) per axis, one line per policy with its 95% band."""
    plt = pyplot()
    fig, axes = plt.subplots(2, len(results), figsize=(4.2 * len(results), 6.4), squeeze=False)
    for col, (axis, tables) in enumerate(results.items()):
        field = AXES[axis][0]
        rows = [r for t in tables for r in t.rows]
        for row, (key, label) in enumerate(
            (("goodput_tokens_per_s", "G (tokens/s)"), ("coupled_share", "coupled share"))
        ):
            ax = axes[row][col]
            for p in POLICIES if row == 0 else ("three_way",):
                pts = sorted((r for r in rows if r["policy"] == p), key=lambda r: r[field])
                lo, hi = ("goodput_low", "goodput_high") if row == 0 else ("coupled_share_low", "coupled_share_high")
                band(
                    ax,
                    [{field: r[field], "g": r[key], "g_lo": r[lo], "g_hi": r[hi]} for r in pts],
                    field,
                    "g",
                    p,
                    style=STYLE[p],
                )
            ax.set_xlabel(field + (" (P^dl = P^ul + 6 dB)" if AXES[axis][2] else ""))
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
            if row == 0:
                ax.legend(fontsize=7)
    fig.text(0.01, 0.0, ASSUMPTION, fontsize=6, wrap=True)
    fig.subplots_adjust(bottom=0.12, hspace=0.35, wspace=0.3)
    save(fig, path)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drops", type=int, default=10)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("axes", nargs="*", default=list(AXES), help="the axes to run (default: all)")
    args = ap.parse_args(argv)
    sc = get_preset("paper-qwen")
    args.out.mkdir(parents=True, exist_ok=True)
    results, lines = {}, []
    for axis in args.axes:
        tables = run_axis(sc, axis, args.drops)
        results[axis] = tables
        (args.out / f"{axis}.json").write_text(json.dumps([t.to_dict() for t in tables], indent=1))
        lines += summary_lines(axis, tables)
    head = [
        f"paper-qwen, K = 20, {args.drops} drops per point (the same drops everywhere), N_SAA = 1000. {ASSUMPTION}.",
        "",
        "| axis | point | G adaptive | G three-way | three-way vs adaptive (paired 95%) | coupled share | "
        "G all-coupled | G all-UL | G all-DL |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    (args.out / "summary.md").write_text("\n".join(head + lines) + "\n")
    plot_study(results, args.out / "coupled-study.png")
    print("\n".join(head + lines))


if __name__ == "__main__":
    main()
