"""The public Python API: small, documented, reproducing the CLI, and the
README's library example runs as written."""

from __future__ import annotations

import doctest
import importlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

import multispin as ms
from multispin import api
from multispin.vocabulary import LinkCode

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "multispin"


def test_the_readme_library_example_runs(capsys):
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## As a library") : text.index("## Tests")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, "the README's library section lost its example"
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})
    assert "tokens/s" in capsys.readouterr().out


def test_api_docstring_examples_run():
    res = doctest.testmod(api, optionflags=doctest.ELLIPSIS)
    assert res.attempted >= 5 and res.failed == 0


def test_the_cli_prints_what_the_api_returns(multispin):
    sc = ms.scenario("paper-r1", devices=5, p_dl_dbm=20, n_saa=200, seed=3)
    p = ms.plan(sc, round_index=2)
    res = multispin(
        "optimize",
        "--scenario",
        "paper-r1",
        "--devices",
        "5",
        "--pdl-dbm",
        "20",
        "--n-saa",
        "200",
        "--seed",
        "3",
        "--round",
        "2",
        "--json",
    )
    assert res.code == 0, res.err
    r = json.loads(res.out)
    assert r["goodput_tokens_per_s"] == pytest.approx(p.goodput_tokens_per_s, rel=1e-12)
    assert [d["draft_len"] for d in r["devices"]] == p.draft_len.tolist()
    assert r["baselines"] == pytest.approx(p.baselines)


def test_plan_gives_modes_and_powers_per_outcome():
    sc = ms.scenario("paper-qwen", devices=6, n_saa=200)
    p = ms.plan(sc, baselines=False)
    assert p.draft_len.shape == (6,) and p.baselines == {}
    d = p.decide([1, 4])
    assert set(np.flatnonzero(d.mode)) == {1, 4}
    dl = d.mode == LinkCode.DL
    assert d.power_w[dl].sum() <= p.instance.radio.p_dl_w * (1 + 1e-9)
    assert np.all(d.power_w[d.mode == LinkCode.UL] == pytest.approx(p.instance.radio.p_ul_w))
    assert d.comm_latency_s == pytest.approx(d.latency_s.max())
    mc = ms.evaluate(p, rounds=3000)
    assert mc.goodput_tokens_per_s == pytest.approx(p.goodput_tokens_per_s, rel=0.1)
    assert ms.evaluate(p, rounds=100).tokens == ms.evaluate(p, rounds=100).tokens  # seeded by the scenario


def test_scenario_takes_files_fields_and_refuses_nonsense(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("preset: paper-r1\nradio.p_dl_dbm: 22\n")
    sc = ms.scenario(path, fields={"radio.bandwidth_hz": 20e6}, devices=3)
    assert (sc.radio.p_dl_dbm, sc.radio.bandwidth_hz, sc.devices.count) == (22, 20e6, 3)
    from multispin.errors import ConfigError

    with pytest.raises(ConfigError, match="round: must be an integer"):
        ms.plan(sc, round_index=-1)
    with pytest.raises(ConfigError, match="radio.bandwith_hz: unknown field .did you mean bandwidth_hz"):
        ms.scenario("paper-qwen", fields={"radio.bandwith_hz": 1e6})


def test_all_lists_only_the_api():
    assert set(ms.__all__) == {"__version__", *api.__all__}
    assert set(api.__all__) == {
        "RoundPlan",
        "capacity",
        "evaluate",
        "generate",
        "instance",
        "plan",
        "plot",
        "scenario",
        "sweep",
        "testbed",
    }
    import multispin.optimize as opt

    assert len(opt.__all__) <= 15 and "plan" in opt.__all__ and "two_phase_greedy" not in opt.__all__
    for name in opt.__all__:
        assert getattr(opt, name) is not None


_REF = re.compile(r":(?:func|class|meth|mod|data|attr):`~?([\w.]+)`")
_CROSSREF = re.compile(r"\]\[(multispin\.[\w.]+)\]")


def _resolves(dotted: str) -> bool:
    """Import the longest module prefix of ``dotted``, then walk the remaining attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_docstrings_cite_only_names_that_exist():
    """A docstring cited `optimize_scenario`, which does not exist."""
    defined = set()
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        defined |= set(re.findall(r"^\s*(?:def|class)\s+(\w+)", text, re.M))
        defined |= set(re.findall(r"^\s*(\w+)\s*[:=]", text, re.M))  # module names and class fields
        defined.add(path.stem)
    missing = {}
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        # mkdocstrings cross-references, [title][multispin.x.y]: the strict docs build checks the
        # ones on the site, this the rest
        for ref in _CROSSREF.findall(text):
            if not _resolves(ref):
                missing.setdefault(ref, str(path.relative_to(SRC)))
        for ref in _REF.findall(text):
            if ref.startswith("multispin."):
                ok = _resolves(ref)
            else:
                ok = ref.split(".")[-1] in defined
            if not ok:
                missing.setdefault(ref, str(path.relative_to(SRC)))
    assert not missing, missing


def test_importing_the_api_and_the_session_does_not_load_torch_or_transformers():
    """`import multispin.runtime.round.session` took 3.2 s (11 s on a loaded 2-core host): it loaded
    transformers and torch, which only running models needs."""
    import subprocess
    import sys

    code = (
        "import sys, multispin, multispin.api, multispin.cli, multispin.runtime.round.session; "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_a_plan_serialises_to_what_optimize_json_prints():
    """RoundPlan.to_json() is the document `multispin optimize --json` prints (a subprocess, as a
    user runs it), for the same scenario, round and draft policy."""
    import os
    import subprocess
    import sys

    sc = ms.scenario("paper-r1", devices=4, p_dl_dbm=20, n_saa=100, seed=3)
    mine = json.loads(ms.plan(sc, round_index=1, draft_policy="best_uniform").to_json())
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "multispin",
            "optimize",
            "--scenario",
            "paper-r1",
            "--devices",
            "4",
            "--pdl-dbm",
            "20",
            "--n-saa",
            "100",
            "--seed",
            "3",
            "--round",
            "1",
            "--draft-policy",
            "best_uniform",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == mine and mine["schema"] == "multispin.optimize"
    assert mine["draft_policy"] == "best_uniform" and len(mine["devices"]) == 4
