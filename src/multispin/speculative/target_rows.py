"""The target's rows of one round, warped only where the verdict looks.

The acceptance test needs p_i(x_i) at each drafted token up to the device's first rejection
(`verify` asks position by position), and the rest of the round needs whole warped rows only for
each device's last row (the bonus row, or p_j of the first rejection): at K = 20, γ = 8 that is
20 of 180 rows. So `TargetRows` keeps the logits as a torch tensor on their own device and
computes p_i(x_i) with one normaliser per row it is asked about (log-softmax, or the top-k
values' logsumexp), batched over the rows of one position; whole rows go through
`warp_tensor` (the one implementation of the sampling policy), so a row it returns is bit for
bit the row `warp` gives on all rows at once, and stays on the logits' device (on CUDA the rows
leave the GPU only as the verdict's scalars and tokens). Top-p needs each row's sorted mass:
those rows are warped whole. `ArrayRows` gives the same two methods over already warped rows
(tests, tools).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from multispin.speculative.warp import SamplingParams, warp_tensor

if TYPE_CHECKING:
    import torch


class WarpedRows(Protocol):
    """What `verify` reads of the target's rows."""

    num_rows: int
    vocab_size: int

    def prob_at(self, rows: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """p_row(token) for each pair, float64."""

    def warped(self, rows: Sequence[int] | np.ndarray) -> torch.Tensor:
        """The whole warped rows, a float32 tensor (len(rows), V) on the rows' device."""


class ArrayRows:
    """Rows already warped (a numpy array (N, V))."""

    def __init__(self, probs: np.ndarray):
        self.probs = np.asarray(probs)
        self.num_rows, self.vocab_size = self.probs.shape

    def prob_at(self, rows: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        return self.probs[rows, tokens].astype(np.float64)

    def warped(self, rows: Sequence[int] | np.ndarray) -> torch.Tensor:
        import torch

        return torch.from_numpy(np.ascontiguousarray(self.probs[np.asarray(rows, dtype=np.int64)]))


class TargetRows:
    """Logits (N, V) of the target, a torch tensor (kept on its device) or a numpy array."""

    def __init__(self, logits, params: SamplingParams):
        import torch

        self.logits = torch.as_tensor(logits)
        self.params = params
        self.num_rows, self.vocab_size = self.logits.shape

    @classmethod
    def stacked(cls, blocks: Sequence, params: SamplingParams) -> TargetRows:
        """The rows of several blocks (each (n_i, V), tensors on one device or arrays) in order,
        concatenated where they are: a model's on-device logits never pass through the CPU."""
        import torch

        return cls(torch.cat([torch.as_tensor(b) for b in blocks], dim=0), params)

    def _select(self, rows: np.ndarray):
        """A copy of the given rows, on the logits' device."""
        import torch

        if self.logits.device.type == "cpu" and self.logits.dtype in (torch.float32, torch.float64):
            # numpy's row copy: torch's parallel index_select is many times slower on a busy CPU
            return torch.from_numpy(self.logits.numpy()[rows])
        return self.logits.index_select(0, torch.as_tensor(rows, device=self.logits.device))

    def warped(self, rows: Sequence[int] | np.ndarray) -> torch.Tensor:
        return warp_tensor(self._select(np.asarray(rows, dtype=np.int64)), self.params)

    def prob_at(self, rows: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        import torch

        rows, tokens = np.asarray(rows, dtype=np.int64), np.asarray(tokens, dtype=np.int64)
        if rows.size == 0:
            return np.zeros(0, dtype=np.float64)
        params = self.params
        if params.top_p < 1.0:  # the nucleus needs the row's sorted mass: warp the rows whole
            uniq, where = np.unique(rows, return_inverse=True)
            whole = self.warped(uniq)
            on = whole.device
            at = whole[torch.as_tensor(where, device=on), torch.as_tensor(tokens, device=on)]
            return at.to(torch.float64).cpu().numpy()
        dev = self.logits.device
        t = torch.as_tensor(tokens, device=dev)
        x = self._select(rows).to(torch.float32)  # the rows the test reads, once each
        if params.greedy:  # all mass on the first arg-max, as warp puts it
            return (x.argmax(dim=-1) == t).to(torch.float64).cpu().numpy()
        if params.temperature != 1.0:
            x = x / params.temperature
        at = x.gather(1, t[:, None])[:, 0]
        if params.top_k and params.top_k < self.vocab_size:
            top = torch.topk(x, params.top_k, dim=-1, sorted=False)
            kept = (top.indices == t[:, None]).any(dim=-1)
            p = torch.where(kept, torch.exp(at - torch.logsumexp(top.values, dim=-1)), torch.zeros_like(at))
        else:
            # log_softmax is one fused pass per row (logsumexp is several): read it at the token
            p = torch.exp(torch.log_softmax(x, dim=-1).gather(1, t[:, None])[:, 0])
        return p.to(torch.float64).cpu().numpy()


def as_rows(target) -> WarpedRows:
    """`target` as rows `verify` can read: a `WarpedRows` as given, an array as warped rows."""
    return target if hasattr(target, "prob_at") else ArrayRows(target)
