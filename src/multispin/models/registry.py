"""Named draft/target pairs: resolve a name to a loaded `LoadedPair`.

Accepted names (``pair_names()`` lists the registered ones):

* ``smollm2-135m`` (the default): target SmolLM2-135M-Instruct, fetched as a wheel and converted
  once (see `multispin.models.acquire`); drafts are round-to-nearest quantised copies of the
  target (`multispin.models.quantize`), default ``q5g64, q4g64, q3g32, q3g64`` (acceptance
  E[sum min(p, q)] about 0.84, 0.73, 0.43, 0.30 on ShareGPT at temperature 1, top-k 1024; docs/acceptance.md). Avoid ``q4g32`` (and any
  wider grid with group 32) here: the GGUF is Q4_1 in blocks of 32, so that draft reproduces
  the target's weights exactly (acceptance 1.0).
* ``qwen2.5-coder-0.5b``: target Qwen2.5-Coder-0.5B-Instruct (478 MB download, on demand);
  drafts ``q4g128, q3g32, q3g128, q2g32`` (acceptance about 0.90, 0.85, 0.70, 0.32). The
  tokenizer has 151,665 valid ids while the logits are 151,936 wide; ``vocab_size`` is the
  valid count ``len(tokenizer)``.
* ``tiny``: the random-init test pair of `multispin.models.tiny` (no download).
* ``smollm2-135m:qwen2.5-coder-0.5b``: SmolLM2-135M-Instruct (its own 49,152-token vocabulary)
  drafts for the Qwen2.5-Coder-0.5B-Instruct target; the draft's distribution reaches the
  engine over the target's ids (`multispin.models.cross_vocab`).
* ``gemma3-270m:qwen2.5-coder-0.5b``: Gemma 3 270M base (its own 262,144-token SentencePiece
  vocabulary; 238 MB download, on demand) drafts for the same Qwen target, a second draft
  family. **Licence: the Gemma Terms of Use** (https://ai.google.dev/gemma/terms), not
  Apache-2.0 like the other real models: fetching it means accepting them. Not registered
  against ``smollm2-135m``: a 270M draft for a 135M target costs more than it saves (the
  ``DRAFT:TARGET`` form still builds it).
* ``tiny-cross``: the tiny target with a draft of another (synthetic) vocabulary, for tests.
* ``DRAFT:TARGET``: two models, each a registered model name (``smollm2-135m``), a hub id
  (``Qwen/Qwen2.5-0.5B-Instruct``) or a local directory (``/models/draft:/models/target``). When
  their tokenizers differ the draft proposes over the intersection of the two vocabularies
  ([`VocabularyMismatchError`][multispin.errors.VocabularyMismatchError] if they share no token). Extra ``qBgG``
  names in ``drafts`` add quantised copies of the target (devices of one run may mix them).
* a single local directory: that model is the target, drafts are quantised copies.

``local_path`` replaces the download of a registered model by a local directory (a Hugging Face
model directory, or one holding the original GGUF file); so does ``MULTISPIN_MODEL_<NAME>``.

``drafts`` chooses the draft set (names ``q<bits>g<group>``); ``None`` takes the pair's default.
The first draft is the pair's ``default_draft``.

Loaded models are cached in the process: resolving the same pair again returns the same object,
and a different draft set reuses the loaded target. ``clear_cache()`` forgets them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from multispin.errors import ConfigError, ModelError
from multispin.models.acquire import MODEL_SOURCES, dtype_kwarg, ensure_model, model_dir, quiet_transformers
from multispin.models.base import LoadedPair
from multispin.models.cross_vocab import CrossDraft

DEFAULT_PAIR = "smollm2-135m"


@dataclass(frozen=True)
class PairInfo:
    name: str
    description: str
    default_drafts: tuple[str, ...] = ()
    instruct: bool = True
    vocab_size: int | None = None  # valid token ids V, known without loading (profiles are checked against it)
    draft_target: tuple[str, str] | None = None  # a DRAFT:TARGET pair of two registered models


REGISTERED: dict[str, PairInfo] = {
    "smollm2-135m": PairInfo(
        "smollm2-135m",
        "SmolLM2-135M-Instruct target (93 MB wheel, converted once) + RTN-quantised drafts "
        "q5g64/q4g64/q3g32/q3g64 (acceptance ~0.84/0.73/0.43/0.30 on chat); the default",
        ("q5g64", "q4g64", "q3g32", "q3g64"),
        vocab_size=49_152,
    ),
    "qwen2.5-coder-0.5b": PairInfo(
        "qwen2.5-coder-0.5b",
        "Qwen2.5-Coder-0.5B-Instruct target (478 MB download, on demand; V = 151,665) + "
        "RTN-quantised drafts q4g128/q3g32/q3g128/q2g32 (acceptance ~0.90/0.85/0.70/0.32)",
        ("q4g128", "q3g32", "q3g128", "q2g32"),
        vocab_size=151_665,
    ),
    "smollm2-135m:qwen2.5-coder-0.5b": PairInfo(
        "smollm2-135m:qwen2.5-coder-0.5b",
        "SmolLM2-135M-Instruct drafts for Qwen2.5-Coder-0.5B-Instruct across vocabularies "
        "(39,234 shared tokens, 80% of SmolLM2's); extra qBgG drafts add RTN copies of the target",
        vocab_size=151_665,
        draft_target=("smollm2-135m", "qwen2.5-coder-0.5b"),
    ),
    "gemma3-270m:qwen2.5-coder-0.5b": PairInfo(
        "gemma3-270m:qwen2.5-coder-0.5b",
        "Gemma 3 270M base (licence: Gemma Terms of Use; 238 MB download, on demand) drafts for "
        "Qwen2.5-Coder-0.5B-Instruct across vocabularies (95,904 shared tokens, 38% of Gemma's; "
        "α ~0.40 on chat); extra qBgG drafts add RTN copies of the target",
        vocab_size=151_665,
        draft_target=("gemma3-270m", "qwen2.5-coder-0.5b"),
    ),
    "tiny": PairInfo(
        "tiny",
        "random-init 2-layer Qwen2 pair for tests, drafts close/mid/far (no download)",
        (),
        instruct=False,
        vocab_size=256,
    ),
    "tiny-cross": PairInfo(
        "tiny-cross",
        "the tiny target with a draft of another vocabulary (merged byte pieces, 'merged') and "
        "a same-vocabulary draft ('close'), for tests (no download)",
        (),
        instruct=False,
        vocab_size=256,
    ),
}

_lock = threading.RLock()
_models: dict[str, tuple[Any, Any]] = {}  # resolved key -> (model, tokenizer)
_drafts: dict[tuple[str, str], Any] = {}  # (target key, draft name) -> quantised model
_pairs: dict[tuple, LoadedPair] = {}


def pair_names() -> dict[str, str]:
    """Registered pair names and one-line descriptions (plus the DRAFT:TARGET form)."""
    out = {name: info.description for name, info in REGISTERED.items()}
    out["DRAFT:TARGET"] = "two models (registered names, hub ids or local directories); their tokenizers may differ"
    return out


def clear_cache() -> None:
    """Forget every model loaded in this process."""
    with _lock:
        _models.clear()
        _drafts.clear()
        _pairs.clear()


# --------------------------------------------------------------------------------------------
# Entry point


def resolve_pair(name: str, drafts: Sequence[str] | None = None, local_path: str | None = None) -> LoadedPair:
    """Resolve ``name`` (see the module docstring) to a loaded pair, cached in the process.

    Raises ``ConfigError`` for an unknown name or a bad draft name, ``ModelError`` when a model
    cannot be fetched or loaded, ``VocabularyMismatchError`` when draft and target tokenizers
    share no token.
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"pair: expected a name, got {name!r}; allowed: {_allowed()}")
    name = name.strip()
    draft_list = None if drafts is None else tuple(str(d).strip() for d in drafts)
    if draft_list is not None and not draft_list:
        draft_list = None
    key = (name, draft_list, None if local_path is None else str(local_path))
    with _lock:
        if key in _pairs:
            return _pairs[key]
        pair = _resolve(name, draft_list, local_path)
        _pairs[key] = pair
        return pair


