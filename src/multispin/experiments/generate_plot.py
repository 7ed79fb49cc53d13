"""The picture of a `multispin generate` run, drawn from its JSON document (what `--json` prints),
so a saved ``run.json`` can be drawn again: per device, the draft tokens accepted in each round
against the draft length γ (marker: how the round ended), and the tokens written so far."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from multispin.experiments.reproduce._figure import pyplot, save

# how a device's round ended: a correction sent in UL or DL mode, or every draft token accepted
# (a bonus token), or no draft at all (γ = 0: the server writes the token itself)
_END_MARKER = {
    "ul": ("o", "rejected, UL correction"),
    "dl": ("s", "rejected, DL correction"),
    None: ("*", "no rejection (bonus token, or γ = 0)"),
}


def tokens_written(dev: dict) -> np.ndarray:
    """Tokens a device has after each round of a generate document: each round adds its accepted
    draft tokens plus one (bonus or correction), the last one cut at the token budget."""
    return np.minimum(np.cumsum(np.asarray(dev["accepted_counts"]) + 1), len(dev["tokens"]))


def plot_generate(doc: dict, path) -> Path:
    """Two panels from a generate document: accepted draft tokens per round with γ dashed (left),
    cumulative tokens per device against the round (right). Returns the PNG's path."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for i, dev in enumerate(doc["devices"]):
        color, rounds = f"C{i}", np.arange(1, len(dev["accepted_counts"]) + 1)
        label = f"device {dev['device_id']} ({dev['draft']}, α̂ {dev['acceptance']['token_acceptance_rate']:.2f})"
        ax1.plot(rounds, dev["accepted_counts"], color=color, linewidth=1, label=label)
        ax1.step(rounds, dev["draft_lens"], where="mid", color=color, linestyle="--", linewidth=0.8, alpha=0.6)
        for mode, (marker, _) in _END_MARKER.items():
            at = [j for j, m in enumerate(dev["modes"]) if m == mode]
            ax1.scatter(rounds[at], np.asarray(dev["accepted_counts"])[at], color=color, marker=marker, s=28, zorder=3)
        ax2.plot(
            np.concatenate([[0], rounds]),
            np.concatenate([[0], tokens_written(dev)]),
            color=color,
            marker=".",
            label=label,
        )
    for marker, text in _END_MARKER.values():
        ax1.scatter([], [], color="gray", marker=marker, label=text)
    ax1.plot([], [], color="gray", linestyle="--", label="draft length γ")
    cfg = doc["config"]
    ax1.set(xlabel="round", ylabel="draft tokens accepted", title="accepted per round (dashed: γ)")
    ax2.set(xlabel="round", ylabel="tokens written", title="tokens written per device")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.yaxis.get_major_locator().set_params(integer=True)
    ax1.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2, frameon=False)
    fig.suptitle(
        f"multispin generate: {cfg['pair']}, K={len(doc['devices'])}, γ={cfg['draft_len']}, "
        f"mode={cfg['mode']}, T={cfg['temperature']:g}, seed {cfg['seed']}"
    )
    path = Path(path)
    save(fig, path)
    return path
