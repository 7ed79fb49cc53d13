"""Shared plumbing of the figure modules: selecting a figure's table, plotting bands. A figure
module never imports the pipeline (which imports every figure); one figure runs through
`multispin reproduce --figure NAME`."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from multispin.system import get_preset
from multispin.vocabulary import POLICY_TABLE


def _style(color: str, marker: str, linestyle: str, filled: bool) -> dict[str, Any]:
    look: dict[str, Any] = dict(color=color, marker=marker, linestyle=linestyle)
    return {**look, "filled": True} if filled else look


PAIR_LABEL = {"paper-qwen": "Qwen2.5 0.5B → 14B", "paper-r1": "R1-Distill-Qwen 1.5B → 32B"}
# One look per policy, the same in every figure: colour, marker and line style all differ, and the
# baselines' markers are hollow, so that a policy whose curve coincides with another's (adaptive
# on all-DL, all-UL on random) still shows through it.
# The looks are the policies' (vocabulary.POLICY_TABLE), with the bound's.
STYLE: dict[str, dict[str, Any]] = {
    **{p.name: _style(*p.look) for p in POLICY_TABLE.values() if p.look},
    "bound": dict(color="k", marker="", linestyle="--"),
}
COLORS = {k: v["color"] for k, v in STYLE.items()}
# one look per model pair, where the curves are pairs
PAIR_STYLE = {
    "paper-qwen": dict(color="C0", marker="o", linestyle="-", filled=True),
    "paper-r1": dict(color="C1", marker="s", linestyle="--"),
}


def select(
    rows: list[dict[str, Any]],
    params: Iterable[str],
    metrics: Iterable[str],
    keep: Callable[[dict], bool] | None = None,
) -> list[dict[str, Any]]:
    """The figure's rows: its parameters, n_drops, and each metric with its CI columns, sorted."""
    params, metrics = list(params), list(metrics)
    out = []
    for r in rows:
        if keep is not None and not keep(r):
            continue
        o = {p: r[p] for p in params if p in r}
        o["n_drops"] = r["n_drops"]
        for m in metrics:
            for suf in ("", "_lo", "_hi", "_n"):
                if m + suf in r:
                    o[m + suf] = r[m + suf]
        out.append(o)
    out.sort(
        key=lambda r: tuple((0, r[p]) if isinstance(r.get(p), (int, float)) else (1, str(r.get(p))) for p in params)
    )
    return out


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def band(
    ax,
    rows: list[dict],
    x: str,
    metric: str,
    label: str,
    color=None,
    marker="o",
    linestyle="-",
    filled: bool = False,
    style: dict | None = None,
) -> None:
    """Mean line with its 95% confidence band; ``style``: an entry of STYLE or PAIR_STYLE."""
    if style is not None:
        color, marker, linestyle = style["color"], style["marker"], style["linestyle"]
        filled = style.get("filled", False)
    rows = [r for r in rows if r.get(metric) is not None and not _nan(r.get(metric))]
    if not rows:
        return
    xs = [r[x] for r in rows]
    ys = [r[metric] for r in rows]
    lo = [r.get(metric + "_lo", float("nan")) for r in rows]
    hi = [r.get(metric + "_hi", float("nan")) for r in rows]
    ax.plot(
        xs,
        ys,
        marker=marker,
        linestyle=linestyle,
        color=color,
        label=label,
        markersize=6 if filled else 7,
        markerfacecolor=color if filled else "none",
        markeredgewidth=1.2,
        linewidth=1.4,
        zorder=3 if filled else 2,
    )
    lo = [y if _nan(v) else v for v, y in zip(lo, ys)]
    hi = [y if _nan(v) else v for v, y in zip(hi, ys)]
    ax.fill_between(xs, lo, hi, color=color, alpha=0.15, linewidth=0)


def _nan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def with_pdl_dbm(rows: list[dict]) -> list[dict]:
    """Rows with ``p_dl_dbm`` = P^ul of the row's preset + 10·log10(pdl_ratio) (the x of the P^dl axes)."""

    p_ul = {}
    out = []
    for r in rows:
        if "p_dl_dbm" not in r and r.get("pdl_ratio") is not None:
            pre = r.get("preset")
            if pre not in p_ul:
                p_ul[pre] = float(get_preset(pre).radio.p_ul_dbm)
            r = {**r, "p_dl_dbm": round(p_ul[pre] + 10.0 * math.log10(r["pdl_ratio"]), 2)}
        out.append(r)
    return out