def _allowed() -> str:
    return ", ".join(list(REGISTERED) + ["DRAFT:TARGET (hub ids or local directories)", "a local model directory"])


def _resolve(name: str, drafts: tuple[str, ...] | None, local_path: str | None) -> LoadedPair:
    if name in ("tiny", "tiny-cross"):
        return _resolve_tiny(name, drafts, local_path)
    if name in REGISTERED and REGISTERED[name].draft_target is not None:
        if local_path is not None:
            raise ConfigError(f"local_path: pair {name!r} is two models; set MULTISPIN_MODEL_<NAME> for each instead")
        return _resolve_draft_target(name, *REGISTERED[name].draft_target, drafts)
    if name in REGISTERED:
        return _resolve_registered(REGISTERED[name], drafts, local_path)
    if local_path is not None:
        raise ConfigError(
            f"local_path: only applies to a registered pair ({', '.join(REGISTERED)}), "
            f"not {name!r}; name the directory itself instead"
        )
    if os.path.isdir(os.path.expanduser(name)):
        return _resolve_single_local(name, drafts)
    if ":" in name:
        draft_ref, _, target_ref = name.partition(":")
        if not draft_ref or not target_ref or ":" in target_ref:
            raise ConfigError(f"pair: {name!r} is not DRAFT:TARGET; allowed: {_allowed()}")
        return _resolve_draft_target(name, draft_ref, target_ref, drafts)
    raise ConfigError(f"pair: unknown name {name!r}; allowed: {_allowed()}")


