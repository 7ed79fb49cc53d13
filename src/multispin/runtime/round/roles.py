"""The two roles of one Multi-SPIN round, without any transport: a device (drafts, uploads q̂_j
or corrects locally) and the edge server (verifies all devices in one batch, corrects in UL mode
or sends p_j down). The in-process loop calls them directly; the networked testbed wraps the
same objects in messages, so both run the identical token math.

Randomness is derived from (seed, device, position, purpose) with counter-based seeding, where
the position is the length of the device's committed record when the round starts. So a device's
tokens do not depend on which other devices share its batch, nor on which server round it drafts
in (a device that missed rounds, or a round replayed after a crash, draws the same numbers), and
the correction uniform is the same whether the server (UL) or the device (DL) draws it.
"""

from __future__ import annotations

from collections.abc import Collection, Generator, Sequence
from dataclasses import dataclass

import numpy as np

from multispin.errors import ProtocolError
from multispin.models.base import BatchedLM, BatchedSequence, SequenceLM, device_rows, last_rows, next_logits
from multispin.speculative.codecs import Codec
from multispin.speculative.coupled import NoiseStream, coupled_draft_token, session_key, tokens_only, verify_coupled
from multispin.speculative.expected_kept import accept_probabilities
from multispin.speculative.residual import sample_residual
from multispin.speculative.sampling import sample_categorical
from multispin.speculative.target_rows import TargetRows
from multispin.speculative.verify import DEFAULT_GAMMA_MAX, RaggedDrafts, verify
from multispin.speculative.warp import SamplingParams, warp
from multispin.vocabulary import COUPLED, STANDARD, VerifyRule

_DRAFT, _ACCEPT, _CORRECT = 1, 2, 3


def step_rng(seed: int, device_id: int, position: int, purpose: int) -> np.random.Generator:
    """The generator of one device step: `position` is the length of the device's committed
    record (prompt + generated) before the step, which every committed round increases."""
    return np.random.default_rng([seed, device_id, position, purpose])


def correction_uniform(seed: int, device_id: int, position: int) -> float:
    """The uniform that draws device `device_id`'s correction token at record length `position`."""
    return float(step_rng(seed, device_id, position, _CORRECT).random())


@dataclass(frozen=True)
class Draft:
    tokens: list[int]
    q_at_tokens: list[float]  # q̂_i(x_i), the scalars the standard test needs; empty for a coupled draft


class _Role:
    """What both ends of a round hold: a model, and the round's law, which the two must agree on
    for the output to be exact (the sampling warp, both codecs, the seed of every draw; the
    networked server sends them in WELCOME)."""

    def __init__(self, lm, sampling: SamplingParams, ul_codec: Codec, dl_codec: Codec, seed: int):
        self.lm = lm
        self.sampling = sampling
        self.ul_codec = ul_codec
        self.dl_codec = dl_codec
        self.seed = seed
        self._noise: dict[int, NoiseStream] = {}

    def noise(self, device_id: int) -> NoiseStream:
        """The coupled rule's noise of device `device_id`'s session, keyed by (seed, device id):
        both ends derive it from what WELCOME already told them, nothing more crosses the air."""
        stream = self._noise.get(device_id)
        if stream is None:
            stream = self._noise[device_id] = NoiseStream(session_key(self.seed, device_id))
        return stream


