"""Hugging Face transformers backend: any causal LM as a `SequenceLM` (device drafting) or a
`BatchedLM` (server verification of many devices in one forward pass).

The batched model keeps one KV cache per sequence (a device). A forward over several sequences
appends every sequence's new tokens (right-padded) to their stacked caches and runs ONE pass with
an attention mask and explicit positions. The stacked cache then stays as it is for the next
forward over the same sequences (the next drafting step, the next round's verify): a rollback
masks the rejected positions out of it, and only when the set of sequences changes, or the holes
outgrow the tokens, is each sequence's cache copied out and the batch stacked again (left-padded
to a common length). Rejected draft positions are never attended to.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch  # noqa: TID253  (the models' own module)
from transformers import DynamicCache  # noqa: TID253

from multispin.errors import ProtocolError
from multispin.models.attention import share_kv_heads
from multispin.models.base import BatchedLM, LoadedPair, SequenceLM
from multispin.speculative.warp import align_logits

if TYPE_CHECKING:
    from multispin.models.prefill_store import DraftPrefills

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values), each (B, H, L, D)
PREFILL_ALONE_TOKENS = 64  # more new tokens than any draft (γ_max + 1) brings: a prompt's prefill


def _cache_layers(cache: DynamicCache) -> KV:
    if hasattr(cache, "layers"):  # transformers >= 4.56
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))  # older releases


def _aligned_logits(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The valid ids' logits, float32, where the model computed them."""
    return align_logits(logits, vocab_size).to(torch.float32)


def _keeps_last_logits(model: torch.nn.Module) -> bool:
    """Whether the model's forward takes ``logits_to_keep`` (transformers' causal LMs do): the
    output head then runs on the last positions only. A prompt's prefill needs one row of its
    logits, and the head is a fifth of SmolLM2-135M's and a quarter of Qwen2.5-0.5B's compute per
    position: running it on every prompt position wastes most of a prefill's head."""
    return "logits_to_keep" in inspect.signature(model.forward).parameters


