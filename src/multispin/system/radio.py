"""Radio arithmetic of docs/system-model.md §2: unit conversions, path loss, Shannon rates, latencies.

Every function is a pure numpy function that broadcasts over its array arguments. Powers are in
watts (`*_w`) unless the name says dBm, bandwidths in Hz, payloads in bits, latencies in seconds.
The noise power spectral density `noise_psd_w_per_hz` already includes the noise figure (see
`noise_psd_w_per_hz`).
"""

from __future__ import annotations

import numpy as np

LN2 = float(np.log(2.0))


SPEED_OF_LIGHT_M_PER_S = 299_792_458.0


def dbm_to_w(power_dbm):
    """dBm → W (``10^((dBm − 30)/10)``)."""
    return 10.0 ** ((np.asarray(power_dbm, dtype=float) - 30.0) / 10.0)


def w_to_dbm(power_w):
    """W → dBm; 0 W maps to −inf."""
    with np.errstate(divide="ignore"):
        return 10.0 * np.log10(np.asarray(power_w, dtype=float)) + 30.0


def db_to_linear(value_db):
    """dB → linear ratio."""
    return 10.0 ** (np.asarray(value_db, dtype=float) / 10.0)


def linear_to_db(value):
    """Linear ratio → dB; 0 maps to −inf."""
    with np.errstate(divide="ignore"):
        return 10.0 * np.log10(np.asarray(value, dtype=float))


def noise_psd_w_per_hz(noise_psd_dbm_per_hz: float = -174.0, noise_figure_db: float = 0.0) -> float:
    """Effective noise PSD N0 in W/Hz: thermal PSD (dBm/Hz) raised by the receiver noise figure (dB)."""
    return float(dbm_to_w(noise_psd_dbm_per_hz + noise_figure_db))


def path_loss_linear(distance_m, path_loss_db_at_1m: float = -30.0, path_loss_exponent: float = 3.5):
    """Large-scale power gain ``10^(PL0/10) · d^-η`` (paper: 10^-3 · d^-3.5)."""
    d = np.asarray(distance_m, dtype=float)
    return db_to_linear(path_loss_db_at_1m) * d ** (-path_loss_exponent)


def rate_bps(bandwidth_hz, power_w, gain, noise_psd_w_per_hz):
    """Shannon rate ``B · log2(1 + P·h / (N0·B))`` in bit/s (0 where B = 0 or P·h = 0)."""
    b = np.asarray(bandwidth_hz, dtype=float)
    snr_hz = np.asarray(power_w, dtype=float) * np.asarray(gain, dtype=float) / noise_psd_w_per_hz
    with np.errstate(divide="ignore", invalid="ignore"):
        r = b * np.log1p(snr_hz / b) / LN2
    return np.where(b > 0, r, 0.0)


def latency_s(bits, bandwidth_hz, power_w, gain, noise_psd_w_per_hz):
    """Time to move ``bits`` at the Shannon rate (inf where the rate is 0)."""
    r = rate_bps(bandwidth_hz, power_w, gain, noise_psd_w_per_hz)
    with np.errstate(divide="ignore"):
        return np.where(np.asarray(bits, dtype=float) > 0, np.asarray(bits, dtype=float) / r, 0.0)


def power_for_latency_w(bits, latency_s_, bandwidth_hz, gain, noise_psd_w_per_hz):
    """Transmit power that moves ``bits`` in exactly ``latency_s_`` over ``bandwidth_hz``.

    ``p(τ) = (N0·B / h) · (2^{S/(B·τ)} − 1)``: the inverse of `latency_s` in the power.
    Strictly decreasing and convex in τ, and decreasing in B.
    """
    b = np.asarray(bandwidth_hz, dtype=float)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        expo = LN2 * np.asarray(bits, dtype=float) / (b * np.asarray(latency_s_, dtype=float))
        return noise_psd_w_per_hz * b / np.asarray(gain, dtype=float) * np.expm1(expo)
