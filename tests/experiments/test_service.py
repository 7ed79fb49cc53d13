"""Per-device service metrics (experiments/service.py): recomputed from rounds.jsonl by independent
code, on a scripted run with known round times, and a negative control for each check."""

from __future__ import annotations

import json

import numpy as np
import pytest

from multispin.experiments.service import jain_index, service_metrics
from multispin.runtime.wire.round_row import RoundRow


def _row(r: int, gamma: dict, tokens: dict, comp: float, comm: float, **kw) -> RoundRow:
    base = dict(
        round=r,
        gamma=gamma,
        rejected=[],
        modes={},
        power_w={},
        bandwidth_hz={},
        gain={},
        charged_bits={},
        payload_bits={},
        correction_bits={},
        uplink_bits={},
        downlink_bits={},
        tokens_gained=tokens,
        comp_latency_s=comp,
        comm_latency_s=comm,
        planned_goodput_tokens_per_s=0.0,
        planning_cpu_s=0.0,
        planning_wall_s=0.0,
        planning_charged_s=0.0,
        verify_s=0.0,
        round_wall_s=0.0,
        dropped={},
    )
    return RoundRow(**{**base, **kw})


# 2 device slots, 3 rounds of 0.1, 0.2 and 0.3 s; job 2 (slot 0's second job) starts in round 2
SCRIPT = [
    _row(0, {0: 3, 1: 0}, {0: 4, 1: 1}, 0.08, 0.02),
    _row(1, {0: 2, 1: 0}, {0: 2, 1: 1}, 0.15, 0.05),
    _row(2, {2: 1, 1: 4}, {2: 1, 1: 5}, 0.20, 0.10),
]


def test_tpot_ttft_goodput_and_gamma0_share_on_a_scripted_run():
    s = service_metrics(SCRIPT, 2)
    # TPOT per device-round: round time / tokens: 0.1/4, 0.1/1, 0.2/2, 0.2/1, 0.3/1, 0.3/5
    tpot = sorted([0.025, 0.1, 0.1, 0.2, 0.3, 0.06])
    assert s["tpot_s"]["n"] == 6
    assert s["tpot_s"]["p50"] == pytest.approx((0.1 + 0.1) / 2, abs=1e-12)
    # p95 by linear interpolation at rank 0.95·5 = 4.75 between 0.2 and 0.3
    assert s["tpot_s"]["p95"] == pytest.approx(tpot[4] + 0.75 * (tpot[5] - tpot[4]), abs=1e-12)
    # TTFT: jobs 0 and 1 get a token in their first round (0.1 s); job 2 in its first, 0.3 s
    assert s["ttft_s"]["n"] == 3 and s["ttft_s"]["p50"] == pytest.approx(0.1, abs=1e-12)
    total = 0.6
    assert s["device_goodput_tokens_per_s"] == pytest.approx({"0": 7 / total, "1": 7 / total}, abs=1e-12)
    assert s["jain_index"] == pytest.approx(1.0)
    assert s["gamma0_share"] == pytest.approx(2 / 6)


def test_ttft_spans_rounds_until_the_first_token():
    rows = [_row(0, {0: 2}, {}, 0.1, 0.0), _row(1, {0: 2}, {0: 3}, 0.2, 0.0)]  # no token in round 0
    assert service_metrics(rows, 1)["ttft_s"]["p50"] == pytest.approx(0.3, abs=1e-12)


def test_jain_index_bounds_and_a_broken_formula_is_caught():
    assert jain_index([1, 1, 1, 1]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    broken = lambda x: float(np.sum(x) / (len(x) * np.sqrt(np.sum(np.square(x)))))  # noqa: E731
    assert jain_index([1, 1, 0, 0]) == pytest.approx(0.5)
    assert broken([1, 1, 0, 0]) != pytest.approx(jain_index([1, 1, 0, 0]))


def _recompute(lines: list[dict], devices: int) -> dict:
    """The summary's service figures, from the rounds.jsonl lines alone (independent code)."""
    dur = [r["comp_latency_s"] + r["comm_latency_s"] + r["planning_charged_s"] for r in lines]
    total = sum(dur)
    tokens = [0.0] * devices
    for r in lines:
        for d, n in r["tokens_gained"].items():
            tokens[int(d) % devices] += n
    g = [t / total for t in tokens]
    tpot = [t / n for r, t in zip(lines, dur) for n in r["tokens_gained"].values() if n > 0]
    gammas = [v for r in lines for v in r["gamma"].values()]
    return {
        "g": g,
        "jain": sum(g) ** 2 / (devices * sum(x * x for x in g)),
        "tpot": [float(np.percentile(tpot, q)) for q in (50, 95, 99)],
        "gamma0": sum(v == 0 for v in gammas) / len(gammas),
    }


def _check(summary: dict, again: dict, devices: int) -> None:
    s = summary["service"]
    assert [s["device_goodput_tokens_per_s"][str(k)] for k in range(devices)] == pytest.approx(again["g"], abs=1e-9)
    assert s["jain_index"] == pytest.approx(again["jain"], abs=1e-9)
    assert [s["tpot_s"][f"p{q}"] for q in (50, 95, 99)] == pytest.approx(again["tpot"], abs=1e-9)
    assert s["gamma0_share"] == pytest.approx(again["gamma0"], abs=1e-9)


def test_the_summary_equals_a_recomputation_from_rounds_jsonl(tmp_path):
    from multispin.experiments.testbed import TestbedConfig, run_testbed

    cfg = TestbedConfig.make(pair="tiny", devices=3, rounds=5, max_new_tokens=20, runner="thread", out=tmp_path)
    run_testbed(cfg)
    summary = json.loads((tmp_path / "summary.json").read_text())
    lines = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    _check(summary, _recompute(lines, 3), 3)
    # typed rows read back from the file give the same figures as the run's own rows
    rows = [RoundRow.from_dict(x) for x in lines]
    assert service_metrics(rows, 3)["jain_index"] == pytest.approx(summary["service"]["jain_index"], abs=1e-12)
    # negative control: the same check rejects a summary whose TPOT ignored T_comm
    broken = [{**x, "comm_latency_s": 0.0} for x in lines]
    if any(x["comm_latency_s"] > 0 for x in lines):
        with pytest.raises(AssertionError):
            _check(summary, _recompute(broken, 3), 3)
    doubled = [{**x, "tokens_gained": {d: 2 * n for d, n in x["tokens_gained"].items()}} for x in lines]
    with pytest.raises(AssertionError):
        _check(summary, _recompute(doubled, 3), 3)
