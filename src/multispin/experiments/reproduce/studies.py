"""The computations behind the figures: one drop's numbers, and each study's grid of points.

One drop (`.drop`, whose ``run_drop`` and ``run_chunk`` are importable from here too) = one
`multispin.system.World` (the scenario with the drop's own seed: device positions, tasks,
draft latencies, fading, SAA samples), its round-0 instance, and the optimiser's plan plus whatever
baselines the point asks for (``options``), all on the same SAA samples. The optimiser is used as
shipped ([`multispin.optimize.plan.plan`][multispin.optimize.plan.plan], the baselines of §5.3).

Studies (each a list of `.config.Point`):

- ``pdl``: P^dl/P^ul sweep per model pair: plan, mode split, draft-length baselines, G/G_max;
- ``users``: K sweep at P^dl/P^ul = 4 and 16: plan against all-UL, all-DL and random;
- ``resources``: total bandwidth sweep and cell-radius sweep: plan;
- ``extensions``: optimised bandwidth split and lattice codec against the paper's setting;
- ``identification``: the unpublished settings (noise figure 0–30 dB, T_ver^tok, acceptance table,
  channel model) × P^dl/P^ul on the main pair: fewer drops, the same N_SAA;
- ``csi``: imperfect and outdated channel knowledge (speed, pilot SNR): perfect, naive and robust
  planning (`.csi`);
- ``capacity``: devices served within a p95 TPOT target vs P^dl/P^ul, adaptive / all-UL / all-DL
  under the sum and the proportional-fair objective (`multispin.experiments.capacity`).
"""

from __future__ import annotations

from typing import Any

from multispin.experiments.reproduce.config import Point, RunConfig, db
from multispin.experiments.reproduce.csi import (
    CARRIER_HZ,
    CSI_DROPS_FULL,
    CSI_DROPS_QUICK,
    CSI_REPLICATES,
    PILOT_SNR_DB_FULL,
    PILOT_SNR_DB_QUICK,
    PILOT_SWEEP_SPEED_KMH,
    SPEED_SWEEP_PILOT_SNR_DB,
    SPEEDS_KMH_FULL,
    SPEEDS_KMH_QUICK,
)

# one drop's computation lives in drop.py; its names stay importable from here
from multispin.experiments.reproduce.drop import DROP_CODE, _nan_if_empty, _pct, run_chunk, run_drop  # noqa: F401
from multispin.system import get_preset

PDL_RATIOS_FULL = (1, 2, 4, 8, 16, 32, 64)
PDL_RATIOS_QUICK = (1, 4, 16, 64)
USERS_K_FULL = (2, 5, 10, 15, 20, 30, 40, 50)
USERS_ALL_DROPS_UP_TO_K = 20  # beyond the paper's K range a drop costs ~K^1.4: fewer drops, same N_SAA
USERS_MIN_DROPS = 8
USERS_K_QUICK = (2, 10, 20)
USERS_RATIOS = (4, 16)
BANDWIDTH_MHZ_FULL = (2.5, 5.0, 10.0, 20.0, 40.0)
BANDWIDTH_MHZ_QUICK = (5.0, 20.0)
RADIUS_M_FULL = (200.0, 300.0, 500.0, 750.0, 1000.0)
RADIUS_M_QUICK = (300.0, 500.0, 800.0)
EXT_RATIOS_FULL = (1, 4, 16, 64)
EXT_RATIOS_QUICK = (4, 16)
# Identification of the unpublished settings (figure 7): the noise figure swept over 0-30 dB at the
# presets' other values, and at three noise figures each other unknown varied in turn.
ID_NF_FULL = (0.0, 5.0, 7.0, 10.0, 15.0, 20.0, 25.0, 30.0)
ID_NF_CROSSED_FULL = (0.0, 7.0, 22.0)
ID_NF_QUICK = (7.0, 22.0)
ID_NF_CROSSED_QUICK = (7.0,)
ID_T_VER_TOK_MS = (1.0, 2.0)
# Acceptance tables inside the paper's 0.82-0.95 (HumanEval, GSM8K, MT-Bench, IFEval); "mid" is the preset's own.
ID_ACCEPTANCE = {
    "low": {"humaneval": 0.86, "gsm8k": 0.85, "mt_bench": 0.82, "ifeval": 0.83},
    "high": {"humaneval": 0.95, "gsm8k": 0.94, "mt_bench": 0.91, "ifeval": 0.92},
}
ID_RATIOS_FULL = (1, 4, 16, 64)
ID_RATIOS_QUICK = (1, 4, 16)
ID_MODE_RATIOS = (4, 16)  # identification points that also run the mode baselines (claims 1 and 3)
ID_DROPS_FULL = 6
ID_DROPS_QUICK = 2
BASE_SETTING = {"t_ver_tok_ms": 0.0, "acceptance": "mid", "channel": "rayleigh"}

