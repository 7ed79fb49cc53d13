"""What each device gets from a run, from its typed round rows (docs/service.md defines each figure).

The sum goodput says how much the server produced; these say who got it and what it cost them:

- per-device goodput G_k = tokens committed to device slot k / the run's duration on its clock
  (Σ_k G_k is the sum goodput); device id d is slot d mod K (a steady-state run's job j of device k
  has id k + K·j);
- Jain's fairness index of the G_k, (Σ G_k)² / (K Σ G_k²): 1 when all are equal, 1/K when one
  device gets everything;
- the share of device-rounds at γ = 0 (devices the plan stopped drafting);
- TTFT per job: from the start of the job's first round to the end of the first round that
  committed it a token; TPOT per device-round: the round's duration / the tokens it committed to
  the device; p50/p95/p99 of each (linear interpolation between order statistics);
- energy per generated token per device (`system.energy`): the device's joules / its tokens.

The run's clock: `virtual` charges each round T_comp + T_comm (+ planning where charged:
`RoundRow.latency_s`); `wall` its measured duration plus the emulated airtime."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from multispin.runtime.wire.round_row import RoundRow
from multispin.system.energy import device_round_energy

PERCENTILES = (50, 95, 99)


def round_durations(rows: Sequence[RoundRow], clock: str = "virtual") -> np.ndarray:
    """Each round's duration on the run's clock (s)."""
    if clock == "wall":
        return np.array([r.round_wall_s + r.comm_latency_s for r in rows], dtype=float)
    return np.array([r.latency_s for r in rows], dtype=float)


def jain_index(x: Sequence[float]) -> float:
    """(Σ x)² / (n Σ x²); 1.0 for an all-zero vector (nobody is favoured)."""
    a = np.asarray(x, dtype=float)
    sq = float(np.sum(a * a))
    return float(np.sum(a) ** 2 / (a.size * sq)) if a.size and sq > 0 else 1.0


def percentiles(samples: Sequence[float]) -> dict[str, float | int | None]:
    """p50/p95/p99 (linear interpolation) and the sample count; None where there is no sample."""
    a = np.asarray(samples, dtype=float)
    out: dict[str, float | int | None] = {
        f"p{q}": (float(np.percentile(a, q)) if a.size else None) for q in PERCENTILES
    }
    out["n"] = int(a.size)
    return out


def ttft_samples(rows: Sequence[RoundRow], durations: np.ndarray) -> list[float]:
    """Per job (device id): end of its first round with a token − start of its first round."""
    ends = np.cumsum(durations)
    starts = ends - durations
    first: dict[int, int] = {}
    out = []
    done: set[int] = set()
    for i, r in enumerate(rows):
        for d in r.gamma:
            first.setdefault(d, i)
        for d, n in r.tokens_gained.items():
            if n > 0 and d not in done and d in first:
                done.add(d)
                out.append(float(ends[i] - starts[first[d]]))
    return out


def tpot_samples(rows: Sequence[RoundRow], durations: np.ndarray) -> list[float]:
    """Per device-round that committed tokens: the round's duration / those tokens."""
    return [float(t / n) for r, t in zip(rows, durations) for n in r.tokens_gained.values() if n > 0]


def device_energy_j(row: RoundRow, d: int, duration_s: float, energy, p_ul_w: float) -> float:
    """Device id d's joules in one round (`system.energy.device_round_energy`)."""
    mode = row.modes.get(d)
    return device_round_energy(
        energy,
        round_s=duration_s,
        draft_compute_s=row.draft_compute_s.get(d, 0.0),
        draft_upload_s=row.draft_upload_s.get(d, 0.0),
        p_ul_w=p_ul_w,
        mode=mode,
        airtime_s=row.airtime_s.get(d, 0.0),
        correction_power_w=row.power_w.get(d, 0.0),
    ).total_j


def service_metrics(
    rows: Sequence[RoundRow], devices: int, *, energy=None, p_ul_w: float | None = None, clock: str = "virtual"
) -> dict:
    """Per-device goodput, Jain's index, the γ = 0 share, TTFT and TPOT percentiles and (with an
    `EnergyConfig` and the devices' P^ul in W) energy per generated token, for a run of `devices` slots."""
    return pooled_service_metrics([rows], devices, energy=energy, p_ul_w=p_ul_w, clock=clock)


def pooled_service_metrics(
    runs: Sequence[Sequence[RoundRow]],
    devices: int,
    *,
    energy=None,
    p_ul_w: float | None = None,
    clock: str = "virtual",
) -> dict:
    """`service_metrics` over several runs (seeds) of the same policy: G_k is slot k's tokens over
    all runs / their summed duration, the percentiles pool every run's samples."""
    total = 0.0
    tokens = np.zeros(devices)
    joules = np.zeros(devices)
    zero = slots = 0
    ttft: list[float] = []
    tpot: list[float] = []
    for rows in runs:
        dur = round_durations(rows, clock)
        total += float(dur.sum())
        ttft += ttft_samples(rows, dur)
        tpot += tpot_samples(rows, dur)
        for r, t in zip(rows, dur):
            for d, n in r.tokens_gained.items():
                tokens[d % devices] += n
            for d, g in r.gamma.items():
                slots += 1
                zero += g == 0
                if energy is not None:
                    joules[d % devices] += device_energy_j(r, d, float(t), energy, float(p_ul_w or 0.0))
    g = tokens / total if total > 0 else np.zeros(devices)
    out = {
        "clock": clock,
        "device_goodput_tokens_per_s": {str(k): float(v) for k, v in enumerate(g)},
        "worst_device_goodput_tokens_per_s": float(g.min()) if devices else 0.0,
        "jain_index": jain_index(g),
        "gamma0_share": zero / slots if slots else 0.0,
        "ttft_s": percentiles(ttft),
        "tpot_s": percentiles(tpot),
    }
    if energy is not None:
        out["device_energy_j"] = {str(k): float(v) for k, v in enumerate(joules)}
        out["device_energy_per_token_j"] = {
            str(k): (float(joules[k] / tokens[k]) if tokens[k] else None) for k in range(devices)
        }
        out["energy_per_token_j"] = float(joules.sum() / tokens.sum()) if tokens.sum() else None
    return out