class DraftDevice(_Role):
    """Device side: draft from the decoded q̂ (so lossy UL codecs stay exact), keep the encoded
    rows until the verdict, then roll the draft cache back to the accepted length."""

    lm: SequenceLM

    def __init__(
        self,
        device_id: int,
        lm: SequenceLM,
        sampling: SamplingParams,
        ul_codec: Codec,
        dl_codec: Codec,
        seed: int,
        prompt_ids: Sequence[int],
    ):
        if len(prompt_ids) == 0:
            raise ProtocolError(f"device {device_id}: prompt must hold at least one token")
        super().__init__(lm, sampling, ul_codec, dl_codec, seed)
        self.device_id = device_id
        self.tokens: list[int] = [int(t) for t in prompt_ids]  # prompt + generated
        self.num_prompt = len(self.tokens)
        self._q_payloads: list[bytes] = []
        self._q_hat: list[np.ndarray] = []
        self.last_draft: list[int] = []
        lm.reset()

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.num_prompt :]

    def draft(self, gamma: int, rule: VerifyRule = STANDARD) -> Draft:
        coupled = [self.device_id] if rule == COUPLED else []
        return draft_all({self.device_id: self}, {self.device_id: gamma}, coupled)[self.device_id]

    def drafting(self, gamma: int, rule: VerifyRule = STANDARD) -> Generator[Sequence[int], np.ndarray | None, Draft]:
        """The draft step by step: yields the tokens the draft model must append next, receives
        the logits row after the last of them, and returns the `Draft`. `draft_all` drives many
        devices' drafts in lock-step, so devices that share one draft module take each step in
        one batched forward pass; the token math is this one function either way. Under the
        coupled rule (fixed by the plan before drafting) token i is argmax(log q + G) at its
        absolute position, and the draft carries no q scalars."""
        self._q_payloads, self._q_hat, self.last_draft = [], [], []
        if gamma == 0:
            return Draft([], [])
        pick = self._coupled_pick() if rule == COUPLED else self._standard_pick()
        pending = self.tokens[self.lm.length :]
        if not pending:  # the cache must stop short of the record's last token, whose row we need
            raise ProtocolError(
                f"device {self.device_id}: draft cache holds {self.lm.length} tokens, the record {len(self.tokens)}"
            )
        logits = yield pending
        tokens, q_at = [], []
        for i in range(gamma):
            assert logits is not None, "drafting: resumed without the logits of the tokens it asked for"
            tok, q = pick(logits, len(self.tokens) + i)
            tokens.append(tok)
            if q is not None:
                q_at.append(q)
            if i + 1 < gamma:
                logits = yield [tok]
        self.last_draft = tokens
        return Draft(tokens, q_at)

    def _standard_pick(self):
        """Token i sampled from the decoded q̂ (kept for a UL upload or a DL residual), and q̂(x_i)."""
        rng = step_rng(self.seed, self.device_id, len(self.tokens), _DRAFT)

        def pick(logits: np.ndarray, position: int) -> tuple[int, float | None]:
            payload = self.ul_codec.encode(warp(logits, self.sampling))
            q_hat = self.ul_codec.decode(payload, self.lm.vocab_size)
            tok = int(sample_categorical(q_hat, rng.random()))
            self._q_payloads.append(payload)
            self._q_hat.append(q_hat)
            return tok, float(q_hat[tok])

        return pick

    def _coupled_pick(self):
        """Token i as argmax(log q + G_i) at its absolute position; no q scalar, nothing kept (a
        coupled device is never corrected)."""
        noise = self.noise(self.device_id)

        def pick(logits: np.ndarray, position: int) -> tuple[int, float | None]:
            return coupled_draft_token(warp(logits, self.sampling), noise, position), None

        return pick

    def upload_q(self, position: int) -> bytes:
        """UL mode: the encoded q̂_j of the first rejected position."""
        return self._q_payloads[position]

    def correct_locally(self, position: int, p_payload: bytes) -> int:
        """DL mode: sample the correction from norm(max(0, p̂_j - q̂_j)) on the device."""
        p_hat = self.dl_codec.decode(p_payload, self.lm.vocab_size)
        u = correction_uniform(self.seed, self.device_id, len(self.tokens))
        return sample_residual(p_hat, self._q_hat[position], u)

    def commit(self, num_accepted: int, new_tokens: Sequence[int]) -> None:
        """Keep the verdict's tokens; drop rejected drafts from the KV cache."""
        self.lm.rollback(len(self.tokens) + num_accepted)
        self.tokens.extend(int(t) for t in new_tokens)


def draft_all(
    devices: dict[int, DraftDevice], gammas: dict[int, int], coupled: Collection[int] = ()
) -> dict[int, Draft]:
    """Every device's draft of the round (``gammas[d]`` tokens for device d; the devices in
    ``coupled`` draft under the coupled rule).

    Devices whose draft models are sequences of one `BatchedLM` (`BatchedSequence`) draft each
    step together in one padded forward pass, as the server verifies; any other device drafts on
    its own model. Only the forward passes are shared: each device's tokens come from its own
    random stream, so the batch changes no draw (at most the floating-point rounding of logits)."""
    steps = {d: devices[d].drafting(g, COUPLED if d in coupled else STANDARD) for d, g in gammas.items()}
    drafts: dict[int, Draft] = {}
    wants: dict[int, Sequence[int]] = {}

    def advance(d: int, logits: np.ndarray | None) -> None:
        try:
            wants[d] = steps[d].send(logits)
        except StopIteration as done:
            drafts[d] = done.value

    for d in steps:
        advance(d, None)
    while wants:
        step, wants = wants, {}
        for group in _by_draft_model(devices, step):
            for d, row in _forward(devices, group, step).items():
                advance(d, row)
    return drafts


def _by_draft_model(devices: dict[int, DraftDevice], ids) -> list[list[int]]:
    """Device ids grouped by the model that can score them in one pass."""
    groups: dict[int, list[int]] = {}
    for d in ids:
        lm = devices[d].lm
        groups.setdefault(id(lm.batched if isinstance(lm, BatchedSequence) else lm), []).append(d)
    return list(groups.values())


