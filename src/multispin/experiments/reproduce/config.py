"""Run configuration, points, seeds and cache keys of ``multispin reproduce``.

A *study* is one computation over a grid of *points*; every point is a scenario (a preset plus
dotted overrides) and options, evaluated on ``drops`` independent drops. A drop redraws device
positions, tasks, draft latencies, fading and the SAA samples: it is the scenario with its own
seed, ``drop_seed(base_seed, study, point label, drop index)``. Figures are views of studies.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multispin.errors import ConfigError
from multispin.experiments.reproduce.drop import code_version  # noqa: F401  (re-exported: cache keys, settings)
from multispin.system import get_preset
from multispin.system.scenario import DEFAULT_NOISE_FIGURE_DB, MEASURED_PRESETS, preset_names

PRESET_CHOICES = ("paper-qwen", "paper-r1", "all")  # and any preset on measured acceptance (measured-*)
# 30 drops per point keep the full run under 20 minutes on 2 cores at N_SAA = 1000 with the shipped
# search (100 took 49 min with a weaker search at N_SAA 200 beyond K = 20); the intervals say how
# precise each point is.
FULL_DROPS = 30
QUICK_DROPS = 4


def reproducible_presets() -> tuple[str, ...]:
    """What ``--scenario`` takes: the paper's pairs, both, and the presets on measured acceptance."""
    return PRESET_CHOICES + tuple(n for n in preset_names() if n in MEASURED_PRESETS)


def db(ratio: float) -> float:
    """10·log10(ratio)."""
    return 10.0 * math.log10(ratio)


# Upper bounds of a run's counts, checked before anything is built: drops per point (the chunk
# list grows with it), SAA samples (the scenario's own bound) and worker processes.
MAX_DROPS = 100_000
MAX_N_SAA = 1_000_000
MAX_WORKERS = 1024


def check_count(name: str, value: int | None, low: int, high: int, why: str = "") -> None:
    """A one-line ConfigError unless ``value`` (when given) lies in [low, high]."""
    if value is not None and not low <= value <= high:
        raise ConfigError(f"{name}: must be in [{low}, {high}] (got {value}){why}")


@dataclass(frozen=True)
class RunConfig:
    """What one ``multispin reproduce`` run computes and where it writes."""

    out: Path = Path("reproduce-out")
    quick: bool = False
    preset: str = "all"
    seed: int = 0
    workers: int = 1
    drops: int | None = None  # per point; default FULL_DROPS / QUICK_DROPS
    n_saa: int | None = None  # default: the scenario's (1000), in the full run and in --quick alike
    noise_figure_db: float | None = None  # default: the presets' physical noise figure
    figures: tuple[str, ...] | None = None  # subset of figure names (None: all)
    use_cache: bool = True
    progress: bool = True
    executor: str = "local"  # where the chunks of drops run: "local" (process pool) or "ray" (executor.py)
    address: str | None = None  # Ray cluster address (None: a local Ray instance with `workers` CPUs)
    compare_with: Path | None = None  # another run's folder: the report sets its claim verdicts beside these

    def __post_init__(self) -> None:
        if self.preset not in reproducible_presets():
            raise ConfigError(f"preset: unknown value {self.preset!r} (allowed: {', '.join(reproducible_presets())})")
        check_count("workers", self.workers, 1, MAX_WORKERS)
        check_count("drops", self.drops, 2, MAX_DROPS, "; confidence bands need two drops")
        check_count("n_saa", self.n_saa, 1, MAX_N_SAA)
        if self.seed < 0:
            raise ConfigError(f"seed: must be in [0, inf) (got {self.seed})")
        # lazy: keeps the executors (multiprocessing) off the CLI start-up path
        from multispin.experiments.reproduce.executor import check_executor  # noqa: PLC0415

        check_executor(self.executor, self.address)

    @property
    def presets(self) -> tuple[str, ...]:
        """Model pairs of the per-pair figures."""
        return ("paper-qwen", "paper-r1") if self.preset == "all" else (self.preset,)

    @property
    def main_preset(self) -> str:
        """The pair of the single-pair figures (K sweep, resources, extensions, calibration)."""
        return self.presets[0]

    @property
    def drops_per_point(self) -> int:
        return self.drops if self.drops is not None else (QUICK_DROPS if self.quick else FULL_DROPS)

    @property
    def noise_figure(self) -> float:
        """The noise figure (dB) every point of the run uses (the identification study sweeps it)."""
        return float(self.noise_figure_db if self.noise_figure_db is not None else DEFAULT_NOISE_FIGURE_DB)

    def n_saa_for(self, scenario_n_saa: int) -> int:
        """One N_SAA for every point of a run: where a point is too slow it gets fewer drops, never
        fewer samples (N_SAA changes the plans: 200 samples give visibly shorter drafts than 1000)."""
        return self.n_saa if self.n_saa is not None else scenario_n_saa

    def to_dict(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "quick": self.quick,
            "preset": self.preset,
            "seed": self.seed,
            "workers": self.workers,
            "drops": self.drops_per_point,
            "n_saa": self.n_saa,
            "noise_figure_db": self.noise_figure,
            "figures": list(self.figures) if self.figures else None,
        }


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def digest(obj: Any) -> str:
    return hashlib.sha256(canonical(obj).encode()).hexdigest()


def drop_seed(base_seed: int, study: str, label: str, index: int) -> int:
    """Seed of drop ``index`` of one point: a hash of (base seed, study, point label, index)."""
    h = hashlib.sha256(f"{int(base_seed)}|{study}|{label}|{int(index)}".encode()).digest()
    return int.from_bytes(h[:8], "big") & (2**63 - 1)


@dataclass(frozen=True)
class Point:
    """One point of a study: a scenario (preset + overrides), options, and its labelled parameters.

    ``params``: what the point is (goes into the CSV, e.g. ``{"preset": "paper-qwen", "pdl_ratio": 4}``);
    ``overrides``: dotted scenario fields; ``options``: what the drop computes;
    ``seed_params``: the parameters the drop seeds derive from (default: all of ``params``; the
    calibration study leaves out the noise figure and P^ul so that every setting sees the same
    drops: common random numbers).
    """

    study: str
    params: dict[str, Any]
    preset: str
    overrides: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)
    seed_params: tuple[str, ...] | None = None

    @property
    def label(self) -> str:
        keys = self.seed_params if self.seed_params is not None else tuple(sorted(self.params))
        return canonical({k: self.params[k] for k in keys})

    @property
    def id(self) -> str:
        return canonical(self.params)

    def scenario_dict(self) -> dict[str, Any]:
        return (
            get_preset(self.preset).override(self.overrides).to_dict()
            if self.overrides
            else get_preset(self.preset).to_dict()
        )

    def cache_key(self, base_seed: int, start: int, stop: int, scenario: dict[str, Any] | None = None) -> str:
        sc = dict(scenario if scenario is not None else self.scenario_dict())
        sc.pop("seed", None)
        return digest(
            {
                "study": self.study,
                "label": self.label,
                "scenario": sc,
                "options": self.options,
                "base_seed": base_seed,
                "drops": [start, stop],
                "code": code_version(),
            }
        )


def default_workers() -> int:
    return os.cpu_count() or 1
