"""Prompt prefills kept for the next device pool: a comparison's runs (`multispin demo`: one
testbed run per policy, on the same seeds) give every device the same prompt queues, and each
run's device pool is a fresh process that would prefill the same prompts on the same draft again.

A prompt's prefill on a draft model is a pure function of the model, the prompt's token ids, the
logits rows kept and the torch threads that computed it, as long as it runs alone (one sequence,
nothing cached: `HFBatchedLM` runs every prompt longer than a draft's step alone). The first pool
to prefill a prompt writes its KV cache and its logits rows here; a later pool of the same
comparison reads them instead of computing them. Its tokens are the ones a fresh prefill gives,
bit for bit (tests/models/test_prefill_store.py). A prefill padded into a batch with other
devices' steps depends on that batch and is never stored.

The store is a temporary folder that lives as long as the comparison (`shared_prompt_prefills`),
handed to the pools through the pair they fork with; files are written whole and renamed into
place, so pools running at once (seeds in parallel) read complete entries or none.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from multispin.models.base import LoadedPair


class DraftPrefills:
    """One draft model's stored prefills (`PromptPrefills.for_draft`); counts its hits and misses."""

    def __init__(self, folder: Path, draft: str):
        self.folder = folder
        self.draft = draft
        self.hits = 0
        self.misses = 0

    def key(self, token_ids: Sequence[int], rows: int) -> str:
        """The entry of a prefill of ``token_ids`` keeping its last ``rows`` logits rows, computed
        on this process's torch threads (another thread count may round differently)."""
        import torch

        digest = hashlib.sha256()
        digest.update(f"{self.draft}|{rows}|{torch.get_num_threads()}|".encode())
        digest.update(",".join(str(int(t)) for t in token_ids).encode())
        return digest.hexdigest()

    def load(self, key: str) -> tuple[list[tuple[Any, Any]], Any] | None:
        """(KV per layer, logits rows) of a stored prefill, or None where none is stored."""
        import torch

        path = self.folder / f"{key}.pt"
        try:
            entry = torch.load(path, weights_only=True)
        except FileNotFoundError:
            self.misses += 1
            return None
        self.hits += 1
        return [(k, v) for k, v in entry["layers"]], entry["rows"]

    def save(self, key: str, layers: Sequence[tuple[Any, Any]], rows: Any) -> None:
        """Store a prefill's KV per layer and its logits rows (written whole, then renamed)."""
        import torch

        entry = {"layers": [(k.clone(), v.clone()) for k, v in layers], "rows": rows.clone()}
        tmp: str | None = None
        try:
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".part")
            os.close(fd)
            torch.save(entry, tmp)
            os.replace(tmp, self.folder / f"{key}.pt")
        except (OSError, RuntimeError):  # a full disk (torch's writer raises RuntimeError): computed again next time
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)


class PromptPrefills:
    """The prefills of every draft of a pair, in ``folder``."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def for_draft(self, draft: str) -> DraftPrefills:
        return DraftPrefills(self.folder, draft)


@contextmanager
def shared_prompt_prefills(pair: LoadedPair) -> Iterator[PromptPrefills]:
    """While the block runs, the device pools forked with ``pair`` share their prompts' prefills
    (a temporary folder, removed after the block). Nested blocks share the outer store."""
    if pair.prompt_prefills is not None:
        yield pair.prompt_prefills
        return
    folder = Path(tempfile.mkdtemp(prefix="multispin-prefills-"))
    pair.prompt_prefills = PromptPrefills(folder)
    try:
        yield pair.prompt_prefills
    finally:
        pair.prompt_prefills = None
        shutil.rmtree(folder, ignore_errors=True)