CAPACITY_RATIOS_FULL = (1, 2, 4, 8, 16, 32, 64)
CAPACITY_RATIOS_QUICK = (1, 4, 16, 64)
# each capacity drop runs 6 searches over K with 200 simulated rounds per K: fewer drops than the
# goodput studies keep the full run's cost to about two CPU-minutes
CAPACITY_DROPS_FULL = 20
CAPACITY_DROPS_QUICK = 4

STUDIES = ("pdl", "users", "resources", "extensions", "identification", "csi", "capacity")


# ----------------------------------------------------------------------------- grids


def _base_overrides(cfg: RunConfig, preset: str) -> dict[str, Any]:
    sc = get_preset(preset)
    return {"optimizer.n_saa": cfg.n_saa_for(sc.optimizer.n_saa), "radio.noise_figure_db": cfg.noise_figure}


def _p_ul_dbm(preset: str) -> float:
    return float(get_preset(preset).radio.p_ul_dbm)


def pdl_points(cfg: RunConfig) -> list[Point]:
    out = []
    for preset in cfg.presets:
        pul = _p_ul_dbm(preset)
        for ratio in PDL_RATIOS_QUICK if cfg.quick else PDL_RATIOS_FULL:
            ov = {**_base_overrides(cfg, preset), "radio.p_dl_dbm": pul + db(ratio)}
            # the slow reference search (diagnostic of the shipped one) at the paper's two ratios only
            out.append(
                Point(
                    "pdl",
                    {"preset": preset, "pdl_ratio": ratio},
                    preset,
                    ov,
                    {"stats": True, "drafts": True, "reference": ratio in USERS_RATIOS},
                )
            )
    return out


def users_points(cfg: RunConfig) -> list[Point]:
    out = []
    for preset in cfg.presets:
        pul = _p_ul_dbm(preset)
        for ratio in USERS_RATIOS:
            for k in USERS_K_QUICK if cfg.quick else USERS_K_FULL:
                ov = {**_base_overrides(cfg, preset), "radio.p_dl_dbm": pul + db(ratio), "devices.count": k}
                out.append(
                    Point(
                        "users",
                        {"preset": preset, "pdl_ratio": ratio, "devices": k, "n_saa": ov["optimizer.n_saa"]},
                        preset,
                        ov,
                        {"modes": True},
                    )
                )
    return out


def resources_points(cfg: RunConfig) -> list[Point]:
    preset = cfg.main_preset
    base = get_preset(preset)
    b0, r0 = base.radio.bandwidth_hz / 1e6, base.devices.drop.max_distance_m
    out = []
    for b in BANDWIDTH_MHZ_QUICK if cfg.quick else BANDWIDTH_MHZ_FULL:
        ov = {**_base_overrides(cfg, preset), "radio.bandwidth_hz": b * 1e6}
        out.append(
            Point(
                "resources",
                {"preset": preset, "sweep": "bandwidth", "bandwidth_mhz": b, "radius_m": r0},
                preset,
                ov,
                {},
            )
        )
    for r in RADIUS_M_QUICK if cfg.quick else RADIUS_M_FULL:
        ov = {**_base_overrides(cfg, preset), "devices.drop.max_distance_m": r}
        out.append(
            Point(
                "resources", {"preset": preset, "sweep": "radius", "bandwidth_mhz": b0, "radius_m": r}, preset, ov, {}
            )
        )
    return out


