"""One round's world as arrays: what the optimiser, the simulator and the running system consume.

An `Instance` is built from a validated scenario (`multispin.system.build_instance`)
or directly by the runtime from its current channel and acceptance estimates. It holds no
randomness: everything random (fading, tasks) was drawn before it was built.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from multispin.errors import ConfigError
from multispin.system.radio import rate_bps


def _check(cond: bool, field_name: str, allowed: str, got) -> None:
    if not cond:
        raise ConfigError(f"{field_name}: must be in {allowed} (got {got})")


@dataclass(frozen=True)
class RadioParams:
    """Radio resources of one round.

    ``p_ul_w`` is each device's maximum UL power (scalar or one per device), ``p_dl_w`` the
    server's DL power budget shared by the DL-mode devices, ``noise_psd_w_per_hz`` the effective
    noise PSD N0 (noise figure included), ``bandwidth_hz`` the total OFDMA bandwidth B.
    """

    bandwidth_hz: float
    p_ul_w: float | np.ndarray
    p_dl_w: float
    noise_psd_w_per_hz: float

    def __post_init__(self) -> None:
        _check(
            np.isfinite(self.bandwidth_hz) and self.bandwidth_hz > 0, "bandwidth_hz", "(0, inf) Hz", self.bandwidth_hz
        )
        p_ul = np.asarray(self.p_ul_w, dtype=float)
        _check(bool(np.all(np.isfinite(p_ul)) and np.all(p_ul > 0)), "p_ul_w", "(0, inf) W", self.p_ul_w)
        _check(np.isfinite(self.p_dl_w) and self.p_dl_w >= 0, "p_dl_w", "[0, inf) W", self.p_dl_w)
        _check(
            np.isfinite(self.noise_psd_w_per_hz) and self.noise_psd_w_per_hz > 0,
            "noise_psd_w_per_hz",
            "(0, inf) W/Hz",
            self.noise_psd_w_per_hz,
        )


@dataclass(frozen=True)
class ComputeParams:
    """Server verification profile: ``T_ver = t_ver0_s + K·t_ver1_s + t_ver_tok_s·Σ(γ_k+1)``."""

    t_ver0_s: float
    t_ver1_s: float
    t_ver_tok_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("t_ver0_s", "t_ver1_s", "t_ver_tok_s"):
            v = getattr(self, name)
            _check(np.isfinite(v) and v >= 0, name, "[0, inf) s", v)


def _survival(alpha: np.ndarray, gamma_max: int) -> np.ndarray:
    """P(the first g draft tokens are all accepted), g = 0..gamma_max, per device (K, γ_max + 1)."""
    k = alpha.shape[0]
    per_pos = np.broadcast_to(alpha[:, None], (k, gamma_max)) if alpha.ndim == 1 else alpha
    surv = np.ones((k, gamma_max + 1))
    if gamma_max:
        surv[:, 1:] = np.cumprod(per_pos, axis=1)
    return surv


def _readonly(a, dtype=float) -> np.ndarray:
    out = np.array(a, dtype=dtype, copy=True)
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class Instance:
    """K devices, one round: channel gains, acceptance, draft latency, payload, radio, compute.

    - ``gain_ul`` / ``gain_dl`` (K,): power gains h_k (path loss × fading) of each link;
    - ``alpha``: per-token acceptance rate, shape (K,) (i.i.d. model of §3) or (K, gamma_max) with
      the conditional acceptance rate of each draft position (measured profiles);
    - ``draft_latency_s`` (K,): per-token draft latency T_k^dft;
    - ``payload_bits`` (K,): bits S_k^ul a rejected device moves in UL mode (q_j, plus the
      correction id where signalling counts);
    - ``dl_payload_bits`` (K,): bits S_k^dl it moves in DL mode (p_j, plus the correction id);
      ``None`` means the same as ``payload_bits`` (one codec for both links, the paper's model),
      also after ``replace(payload_bits=…)``; read it through `payload_bits_dl`. A running
      system's UL and DL codecs may differ, and so may S^ul and S^dl;
    - ``draft_upload_bits_per_token``: UL bits per drafted token (id + q_i(x_i)); 0 reproduces
      the paper, which neglects the upload. When > 0 every device uploads at P^ul on an equal
      share B/K right after drafting, which adds ``bits / rate`` per drafted token to its
      compute-phase time (`token_latency_s`);
    - ``alpha_coupled``: the acceptance rate of coupled verification (same shape as ``alpha``),
      or ``None`` where coupled verification is unavailable;
    - ``coupled`` (K,) bool or ``None`` (all standard): which devices verify coupled this round. A
      coupled device gains E[N_k] at ``alpha_coupled``, drafts with
      ``coupled_upload_bits_per_token`` (token ids, no q scalars; ``None``: the standard upload)
      and is never corrected over the air, so it never joins a rejected set: its row of
      ``survival`` (the probability that no correction is needed) is all ones, while
      ``accepted_survival`` keeps every device's P(first g drafts accepted);
    - ``gamma_cap`` (K,) or ``None``: the longest draft each device can use this round (a job
      with b tokens left drafts at most b − 1, the round engine's clip). A γ above the cap is
      drafted as the cap, so past it the survival and expected-token tables stay flat: such a γ
      gains nothing and risks nothing, and `capped` maps a plan onto what the engine drafts.
    """

    gain_ul: np.ndarray
    gain_dl: np.ndarray
    alpha: np.ndarray
    draft_latency_s: np.ndarray
    payload_bits: np.ndarray
    radio: RadioParams
    compute: ComputeParams
    gamma_max: int = 20
    draft_upload_bits_per_token: float = 0.0
    distance_m: np.ndarray | None = None
    dl_payload_bits: np.ndarray | None = None
    gamma_cap: np.ndarray | None = None
    alpha_coupled: np.ndarray | None = None
    coupled: np.ndarray | None = None
    coupled_upload_bits_per_token: float | None = None
    survival: np.ndarray = field(init=False, repr=False)
    accepted_survival: np.ndarray = field(init=False, repr=False)
    expected_tokens: np.ndarray = field(init=False, repr=False)
    token_latency_s: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        k = self._check_gains()
        a, t = self._check_device_fields(k)
        coupled = self._check_coupled(k, a)
        accepted, expected = self._survival_tables(k, a, coupled)
        set_(self, "accepted_survival", _readonly(accepted))
        survival = accepted.copy()
        survival[coupled] = 1.0  # a coupled device is never corrected over the air
        set_(self, "survival", _readonly(survival))
        set_(self, "expected_tokens", _readonly(expected))
        set_(self, "token_latency_s", _readonly(self._token_latency(k, t, coupled)))

    def _check_gains(self) -> int:
        """Validate and store the UL and DL channel gains; returns K."""
        set_ = object.__setattr__
        gu = _readonly(self.gain_ul)
        k = gu.shape[0] if gu.ndim == 1 else -1
        _check(gu.ndim == 1 and k >= 1, "gain_ul", "a non-empty 1-D array", gu.shape)
        gd = _readonly(self.gain_dl)
        _check(gd.shape == (k,), "gain_dl", f"shape ({k},)", gd.shape)
        for name, arr in (("gain_ul", gu), ("gain_dl", gd)):
            _check(bool(np.all(np.isfinite(arr)) and np.all(arr > 0)), name, "(0, inf)", arr.min())
        set_(self, "gain_ul", gu)
        set_(self, "gain_dl", gd)
        return k

    def _check_device_fields(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Validate and store γ_max and the per-device fields (α, draft latency, payloads, UL
        power, upload bits, distances); returns α and the draft latency per token."""
        set_ = object.__setattr__
        _check(
            isinstance(self.gamma_max, (int, np.integer)) and 0 <= self.gamma_max <= 256,
            "gamma_max",
            "[0, 256]",
            self.gamma_max,
        )
        set_(self, "gamma_max", int(self.gamma_max))
        a = _readonly(self.alpha)
        _check(a.shape in ((k,), (k, self.gamma_max)), "alpha", f"shape ({k},) or ({k}, {self.gamma_max})", a.shape)
        _check(bool(np.all((a >= 0) & (a <= 1))), "alpha", "[0, 1]", a.min() if a.size else a)
        set_(self, "alpha", a)
        t = _readonly(np.broadcast_to(np.asarray(self.draft_latency_s, dtype=float), (k,)))
        _check(bool(np.all(np.isfinite(t)) and np.all(t >= 0)), "draft_latency_s", "[0, inf) s", t.min())
        set_(self, "draft_latency_s", t)
        s = _readonly(np.broadcast_to(np.asarray(self.payload_bits, dtype=float), (k,)))
        _check(bool(np.all(np.isfinite(s)) and np.all(s > 0)), "payload_bits", "(0, inf) bits", s.min())
        set_(self, "payload_bits", s)
        if self.dl_payload_bits is not None:  # None keeps DL tied to payload_bits through replace()
            s_dl = _readonly(np.broadcast_to(np.asarray(self.dl_payload_bits, dtype=float), (k,)))
            _check(bool(np.all(np.isfinite(s_dl)) and np.all(s_dl > 0)), "dl_payload_bits", "(0, inf) bits", s_dl.min())
            set_(self, "dl_payload_bits", s_dl)
        p_ul = np.asarray(self.radio.p_ul_w, dtype=float)
        _check(p_ul.ndim == 0 or p_ul.shape == (k,), "p_ul_w", f"a scalar or shape ({k},)", p_ul.shape)
        _check(
            self.draft_upload_bits_per_token >= 0,
            "draft_upload_bits_per_token",
            "[0, inf) bits",
            self.draft_upload_bits_per_token,
        )
        if self.distance_m is not None:
            set_(self, "distance_m", _readonly(self.distance_m))
        return a, t

    def _survival_tables(self, k: int, a: np.ndarray, coupled: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """P(first g draft tokens all accepted) and E[N_k | γ_k = g], g = 0..γ_max, each (K, γ_max + 1),
        at each device's own rule's α and flat past its ``gamma_cap`` (validated and stored here)."""
        g = self.gamma_max
        surv = _survival(a, g)
        if coupled.any():
            assert self.alpha_coupled is not None  # checked by _check_coupled
            surv[coupled] = _survival(self.alpha_coupled, g)[coupled]
        if self.gamma_cap is None:
            return surv, np.cumsum(surv, axis=1)
        cap = np.asarray(self.gamma_cap)
        _check(
            cap.shape == (k,) and bool(np.all(cap == np.round(cap))) and bool(np.all((cap >= 0) & (cap <= g))),
            "gamma_cap",
            f"{k} integers in [0, {g}]",
            self.gamma_cap,
        )
        cap = _readonly(cap, dtype=np.int64)
        object.__setattr__(self, "gamma_cap", cap)
        # γ past the cap is drafted as the cap: the tables repeat the cap's column
        capped = np.arange(k)[:, None], np.minimum(np.arange(g + 1)[None, :], cap[:, None])
        surv = surv[capped]
        return surv, np.cumsum(surv, axis=1)[capped]

    def _token_latency(self, k: int, t: np.ndarray, coupled: np.ndarray) -> np.ndarray:
        """Each device's compute-phase time per drafted token: drafting, and its upload at P^ul on
        an equal share B/K where it uploads anything (ids and q scalars, or a coupled draft's ids)."""
        bits = np.where(coupled, self.upload_bits_coupled, self.draft_upload_bits_per_token)
        if not np.any(bits > 0):
            return t
        r = rate_bps(self.radio.bandwidth_hz / k, self.radio.p_ul_w, self.gain_ul, self.radio.noise_psd_w_per_hz)
        return t + bits / r

    def _check_coupled(self, k: int, a: np.ndarray) -> np.ndarray:
        """Validate and store the coupled fields; returns the (K,) coupled mask."""
        set_ = object.__setattr__
        if self.alpha_coupled is not None:
            ac = _readonly(self.alpha_coupled)
            _check(ac.shape == a.shape, "alpha_coupled", f"the shape of alpha {a.shape}", ac.shape)
            _check(bool(np.all((ac >= 0) & (ac <= 1))), "alpha_coupled", "[0, 1]", ac.min() if ac.size else ac)
            set_(self, "alpha_coupled", ac)
        if self.coupled_upload_bits_per_token is not None:
            b = self.coupled_upload_bits_per_token
            _check(np.isfinite(b) and b >= 0, "coupled_upload_bits_per_token", "[0, inf) bits", b)
        if self.coupled is None:
            return np.zeros(k, dtype=bool)
        c = np.asarray(self.coupled)
        _check(c.shape == (k,) and c.dtype == bool, "coupled", f"{k} booleans", self.coupled)
        _check(
            self.alpha_coupled is not None or not c.any(),
            "coupled",
            "all False when alpha_coupled is None (coupled verification unavailable)",
            c.tolist(),
        )
        c = _readonly(c, dtype=bool)
        set_(self, "coupled", c)
        return c

    @property
    def upload_bits_coupled(self) -> float:
        """UL bits per drafted token of a coupled device (the token id only where counted)."""
        b = self.coupled_upload_bits_per_token
        return self.draft_upload_bits_per_token if b is None else float(b)

    @property
    def coupled_mask(self) -> np.ndarray:
        """(K,) bool: which devices verify coupled this round (all False by default)."""
        return np.zeros(self.num_devices, dtype=bool) if self.coupled is None else self.coupled

    @property
    def coupled_available(self) -> bool:
        return self.alpha_coupled is not None

    def with_coupled(self, coupled) -> Instance:
        """A copy where the devices of the (K,) bool mask ``coupled`` verify coupled."""
        return self.replace(coupled=np.asarray(coupled, dtype=bool))

    @property
    def num_devices(self) -> int:
        return int(self.gain_ul.shape[0])

    @property
    def p_ul_w(self) -> np.ndarray:
        """Maximum UL power per device, shape (K,)."""
        return np.broadcast_to(np.asarray(self.radio.p_ul_w, dtype=float), (self.num_devices,))

    @property
    def payload_bits_dl(self) -> np.ndarray:
        """S_k^dl (K,): bits a rejected device moves in DL mode."""
        return self.payload_bits if self.dl_payload_bits is None else self.dl_payload_bits

    @property
    def uniform_payload(self) -> bool:
        """True when every device moves the same bits on each link (closed-form DL power split);
        the UL and the DL payloads may still differ from each other."""
        return bool(
            np.all(self.payload_bits == self.payload_bits[0])
            and np.all(self.payload_bits_dl == self.payload_bits_dl[0])
        )

    @property
    def same_payload_both_links(self) -> bool:
        """True when every device moves as many bits in DL mode as in UL mode (S^ul = S^dl)."""
        return self.dl_payload_bits is None or bool(np.array_equal(self.payload_bits, self.dl_payload_bits))

    def capped(self, gamma) -> np.ndarray:
        """γ as the engine drafts it: at most each device's ``gamma_cap`` (unchanged without caps)."""
        g = np.asarray(gamma, dtype=np.int64)
        return g if self.gamma_cap is None else np.minimum(g, self.gamma_cap)

    def replace(self, **changes) -> Instance:
        """A copy with some fields changed (``radio=…``, ``alpha=…``, ``gain_ul=…``)."""
        return dataclasses.replace(self, **changes)

    def with_radio(self, **changes) -> Instance:
        """A copy with some radio parameters changed (e.g. ``p_dl_w=…``)."""
        return self.replace(radio=dataclasses.replace(self.radio, **changes))

    def with_compute(self, **changes) -> Instance:
        """A copy with some compute parameters changed (e.g. ``t_ver_tok_s=…``)."""
        return self.replace(compute=dataclasses.replace(self.compute, **changes))

    def subset(self, devices) -> Instance:
        """The instance restricted to some devices (indices or a boolean mask)."""
        idx = np.arange(self.num_devices)[np.asarray(devices)]
        p_ul = np.asarray(self.radio.p_ul_w, dtype=float)
        radio = self.radio if p_ul.ndim == 0 else dataclasses.replace(self.radio, p_ul_w=p_ul[idx])
        return Instance(
            gain_ul=self.gain_ul[idx],
            gain_dl=self.gain_dl[idx],
            alpha=self.alpha[idx],
            draft_latency_s=self.draft_latency_s[idx],
            payload_bits=self.payload_bits[idx],
            radio=radio,
            compute=self.compute,
            gamma_max=self.gamma_max,
            draft_upload_bits_per_token=self.draft_upload_bits_per_token,
            distance_m=None if self.distance_m is None else self.distance_m[idx],
            dl_payload_bits=None if self.dl_payload_bits is None else self.dl_payload_bits[idx],
            gamma_cap=None if self.gamma_cap is None else self.gamma_cap[idx],
            alpha_coupled=None if self.alpha_coupled is None else self.alpha_coupled[idx],
            coupled=None if self.coupled is None else self.coupled[idx],
            coupled_upload_bits_per_token=self.coupled_upload_bits_per_token,
        )