def _forward(
    devices: dict[int, DraftDevice], group: list[int], step: dict[int, Sequence[int]]
) -> dict[int, np.ndarray]:
    """The last logits row of each device in `group` after appending its step's tokens."""
    first = devices[group[0]].lm
    if len(group) == 1 or not isinstance(first, BatchedSequence):
        return {d: next_logits(devices[d].lm, step[d]) for d in group}
    seqs = {d: devices[d].lm for d in group}  # one BatchedLM's sequences (draft_all groups them)
    ids = {d: s.seq_id for d, s in seqs.items() if isinstance(s, BatchedSequence)}
    rows = last_rows(first.batched, {ids[d]: step[d] for d in group})
    return {d: rows[ids[d]] for d in group}


@dataclass(frozen=True)
class Verdict:
    """A device's verdict. Under the coupled rule a device is never rejected: ``bonus_token``
    is the x* it commits (at its first mismatch, or after its whole draft matched)."""

    num_accepted: int
    accepted_tokens: list[int]
    bonus_token: int | None  # set when every draft token was accepted, and always under the coupled rule
    rejected: bool
    rule: VerifyRule = STANDARD


class VerifierServer(_Role):
    """Server side: one batched target pass for all devices, acceptance tests, bonus tokens,
    and the p_j rows it holds for the correction step."""

    lm: BatchedLM

    def __init__(
        self,
        lm: BatchedLM,
        sampling: SamplingParams,
        ul_codec: Codec,
        dl_codec: Codec,
        seed: int,
        gamma_max: int = DEFAULT_GAMMA_MAX,
    ):
        super().__init__(lm, sampling, ul_codec, dl_codec, seed)
        self.gamma_max = gamma_max
        self.records: dict[int, list[int]] = {}  # the server's record of each device's tokens
        self.num_prompt: dict[int, int] = {}
        self._pending_p: dict = {}  # device -> warped p_j, a tensor on the target's device
        self._scored: tuple | None = None  # the last verify's devices, drafts and target rows
        self._coupled_matched: dict[int, np.ndarray] = {}  # coupled devices: y_i == x*_i of the last verify

    def open(self, device_id: int, prompt_ids: Sequence[int]) -> None:
        self.records[device_id] = [int(t) for t in prompt_ids]
        self.num_prompt[device_id] = len(self.records[device_id])
        self.lm.open(device_id)

    def generated(self, device_id: int) -> list[int]:
        return self.records[device_id][self.num_prompt[device_id] :]

    def num_generated(self, device_id: int) -> int:
        """len(generated(device_id)) without copying the record (asked several times per device
        and round: the budget clip, the commit, "finished")."""
        return len(self.records[device_id]) - self.num_prompt[device_id]

    def last_token(self, device_id: int) -> int:
        return self.records[device_id][-1]

    def close(self, device_id: int) -> None:
        self.records.pop(device_id, None)
        self.num_prompt.pop(device_id, None)
        self.lm.close(device_id)

    def verify(self, drafts: dict[int, Draft], coupled: Collection[int] = ()) -> dict[int, Verdict]:
        """One batched target pass over every draft, then each device's rule: ``coupled`` names
        the devices the plan put under the coupled rule (fixed before they drafted; never read off
        the draft), every other device is tested by speculative sampling."""
        ids = list(drafts)
        new = {d: self.records[d][self.lm.length(d) :] + drafts[d].tokens for d in ids}
        # The rows that score each device's drafts and its bonus token, on the target's device
        # until the verdict (a prompt's prefill computes no rows for the prompt itself).
        logits = device_rows(self.lm, new, {d: len(drafts[d].tokens) + 1 for d in ids})
        standard = [d for d in ids if d not in coupled]
        self._scored, self._pending_p = None, {}
        verdicts = self._verify_standard(standard, drafts, logits) if standard else {}
        self._coupled_matched = {}
        if len(standard) < len(ids):
            verdicts.update(self._verify_coupled([d for d in ids if d in coupled], drafts, logits))
        for d in ids:
            self.lm.rollback(d, len(self.records[d]) + verdicts[d].num_accepted)
        return {d: verdicts[d] for d in ids}

    def _verify_standard(self, ids: list[int], drafts: dict[int, Draft], logits: dict) -> dict[int, Verdict]:
        ragged = RaggedDrafts.from_lists([drafts[d].tokens for d in ids], [drafts[d].q_at_tokens for d in ids])
        # Warped lazily: p_i(x_i) for the test, whole rows only for bonus and rejection rows.
        target = TargetRows.stacked([logits[d] for d in ids], self.sampling)
        accept_u, bonus_u = [], []
        for d in ids:
            u = step_rng(self.seed, d, len(self.records[d]), _ACCEPT).random(len(drafts[d].tokens) + 1)
            accept_u.append(u[:-1])
            bonus_u.append(u[-1])
        result = verify(ragged, target, np.concatenate(accept_u), np.array(bonus_u), gamma_max=self.gamma_max)
        self._scored = (ids, ragged, target)
        rejected_at = result.rejected_devices
        self._pending_p = dict(zip((ids[i] for i in rejected_at), target.warped(result.rejection_row[rejected_at])))
        verdicts = {}
        for i, d in enumerate(ids):
            n_acc, rejected = int(result.num_accepted[i]), bool(result.rejected[i])
            verdicts[d] = Verdict(
                n_acc, drafts[d].tokens[:n_acc], None if rejected else int(result.bonus_token[i]), rejected
            )
        return verdicts

    def _verify_coupled(self, ids: list[int], drafts: dict[int, Draft], logits: dict) -> dict[int, Verdict]:
        """x* = argmax(log p + G) with the server's own noise: the committed token never depends on
        the device's noise, so no device can steer it."""
        for d in ids:
            if drafts[d].q_at_tokens:
                raise ProtocolError(f"device {d}: a coupled draft carries token ids only (got q scalars)")
        ragged = tokens_only([drafts[d].tokens for d in ids])
        target = TargetRows.stacked([logits[d] for d in ids], self.sampling)
        starts = [len(self.records[d]) for d in ids]
        result = verify_coupled(ragged, target, [self.noise(d) for d in ids], starts, gamma_max=self.gamma_max)
        verdicts = {}
        for i, d in enumerate(ids):
            n_acc = int(result.num_accepted[i])
            verdicts[d] = Verdict(n_acc, drafts[d].tokens[:n_acc], int(result.committed_token[i]), False, COUPLED)
            self._coupled_matched[d] = result.matched[ragged.cu[i] : ragged.cu[i + 1]].astype(np.float64)
        return verdicts

    def accept_probabilities(self) -> dict[int, np.ndarray]:
        """β_i = min(1, p_i(x_i) / q̂_i(x_i)) at every drafted position of the last verify, past a
        device's first rejection too (those rows are computed but the test never reads them): the
        acceptance test's own odds, for the expected tokens of `speculative.expected_kept`. Reads
        the last verify's target rows once, then lets them go. A coupled device's verdict is a
        function of its draft and the noise: its odds are the match indicators (1 while y_i = x*_i,
        then 0)."""
        coupled, self._coupled_matched = self._coupled_matched, {}
        if self._scored is None:
            return coupled
        ids, ragged, target = self._scored
        self._scored = None
        starts, lens = ragged.target_row_start[:-1], ragged.draft_lens
        rows = np.concatenate([s + np.arange(n) for s, n in zip(starts, lens)]).astype(np.int64)
        beta = accept_probabilities(target.prob_at(rows, ragged.token_ids), ragged.draft_probs)
        return {**coupled, **{d: beta[c0:c1] for d, c0, c1 in zip(ids, ragged.cu[:-1], ragged.cu[1:])}}

    def correct_remotely(self, device_id: int, q_payload: bytes) -> int:
        """UL mode: sample the correction from norm(max(0, p_j - q̂_j)) at the server."""
        p = self._pending_p.pop(device_id)
        q_hat = self.ul_codec.decode(q_payload, self.lm.vocab_size)
        u = correction_uniform(self.seed, device_id, len(self.records[device_id]))
        return sample_residual(p, q_hat, u)

    def send_p(self, device_id: int) -> bytes:
        """DL mode: the encoded p_j for the device to correct with."""
        return self.dl_codec.encode(self._pending_p.pop(device_id).cpu().numpy())

    def commit(self, device_id: int, new_tokens: Sequence[int]) -> None:
        self.records[device_id].extend(int(t) for t in new_tokens)

    def release(self, device_id: int) -> None:
        """Free the device's target cache while it is detached or done (memory per idle device
        is its record only); the next verify rebuilds the cache from the record."""
        self._pending_p.pop(device_id, None)
        self.lm.rollback(device_id, 0)

    def abandon(self, device_id: int) -> None:
        """The device verified this round but will not commit: forget its p_j and roll its target
        cache back. Between rounds the cache never holds the record's last token (the next verify
        feeds it, to get the row that scores the first draft token), so len(record) - 1."""
        self._pending_p.pop(device_id, None)
        self.lm.rollback(device_id, max(0, len(self.records[device_id]) - 1))