def extensions_points(cfg: RunConfig) -> list[Point]:
    preset = cfg.main_preset
    pul = _p_ul_dbm(preset)
    out = []
    for ratio in EXT_RATIOS_QUICK if cfg.quick else EXT_RATIOS_FULL:
        ov = {**_base_overrides(cfg, preset), "radio.p_dl_dbm": pul + db(ratio)}
        out.append(Point("extensions", {"preset": preset, "pdl_ratio": ratio}, preset, ov, {"extensions": True}))
    return out


def identification_settings(cfg: RunConfig) -> list[dict[str, Any]]:
    """The settings of the unknowns the identification study scores every claim on."""
    nfs = ID_NF_QUICK if cfg.quick else ID_NF_FULL
    crossed = ID_NF_CROSSED_QUICK if cfg.quick else ID_NF_CROSSED_FULL
    out = [{"noise_figure_db": nf, **BASE_SETTING} for nf in nfs]
    for nf in crossed:
        variants = [{"t_ver_tok_ms": t} for t in (ID_T_VER_TOK_MS[-1:] if cfg.quick else ID_T_VER_TOK_MS)]
        if not cfg.quick:
            variants += [{"acceptance": a} for a in ID_ACCEPTANCE]
        variants.append({"channel": "path_loss_only"})
        out += [{"noise_figure_db": nf, **BASE_SETTING, **v} for v in variants]
    return out


def identification_points(cfg: RunConfig) -> list[Point]:
    """Every setting × P^dl/P^ul on the main pair (K = 20), with common random numbers: every setting
    sees the same drops (the drop seed leaves the setting out)."""
    preset = cfg.main_preset
    pul = _p_ul_dbm(preset)
    n_saa = _base_overrides(cfg, preset)["optimizer.n_saa"]
    out = []
    for st in identification_settings(cfg):
        ov = {
            "optimizer.n_saa": n_saa,
            "radio.noise_figure_db": st["noise_figure_db"],
            "compute.t_ver_tok_s": st["t_ver_tok_ms"] / 1e3,
            "radio.fading": "none" if st["channel"] == "path_loss_only" else "rayleigh",
        }
        if st["acceptance"] in ID_ACCEPTANCE:
            ov["tasks.acceptance"] = ID_ACCEPTANCE[st["acceptance"]]
        for ratio in ID_RATIOS_QUICK if cfg.quick else ID_RATIOS_FULL:
            opts = {"stats": True, "drafts": True, "modes": ratio in ID_MODE_RATIOS}
            out.append(
                Point(
                    "identification",
                    {"preset": preset, **st, "pdl_ratio": ratio},
                    preset,
                    {**ov, "radio.p_dl_dbm": pul + db(ratio)},
                    opts,
                    seed_params=("pdl_ratio", "preset"),
                )
            )
    return out


def identification_drops(cfg: RunConfig) -> int:
    if cfg.drops is not None:
        return cfg.drops
    return ID_DROPS_QUICK if cfg.quick else ID_DROPS_FULL