def _attends_to_a_window(model: torch.nn.Module) -> bool:
    """Whether some layer attends only to the last cache columns (Gemma 3's sliding layers). Its
    window counts columns, so the holes a resident batch carries would shrink it: such a model's
    batch is restacked without holes after every forward."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    types = getattr(config, "layer_types", None)
    if types:
        return any(t != "full_attention" for t in types)
    return getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True)


def _to_numpy_logits(logits: torch.Tensor, vocab_size: int) -> np.ndarray:
    # .cpu() is free for CPU tensors and brings GPU logits to the numpy token math
    return _aligned_logits(logits, vocab_size).cpu().numpy()


class HFSequenceLM:
    """One sequence with its own KV cache (a device's draft model)."""

    def __init__(self, model: torch.nn.Module, vocab_size: int):
        self.model = model
        self.vocab_size = vocab_size
        self._device = next(model.parameters()).device
        self._keeps_last = _keeps_last_logits(model)
        self.reset()

    @property
    def length(self) -> int:
        return self._length

    def reset(self) -> None:
        self._cache = DynamicCache()
        self._length = 0

    def extend(self, token_ids: Sequence[int]) -> np.ndarray:
        return self._extend(token_ids, None)

    def extend_last(self, token_ids: Sequence[int]) -> np.ndarray:
        """`extend`, the last row only (`models.base.next_logits`): the head runs once."""
        return self._extend(token_ids, 1)[-1]

    @torch.inference_mode()
    def _extend(self, token_ids: Sequence[int], last: int | None) -> np.ndarray:
        if len(token_ids) == 0:
            raise ProtocolError("extend: need at least one token")
        ids = torch.tensor([list(token_ids)], dtype=torch.long, device=self._device)
        keep = {"logits_to_keep": last} if last is not None and self._keeps_last else {}
        out = self.model(input_ids=ids, past_key_values=self._cache, use_cache=True, **keep)
        self._cache = out.past_key_values
        self._length += len(token_ids)
        return _to_numpy_logits(out.logits[0], self.vocab_size)

    def rollback(self, length: int) -> None:
        if length < self._length:
            self._cache.crop(length)
            self._length = length


class _ResidentBatch:
    """The last multi-sequence forward's KV cache, kept stacked for the next one.

    A round's drafting steps and the next round's verify ask for the same sequences again, so
    the batched cache stays as the model returned it instead of being sliced into per-sequence
    copies and stacked again at every step (two copies of every cache per step: 15% of a
    SmolLM2-135M drafting step at batch 4). Column c of row b holds a token of sequence b where
    ``mask[b, c]`` is 1; the other columns (a shorter sequence's padding, rolled-back drafts) are
    masked out of attention, and positions are given explicitly, so the holes change nothing a
    query sees. The cache object itself is kept: building a `DynamicCache` from tensors copies
    them."""

    def __init__(self, seq_ids: tuple[int, ...], cache: DynamicCache, mask: torch.Tensor):
        self.seq_ids = seq_ids
        self.row = {s: b for b, s in enumerate(seq_ids)}
        self.cache = cache
        self.mask = mask  # (B, L) long, on the model's device

    def columns(self, seq_id: int) -> torch.Tensor:
        """The columns holding sequence `seq_id`'s tokens, in order."""
        return self.mask[self.row[seq_id]].nonzero().squeeze(1)

    @torch.inference_mode()  # the mask is an inference tensor: only changed in that mode
    def truncate(self, seq_id: int, length: int) -> None:
        self.mask[self.row[seq_id], self.columns(seq_id)[length:]] = 0

    def wasted(self, lengths: Sequence[int]) -> bool:
        """Whether the holes have grown past the tokens (attention would pay for them)."""
        width = int(self.mask.shape[1])
        return width > 2 * max(lengths) + RESIDENT_SLACK


RESIDENT_SLACK = 64  # hole columns a resident batch may carry beyond twice its longest sequence


class HFBatchedLM:
    """Many sequences, one KV cache each; `extend_many` scores them in one forward pass.

    A cache lives either on its own (``_kv``, the `DynamicCache` its last forward returned: one
    built from tensors would copy them) or in the resident batch, the last multi-sequence
    forward's stacked cache (`_ResidentBatch`), which the next forward over the same sequences
    reuses as it stands."""

    def __init__(
        self, model: torch.nn.Module, vocab_size: int, pad_token_id: int = 0, prefills: DraftPrefills | None = None
    ):
        self.model = model
        self.vocab_size = vocab_size
        self.pad_token_id = pad_token_id
        self._device = next(model.parameters()).device
        self._keeps_last = _keeps_last_logits(model)
        share_kv_heads(model)  # a padded batch has a mask: keep SDPA from copying the KV heads
        self._holes_allowed = not _attends_to_a_window(model)
        # stored prompt prefills (`models.prefill_store`); not for a windowed model, whose cache
        # the model builds with layers of its own kind, which a cache rebuilt from tensors is not
        self._prefills = prefills if self._holes_allowed else None
        self._kv: dict[int, DynamicCache | None] = {}
        self._len: dict[int, int] = {}
        self._resident: _ResidentBatch | None = None

    def open(self, seq_id: int) -> None:
        self._kv[seq_id] = None
        self._len[seq_id] = 0

    def close(self, seq_id: int) -> None:
        if self._resident is not None and seq_id in self._resident.row:
            self._evict()
        self._kv.pop(seq_id, None)
        self._len.pop(seq_id, None)

    def length(self, seq_id: int) -> int:
        return self._len[seq_id]

    def rollback(self, seq_id: int, length: int) -> None:
        if length < self._len[seq_id]:
            if self._resident is not None and seq_id in self._resident.row:
                self._resident.truncate(seq_id, length)
            elif length:
                self._kv[seq_id].crop(length)
            else:
                self._kv[seq_id] = None
            self._len[seq_id] = length

    def extend_many(self, new_tokens: dict[int, Sequence[int]]) -> dict[int, np.ndarray]:
        return {s: rows.cpu().numpy() for s, rows in self.extend_many_on_device(new_tokens).items()}

    def extend_many_last(self, new_tokens: dict[int, Sequence[int]]) -> dict[int, np.ndarray]:
        """`extend_many`, each sequence's last row only (`models.base.last_rows`)."""
        last = {s: 1 for s in new_tokens}
        return {s: rows[-1].cpu().numpy() for s, rows in self.extend_many_on_device(new_tokens, last).items()}

    @torch.inference_mode()
    def extend_many_on_device(
        self, new_tokens: dict[int, Sequence[int]], last: dict[int, int] | None = None
    ) -> dict[int, torch.Tensor]:
        """`extend_many` with each sequence's logits a float32 tensor on the model's device: the
        server's verify reads them there (`models.base.device_rows`), so on a GPU the rows of a
        round reach the CPU only as the verdict. With `last`, sequence s gets only its last
        last[s] rows (the output head runs on those positions only where the model allows)."""
        seq_ids = [s for s, toks in new_tokens.items() if len(toks) > 0]
        if not seq_ids:
            return {}
        last = last or {}
        # A prefill (a new prompt) runs on its own: padded into the round's batch, one 500-token prompt
        # would make every device's few draft tokens a 500-token row (8× the work at K = 8).
        long = [s for s in seq_ids if len(new_tokens[s]) > PREFILL_ALONE_TOKENS]
        if long and len(seq_ids) > 1:
            result = self._extend_batch({s: new_tokens[s] for s in seq_ids if s not in long}, last)
            for s in long:
                result.update(self._extend_batch({s: new_tokens[s]}, last))
            return result
        return self._extend_batch({s: new_tokens[s] for s in seq_ids}, last)

    def _extend_batch(self, new_tokens: dict[int, Sequence[int]], last: dict[int, int]) -> dict[int, torch.Tensor]:
        """One forward pass over every sequence in `new_tokens` (each with at least one token);
        sequence s's last last[s] rows (all its rows where `last` does not name it). A prompt's
        prefill alone is read from the stored prefills where they hold it, and stored otherwise."""
        if not new_tokens:
            return {}
        key = self._prefill_key(new_tokens, last)
        if key is None:
            return self._forward(new_tokens, last)
        (s,) = new_tokens
        assert self._prefills is not None  # a key is only made with a store
        stored = self._prefills.load(key)
        if stored is not None:
            layers, rows = stored
            self._kv[s], self._len[s] = DynamicCache(layers), len(new_tokens[s])
            return {s: rows.to(self._device)}
        out = self._forward(new_tokens, last)
        computed = self._kv[s]  # the alone forward's own cache
        if computed is not None:
            self._prefills.save(key, _cache_layers(computed), out[s])
        return out

    def _prefill_key(self, new_tokens: dict[int, Sequence[int]], last: dict[int, int]) -> str | None:
        """The store's key of a prompt's prefill alone (one sequence, nothing cached; several
        tokens: a one-token step is cheaper computed), else None."""
        if self._prefills is None or len(new_tokens) != 1:
            return None
        ((s, tokens),) = new_tokens.items()
        if self._len[s] != 0 or len(tokens) < 2:
            return None
        return self._prefills.key(tokens, min(last.get(s, len(tokens)), len(tokens)))

    def _forward(self, new_tokens: dict[int, Sequence[int]], last: dict[int, int]) -> dict[int, torch.Tensor]:
        """`_extend_batch`'s forward pass."""
        seq_ids, resident = self._batch_order(new_tokens)
        past = [self._len[s] for s in seq_ids]
        new = [len(new_tokens[s]) for s in seq_ids]
        max_new = max(new)
        wanted = [min(last.get(s, n), n) for s, n in zip(seq_ids, new)]
        # Right-padded inputs: sequence b's rows end at position new[b], so the head must cover the
        # last max_new - min(new[b] - wanted[b]) positions of the batch.
        first_kept = min(n - w for n, w in zip(new, wanted)) if self._keeps_last else 0
        keep = {"logits_to_keep": max_new - first_kept} if first_kept else {}
        input_ids, new_mask, positions = self._padded_inputs(seq_ids, new_tokens, past, max_new)
        cache, past_mask = self._past_cache(seq_ids, past, resident, new_mask)
        mask = torch.cat([past_mask, new_mask], dim=1)
        out = self.model(
            input_ids=input_ids.to(self._device),
            attention_mask=mask,
            position_ids=positions.to(self._device),
            past_key_values=cache,
            use_cache=True,
            **keep,
        )
        for s, p, n in zip(seq_ids, past, new):
            self._len[s] = p + n
        self._keep_cache(seq_ids, resident, out.past_key_values, mask)
        return {
            s: _aligned_logits(out.logits[b, new[b] - wanted[b] - first_kept : new[b] - first_kept], self.vocab_size)
            for b, s in enumerate(seq_ids)
        }

    def _batch_order(self, new_tokens: dict[int, Sequence[int]]) -> tuple[list[int], _ResidentBatch | None]:
        """The batch's sequences in row order, and the resident batch where it holds exactly these
        (its rows' order); a resident batch that shares only some of them is evicted first."""
        resident = self._resident
        if resident is not None and set(new_tokens) == set(resident.seq_ids):
            return list(resident.seq_ids), resident
        if resident is not None and not resident.row.keys().isdisjoint(new_tokens):
            self._evict()
        return list(new_tokens), None

    def _padded_inputs(
        self, seq_ids: list[int], new_tokens: dict[int, Sequence[int]], past: list[int], max_new: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The new tokens right-padded to ``max_new``: input ids, the mask of the real ones (on the
        model's device) and each slot's position after its sequence's past."""
        batch = len(seq_ids)
        input_ids = torch.full((batch, max_new), self.pad_token_id, dtype=torch.long)
        new_mask = torch.zeros((batch, max_new), dtype=torch.long)
        positions = torch.zeros((batch, max_new), dtype=torch.long)
        for b, s in enumerate(seq_ids):
            n = len(new_tokens[s])
            input_ids[b, :n] = torch.tensor(list(new_tokens[s]), dtype=torch.long)
            new_mask[b, :n] = 1
            # Padded query slots get in-range positions; their outputs are discarded.
            positions[b] = past[b] + torch.arange(max_new)
        return input_ids, new_mask.to(self._device), positions

    def _past_cache(self, seq_ids: list[int], past: list[int], resident: _ResidentBatch | None, new_mask: torch.Tensor):
        """The cache the forward extends and the mask of its past. One sequence alone (K = 1, a
        prefill): its cache as it stands. Several: the resident batch when it holds just these
        sequences, else their caches left-padded and stacked."""
        if resident is not None:
            return resident.cache, resident.mask
        if max(past) and len(seq_ids) == 1:
            return self._kv[seq_ids[0]], new_mask.new_ones((1, past[0]))
        if max(past):
            return DynamicCache(self._stack_past(seq_ids, past, max(past))), self._left_padded(past)
        return DynamicCache(), new_mask[:, :0]

    def _keep_cache(self, seq_ids: list[int], resident: _ResidentBatch | None, cache, mask: torch.Tensor) -> None:
        """Where the forward's output cache goes: a lone sequence's own; a batch's the resident
        batch (evicted at once where it would leave holes the model cannot skip)."""
        if len(seq_ids) == 1:
            self._kv[seq_ids[0]] = cache
            return
        if resident is None and self._resident is not None:
            # a batch disjoint from the resident one (devices that drafted last round sit
            # this one out, γ = 0): those sequences get their own caches back first
            self._evict()
        self._resident = _ResidentBatch(tuple(seq_ids), cache, mask)
        for s in seq_ids:
            self._kv.pop(s, None)
        if not self._holes_allowed or self._resident.wasted([self._len[s] for s in seq_ids]):
            self._evict()  # the next forward stacks the sequences afresh, without holes

    @torch.inference_mode()
    def _evict(self) -> None:
        """Give every sequence of the resident batch its own cache again: its columns, copied
        (a view would keep the whole batch's cache alive for as long as that sequence is not
        extended again: a finished device pinned its last batch, 9 GB after 30 rounds of 32
        SmolLM2 sequences)."""
        resident, self._resident = self._resident, None
        layers = _cache_layers(resident.cache)
        for s, b in resident.row.items():
            cols = resident.columns(s)
            self._kv[s] = (
                DynamicCache(
                    [(k[b : b + 1].index_select(2, cols), v[b : b + 1].index_select(2, cols)) for k, v in layers]
                )
                if len(cols)
                else None
            )

    def _left_padded(self, past: list[int]) -> torch.Tensor:
        """The attention mask of `_stack_past`'s caches: row b's last past[b] columns."""
        mask = torch.zeros((len(past), max(past)), dtype=torch.long)
        for b, p in enumerate(past):
            mask[b, max(past) - p :] = 1
        return mask.to(self._device)

    def _stack_past(self, seq_ids: list[int], past: list[int], max_past: int) -> KV:
        """Left-pad every sequence's cache to max_past and stack along the batch axis."""
        per_layer = []
        caches = {s: _cache_layers(self._kv[s]) for s in seq_ids if self._kv[s] is not None}
        n_layers = len(next(iter(caches.values())))
        for layer in range(n_layers):
            keys, values = [], []
            for s, length in zip(seq_ids, past):
                kv = caches.get(s)
                if kv is None:
                    ref_k, ref_v = next(iter(caches.values()))[layer]
                    k = ref_k.new_zeros(ref_k.shape[:2] + (max_past,) + ref_k.shape[3:])
                    v = ref_v.new_zeros(ref_v.shape[:2] + (max_past,) + ref_v.shape[3:])
                else:
                    k, v = kv[layer]
                    if length < max_past:
                        pad = max_past - length
                        k = torch.nn.functional.pad(k, (0, 0, pad, 0))
                        v = torch.nn.functional.pad(v, (0, 0, pad, 0))
                keys.append(k)
                values.append(v)
            per_layer.append((torch.cat(keys, dim=0), torch.cat(values, dim=0)))
        return per_layer


def draft_lm(pair: LoadedPair, name: str) -> SequenceLM:
    """Draft `name` of `pair` as a SequenceLM over the target's ids: its own KV cache, wrapped in
    a `multispin.models.cross_vocab.CrossVocabLM` when its tokenizer is not the target's."""
    cross = pair.cross_drafts.get(name)
    if cross is None:
        return HFSequenceLM(pair.drafts[name], pair.vocab_size)
    return cross.wrap(HFSequenceLM(pair.drafts[name], cross.vocab.draft_size))


def draft_batched(pair: LoadedPair, name: str, pad_token_id: int = 0) -> BatchedLM:
    """Draft `name` of `pair` as a BatchedLM over the target's ids: devices sharing it draft each
    step in one batched pass, a draft of another vocabulary too (its own ids padded with 0,
    masked). A draft of the target's vocabulary reads and stores its prompts' prefills in the
    pair's `prompt_prefills` where it has one (`models.prefill_store`)."""
    cross = pair.cross_drafts.get(name)
    if cross is None:
        prefills = pair.prompt_prefills.for_draft(name) if pair.prompt_prefills is not None else None
        return HFBatchedLM(pair.drafts[name], pair.vocab_size, pad_token_id, prefills)
    return cross.batched(HFBatchedLM(pair.drafts[name], cross.vocab.draft_size, 0))
