"""Reactive decision of docs/system-model.md §5.1: modes and powers for the rejected set of one round.

Given the rejected set R (one outcome, or many outcomes as rows of a boolean mask), the channel
and the payload sizes (S_k^ul bits in UL mode, S_k^dl in DL mode: the codecs of the two links
may differ), choose for every rejected device UL mode (it uploads q_j at its maximum
power P^ul) or DL mode (the server sends p_j, splitting one budget P^dl among the DL devices), so
as to minimise the communication latency ``T_comm = max_{k∈R} T_k``.

The optimal modes and the DL power equalisation on the equal split, and the structure they use,
are in `multispin.optimize.modes` (its names are importable from here too); this module adds
the fixed-mode policies, the oracles, `t_comm_batch` and one round's [`reactive`][multispin.optimize.reactive.reactive].

Bandwidth: the equal split ``B_k = B/|R|`` of the paper, or ``split="optimized"`` (our extension,
`multispin.optimize.bandwidth`): bandwidths and DL powers chosen jointly (min–max latency).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from multispin.errors import ConfigError
from multispin.optimize.bandwidth import optimized_split_batch

# the equal-split solver's names stay importable from here (they lived in this module)
from multispin.optimize.modes import (  # noqa: F401
    METHODS,
    MODE_POLICIES,
    SPLITS,
    BatchDecision,
    DLPowerSplit,
    _as_mask,
    _check_choice,
    _latency_from_x_s,
    dl_latency_closed_form_s,
    dl_latency_s,
    dl_power_equalisation,
    equal_share_hz,
    optimal_modes_batch,
    ul_latency_s,
)
from multispin.system.instance import Instance
from multispin.vocabulary import CODE_LINK, COIN_UL_BELOW, LinkCode, LinkMode, ModeRule


def fixed_modes_latency_s(rejected, is_ul, inst: Instance, rtol: float = 1e-12, gains=None) -> np.ndarray:
    """T_comm of given modes on the equal split: ``max(max_{UL} τ^ul, τ^dl(DL))`` per row.

    ``gains``: per-row channels ``(gain_ul, gain_dl)`` (M, K) in place of the instance's
    (uniform payloads only)."""
    mask = _as_mask(rejected, inst.num_devices)
    ul = mask & np.broadcast_to(np.asarray(is_ul, dtype=bool), mask.shape)
    b = equal_share_hz(mask, inst.radio.bandwidth_hz)
    if gains is not None and not inst.uniform_payload:
        raise ConfigError("gains: per-row channels need uniform payloads (t_comm_batch solves the others row by row)")
    if inst.uniform_payload:  # one logarithm per row (see _optimal_fast)
        n0 = inst.radio.noise_psd_w_per_hz
        gain_ul, gain_dl = (inst.gain_ul, inst.gain_dl) if gains is None else gains
        x_ul = np.where(ul, inst.p_ul_w * gain_ul, np.inf).min(axis=1)
        w = np.where(mask & ~ul, 1.0 / gain_dl, 0.0).sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            x_dl = np.where(w > 0, inst.radio.p_dl_w / w, np.inf)
        s_ul, s_dl = inst.payload_bits[0], inst.payload_bits_dl[0]
        if s_ul == s_dl:
            t = _latency_from_x_s(np.minimum(x_ul, x_dl), s_ul, b, n0)
        else:  # two payloads: one logarithm per link
            t = np.maximum(_latency_from_x_s(x_ul, s_ul, b, n0), _latency_from_x_s(x_dl, s_dl, b, n0))
        return np.where(mask.any(axis=1), t, 0.0)
    tau_ul = np.where(ul, ul_latency_s(inst, b[:, None]), 0.0).max(axis=1)
    tau_dl = dl_latency_s(mask & ~ul, inst, b, rtol)
    return np.maximum(tau_ul, tau_dl)


def policy_ul_mask(rejected: np.ndarray, modes: ModeRule, mode_uniforms: np.ndarray | None = None) -> np.ndarray:
    """UL mask of a fixed-mode policy: all_ul, all_dl, or random (UL where the mode uniform is
    below the fair coin's threshold; the runtime draws the uniforms with
    `multispin.system.channel.coin_uniforms`)."""
    if modes == "all_ul":
        return rejected.copy()
    if modes == "all_dl":
        return np.zeros_like(rejected)
    if modes == "random":
        if mode_uniforms is None:
            raise ConfigError("mode_uniforms: the random mode policy needs pre-drawn uniforms (one per device)")
        return rejected & (np.broadcast_to(mode_uniforms, rejected.shape) < COIN_UL_BELOW)
    raise ConfigError(f"modes: unknown value {modes!r} (allowed: {', '.join(MODE_POLICIES)})")


def t_comm_batch(
    rejected,
    inst: Instance,
    modes: ModeRule = "optimal",
    split: str = "equal",
    mode_uniforms: np.ndarray | None = None,
    method: str = "auto",
    gains=None,
) -> np.ndarray:
    """Communication latency T_comm (s) of every outcome row under a mode policy and a bandwidth split.

    ``modes``: ``"optimal"`` (§5.1), ``"all_ul"``, ``"all_dl"``, ``"random"`` (needs
    ``mode_uniforms`` with the rows' shape: a device is UL where its uniform is < 1/2).
    ``split``: ``"equal"`` (B/|R|) or ``"optimized"`` (joint bandwidth and DL power).
    ``gains``: optional per-row channels ``(gain_ul, gain_dl)``, each (M, K), in place of the
    instance's (robust planning over channel samples): vectorised on the equal split with uniform
    payloads, otherwise each row is solved on its own channel.
    """
    _check_choice(modes, MODE_POLICIES, "modes")
    _check_choice(split, SPLITS, "split")
    mask = _as_mask(rejected, inst.num_devices)
    if gains is not None:
        return _t_comm_per_row_channel(mask, inst, modes, split, mode_uniforms, method, gains)
    if split == "optimized":
        fixed = None if modes == "optimal" else policy_ul_mask(mask, modes, mode_uniforms)
        return optimized_split_batch(mask, inst, is_ul=fixed).latency_s
    if modes == "optimal":
        return optimal_modes_batch(mask, inst, method=method).latency_s
    return fixed_modes_latency_s(mask, policy_ul_mask(mask, modes, mode_uniforms), inst)


def _t_comm_per_row_channel(
    mask, inst: Instance, modes: ModeRule, split: str, mode_uniforms, method: str, gains
) -> np.ndarray:
    """`t_comm_batch` with row m on the channel ``(gains[0][m], gains[1][m])``."""
    gain_ul, gain_dl = (np.asarray(g, dtype=float) for g in gains)
    if gain_ul.shape != mask.shape or gain_dl.shape != mask.shape:
        raise ConfigError(
            f"gains: needs two arrays of the outcome rows' shape {mask.shape} (got {gain_ul.shape}, {gain_dl.shape})"
        )
    if split == "equal" and inst.uniform_payload and method in ("auto", "fast"):
        if modes == "optimal":
            return optimal_modes_batch(mask, inst, method="fast", gains=(gain_ul, gain_dl)).latency_s
        return fixed_modes_latency_s(mask, policy_ul_mask(mask, modes, mode_uniforms), inst, gains=(gain_ul, gain_dl))
    out = np.zeros(mask.shape[0])
    for m in range(mask.shape[0]):
        row = inst.replace(gain_ul=gain_ul[m], gain_dl=gain_dl[m])
        mu = None if mode_uniforms is None else np.asarray(mode_uniforms)[m : m + 1]
        out[m] = t_comm_batch(mask[m : m + 1], row, modes, split, mu, method)[0]
    return out


# --------------------------------------------------------------------------- oracles


def brute_force_oracle(rejected, inst: Instance, max_rejected: int = 22) -> BatchDecision:
    """Oracle: all 2^|R| UL/DL splits of each outcome row (equal bandwidth split), keep the best."""
    mask = _as_mask(rejected, inst.num_devices)
    lat = np.zeros(mask.shape[0])
    is_ul = np.zeros_like(mask)
    for r in range(mask.shape[0]):
        idx = np.flatnonzero(mask[r])
        m = idx.size
        if m == 0:
            continue
        if m > max_rejected:
            raise ConfigError(f"rejected: brute force is limited to {max_rejected} rejected devices (got {m})")
        codes = np.arange(2**m, dtype=np.int64)
        best_t, best_code = np.inf, 0
        for start in range(0, codes.size, 1 << 16):
            c = codes[start : start + (1 << 16)]
            bits = ((c[:, None] >> np.arange(m)[None, :]) & 1).astype(bool)
            ul = np.zeros((c.size, inst.num_devices), dtype=bool)
            ul[:, idx] = bits
            rows = np.broadcast_to(mask[r], ul.shape)
            t = fixed_modes_latency_s(rows, ul, inst)
            i = int(np.argmin(t))
            if t[i] < best_t:
                best_t, best_code = float(t[i]), int(c[i])
        lat[r] = best_t
        is_ul[r, idx] = ((best_code >> np.arange(m)) & 1).astype(bool)
    return BatchDecision(lat, is_ul)


# --------------------------------------------------------------------------- one round


@dataclass(frozen=True)
class ReactiveDecision:
    """Modes, powers and bandwidths of one round's rejected set.

    Per device (K,): ``mode`` (a `LinkCode`: not rejected, UL or DL), ``power_w`` (P^ul for UL,
    the equalised DL power for DL, 0 otherwise), ``bandwidth_hz`` and ``latency_s`` (0 for
    devices not rejected).
    ``comm_latency_s`` is T_comm = max latency.
    """

    mode: np.ndarray
    power_w: np.ndarray
    bandwidth_hz: np.ndarray
    latency_s: np.ndarray
    comm_latency_s: float

    @property
    def is_ul(self) -> np.ndarray:
        return self.mode == LinkCode.UL

    @property
    def is_dl(self) -> np.ndarray:
        return self.mode == LinkCode.DL

    @property
    def dl_power_total_w(self) -> float:
        return float(self.power_w[self.mode == LinkCode.DL].sum())

    def mode_names(self) -> list[str]:
        """Each device's link, ``-`` for a device not rejected."""
        return [CODE_LINK[int(m)] or "-" for m in self.mode]

    def link(self, i: int) -> LinkMode:
        """The link of device ``i``, which was rejected."""
        link = CODE_LINK[int(self.mode[i])]
        if link is None:
            raise ConfigError(f"device: index {i} was not rejected, it has no link")
        return link


def reactive(
    rejected,
    inst: Instance,
    split: str = "equal",
    modes: ModeRule = "optimal",
    mode_uniforms: np.ndarray | None = None,
    rtol: float = 1e-12,
) -> ReactiveDecision:
    """Modes, powers and bandwidths for one round's rejected set (device indices or a (K,) mask).

    UL devices transmit at P^ul; DL devices share P^dl with equalised latencies (Σ p = P^dl, up to
    ``rtol``). With ``split="optimized"`` the bandwidths are optimised jointly with the DL powers.
    """
    _check_choice(split, SPLITS, "split")
    _check_choice(modes, MODE_POLICIES, "modes")
    mask = _as_mask(rejected, inst.num_devices)
    if mask.shape[0] != 1:
        raise ConfigError(f"rejected: one outcome expected (got {mask.shape[0]} rows)")
    k = inst.num_devices
    if split == "optimized":
        fixed = None if modes == "optimal" else policy_ul_mask(mask, modes, mode_uniforms)
        dec = optimized_split_batch(mask, inst, is_ul=fixed, return_allocation=True)
        assert (
            dec.is_ul is not None
            and dec.power_w is not None
            and dec.bandwidth_hz is not None
            and dec.device_latency_s is not None
        )  # asked for (return_allocation)
        mode = np.where(mask[0], np.where(dec.is_ul[0], LinkCode.UL, LinkCode.DL), LinkCode.NONE).astype(np.int8)
        return ReactiveDecision(
            mode, dec.power_w[0], dec.bandwidth_hz[0], dec.device_latency_s[0], float(dec.latency_s[0])
        )
    if modes == "optimal":
        chosen = optimal_modes_batch(mask, inst, return_modes=True, rtol=rtol).is_ul
        assert chosen is not None  # asked for (return_modes)
        is_ul = chosen[0]
    else:
        is_ul = policy_ul_mask(mask, modes, mode_uniforms)[0]
    rej = mask[0]
    m = int(rej.sum())
    mode = np.where(rej, np.where(is_ul, LinkCode.UL, LinkCode.DL), LinkCode.NONE).astype(np.int8)
    bw = np.where(rej, inst.radio.bandwidth_hz / max(m, 1), 0.0)
    power = np.zeros(k)
    lat = np.zeros(k)
    ul = mode == LinkCode.UL
    power[ul] = inst.p_ul_w[ul]
    lat[ul] = ul_latency_s(inst, bw)[ul]
    dl = mode == LinkCode.DL
    if dl.any():
        split_dl = dl_power_equalisation(
            inst.gain_dl[dl],
            inst.payload_bits_dl[dl],
            bw[dl],
            inst.radio.p_dl_w,
            inst.radio.noise_psd_w_per_hz,
            rtol=rtol,
        )
        power[dl] = split_dl.power_w
        lat[dl] = split_dl.latency_s
    return ReactiveDecision(mode, power, bw, lat, float(lat.max()) if m else 0.0)
