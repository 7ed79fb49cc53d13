import json

import numpy as np
from typer.testing import CliRunner

from multispin.cli import app
from multispin.experiments.compute_profile import fit_verification


def test_fit_recovers_known_coefficients():
    t0, t1, ttok = 0.040, 0.007, 0.0005
    rows = [
        {"batch": b, "draft_len": g, "seconds": t0 + b * t1 + b * (g + 1) * ttok}
        for b in (1, 2, 4, 8)
        for g in (1, 2, 4, 8)
    ]
    fit = fit_verification(rows)
    np.testing.assert_allclose([fit["t_ver0_s"], fit["t_ver1_s"], fit["t_ver_tok_s"]], [t0, t1, ttok], rtol=1e-6)
    assert fit["r2"] > 0.999999


def test_fit_reports_poor_r2_for_data_off_the_model():
    rng = np.random.default_rng(0)
    rows = [{"batch": b, "draft_len": g, "seconds": float(rng.random())} for b in (1, 2, 4, 8) for g in (1, 2, 4, 8)]
    assert fit_verification(rows)["r2"] < 0.5


def test_profile_cli_on_tiny(tmp_path):
    out = tmp_path / "compute.json"
    res = CliRunner().invoke(
        app,
        [
            "profile",
            "--pair",
            "tiny",
            "--draft",
            "close",
            "--max-batch",
            "2",
            "--max-draft-len",
            "2",
            "--repeats",
            "1",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    prof = json.loads(out.read_text())
    assert set(prof) >= {"t_ver0_s", "t_ver1_s", "t_ver_tok_s", "draft_latency_s_per_token", "samples"}
    assert prof["draft_latency_s_per_token"]["close"] > 0
    assert len(prof["samples"]) == 4
