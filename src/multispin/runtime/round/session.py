"""`generate`: K devices and one server in one process, real models, real tokens.

Builds the devices (each with its own draft model and prompt) and the server from a validated
`GenerateConfig`, runs the round loop and returns every device's tokens, text and round log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import Field

from multispin.errors import Interrupted
from multispin.models.base import BatchedSequence, LoadedPair
from multispin.models.prompts import default_prompts, encode_prompt
from multispin.models.registry import DEFAULT_PAIR, resolve_pair
from multispin.runtime.round.engine import RoundRecord
from multispin.runtime.round.local import DeviceResult, fixed_policy, run_rounds
from multispin.runtime.round.roles import DraftDevice, VerifierServer
from multispin.speculative.codecs import Codec, exactness_by_mode, make_codec
from multispin.speculative.stats import AcceptanceStats
from multispin.speculative.verify import DEFAULT_GAMMA_MAX
from multispin.speculative.warp import SamplingFields, SamplingParams
from multispin.vocabulary import FixedMode, fixed_mode_links


class GenerateConfig(SamplingFields):
    pair: str = DEFAULT_PAIR
    devices: int = Field(4, ge=1, le=256)
    draft_len: int = Field(4, ge=0, le=DEFAULT_GAMMA_MAX)
    mode: FixedMode = "random"
    seed: int = 0
    max_new_tokens: int = Field(32, ge=1, le=8192)
    ul_codec: str = "dense-fp32"
    dl_codec: str = "dense-fp32"
    drafts: list[str] | None = None  # draft model per device, cycled; default: all of the pair's
    prompts: list[str] | None = None  # cycled over devices; default: built-in prompts


@dataclass
class GenerationResult:
    config: GenerateConfig
    devices: list[DeviceResult]
    wall_s: float
    notes: list[str] = field(default_factory=list)

    @property
    def num_rounds(self) -> int:
        return max((len(d.rounds) for d in self.devices), default=0)

    def to_dict(self) -> dict:
        return {
            "config": self.config.model_dump(),
            "wall_s": self.wall_s,
            "num_rounds": self.num_rounds,
            "notes": self.notes,
            "devices": [d.to_dict() for d in self.devices],
        }


def generate(
    config: GenerateConfig,
    pair: LoadedPair | None = None,
    on_round: Callable[[int, dict[int, RoundRecord]], None] | None = None,
) -> GenerationResult:
    """Run Multi-SPIN rounds for `config.devices` devices until each is done."""
    # transformers takes seconds to import: load it when models run, not when this module is read
    from multispin.models.hf import HFBatchedLM

    pair = pair or resolve_pair(config.pair, drafts=config.drafts)
    sampling = config.sampling
    ul_codec, dl_codec = make_codec(config.ul_codec), make_codec(config.dl_codec)
    notes = [
        f"{m.upper()} codec {(ul_codec if m == 'ul' else dl_codec).name} is not exact here: {v.reason}"
        for m, v in exactness_by_mode(
            ul_codec, dl_codec, sampling, pair.vocab_size, fixed_mode_links(config.mode)
        ).items()
        if not v.exact
    ]
    draft_names = pair.check_drafts(config.drafts or list(pair.drafts))
    texts = config.prompts or default_prompts(config.devices, config.seed)
    pad_id = getattr(pair.tokenizer, "pad_token_id", None) or 0
    server = VerifierServer(
        HFBatchedLM(pair.target, pair.vocab_size, pad_id), sampling, ul_codec, dl_codec, config.seed
    )
    devices, results = _devices(config, pair, draft_names, texts, pad_id, sampling, (ul_codec, dl_codec))
    logs: dict[int, list[RoundRecord]] = {k: [] for k in devices}

    def record(round_idx: int, records: dict[int, RoundRecord]) -> None:
        for d, rec in records.items():
            logs[d].append(rec)
        if on_round is not None:
            on_round(round_idx, records)

    def outcome() -> GenerationResult:
        _fill_results(results, devices, logs, pair)
        return GenerationResult(config, results, time.perf_counter() - started, notes)

    started = time.perf_counter()
    try:
        run_rounds(
            server,
            devices,
            fixed_policy(config.draft_len, config.mode, config.seed),
            config.max_new_tokens,
            pair.eos_token_ids,
            on_round=record,
        )
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: every device's text so far goes with it
        done = max((len(v) for v in logs.values()), default=0)
        raise Interrupted.after(
            exc, f"interrupted after {done} rounds; the texts above are partial", partial=outcome()
        ) from None
    return outcome()


def _devices(
    config: GenerateConfig,
    pair: LoadedPair,
    draft_names: list[str],
    texts: list[str],
    pad_id: int,
    sampling: SamplingParams,
    codecs: tuple[Codec, Codec],
) -> tuple[dict[int, DraftDevice], list[DeviceResult]]:
    """Device k drafts with draft ``k mod len(draft_names)`` on prompt ``k mod len(texts)``;
    devices that hold the same draft draft each step in one batched pass (roles.draft_all).
    Returns them with their (still empty) results."""
    from multispin.models.hf import draft_batched

    devices, results = {}, []
    shared_drafts = {name: draft_batched(pair, name, pad_id) for name in set(draft_names)}
    for k in range(config.devices):
        draft_name = draft_names[k % len(draft_names)]
        prompt = texts[k % len(texts)]
        lm = BatchedSequence(shared_drafts[draft_name], k)
        devices[k] = DraftDevice(k, lm, sampling, *codecs, config.seed, encode_prompt(pair, prompt))
        results.append(DeviceResult(k, draft_name, prompt, [], ""))
    return devices, results


def _fill_results(
    results: list[DeviceResult],
    devices: dict[int, DraftDevice],
    logs: dict[int, list[RoundRecord]],
    pair: LoadedPair,
) -> None:
    """Each device's tokens, text, round log and acceptance statistics so far into its result."""
    for res in results:
        dev = devices[res.device_id]
        res.tokens = list(dev.generated)
        res.text = pair.tokenizer.decode(res.tokens, skip_special_tokens=True)
        res.rounds = logs[res.device_id]
        res.stats = AcceptanceStats()
        for r in res.rounds:
            res.stats.record(r.draft_len, r.num_accepted)
