"""Figures of `multispin reproduce` on fabricated tables: styles, axes, labels (no drop is computed)."""

from __future__ import annotations

import itertools

import pytest

from multispin.experiments.reproduce import _figure, fig_bound, fig_draft_schemes, fig_mode_split, fig_users


def test_every_policy_has_its_own_marker_and_line_style():
    looks = [(s["marker"], s["linestyle"]) for name, s in _figure.STYLE.items() if name != "bound"]
    colors = [s["color"] for s in _figure.STYLE.values()]
    assert len(set(looks)) == len(looks) and len(set(colors)) == len(colors)
    # adaptive is drawn filled and on top; the baselines hollow, so a coinciding curve shows through
    assert _figure.STYLE["adaptive"].get("filled") and not _figure.STYLE["all_dl"].get("filled")


def test_pdl_axis_is_in_dbm_with_the_ratio_on_top():
    plt = _figure.pyplot()
    rows = _figure.with_pdl_dbm([{"preset": "paper-qwen", "pdl_ratio": r} for r in (1, 4, 16, 64)])
    assert [r["p_dl_dbm"] for r in rows] == [10.0, 16.02, 22.04, 28.06]  # P^ul = 10 dBm
    fig, ax = plt.subplots()
    _figure.pdl_axis(ax, rows)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["10.0", "16.0", "22.0", "28.1"]
    assert "dBm" in ax.get_xlabel()
    top = [c for c in ax.child_axes]
    assert top and [t.get_text() for t in top[0].get_xticklabels()] == ["1", "4", "16", "64"]
    plt.close(fig)


def test_value_ticks_are_plain_numbers():
    plt = _figure.pyplot()
    fig, ax = plt.subplots()
    ax.plot([2.5, 40], [0, 1])
    ax.set_xscale("log")
    _figure.value_ticks(ax, [2.5, 5.0, 10.0, 20.0, 40.0])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2.5", "5", "10", "20", "40"]
    plt.close(fig)


def _users_rows():
    rows = []
    for preset, ratio, k in itertools.product(("paper-qwen", "paper-r1"), (4, 16), (2, 10, 20)):
        r = {"preset": preset, "pdl_ratio": ratio, "devices": k, "n_saa": 1000, "n_drops": 4}
        for m, v in (
            ("goodput", 10.0 * k),
            ("goodput_all_ul", 9.0 * k),
            ("goodput_all_dl", 10.0 * k),
            ("goodput_random", 9.0 * k),
            ("gom_vs_all_ul_pct", 11.1),
            ("gom_vs_all_dl_pct", 0.0),
            ("gom_vs_random_pct", 11.1),
            ("g_ratio_bound", 0.5),
        ):
            r[m], r[m + "_lo"], r[m + "_hi"] = v, v - 1.0, v + 1.0
        rows.append(r)
    return rows


def test_k_sweep_draws_both_pairs_and_names_the_baselines_whole(tmp_path):
    rows = _users_rows()
    fig_users.plot(rows, tmp_path / "fig2.png")
    assert (tmp_path / "fig2.png").read_bytes()[:4] == b"\x89PNG"
    text = fig_users.describe(rows)
    assert "R1-Distill" in text and "Qwen2.5" in text
    assert "(all-UL, K = " in text and "(random, K = " in text
    assert "(ll-ul" not in text and "(andom" not in text  # the old m[8:-4] slicing
    fig_bound.plot([{**r, "sweep": "devices"} for r in rows], tmp_path / "fig6.png")
    assert (tmp_path / "fig6.png").exists()


@pytest.mark.parametrize("module", [fig_mode_split, fig_draft_schemes])
def test_pdl_figures_plot_from_a_table_with_intervals(tmp_path, module):
    rows = []
    for preset, ratio in itertools.product(("paper-qwen", "paper-r1"), (1, 4, 16)):
        r = {"preset": preset, "pdl_ratio": ratio, "n_drops": 4}
        for m in module.METRICS:
            v = 0.5 if "fraction" in m or "frac" in m else 3.0
            r[m], r[m + "_lo"], r[m + "_hi"] = v, 0.0, 2 * v
        rows.append(r)
    rows[0]["gom_vs_computation_only_pct_hi"] = 9000.0  # one huge interval is clipped, not the axis blown up
    module.plot(rows, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 10_000
