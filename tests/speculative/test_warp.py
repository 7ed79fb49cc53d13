import numpy as np
import pytest

from multispin.errors import ConfigError, VocabularyMismatchError
from multispin.speculative.warp import SamplingParams, align_logits, shared_vocab_size, warp


def test_plain_softmax_and_temperature():
    logits = np.array([[0.0, 1.0, 2.0]], dtype=np.float32)
    p = warp(logits, SamplingParams(temperature=1.0))
    e = np.exp(logits[0] - logits[0].max())
    np.testing.assert_allclose(p[0], e / e.sum(), rtol=1e-6)
    hot = warp(logits, SamplingParams(temperature=0.5))
    e2 = np.exp(2 * (logits[0] - logits[0].max()))
    np.testing.assert_allclose(hot[0], e2 / e2.sum(), rtol=1e-6)


def test_greedy_is_one_hot_on_first_argmax():
    p = warp(np.array([1.0, 3.0, 3.0, 0.0]), SamplingParams(temperature=0))
    assert p.tolist() == [0.0, 1.0, 0.0, 0.0]


def test_top_k_keeps_exactly_k_even_with_ties():
    logits = np.array([5.0, 1.0, 1.0, 1.0, 0.0])
    p = warp(logits, SamplingParams(top_k=2))
    assert (p > 0).sum() == 2 and p[0] > 0
    assert abs(p.sum() - 1) < 1e-6


def test_top_p_keeps_smallest_prefix_reaching_mass():
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    p = warp(np.log(probs), SamplingParams(top_p=0.8))
    # 0.5 + 0.3 reaches 0.8: the tail is dropped, the kept mass is renormalised.
    np.testing.assert_allclose(p, [0.5 / 0.8, 0.3 / 0.8, 0, 0], rtol=1e-5)
    only_top = warp(np.log(probs), SamplingParams(top_p=0.01))
    assert only_top.tolist() == [1.0, 0.0, 0.0, 0.0]


def test_same_policy_gives_same_rows_for_draft_and_target():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 100)).astype(np.float32)
    params = SamplingParams(temperature=0.8, top_k=40, top_p=0.9)
    np.testing.assert_array_equal(warp(logits, params), warp(logits.copy(), params))
    assert np.all(np.abs(warp(logits, params).sum(-1) - 1) < 1e-5)


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("temperature", -0.1, "temperature"),
        ("top_p", 0.0, "top_p"),
        ("top_p", 1.5, "top_p"),
        ("top_k", -1, "top_k"),
    ],
)
def test_bad_sampling_values_give_one_line_error(field, value, needle):
    with pytest.raises(ConfigError) as err:
        SamplingParams.make(**{field: value})
    msg = str(err.value)
    assert needle in msg and "\n" not in msg


def test_vocabulary_alignment_cuts_to_shared_valid_ids():
    # Qwen2.5: small models emit 151,936 logits, large ones 152,064; both cut to 151,665 ids.
    n = shared_vocab_size(151_665, 151_665)
    small = align_logits(np.zeros((2, 151_936), dtype=np.float32), n)
    large = align_logits(np.zeros((2, 152_064), dtype=np.float32), n)
    assert small.shape == large.shape == (2, 151_665)


def test_mismatched_vocabularies_are_refused():
    with pytest.raises(VocabularyMismatchError, match="vocabulary"):
        shared_vocab_size(49_152, 151_665)
    with pytest.raises(VocabularyMismatchError, match="digest"):
        shared_vocab_size(100, 100, "aaaa", "bbbb")
    with pytest.raises(VocabularyMismatchError):
        align_logits(np.zeros((1, 10)), 20)