def _resolve_tiny(name: str, drafts: tuple[str, ...] | None, local_path: str | None) -> LoadedPair:
    if local_path is not None:
        raise ConfigError(f"local_path: the {name} pair is built in memory and takes no path")
    try:
        from multispin.models.tiny import load_tiny_cross_pair, load_tiny_pair  # lazy: imports torch
    except ImportError as exc:  # pragma: no cover - tiny ships with the package
        raise ModelError(f"the tiny pair is unavailable: {exc}") from None
    pair = load_tiny_cross_pair() if name == "tiny-cross" else load_tiny_pair()
    if drafts is None:
        return pair
    pair.check_drafts(drafts)
    return LoadedPair(
        name=pair.name,
        tokenizer=pair.tokenizer,
        target=pair.target,
        drafts={d: pair.drafts[d] for d in drafts},
        vocab_size=pair.vocab_size,
        eos_token_ids=pair.eos_token_ids,
        use_chat_template=pair.use_chat_template,
        notes=dict(pair.notes),
        cross_drafts={d: c for d, c in pair.cross_drafts.items() if d in drafts},
    )


# --------------------------------------------------------------------------------------------
# Registered real models


def _resolve_registered(info: PairInfo, drafts: tuple[str, ...] | None, local_path: str | None) -> LoadedPair:
    draft_names = _validate_drafts(drafts or info.default_drafts)
    t0 = time.perf_counter()
    directory = ensure_model(info.name, local_path=local_path)
    model, tok = _load_local(directory)
    t_load = time.perf_counter() - t0
    built, t_q = _quantised_drafts(str(directory), model, draft_names)
    return _make_pair(
        info.name,
        tok,
        model,
        built,
        instruct=info.instruct,
        notes={
            "source": str(directory),
            "drafts": "round-to-nearest quantised copies of the "
            "target (asymmetric, per group of input columns; lm_head and embeddings exact)",
            "load_s": round(t_load, 2),
            "quantize_s": round(t_q, 2),
        },
    )