def p_ul_dbm(rows: list[dict]) -> float:
    """P^ul (dBm) of rows that carry p_dl_dbm and pdl_ratio."""
    r = next(r for r in rows if r.get("p_dl_dbm") is not None)
    return r["p_dl_dbm"] - 10.0 * math.log10(r["pdl_ratio"])


def pdl_axis(ax, rows: list[dict], top: bool = True) -> None:
    """x = P^dl in dBm (as the paper draws it), ticks at the swept values; the ratio P^dl/P^ul on a
    secondary axis on top. ``rows`` carry ``p_dl_dbm`` and ``pdl_ratio`` (one P^ul per axis)."""
    pts = sorted({(r["p_dl_dbm"], r["pdl_ratio"]) for r in rows if r.get("p_dl_dbm") is not None})
    ax.set_xlabel("server DL power budget P$^{dl}$ (dBm)")
    if not pts:
        return
    ax.set_xticks([p for p, _ in pts], [f"{p:.1f}" for p, _ in pts])
    if top:
        p_ul = p_ul_dbm(rows)
        sec = ax.secondary_xaxis(
            "top",
            functions=(lambda p: 10 ** ((p - p_ul) / 10.0), lambda r: p_ul + 10.0 * np.log10(np.maximum(r, 1e-30))),
        )
        sec.set_xticks([r for _, r in pts], [f"{r:g}" for _, r in pts])
        sec.set_xlabel("P$^{dl}$ / P$^{ul}$", fontsize=8)
        sec.tick_params(labelsize=8)


def fit_means(ax, rows: list[dict], metrics, margin: float = 0.15) -> None:
    """y limits that show every mean (and 0), not the widest interval: a band that runs past the
    frame is clipped there and the panel says so. Without it one point's interval over a few drops
    (thousands of % where nobody drafts) flattens every other point of a linear gain axis."""
    means = [r[m] for r in rows for m in metrics if not _nan(r.get(m))]
    ends = [r[m + s] for r in rows for m in metrics for s in ("_lo", "_hi") if not _nan(r.get(m + s))]
    if not means:
        return
    lo, hi = min(0.0, *means), max(0.0, *means)
    pad = margin * (hi - lo or 1.0)
    lo, hi = lo - pad, hi + pad
    if any(e < lo or e > hi for e in ends):
        ax.set_ylim(lo, hi)
        ax.text(
            0.99,
            0.01,
            "95% bands clipped at the frame",
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            fontsize=6,
            color="0.4",
        )


def value_ticks(ax, values, unit: str = "") -> None:
    """Ticks at the swept values, written as plain numbers ("2.5", "10"; not "2³")."""
    vs = sorted(set(values))
    ax.set_xticks(vs, [f"{v:g}{unit}" for v in vs])
    ax.minorticks_off()


def legend(ax, **kw) -> None:
    """A legend that does not cover the curves (matplotlib's least-overlap placement), framed."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc=kw.pop("loc", "best"), framealpha=0.9, **kw)


def save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # no timestamps in the PNG metadata: the same data gives the same file
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    pyplot().close(fig)


def by(rows: list[dict], key: str | tuple[str, ...]) -> dict[Any, list[dict]]:
    """Rows grouped by one column's value, or by a tuple of columns' values; in first-seen order."""
    out: dict[Any, list[dict]] = {}
    for r in rows:
        k = tuple(r[c] for c in key) if isinstance(key, tuple) else r[key]
        out.setdefault(k, []).append(r)
    return out


def fmt_ci(r: dict, m: str, digits: int = 1) -> str:
    """ "12.3 [11.0, 13.6]"."""
    v, lo, hi = r.get(m), r.get(m + "_lo"), r.get(m + "_hi")
    if _nan(v):
        return "n/a"
    if _nan(lo) or _nan(hi):
        return f"{v:.{digits}f}"
    return f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"
