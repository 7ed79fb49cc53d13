"""The engine the exactness tests run: many independent devices through the real round loop
(devices, batched server, UL/DL correction, codecs) on synthetic Markov models whose law is known
exactly, and that law by enumeration. Shared by the in-process, batched and networked checks."""

from __future__ import annotations

import numpy as np

import multispin.runtime.round.roles as roles
from doubles import FixedDraftLengths
from exactness_stats import exact_marginals as enumerate_marginals
from multispin.models.synthetic import MarkovBatchedLM, MarkovSequenceLM, make_tables
from multispin.runtime.round.engine import PolicyPair, RoundEngine
from multispin.runtime.round.local import FixedLink, _one_round
from multispin.speculative.codecs import make_codec
from multispin.speculative.warp import SamplingParams
from multispin.system.payload import WirePayload

VOCAB = 8
PROMPT = [0]
N_DEVICES = 3000
N_POSITIONS = 3
P_PASS = 1e-4  # a correct engine fails a single test with this probability
TARGET, DRAFT = make_tables(VOCAB, seed=3, scale=1.5, draft_noise=1.2)


def exact_marginals(sampling: SamplingParams) -> np.ndarray:
    """Law of emitted tokens 1..N_POSITIONS under the target alone, by enumeration."""
    return enumerate_marginals(TARGET, PROMPT, N_POSITIONS, sampling)


def run_engine(
    mode: str,
    gamma: int,
    sampling: SamplingParams,
    ul: str = "dense-fp32",
    dl: str = "dense-fp32",
    seed: int = 11,
    n_devices: int = N_DEVICES,
) -> np.ndarray:
    ul_codec, dl_codec = make_codec(ul), make_codec(dl)
    server = roles.VerifierServer(MarkovBatchedLM(TARGET), sampling, ul_codec, dl_codec, seed)
    devices = {
        k: roles.DraftDevice(k, MarkovSequenceLM(DRAFT), sampling, ul_codec, dl_codec, seed, PROMPT)
        for k in range(n_devices)
    }
    run_first_tokens(
        server, devices, PolicyPair(FixedDraftLengths({k: gamma for k in devices}), FixedLink(mode)), gamma
    )
    return np.array([devices[k].generated[:N_POSITIONS] for k in devices])


def run_first_tokens(server, devices, policy, gamma: int) -> None:
    """`local.run_rounds` with budget max(N_POSITIONS, γ + 1) (so the first round drafts the full γ),
    except that a device leaves the loop once it holds the N_POSITIONS tokens the tests read.
    Every draw is keyed by (seed, device, position) and a device's γ cap by its own budget, so
    the devices still running draw exactly what they would have: the tokens read are unchanged,
    and the rounds nobody reads (up to 7 tokens past position 3 at γ = 7) are not run."""
    vocab = next(iter(devices.values())).lm.vocab_size
    wire = WirePayload.from_codecs(server.ul_codec, server.dl_codec, vocab, server.gamma_max)
    engine = RoundEngine(server, policy, max(N_POSITIONS, gamma + 1), (), wire)
    for d, dev in devices.items():
        server.open(d, dev.tokens)
    round_idx = 0
    while active := [d for d in devices if not engine.finished(d) and len(devices[d].generated) < N_POSITIONS]:
        _one_round(engine, devices, round_idx, active)
        round_idx += 1


T1 = SamplingParams()
MARG_T1 = exact_marginals(T1)
