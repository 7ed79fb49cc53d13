"""Figure 8, the channel-knowledge study: one drop's numbers and the statement."""

from __future__ import annotations

import pytest

from multispin.experiments.reproduce import fig_channel_knowledge as fig
from multispin.experiments.reproduce.config import RunConfig
from multispin.experiments.reproduce.csi import CSI_DROPS_FULL, CSI_DROPS_QUICK, run_csi_drop
from multispin.experiments.reproduce.studies import csi_drops, csi_points
from multispin.system import get_preset

OPTIONS = {"csi": True, "replicates": 2}


def _scenario(speed_kmh, pilot_snr_db, seed=11):
    return (
        get_preset("paper-qwen")
        .override(
            {
                "devices.count": 4,
                "optimizer.n_saa": 64,
                "seed": seed,
                "channel.speed_kmh": speed_kmh,
                "channel.pilot_snr_db": pilot_snr_db,
            }
        )
        .to_dict()
    )


def test_with_static_perfect_pilots_the_three_plans_score_the_same():
    row = run_csi_drop(_scenario(0.0, None), OPTIONS)
    assert row["rho"] == 1.0 and row["posterior_var"] == 0.0
    for s in ("", "_all_ul", "_all_dl"):
        assert row[f"goodput_naive{s}"] == pytest.approx(row[f"goodput_perfect{s}"], rel=1e-9)
        assert row[f"goodput_robust{s}"] == pytest.approx(row[f"goodput_naive{s}"], rel=1e-12)


def test_with_noisy_pilots_and_motion_knowledge_matters_and_the_drop_is_reproducible():
    row = run_csi_drop(_scenario(30.0, -5.0), OPTIONS)
    assert abs(row["rho"]) < 0.5 and row["posterior_var"] > 0.7 and 0 < row["round_ms"] < 2000
    # perfect knowledge is re-planned on each true channel: it beats the plans made on the estimate
    assert row["goodput_perfect"] > max(row["goodput_naive"], row["goodput_robust"])
    assert row != run_csi_drop(_scenario(30.0, -5.0, seed=12), OPTIONS)
    assert row == run_csi_drop(_scenario(30.0, -5.0), OPTIONS)


def test_grid_quick_and_full():
    quick, full = RunConfig(quick=True, preset="all"), RunConfig(preset="all")
    q = csi_points(quick)
    assert {p.params["preset"] for p in q} == {"paper-qwen"}  # --quick: the main pair only
    assert {p.params["speed_kmh"] for p in q} == set(fig.STATEMENT_SPEEDS_KMH)
    assert {p.params["sweep"] for p in csi_points(full)} == {"speed", "pilot_snr"}
    assert {p.params["preset"] for p in csi_points(full)} == {"paper-qwen", "paper-r1"}
    # common random numbers: every speed of a pair sees the same drops
    assert len({p.label for p in q}) == 1
    assert csi_drops(quick) == CSI_DROPS_QUICK and csi_drops(full) == CSI_DROPS_FULL
    assert csi_drops(RunConfig(quick=True, drops=3)) == 3


def _row(speed, v, lo, hi):
    return {
        "preset": "paper-qwen",
        "sweep": "speed",
        "speed_kmh": speed,
        "pilot_snr_db": 10.0,
        "gom_robust_vs_naive_pct": v,
        "gom_robust_vs_naive_pct_lo": lo,
        "gom_robust_vs_naive_pct_hi": hi,
    }


def test_statement_sorts_points_by_their_interval():
    text = fig.statement(
        [_row(3.0, 5.0, 1.0, 9.0), _row(30.0, 2.0, -1.0, 5.0), _row(120.0, -4.0, -6.0, -2.0), _row(60.0, 0.0, 0.0, 0.0)]
    )
    assert "**matters** at 3 km/h" in text
    assert "**no difference** at 30 km/h: 2.0 [-1.0, 5.0]%, 60 km/h" in text
    assert "**hurts** at 120 km/h" in text
    # negative control: an interval that excludes 0 is never "no difference"
    assert "no difference" not in fig.statement([_row(3.0, 5.0, 1.0, 9.0)])
