"""The everyday paths: profile → optimize with defaults, limits instead of silent blow-ups and
waits, and versioned JSON outputs."""

from __future__ import annotations

import json
import re
import time

import pytest

from multispin import __version__


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory):
    """A real compute profile of the tiny pair (three drafts: close, mid, far), as documented."""
    from multispin import cli

    out = tmp_path_factory.mktemp("profile") / "c.json"
    with pytest.raises(SystemExit) as exc:
        cli.main(
            [
                "profile",
                "--pair",
                "tiny",
                "--max-batch",
                "2",
                "--max-draft-len",
                "2",
                "--repeats",
                "1",
                "--out",
                str(out),
                "--json",
            ]
        )
    assert exc.value.code == 0
    return out


def test_profile_then_optimize_with_defaults(multispin, tiny_profile):
    """`optimize --compute-profile c.json` used to stop: 'several drafts, name one'."""
    prof = json.loads(tiny_profile.read_text())
    assert prof["multispin_version"] == __version__ and prof["schema"] == "multispin.compute-profile"
    per_draft = prof["draft_latency_s_per_token"]
    assert list(per_draft) == ["close", "mid", "far"]
    assert prof["vocab_size"] == 256  # the tiny pair's, so a scenario of that vocabulary takes it
    tiny = tiny_profile.parent / "tiny.yaml"
    tiny.write_text("preset: paper-qwen\npayload: {vocab_size: 256, codec: 'sparse:v_eff=64,q=16'}\n")
    res = multispin(
        "optimize",
        "--scenario",
        str(tiny),
        "--compute-profile",
        str(tiny_profile),
        "--devices",
        "6",
        "--n-saa",
        "50",
        "--no-baselines",
        "--json",
    )
    assert res.code == 0, res.err
    got = [d["draft_latency_s"] for d in json.loads(res.out)["devices"]]
    assert got == pytest.approx([per_draft[n] for n in ("close", "mid", "far")] * 2)  # drafts in turn
    res = multispin(
        "optimize",
        "--scenario",
        str(tiny),
        "--compute-profile",
        str(tiny_profile),
        "--draft",
        "mid",
        "--devices",
        "6",
        "--n-saa",
        "50",
        "--no-baselines",
        "--json",
    )
    assert res.code == 0, res.err
    mid = per_draft["mid"]
    assert all(mid <= d["draft_latency_s"] <= 1.15 * mid for d in json.loads(res.out)["devices"])
    res = multispin("optimize", "--scenario", str(tiny), "--compute-profile", str(tiny_profile), "--draft", "q4g64")
    assert res.code == 2 and "no draft 'q4g64' (allowed: close, mid, far)" in res.err


def test_huge_k_is_refused_at_once_not_killed(multispin):
    """`--devices 100000` grew to 6.5 GB and was killed with no output."""
    t0 = time.monotonic()
    res = multispin("optimize", "--devices", "100000")
    assert res.code == 2 and time.monotonic() - t0 < 5
    assert "devices.count² × optimizer.n_saa: 100000² × 1000" in res.err and "--devices at most 7071" in res.err
    res = multispin("optimize", "--devices", "300")
    assert res.code == 2 and "lower --n-saa to 555 or --devices" in res.err


def test_serve_stops_on_a_codec_the_vocabulary_cannot_carry(multispin, monkeypatch):
    """`serve --ul-codec sparse:v_eff=99999999` warned, then waited for devices."""
    monkeypatch.setenv("MULTISPIN_SECRET", "test-secret-0123456789")
    t0 = time.monotonic()
    res = multispin(
        "serve",
        "--pair",
        "tiny",
        "--port",
        "0",
        "--ul-codec",
        "sparse:v_eff=99999999",
        "--join-timeout",
        "60",
        "--insecure",
        "--no-journal",
    )
    assert res.code == 2 and time.monotonic() - t0 < 30
    assert res.err.strip() == (
        "error: ul_codec: sparse.v_eff: must be <= vocab_size 256 (got 99999999); "
        "sparse-v99999999-q16 cannot carry this row"
    )


def test_json_outputs_say_who_wrote_them(multispin):
    r = json.loads(multispin("optimize", "--devices", "2", "--n-saa", "20", "--no-baselines", "--json").out)
    assert (r["multispin_version"], r["schema"], r["schema_version"]) == (__version__, "multispin.optimize", 2)
    g = json.loads(multispin("generate", "--pair", "tiny", "--devices", "1", "--max-new-tokens", "2", "--json").out)
    assert (g["multispin_version"], g["schema"]) == (__version__, "multispin.generate")


def test_offline_with_an_empty_cache_names_only_real_flags(multispin, monkeypatch, tmp_path):
    """The error recommended `--local <dir>`, a flag that does not exist."""
    monkeypatch.setenv("MULTISPIN_OFFLINE", "1")
    monkeypatch.setenv("MULTISPIN_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("MULTISPIN_MODEL_SMOLLM2_135M", raising=False)
    res = multispin("generate", "--devices", "1", "--max-new-tokens", "2")
    assert res.code == 2 and res.err.count("\n") == 1, res.err
    assert "MULTISPIN_MODEL_SMOLLM2_135M=<dir>" in res.err and "--pair DIR" in res.err
    assert "--local" not in res.err


def test_gguf_is_a_core_dependency():
    """The default pair is a GGUF file; gguf was only in an optional extra (a raw traceback)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)  # no tomllib on 3.10
    core = {re.split(r"[<>=\[ ]", d)[0] for d in re.findall(r'^\s*"([^"]+)"', block, re.M)}
    assert {"gguf", "transformers", "torch"} <= core
    from multispin.models.acquire import require_gguf

    require_gguf()  # installed: no error


def test_measure_reports_progress_as_it_goes():
    """`measure` showed one spinner for minutes; it now reports tokens generated and prompts scored."""
    from multispin.experiments.acceptance import MeasureConfig, measure
    from multispin.progress import Step

    seen: list[Step] = []
    cfg = MeasureConfig.make(pair="tiny", prompts=2, max_new_tokens=4, draft_len=2, source="builtin")
    (name,) = measure(cfg, progress=seen.append)
    assert seen[0] == Step("target text", 0, 8, "tokens") and Step("target text", 8, 8, "tokens") in seen
    scored = Step("scoring α", 2, 2, "prompts")
    assert scored in seen and str(scored) == "scoring α: 2/2 prompts"
    assert seen[-1] == Step(f"verdicts {name}", 8, 8, "tokens")
