"""Codec sizes, speed and distortion at the paper's vocabulary (V = 151,665).

For each codec this measures, on one realistic next-token row:

- bits / bytes of one encoded distribution, and the ratio to the paper's S = 34,816 bits
  (sparse top-1024 at 16-bit values);
- encode and decode wall time (median over a few repeats, after one warm-up call);
- the total-variation distance TV(p, roundtrip(p)) = ½ Σ |p − p̂|: how far the receiver's row
  is from the sender's (0 means the codec carried the row exactly).

Rows (float32, as `warp` produces them):

- ``zipf``: a Zipf-like row, p ∝ rank^−1.3 over a random permutation of the ids (top token
  ≈ 0.26, ≈ 8% of the mass beyond the 1024 largest entries);
- ``softmax``: softmax of 5 · N(0, 1) logits (a handful of large entries, top ≈ 0.18, ≈ 2% of
  the mass beyond the 1024 largest);
- ``zipf top-50``: the zipf row after top-k = 50 (what sparse q=32 carries exactly).

Run: .venv/bin/python benchmarks/bench_codecs.py [--repeats N] [--codecs SPEC ...]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from multispin.speculative.codecs import PAPER_PAYLOAD_BITS, PAPER_VOCAB, make_codec
from multispin.speculative.warp import SamplingParams, warp

DEFAULT_CODECS = [
    "dense-fp32",
    "dense-fp16",
    "dense-bf16",
    "sparse:v_eff=1024,q=16",
    "sparse:v_eff=1024,q=32",
    "sparse:v_eff=256,q=16",
    "lattice:l=1000",
    "lattice:l=4000",
]


def rows(vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    zipf = np.empty(vocab)
    zipf[rng.permutation(vocab)] = np.arange(1, vocab + 1, dtype=np.float64) ** -1.3
    zipf = (zipf / zipf.sum()).astype(np.float32)
    logits = rng.standard_normal(vocab) * 5.0
    soft = np.exp(logits - logits.max())
    soft = (soft / soft.sum()).astype(np.float32)
    top50 = warp(np.log(zipf.astype(np.float64)), SamplingParams(top_k=50))
    return {"zipf": zipf, "softmax": soft, "zipf top-50": top50}


def median_ms(fn, repeats: int) -> tuple[float, object]:
    out = fn()  # warm-up (and the value)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--codecs",
        nargs="+",
        default=DEFAULT_CODECS,
        metavar="SPEC",
        help="codec specs, e.g. dense-fp16 sparse:v_eff=1024,q=16 lattice:l=1000",
    )
    args = parser.parse_args()
    specs = args.codecs
    vocab = PAPER_VOCAB
    print(f"V = {vocab:,}; paper payload S = {PAPER_PAYLOAD_BITS:,} bits; median of {args.repeats} runs")
    for row_name, p in rows(vocab).items():
        print(f"\nrow: {row_name} (max p = {p.max():.3f}, nonzero = {np.count_nonzero(p):,})")
        header = f"{'codec':<18} {'bits':>10} {'bytes':>9} {'÷ paper':>8} {'enc ms':>9} {'dec ms':>9} {'TV(p, p̂)':>11}"
        print(header)
        print("-" * len(header))
        for spec in specs:
            codec = make_codec(spec)
            bits = codec.bits(vocab)
            enc_ms, payload = median_ms(lambda: codec.encode(p), args.repeats)
            assert len(payload) == codec.num_bytes(vocab)
            dec_ms, p_hat = median_ms(lambda: codec.decode(payload, vocab), args.repeats)
            tv = 0.5 * float(np.abs(p_hat - p.astype(np.float64)).sum())
            print(
                f"{codec.name:<18} {bits:>10,} {codec.num_bytes(vocab):>9,} "
                f"{bits / PAPER_PAYLOAD_BITS:>8.3f} {enc_ms:>9.2f} {dec_ms:>9.2f} {tv:>11.3e}"
            )


if __name__ == "__main__":
    main()
