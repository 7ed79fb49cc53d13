"""The coupled α of the shipped profiles: rebuilt from what the profile keeps, and the coupled/standard
ratios the model's assumption takes from them (system.coupled_alpha)."""

import numpy as np
import pytest

from multispin.experiments import acceptance_table as at
from multispin.speculative.coupled_acceptance import coupled_acceptance, standard_acceptance
from multispin.system.coupled_alpha import CODE_TASKS, COUPLED_RATIO


def _coupled_profiles():
    return [p for pair in at.PAIRS for p in at.table_profiles(pair) if p.get("coupled")]


def test_some_shipped_profile_has_a_coupled_alpha():
    assert _coupled_profiles(), "no shipped profile carries a coupled α (python -m ...acceptance_table coupled)"


def _problems(c: dict) -> list[str]:
    """What does not rebuild in a profile's coupled block (empty when everything does)."""
    sums = np.asarray(c["per_prompt"], dtype=float)
    out = []
    if sums.shape != (c["num_prompts"], 3) or sums[:, 0].sum() != c["num_tokens"]:
        out.append("shape")
    if abs(sums[:, 2].sum() / sums[:, 0].sum() - c["alpha_coupled"]) >= 1e-9:
        out.append("alpha_coupled")
    if abs(sums[:, 1].sum() / sums[:, 0].sum() - c["alpha_same_rows"]) >= 1e-9:
        out.append("alpha_same_rows")
    if abs(c["alpha_coupled"] / c["alpha_same_rows"] - c["ratio"]) >= 1e-9:
        out.append("ratio")
    # per prompt: never above the standard rate (maximal coupling), never below the (1 − TV)/(1 + TV)
    # bound at the prompt's mean overlap (the bound is convex in TV, so its mean is above it)
    tv = 1 - sums[:, 1] / sums[:, 0]
    if np.any(sums[:, 2] > sums[:, 1] + 1e-9) or np.any(sums[:, 2] / sums[:, 0] < (1 - tv) / (1 + tv) - 1e-9):
        out.append("per-prompt bounds")
    return out


@pytest.mark.parametrize("profile", _coupled_profiles(), ids=lambda p: f"{p['pair']}/{p['draft']}/{p['source']}")
def test_coupled_alpha_and_ratio_rebuild_from_the_per_prompt_sums(profile):
    """The rows themselves are not kept (V = 49,152 floats per position); each prompt's sums are, and
    the profile's coupled α, the standard α of the same rows and their ratio are their ratios of sums."""
    c = profile["coupled"]
    assert _problems(c) == []
    lo, hi = c["ratio_ci95"]
    assert lo <= c["ratio"] <= hi
    assert profile["tasks"][at.SOURCE_LABELS[profile["source"]]]["alpha_coupled"] == c["alpha_coupled"]
    # negative controls: a coupled α off by 1e-6, or per-prompt coupled sums above the standard ones
    assert "alpha_coupled" in _problems({**c, "alpha_coupled": c["alpha_coupled"] + 1e-6})
    swapped = [[n, s2, s1] for n, s1, s2 in c["per_prompt"]]
    assert "per-prompt bounds" in _problems({**c, "per_prompt": swapped})


def test_exact_formula_rows_satisfy_the_per_prompt_bounds():
    """The per-prompt bounds hold for the exact formula on random rows (so the check is no stricter
    than the mathematics)."""
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.full(40, 0.3), 64), rng.dirichlet(np.full(40, 0.3), 64)
    c, s = coupled_acceptance(p, q), standard_acceptance(p, q)
    block = {
        "per_prompt": [[64.0, float(s.sum()), float(c.sum())]],
        "num_prompts": 1,
        "num_tokens": 64,
        "alpha_coupled": float(c.mean()),
        "alpha_same_rows": float(s.mean()),
        "ratio": float(c.mean() / s.mean()),
    }
    assert _problems(block) == []


def test_the_models_assumed_ratios_are_the_shipped_measurements():
    """COUPLED_RATIO (the paper-qwen assumption) is the smollm2-135m q5g64 ratio on HumanEval (code)
    and ShareGPT (chat, the testbed's chat prompts), to its 3 digits."""
    seen = set()
    for p in _coupled_profiles():
        if (p["pair"], p["draft"]) != ("smollm2-135m", "q5g64") or p["source"] not in ("humaneval", "sharegpt"):
            continue
        seen.add(p["source"])
        kind = "code" if at.SOURCE_LABELS[p["source"]] in CODE_TASKS else "chat"
        assert COUPLED_RATIO[kind] == round(p["coupled"]["ratio"], 3), (kind, p["coupled"]["ratio"])
    assert seen == {"humaneval", "sharegpt"}


@pytest.mark.slow
@pytest.mark.integration
def test_first_prompt_of_the_chat_profile_recomputes_from_the_real_rows():
    """The documented sample: the first ShareGPT prompt's target text regenerated and scored again
    with the real smollm2-135m pair; its positions, Σ min(p, q) and Σ P(coupled match) equal the
    profile's first per-prompt entry to 1e-9 (the text does not depend on the prompts run beside it)."""
    from multispin.experiments.acceptance import MeasureConfig, measure_prompts
    from multispin.models.hf import HFBatchedLM, draft_batched
    from multispin.models.prompts import encode_prompt, load_prompts
    from multispin.models.registry import resolve_pair

    profile = next(p for p in _coupled_profiles() if p["pair"] == "smollm2-135m" and p["source"] == "sharegpt")
    cfg = MeasureConfig(
        pair="smollm2-135m", drafts=[profile["draft"]], task="chat", source="sharegpt", prompts=profile["num_prompts"]
    )
    cfg = cfg.model_copy(update=dict(profile["sampling"]))
    pair = resolve_pair(cfg.pair, drafts=cfg.drafts)
    text = load_prompts(cfg.task, cfg.prompts, profile["seed"], source=cfg.source)[0]
    pad = getattr(pair.tokenizer, "pad_token_id", None) or 0
    m = measure_prompts(
        lambda: HFBatchedLM(pair.target, pair.vocab_size, pad),
        {profile["draft"]: lambda: draft_batched(pair, profile["draft"], pad)},
        [encode_prompt(pair, text)],
        profile["draft_len"],
        cfg.sampling,
        profile["seed"],
        profile["max_new_tokens"],
        pair.eos_token_ids,
        verdict_prompts=0,
    )[profile["draft"]][0]
    want = profile["coupled"]["per_prompt"][0]
    assert m.overlap.size == want[0]
    assert abs(float(m.overlap.sum(dtype=float)) - want[1]) < 1e-9
    assert abs(float(m.coupled.sum(dtype=float)) - want[2]) < 1e-9
