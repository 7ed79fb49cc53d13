"""Channels that evolve between rounds and are known only through noisy, aged pilots.

The paper (and `multispin.system.channel.ChannelGenerator`, still the default) redraws an
independent Rayleigh block every round and lets the server know it exactly. Here instead:

- **Time correlation.** Each link's small-scale fading ζ ~ CN(0, 1) follows a first-order
  Gauss–Markov process across rounds, ``ζ_r = ρ·ζ_{r−1} + √(1 − ρ²)·w_r`` with w_r ~ CN(0, 1), and
  the one-step correlation of Jakes' model over the previous round's actual duration Δt:
  ``ρ = J0(2π f_D Δt)``, ``f_D = v·f_c / c`` (speed v, carrier f_c). The marginal stays CN(0, 1),
  so the path loss and the mean SNR are the paper's; only the memory between rounds is new.
  (The AR(1) process matches Jakes' autocorrelation at the one lag it is stepped over, not at
  every lag; a round only ever needs the last one.)
- **Estimation error.** The server knows ``ζ̂ = ζ + e``, e ~ CN(0, σ²), from the pilots that came
  with the previous round's verdicts; σ² = 10^(−SNR_pilot/10) is the error variance relative to
  the mean fading power (the pilot SNR after processing gain).
- **Posterior.** Given ζ̂ of the previous block, the block of this round is
  ``ζ_r | ζ̂ ~ CN(ρ·ζ̂/(1 + σ²), 1 − ρ²/(1 + σ²))`` (MMSE of ζ_{r−1}, then one step of the process).
  With ρ = 1 and σ² = 0 it is a point mass on ζ̂: robust planning then plans on the estimate.

Randomness: ``fading_process`` (the initial block, then the innovation w_r of round r), ``pilot``
(the estimation error of the pilots sent in round r) and ``posterior`` (the planner's posterior
draws for round r), all keyed by (seed, stream, round) like every other stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import j0

from multispin.errors import ConfigError
from multispin.system.channel import ChannelState, drop_devices, large_scale_gain, stream
from multispin.system.radio import SPEED_OF_LIGHT_M_PER_S
from multispin.system.scenario import Scenario


def doppler_hz(speed_kmh: float, carrier_hz: float) -> float:
    """Maximum Doppler shift ``f_D = v·f_c / c`` of a device moving at ``speed_kmh``."""
    return float(speed_kmh) / 3.6 * float(carrier_hz) / SPEED_OF_LIGHT_M_PER_S


def time_correlation(doppler: float, dt_s: float) -> float:
    """Jakes' correlation of the fading over ``dt_s``: ``ρ = J0(2π f_D Δt)`` (may be negative)."""
    if dt_s < 0 or not np.isfinite(dt_s):
        raise ConfigError(f"dt_s: must be in [0, inf) s (got {dt_s})")
    return float(j0(2.0 * np.pi * doppler * dt_s))


def error_variance(pilot_snr_db: float | None) -> float:
    """σ² of the estimation error relative to the mean fading power; 0 (perfect) for ``None``."""
    return 0.0 if pilot_snr_db is None else float(10.0 ** (-float(pilot_snr_db) / 10.0))


def complex_normal(rng: np.random.Generator, size) -> np.ndarray:
    """CN(0, 1) draws: real and imaginary parts N(0, 1/2)."""
    return (rng.standard_normal(size) + 1j * rng.standard_normal(size)) / np.sqrt(2.0)


def gauss_markov_step(z: np.ndarray, rho: float, innovation: np.ndarray) -> np.ndarray:
    """One step ``ρ·z + √(1 − ρ²)·w`` (keeps CN(0, 1) marginals)."""
    return rho * z + np.sqrt(max(0.0, 1.0 - rho * rho)) * innovation


@dataclass(frozen=True)
class FadingState:
    """The small-scale fading of one block, per link: complex ζ, shape (2, K) (UL row, DL row; the
    rows are equal under reciprocity)."""

    z: np.ndarray

    def gains(self, path_loss: np.ndarray) -> ChannelState:
        p = np.abs(self.z) ** 2
        return ChannelState(path_loss * p[0], path_loss * p[1], path_loss)


