"""When coupled verification wins: the closed-form boundary of docs/system-model.md §5.7.

A round makes N = Σ_k E[N_k] tokens in T = T_comp + E[T_comm] seconds. Switching a set of devices
to coupled loses ΔN tokens (their E[N] at α_c instead of α) and saves ΔT seconds of expected
airtime (all of it, when every device switches). The goodput rises iff

    (N − ΔN) / (T − ΔT) > N / T   ⟺   ΔN / N < ΔT / T,

i.e. iff the relative token loss is below the share of the round the switch saves: one device's
switch pays when its lost tokens ΔN_k are worth less than its airtime at the round's goodput,
ΔN_k < G·ΔT_k. For identical devices all switching at a fixed γ, ΔN/N = 1 − E[N](α_c)/E[N](α)
and ΔT/T = E[T_comm]/T_round, which gives the boundary in the (α-loss, T_comm/T_round) plane:

    T_comm / T_round = 1 − E_γ[N](α·(1 − loss)) / E_γ[N](α),   E_γ[N](a) = (1 − a^{γ+1})/(1 − a).

Above the curve coupled wins. At fixed γ the boundary is conservative for coupled: without
corrections to pay for, the planner may also lengthen the drafts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import multispin as ms
from multispin.system.coupled_alpha import COUPLED_RATIO


def _expected_tokens(alpha, gamma: int) -> np.ndarray:
    """E_γ[N](α) = (1 − α^{γ+1})/(1 − α) (γ + 1 at α = 1)."""
    a = np.asarray(alpha, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(a >= 1.0, gamma + 1.0, (1.0 - a ** (gamma + 1)) / (1.0 - a))


def token_loss(alpha, loss, gamma: int) -> np.ndarray:
    """ΔN/N of switching to coupled at a fixed γ: 1 − E_γ[N](α(1 − loss)) / E_γ[N](α)."""
    a = np.asarray(alpha, dtype=float)
    return 1.0 - _expected_tokens(a * (1.0 - np.asarray(loss, dtype=float)), gamma) / _expected_tokens(a, gamma)


def coupled_wins(alpha, loss, gamma: int, comm_share) -> np.ndarray:
    """True where switching every (identical) device to coupled raises the goodput at fixed γ."""
    return np.asarray(comm_share, dtype=float) > token_loss(alpha, loss, gamma)


# the measured points the figure marks: (label, α-loss, T_comm/T_round)
def plot_boundary(path: str | Path, points=(), alphas=(0.85, 0.93), gammas=(4, 8)):
    """The boundary for a few (α, γ), with ``points`` (label, α-loss, T_comm/T_round) marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loss = np.linspace(0.0, 0.10, 201)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for a in alphas:
        for g in gammas:
            ax.plot(100 * loss, token_loss(a, loss, g), label=f"α = {a:g}, γ = {g}")
    for i, (label, x, y) in enumerate(points):
        ax.plot(100 * x, y, "o", color="black")
        ax.annotate(label, (100 * x, y), textcoords="offset points", xytext=(5, 6 if i % 2 else -12), fontsize=8)
    if points:
        ax.text(
            0.99,
            0.02,
            "dots: measured α-loss (smollm2 q5g64) at the T_comm share of\nthe paper's adaptive plan, paper-qwen default drop",
            transform=ax.transAxes,
            ha="right",
            fontsize=7,
        )
    ax.set_xlabel("α-loss 1 − α_c/α (%)")
    ax.set_ylabel("T_comm / T_round")
    ax.set_title("coupled wins above the curve (identical devices, fixed γ)")
    ax.set_ylim(0, max(0.3, *(y * 1.15 for _, _, y in points)) if points else 0.3)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def paper_points() -> list[tuple[str, float, float]]:
    """The measured α-losses (smollm2-135m q5g64: chat, code) at the T_comm share of the paper's
    adaptive plan on paper-qwen's default drop (K = 20, seed 0, P^ul = 10 dBm)."""
    g = ms.plan(ms.scenario(), baselines=False).report.plan.goodput
    share = g.e_t_comm_s / (g.t_comp_s + g.e_t_comm_s)
    return [(kind, 1.0 - r, share) for kind, r in COUPLED_RATIO.items()]


if __name__ == "__main__":  # python -m multispin.experiments.coupled_boundary docs/images/coupled-boundary.png
    import sys

    print(plot_boundary(sys.argv[1], points=paper_points(), alphas=(0.84, 0.93), gammas=(4, 8)))
