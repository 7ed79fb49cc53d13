"""Shared plumbing of the figure modules: selecting a figure's table, plotting bands, the script entry."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable

PAIR_LABEL = {"paper-qwen": "Qwen2.5 0.5B → 14B", "paper-r1": "R1-Distill-Qwen 1.5B → 32B"}
COLORS = {"adaptive": "C0", "all_ul": "C1", "all_dl": "C2", "random": "C3", "best_uniform": "C4",
          "computation_only": "C5", "greedy_paper": "C7"}


def select(rows: list[dict[str, Any]], params: Iterable[str], metrics: Iterable[str],
           keep: Callable[[dict], bool] | None = None) -> list[dict[str, Any]]:
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
    out.sort(key=lambda r: tuple((0, r[p]) if isinstance(r.get(p), (int, float)) else (1, str(r.get(p)))
                                 for p in params))
    return out


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def band(ax, rows: list[dict], x: str, metric: str, label: str, color=None, marker="o", linestyle="-"):
    """Mean line with its 95% confidence band."""
    rows = [r for r in rows if r.get(metric) is not None and not _nan(r.get(metric))]
    if not rows:
        return
    xs = [r[x] for r in rows]
    ys = [r[metric] for r in rows]
    lo = [r.get(metric + "_lo", float("nan")) for r in rows]
    hi = [r.get(metric + "_hi", float("nan")) for r in rows]
    ax.plot(xs, ys, marker=marker, linestyle=linestyle, color=color, label=label, markersize=4)
    lo = [y if _nan(v) else v for v, y in zip(lo, ys)]
    hi = [y if _nan(v) else v for v, y in zip(hi, ys)]
    ax.fill_between(xs, lo, hi, color=color, alpha=0.2, linewidth=0)


def _nan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def ratio_axis(ax) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xlabel("P$^{dl}$ / P$^{ul}$")


def save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # no timestamps in the PNG metadata: the same data gives the same file
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    pyplot().close(fig)


def by(rows: list[dict], key: str) -> dict[Any, list[dict]]:
    out: dict[Any, list[dict]] = {}
    for r in rows:
        out.setdefault(r[key], []).append(r)
    return out


def fmt_ci(r: dict, m: str, digits: int = 1) -> str:
    """"12.3 [11.0, 13.6]"."""
    v, lo, hi = r.get(m), r.get(m + "_lo"), r.get(m + "_hi")
    if _nan(v):
        return "n/a"
    if _nan(lo) or _nan(hi):
        return f"{v:.{digits}f}"
    return f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def figure_main(module: ModuleType, argv: list[str] | None = None) -> int:
    """``python -m multispin.experiments.reproduce.<figure> [--export] [--plot] --out DIR``.

    ``--export`` runs the figure's studies (reusing OUT/cache) and writes its CSV; ``--plot`` draws
    its PNG from the CSV in OUT. Neither flag: both.
    """
    from multispin.experiments.reproduce.config import RunConfig, default_workers
    from multispin.experiments.reproduce.pipeline import export_figures, plot_figure

    ap = argparse.ArgumentParser(prog=f"python -m {module.__name__}", description=module.TITLE)
    ap.add_argument("--out", default="reproduce-out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--preset", default="all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=default_workers())
    ap.add_argument("--drops", type=int, default=None, help="drops per point")
    ap.add_argument("--n-saa", type=int, default=None, help="SAA samples per drop")
    ap.add_argument("--noise-figure-db", type=float, default=None, help="noise figure (dB); default: calibrated")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--export", action="store_true", help="compute and write the CSV")
    ap.add_argument("--plot", action="store_true", help="draw the PNG from the CSV")
    a = ap.parse_args(argv)
    both = not (a.export or a.plot)
    cfg = RunConfig(out=Path(a.out), quick=a.quick, preset=a.preset, seed=a.seed, workers=a.workers,
                    drops=a.drops, n_saa=a.n_saa, noise_figure_db=a.noise_figure_db, figures=(module.NAME,),
                    progress=not a.no_progress)
    if a.export or both:
        export_figures(cfg, [module])
    if a.plot or both:
        plot_figure(module, Path(a.out), cfg.noise_figure)
    return 0


def run_as_script(module_name: str) -> None:
    """Entry of ``python -m <figure module>``: run the figure through its importable module object
    (``__main__`` is a second copy of it)."""
    import importlib

    mod = sys.modules[module_name]
    spec = getattr(mod, "__spec__", None)
    if spec is not None and spec.name:
        mod = importlib.import_module(spec.name)
    sys.exit(figure_main(mod))
