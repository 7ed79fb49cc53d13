"""``python -m multispin.experiments.reproduce.<figure> [--export] [--plot] --out DIR``: one figure
from the command line, through the whole pipeline (:mod:`.pipeline`, which imports every figure;
so a figure module imports this one only under ``if __name__ == "__main__":``)."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from types import ModuleType

from multispin.experiments.reproduce.config import RunConfig, default_workers
from multispin.experiments.reproduce.pipeline import export_figures, plot_figure


def figure_main(module: ModuleType, argv: list[str] | None = None) -> int:
    """``python -m multispin.experiments.reproduce.<figure> [--export] [--plot] --out DIR``.

    ``--export`` runs the figure's studies (reusing OUT/cache) and writes its CSV; ``--plot`` draws
    its PNG from the CSV in OUT. Neither flag: both.
    """
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
        plot_figure(module, Path(a.out))
    return 0


def run_as_script(module_name: str) -> None:
    """Entry of ``python -m <figure module>``: run the figure through its importable module object
    (``__main__`` is a second copy of it)."""
    mod = sys.modules[module_name]
    spec = getattr(mod, "__spec__", None)
    if spec is not None and spec.name:
        mod = importlib.import_module(spec.name)
    sys.exit(figure_main(mod))