def _resolve_single_local(path: str, drafts: tuple[str, ...] | None) -> LoadedPair:
    directory = Path(path).expanduser().resolve()
    draft_names = _validate_drafts(drafts or REGISTERED[DEFAULT_PAIR].default_drafts)
    model, tok = _load_local(directory)
    built, t_q = _quantised_drafts(str(directory), model, draft_names)
    return _make_pair(
        str(path),
        tok,
        model,
        built,
        instruct=_looks_instruct(str(directory), model, tok),
        notes={"source": str(directory), "quantize_s": round(t_q, 2)},
    )


def _resolve_draft_target(name: str, draft_ref: str, target_ref: str, drafts: tuple[str, ...] | None) -> LoadedPair:
    label = Path(draft_ref.rstrip("/")).name or draft_ref
    quantised = _validate_drafts([d for d in drafts or () if d != label])
    target, t_tok = _load_ref(target_ref)
    draft, d_tok = _load_ref(draft_ref)
    built = {label: draft}
    cross = {}
    if not same_vocabulary(d_tok, t_tok):  # a draft of another vocabulary: q over the target's ids
        cross[label] = CrossDraft.between(d_tok, t_tok)
    extra, _ = _quantised_drafts(_ref_key(target_ref), target, quantised)
    built.update(extra)
    notes = {"draft": draft_ref, "target": target_ref}
    if cross:
        notes["vocabulary_map"] = cross[label].vocab.coverage.to_dict()
    # a registered target knows whether it is an instruct model (its cache directory's name does not say)
    instruct = (
        REGISTERED[target_ref].instruct if target_ref in REGISTERED else _looks_instruct(target_ref, target, t_tok)
    )
    pair = _make_pair(name, t_tok, target, built, instruct=instruct, notes=notes)
    pair.cross_drafts.update(cross)
    return pair


def _validate_drafts(names: Sequence[str]) -> tuple[str, ...]:
    from multispin.models.quantize import parse_draft_name  # lazy: imports torch

    out = []
    for d in names:
        bits, group = parse_draft_name(d)
        canonical = f"q{bits}g{group}"
        if canonical not in out:
            out.append(canonical)
    return tuple(out)


def _quantised_drafts(key: str, target: Any, names: Sequence[str]) -> tuple[dict[str, Any], float]:
    from multispin.models.quantize import quantize_named  # lazy: imports torch

    t0 = time.perf_counter()
    out = {}
    for d in names:
        if (key, d) not in _drafts:
            _drafts[(key, d)] = quantize_named(target, d)
        out[d] = _drafts[(key, d)]
    return out, time.perf_counter() - t0


# --------------------------------------------------------------------------------------------
# Loading Hugging Face models


def _ref_key(ref: str) -> str:
    p = Path(ref).expanduser()
    if ref in MODEL_SOURCES and not p.is_dir():
        return str(model_dir(ref))  # the key the registered pair's quantised drafts have
    return str(p.resolve()) if p.is_dir() else ref


def _load_ref(ref: str) -> tuple[Any, Any]:
    """A registered model name, a local directory or a hub id -> (model, tokenizer)."""
    p = Path(ref).expanduser()
    if ref in MODEL_SOURCES and not p.is_dir():
        return _load_local(ensure_model(ref))
    if p.is_dir():
        return _load_local(p.resolve())
    if ref.startswith(("/", ".", "~")):
        raise ModelError(f"model {ref!r}: no such directory")
    return _load_hub(ref)


def _load_local(directory: Path) -> tuple[Any, Any]:
    key = str(Path(directory).resolve())
    if key in _models:
        return _models[key]
    if not (Path(directory) / "config.json").exists():
        raise ModelError(f"model directory {key!r} has no config.json (not a Hugging Face model)")
    try:
        loaded = _from_pretrained(key)
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(f"cannot load model from {key!r}: {_one_line(exc)}") from None
    _models[key] = loaded
    return loaded


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Quick check that the model hub's host name resolves (skipped when a proxy is set)."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    try:
        from huggingface_hub import constants

        host = urlparse(constants.ENDPOINT).hostname
        if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}:
            return False
    except Exception:
        return True
    if not host:
        return True
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(timeout_s)
    try:
        socket.getaddrinfo(host, 443)
        return True
    except OSError:
        return False
    finally:
        socket.setdefaulttimeout(old)