@dataclass(frozen=True)
class ChannelEstimate:
    """What the server knows when it plans a round: the noisy pilot ``z_hat`` (2, K) of the block
    before, the correlation ``rho`` between that block and this round's, the error variance."""

    z_hat: np.ndarray
    rho: float
    error_variance: float
    path_loss: np.ndarray

    def naive(self) -> ChannelState:
        """The estimate taken as the channel (the paper's assumption of known CSI)."""
        return FadingState(self.z_hat).gains(self.path_loss)

    def posterior_moments(self) -> tuple[np.ndarray, float]:
        """Mean (2, K) and variance of this round's ζ given the pilot (module doc)."""
        shrink = 1.0 / (1.0 + self.error_variance)
        return self.rho * shrink * self.z_hat, max(0.0, 1.0 - self.rho * self.rho * shrink)

    def posterior_gains(
        self, rng: np.random.Generator, n: int, reciprocity: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """``n`` draws of this round's power gains from the posterior: (gain_ul, gain_dl), each (n, K).
        Under reciprocity one draw serves both links."""
        mean, var = self.posterior_moments()
        k = self.z_hat.shape[1]
        w = complex_normal(rng, (n, 1 if reciprocity else 2, k))
        z = mean[None, : 1 if reciprocity else 2, :] + np.sqrt(var) * w
        p = np.maximum(np.abs(z) ** 2, np.finfo(float).tiny)  # a gain of exactly 0 has probability 0
        g = self.path_loss[None, :] * p
        return g[:, 0, :], g[:, -1, :]


class ChannelProcess:
    """The time-correlated, imperfectly known channel of a scenario (``scenario.channel``).

    ``initial()`` is round 0's block; ``advance(state, r, dt_s)`` the block of round r after a round
    of ``dt_s`` seconds; ``estimate(state, r, rho)`` what the pilots of ``state`` (the ones round r
    is planned on) tell the server about a block ``rho`` apart; ``step`` is one round of both. Every draw is a pure function of
    (seed, stream, round), so two policies run on the same process see the same innovations and
    pilot errors (common random numbers) even when their rounds last differently.
    """

    def __init__(self, scenario: Scenario, distance_m: np.ndarray | None = None):
        if scenario.radio.fading != "rayleigh":
            raise ConfigError(
                "radio.fading: the channel process (channel.speed_kmh / channel.pilot_snr_db) needs rayleigh (got none)"
            )
        self.scenario = scenario
        if distance_m is None:
            distance_m = drop_devices(scenario).distance_m
        r = scenario.radio
        self.path_loss = large_scale_gain(scenario, np.asarray(distance_m, dtype=float))
        c = scenario.channel
        # no speed given: the paper's independent blocks (ρ = 0 between rounds)
        self.doppler_hz = None if c.speed_kmh is None else doppler_hz(c.speed_kmh, c.carrier_hz)
        self.error_variance = error_variance(c.pilot_snr_db)
        self.reciprocity = r.reciprocity

    @property
    def num_devices(self) -> int:
        return int(self.path_loss.size)

    def rho(self, dt_s: float) -> float:
        """Correlation between consecutive blocks ``dt_s`` apart (0 without a speed: independent)."""
        return 0.0 if self.doppler_hz is None else time_correlation(self.doppler_hz, dt_s)

    def _draw(self, name: str, round_index: int) -> np.ndarray:
        w = complex_normal(stream(self.scenario.seed, name, round_index), (2, self.num_devices))
        if self.reciprocity:
            w[1] = w[0]
        return w

    def initial(self) -> FadingState:
        return FadingState(self._draw("fading_process", 0))

    def advance(self, state: FadingState, round_index: int, dt_s: float) -> FadingState:
        """Round ``round_index``'s block (≥ 1), ``dt_s`` after the block ``state``."""
        if round_index < 1:
            raise ConfigError(f"round_index: must be in [1, inf) (got {round_index}); round 0 is initial()")
        return FadingState(gauss_markov_step(state.z, self.rho(dt_s), self._draw("fading_process", round_index)))

    def estimate(self, state: FadingState, round_index: int, rho: float) -> ChannelEstimate:
        """The server's knowledge from the pilots of block ``state`` (sent in round ``round_index``)
        about a block ``rho`` later."""
        e = np.sqrt(self.error_variance) * self._draw("pilot", round_index)
        return ChannelEstimate(state.z + e, float(rho), self.error_variance, self.path_loss)

    def gains(self, state: FadingState) -> ChannelState:
        return state.gains(self.path_loss)

    def step(
        self, prev: FadingState | None, round_index: int, dt_s: float = 0.0
    ) -> tuple[FadingState, ChannelEstimate]:
        """Round ``round_index``'s block and what the server knows of it when it plans.

        Round 0 (or no ``prev``): the initial block, known from pilots of that block (ρ = 1).
        Without a speed, every round is an independent block known from its own pilots (the
        paper's timing, with estimation error). With a speed, the block follows ``prev`` after
        the previous round's duration ``dt_s`` and the pilots are those of ``prev`` (sent with the
        previous round's verdicts): aged by ρ = J0(2π f_D Δt)."""
        if prev is None or round_index == 0:
            now = self.initial() if round_index == 0 else FadingState(self._draw("fading_process", round_index))
            return now, self.estimate(now, round_index, 1.0)
        if self.doppler_hz is None:
            now = FadingState(self._draw("fading_process", round_index))
            return now, self.estimate(now, round_index, 1.0)
        return self.advance(prev, round_index, dt_s), self.estimate(prev, round_index, self.rho(dt_s))


def uses_channel_process(scenario: Scenario) -> bool:
    """True when the scenario asks for mobility or imperfect pilots (else: the paper's channel)."""
    c = scenario.channel
    return c.speed_kmh is not None or c.pilot_snr_db is not None