def drops_for(point: Point, cfg: RunConfig) -> int:
    """Drops of one point: the run's, the identification study's, or fewer at K beyond the paper's
    range (∝ 1/K², at least USERS_MIN_DROPS) unless ``--drops`` fixes them."""
    if point.study == "identification":
        return identification_drops(cfg)
    if point.study == "csi":
        return csi_drops(cfg)
    if point.study == "capacity":
        return cfg.drops if cfg.drops is not None else (CAPACITY_DROPS_QUICK if cfg.quick else CAPACITY_DROPS_FULL)
    base = cfg.drops_per_point
    k = int(point.params.get("devices", 0))
    if point.study == "users" and cfg.drops is None and k > USERS_ALL_DROPS_UP_TO_K:
        return min(base, max(USERS_MIN_DROPS, round(base * (USERS_ALL_DROPS_UP_TO_K / k) ** 2)))
    return base


def csi_points(cfg: RunConfig) -> list[Point]:
    """Speed sweep at SPEED_SWEEP_PILOT_SNR_DB and pilot-SNR sweep on a static channel, per model pair
    (``--quick``: the main pair's speed sweep only). The drop seed leaves the swept value out: every
    speed (every pilot SNR) sees the same drops."""
    out = []
    sweeps = [("speed", v, SPEED_SWEEP_PILOT_SNR_DB) for v in (SPEEDS_KMH_QUICK if cfg.quick else SPEEDS_KMH_FULL)]
    sweeps += [
        ("pilot_snr", PILOT_SWEEP_SPEED_KMH, s) for s in (PILOT_SNR_DB_QUICK if cfg.quick else PILOT_SNR_DB_FULL)
    ]
    for preset in (cfg.main_preset,) if cfg.quick else cfg.presets:
        for sweep, speed, snr in sweeps:
            ov = {
                **_base_overrides(cfg, preset),
                "channel.speed_kmh": speed,
                "channel.pilot_snr_db": snr,
                "channel.carrier_hz": CARRIER_HZ,
            }
            out.append(
                Point(
                    "csi",
                    {"preset": preset, "sweep": sweep, "speed_kmh": speed, "pilot_snr_db": snr},
                    preset,
                    ov,
                    {"csi": True, "replicates": CSI_REPLICATES},
                    seed_params=("preset", "sweep"),
                )
            )
    return out


def csi_drops(cfg: RunConfig) -> int:
    """Drops per point: the run's ``--drops``, else CSI_DROPS_QUICK or CSI_DROPS_FULL."""
    if cfg.drops is not None:
        return cfg.drops
    return CSI_DROPS_QUICK if cfg.quick else CSI_DROPS_FULL


def capacity_points(cfg: RunConfig) -> list[Point]:
    """P^dl/P^ul sweep on the main pair; each drop runs every policy × objective (common random
    numbers: the drop seed leaves the ratio out, so every ratio sees the same drops)."""
    preset = cfg.main_preset
    pul = _p_ul_dbm(preset)
    return [
        Point(
            "capacity",
            {"preset": preset, "pdl_ratio": ratio},
            preset,
            {"radio.noise_figure_db": cfg.noise_figure, "radio.p_dl_dbm": pul + db(ratio)},
            {"capacity": True},
            seed_params=("preset",),
        )
        for ratio in (CAPACITY_RATIOS_QUICK if cfg.quick else CAPACITY_RATIOS_FULL)
    ]


POINTS = {
    "pdl": pdl_points,
    "users": users_points,
    "resources": resources_points,
    "extensions": extensions_points,
    "identification": identification_points,
    "csi": csi_points,
    "capacity": capacity_points,
}


def cost_estimate(point: Point) -> float:
    """Relative cost of one drop (to start the expensive chunks first)."""
    k = float(point.overrides.get("devices.count", 20))
    n = float(point.overrides.get("optimizer.n_saa", 1000))
    w = (
        1.0
        + 2.0 * bool(point.options.get("modes"))
        + 1.5 * bool(point.options.get("extensions"))
        + 2.0 * bool(point.options.get("reference"))
        + 12.0 * bool(point.options.get("csi"))
        + 0.5 * bool(point.options.get("capacity"))
    )
    return w * (k**1.6) * (n / 1000.0) ** 0.7