def _load_hub(model_id: str) -> tuple[Any, Any]:
    if model_id in _models:
        return _models[model_id]
    if not re.fullmatch(r"[\w.\-]+(/[\w.\-]+)?", model_id):
        raise ConfigError(f"pair: {model_id!r} is neither a local directory nor a hub model id")
    loaded = None
    try:  # already in the local hub cache: no network needed
        loaded = _from_pretrained(model_id, local_files_only=True)
    except Exception:
        loaded = None
    if loaded is None:
        if not hub_reachable():
            raise ModelError(
                f"cannot load {model_id!r}: the model hub cannot be reached from here and the "
                "model is not in the local hub cache; download it elsewhere and pass its "
                "directory instead (DRAFT_DIR:TARGET_DIR), or use --pair smollm2-135m"
            )
        try:
            loaded = _from_pretrained(model_id)
        except Exception as exc:
            raise ModelError(
                f"cannot load {model_id!r} from the model hub: {_one_line(exc)}; pass a local directory instead"
            ) from None
    _models[model_id] = loaded
    return loaded


def _from_pretrained(ref: str, **kwargs) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with quiet_transformers():
        tok = AutoTokenizer.from_pretrained(ref, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(ref, **dtype_kwarg(torch.float32), **kwargs)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, tok


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


# --------------------------------------------------------------------------------------------
# Vocabulary, special tokens, assembling the pair


def vocab_digest(tokenizer: Any) -> str:
    """sha256 of the id -> token map (``get_vocab()``, added tokens included)."""
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    items = sorted(((int(i), str(t)) for t, i in vocab.items()))
    return hashlib.sha256(json.dumps(items, ensure_ascii=False).encode()).hexdigest()


def same_vocabulary(draft_tok: Any, target_tok: Any) -> bool:
    """Whether both tokenizers have the same id -> token map (else the draft is a draft of
    another vocabulary)."""
    return len(draft_tok) == len(target_tok) and vocab_digest(draft_tok) == vocab_digest(target_tok)


def eos_token_ids(tokenizer: Any, model: Any) -> tuple[int, ...]:
    """End-of-sequence ids from the tokenizer and the model's generation config (deduplicated)."""
    ids: list[int] = []

    def add(v: Any) -> None:
        if v is None:
            return
        for i in v if isinstance(v, (list, tuple)) else [v]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))

    add(getattr(tokenizer, "eos_token_id", None))
    gen = getattr(model, "generation_config", None)
    add(getattr(gen, "eos_token_id", None))
    if not ids:
        add(getattr(getattr(model, "config", None), "eos_token_id", None))
    return tuple(ids)


def _looks_instruct(ref: str, model: Any, tok: Any) -> bool:
    if not getattr(tok, "chat_template", None):
        return False
    names = " ".join([ref, str(getattr(getattr(model, "config", None), "_name_or_path", ""))])
    return bool(re.search(r"instruct|chat|-it\b", names, re.IGNORECASE))


def _make_pair(name: str, tok: Any, target: Any, drafts: dict[str, Any], *, instruct: bool, notes: dict) -> LoadedPair:
    vocab = len(tok)
    logits = int(getattr(target.config, "vocab_size", vocab))
    if vocab > logits:
        raise ModelError(f"pair {name!r}: tokenizer has {vocab} tokens but the model only {logits} logits")
    return LoadedPair(
        name=name,
        tokenizer=tok,
        target=target,
        drafts=drafts,
        vocab_size=vocab,
        eos_token_ids=eos_token_ids(tok, target),
        use_chat_template=bool(instruct and getattr(tok, "chat_template", None)),
        notes={**notes, "logit_width": logits},
    )
