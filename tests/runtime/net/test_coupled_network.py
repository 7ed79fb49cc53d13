"""The coupled rule over the network: a pool of devices drafting in batched forwards on loopback
sockets, PLANs that put every device under the coupled rule, DRAFTs of token ids only. Drafter
invariance makes the check an equality: every device's tokens are the target's Gumbel-max
decoding with its session's noise, for γ = 1 and γ = 4 (negative control: a server whose noise is
keyed by round instead of position gives other tokens)."""

from __future__ import annotations

import pytest
from test_pool import MARKOV, SECRET, _serve

import multispin.runtime.round.roles as roles
from exactness_engine import DRAFT, PROMPT, T1, TARGET
from multispin.models.synthetic import MarkovBatchedLM
from multispin.runtime.net.pool import DevicePool, PoolDevice
from multispin.runtime.net.server import EdgeServer
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.round.local import fixed_policy
from multispin.speculative.coupled import NoiseStream, gumbel_argmax, session_key
from multispin.speculative.warp import warp

pytestmark = pytest.mark.integration

SLOTS, JOBS, MAX_NEW, SEED = 20, 6, 10, 11  # 120 device ids, 20 at a time


def reference(d: int) -> list[int]:
    noise, ids = NoiseStream(session_key(SEED, d)), list(PROMPT)
    for _ in range(MAX_NEW):
        ids.append(int(gumbel_argmax(warp(TARGET.next_logits(ids), T1), noise.gumbel(len(ids), TARGET.vocab_size))))
    return ids[len(PROMPT) :]


def run_coupled_pool(gamma: int) -> tuple[dict[int, list[int]], EdgeServer]:
    n = SLOTS * JOBS
    config = ServerConfig.make(
        port=0,
        expected_devices=SLOTS,
        max_devices=n,
        job_slots=SLOTS,
        max_new_tokens=MAX_NEW,
        seed=SEED,
        join_timeout_s=120,
        round_timeout_s=120,
        history=True,
    )
    policy = fixed_policy(gamma, "coupled", config.seed)
    server = EdgeServer(config, MARKOV, SECRET, policy=policy, target_lm=MarkovBatchedLM(TARGET))
    th, box = _serve(server)
    slots = [[PoolDevice(k + SLOTS * j, tuple(PROMPT), "markov") for j in range(JOBS)] for k in range(SLOTS)]
    outcomes = DevicePool(
        server.endpoint, MARKOV, slots, secret=SECRET, draft_models={"markov": MarkovBatchedLM(DRAFT)}
    ).run()
    th.join(300)
    assert box["summary"].stop_reason == "done"
    assert len(outcomes) == n and all(o.finished for o in outcomes)
    return {o.device_id: list(o.generated) for o in outcomes}, server


@pytest.mark.slow
@pytest.mark.parametrize("gamma", [1, 4])
def test_coupled_pool_tokens_are_target_decoding_with_the_session_noise(gamma):
    tokens, server = run_coupled_pool(gamma)
    assert tokens == {d: reference(d) for d in tokens}
    rounds = [r for dev in server.proto.devices.values() for r in dev.rounds]
    assert rounds and all(r.rule == "coupled" and r.mode is None and r.correction_bits == 0 for r in rounds)
    assert sum(r.num_accepted for r in rounds) > 0


@pytest.mark.slow
def test_control_round_keyed_server_noise_changes_the_tokens(monkeypatch):
    real = roles.verify_coupled

    def by_round(drafts, target, noises, starts, **kw):
        by_round.calls += 1
        return real(drafts, target, noises, [1000 * by_round.calls] * len(starts), **kw)

    by_round.calls = 0
    monkeypatch.setattr(roles, "verify_coupled", by_round)
    tokens, _ = run_coupled_pool(4)
    assert tokens != {d: reference(d) for d in tokens}
