"""Device drop, block fading and the per-round `multispin.system.instance.Instance`.

Randomness is keyed by (seed, stream, index): every draw is a pure function of the scenario seed,
so the optimiser, the simulator and the running system see the same world. Streams:

- ``drop``: distances from the drop rule (once per scenario);
- ``tasks``: each device's task (uniform over the task table, once);
- ``draft``: each device's draft latency, profile × U[1, jitter_max] (once);
- ``fading``: |ζ|² with ζ ~ CN(0, 1) per device and link, redrawn every round (block fading);
- ``saa`` / ``modes``: uniforms of the optimiser (SAA outcomes, random-mode baseline) per round;
- ``coin``: the fair coin of the ``random`` mode rule, one uniform per round and device id
  (`fair_coin_ul`: every run that flips it, simulated or real, flips the same coin);
- ``fading_process`` / ``pilot`` / ``posterior``: the channel process of
  `multispin.system.channel_process` (mobility and pilot errors, when a scenario asks for them);
- ``conditioned_comm``: rejected sets drawn for a round's E[T_comm | its drafts]
  (`optimize.goodput.expected_comm_s`) when too many devices' fates are uncertain to enumerate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from multispin.system.coupled_alpha import task_ratio
from multispin.system.instance import ComputeParams, Instance, RadioParams
from multispin.system.radio import path_loss_linear
from multispin.system.scenario import DropRule, Scenario
from multispin.vocabulary import COIN_UL_BELOW

STREAMS = {
    "drop": 1,
    "tasks": 2,
    "draft": 3,
    "fading": 4,
    "saa": 5,
    "modes": 6,
    "montecarlo": 7,
    # the time-correlated, imperfectly known channel (system.channel_process)
    "fading_process": 8,
    "pilot": 9,
    "posterior": 10,
    "coin": 11,
    # rejected sets drawn for E[T_comm | a round's drafts] where too many are uncertain to enumerate
    "conditioned_comm": 12,
    # the 3GPP large-scale drop: device bearings, LOS states, shadow fading (once per scenario)
    "large_scale": 13,
}


def stream(seed: int, name: str, index: int = 0) -> np.random.Generator:
    """The generator of one named random stream (see module doc) for round ``index``."""
    return np.random.default_rng([int(seed), STREAMS[name], int(index)])


def coin_uniforms(seed: int, round_index: int, device_ids) -> np.ndarray:
    """The fair coin's uniforms of round ``round_index``, one per device id: each a pure function
    of (seed, round, device id), so a device's flip does not depend on which others were rejected
    with it, nor on their order."""
    key = (int(seed), STREAMS["coin"], int(round_index))
    return np.array([np.random.default_rng([*key, int(d)]).random() for d in device_ids], dtype=float)


def fair_coin_ul(seed: int, round_index: int, device_ids) -> np.ndarray:
    """Which of ``device_ids`` the fair coin sends UL in round ``round_index`` (the others DL)."""
    return coin_uniforms(seed, round_index, device_ids) < COIN_UL_BELOW


def draw_distances_m(rng: np.random.Generator, count: int, drop: DropRule) -> np.ndarray:
    """Distances of ``count`` devices: uniform in [min, max] m, or uniform over the annulus area."""
    lo, hi = drop.min_distance_m, drop.max_distance_m
    if drop.kind == "uniform_area":
        return np.sqrt(rng.uniform(lo * lo, hi * hi, size=count))
    return rng.uniform(lo, hi, size=count)


def draw_fading(rng: np.random.Generator, size, kind: str = "rayleigh") -> np.ndarray:
    """Small-scale power gain |ζ|², ζ ~ CN(0, 1) (exponential with mean 1), or 1 without fading."""
    if kind == "none":
        return np.ones(size)
    return rng.exponential(1.0, size=size)


@dataclass(frozen=True)
class DeviceDrop:
    """What stays fixed for a scenario: distance, task, acceptance and draft latency per device."""

    distance_m: np.ndarray
    task: list[str]
    alpha: np.ndarray
    draft_latency_s: np.ndarray
    acceptance_assumed: bool
    # the coupled rule's α per device over its standard α: measured (devices.acceptance_coupled)
    # or the assumed ratio of its task (`coupled_assumed`, `system.coupled_alpha`)
    coupled_ratio: np.ndarray
    coupled_assumed: bool

    def coupled_alpha(self, alpha) -> np.ndarray:
        """The coupled rule's α of jobs whose standard α is ``alpha`` ((K,) or (K, …)): each
        device's `coupled_ratio` times it."""
        a = np.asarray(alpha, dtype=float)
        return a * (self.coupled_ratio if a.ndim == 1 else self.coupled_ratio.reshape(-1, *([1] * (a.ndim - 1))))


def drop_devices(scenario: Scenario) -> DeviceDrop:
    """Draw (or take from the scenario's explicit lists) every device's static properties."""
    dev = scenario.devices
    k = dev.count
    if dev.distances_m is not None:
        dist = np.asarray(dev.distances_m, dtype=float)
    else:
        dist = draw_distances_m(stream(scenario.seed, "drop"), k, dev.drop)
    table = scenario.tasks.acceptance
    names = sorted(table)
    if dev.tasks is not None:
        tasks = list(dev.tasks)
    else:
        tasks = [names[i] for i in stream(scenario.seed, "tasks").integers(0, len(names), size=k)]
    if dev.acceptance is not None:
        alpha = np.asarray(dev.acceptance, dtype=float)
        assumed = False
    else:
        alpha = np.array([table[t] for t in tasks])
        assumed = scenario.tasks.assumed
    if dev.draft_latencies_s_per_token is not None:
        tdft = np.asarray(dev.draft_latencies_s_per_token, dtype=float)
    else:
        jitter = stream(scenario.seed, "draft").uniform(1.0, dev.draft_latency_jitter_max, size=k)
        tdft = dev.draft_latency_s_per_token * jitter
    if dev.acceptance_coupled is not None:
        ratio, coupled_assumed = np.asarray(dev.acceptance_coupled, dtype=float) / np.maximum(alpha, 1e-12), False
    else:
        ratio, coupled_assumed = np.array([task_ratio(t) for t in tasks], dtype=float), True
    return DeviceDrop(dist, tasks, alpha, tdft, assumed, ratio, coupled_assumed)


def large_scale_gain(scenario: Scenario, distance_m: np.ndarray) -> np.ndarray:
    """Each device's large-scale power gain, fixed for the drop: the log-distance law, or a 3GPP
    TR 38.901 environment (`radio.path_loss_model`) with the devices on random bearings around the
    base station, their LOS states and correlated shadow fading drawn from the ``large_scale``
    stream (a pure function of the seed and the distances)."""
    r = scenario.radio
    d = np.asarray(distance_m, dtype=float)
    if r.path_loss_model == "log-distance":
        return path_loss_linear(d, r.path_loss_db_at_1m, r.path_loss_exponent)
    # lazy: the 3GPP laws are opt-in, and this module is on the CLI start-up path
    from multispin.system.tr38901 import draw_large_scale  # noqa: PLC0415

    rng = stream(scenario.seed, "large_scale")
    bearing = rng.uniform(0.0, 2 * np.pi, size=d.size)
    positions = np.stack([d * np.cos(bearing), d * np.sin(bearing)], axis=1)
    env = r.path_loss_model.removeprefix("3gpp-")
    fc_ghz = scenario.channel.carrier_hz / 1e9
    drop = draw_large_scale(env, positions, fc_ghz, rng, h_bs=r.bs_height_m, h_ut=r.ut_height_m, shadowing=r.shadowing)
    return drop.gain


@dataclass(frozen=True)
class ChannelState:
    """Power gains of one round (path loss × fading) per device and link."""

    gain_ul: np.ndarray
    gain_dl: np.ndarray
    path_loss: np.ndarray


class ChannelGenerator:
    """Block-fading channel of a scenario: fixed distances, fading redrawn every round; or, with
    ``channel.trace``, the trace's gains of each round.

    ``draw(r)`` is a pure function of (seed, r). With reciprocity the DL gain equals the UL gain;
    without it the DL fading is an independent draw (same path loss).
    """

    def __init__(self, scenario: Scenario, distance_m: np.ndarray | None = None):
        self.scenario = scenario
        if distance_m is None:
            distance_m = drop_devices(scenario).distance_m
        self.distance_m = np.asarray(distance_m, dtype=float)
        self.trace = None
        if scenario.channel.trace is not None:  # a measured channel: gains per round and device
            # lazy: a measured channel is opt-in, and this module is on the CLI start-up path
            from multispin.system.trace import load_trace  # noqa: PLC0415

            self.trace = load_trace(scenario.channel.trace, scenario.devices.count)
            self.path_loss = self.trace.mean_gain
        else:
            self.path_loss = large_scale_gain(scenario, self.distance_m)

    def draw(self, round_index: int = 0) -> ChannelState:
        if self.trace is not None:  # round r takes trace round r mod R
            gain_ul, gain_dl = self.trace.at(round_index)
            return ChannelState(gain_ul, gain_dl, self.path_loss)
        r = self.scenario.radio
        rng = stream(self.scenario.seed, "fading", round_index)
        k = self.distance_m.size
        f_ul = draw_fading(rng, k, r.fading)
        f_dl = f_ul if r.reciprocity else draw_fading(rng, k, r.fading)
        return ChannelState(self.path_loss * f_ul, self.path_loss * f_dl, self.path_loss)


class World:
    """A scenario with its device drop and channel generator; ``instance(r)`` is round r's arrays."""

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.drop = drop_devices(scenario)
        self.channel = ChannelGenerator(scenario, self.drop.distance_m)

    def radio_params(self) -> RadioParams:
        r = self.scenario.radio
        return RadioParams(
            bandwidth_hz=r.bandwidth_hz,
            p_ul_w=r.p_ul_w,
            p_dl_w=r.p_dl_watts,
            noise_psd_w_per_hz=self.scenario.noise_psd_w_per_hz,
        )

    def compute_params(self) -> ComputeParams:
        c = self.scenario.compute
        return ComputeParams(c.t_ver0_s, c.t_ver1_s, c.t_ver_tok_s)

    def instance(self, round_index: int = 0, channel: ChannelState | None = None) -> Instance:
        ch = channel if channel is not None else self.channel.draw(round_index)
        sc = self.scenario
        return Instance(
            gain_ul=ch.gain_ul,
            gain_dl=ch.gain_dl,
            alpha=self.drop.alpha,
            draft_latency_s=self.drop.draft_latency_s,
            payload_bits=np.full(sc.devices.count, float(sc.payload.payload_bits)),
            radio=self.radio_params(),
            compute=self.compute_params(),
            gamma_max=sc.optimizer.gamma_max,
            draft_upload_bits_per_token=float(sc.payload.draft_upload_bits_per_token),
            coupled_upload_bits_per_token=float(sc.payload.coupled_upload_bits_per_token),
            distance_m=self.drop.distance_m,
        )

    def saa_uniforms(self, round_index: int = 0, n_saa: int | None = None) -> np.ndarray:
        """The SAA uniforms u (N_SAA, K) of round ``round_index`` (common random numbers)."""
        n = n_saa or self.scenario.optimizer.n_saa
        return stream(self.scenario.seed, "saa", round_index).random((n, self.scenario.devices.count))

    def mode_uniforms(self, round_index: int = 0, n_saa: int | None = None) -> np.ndarray:
        """Uniforms of the random-mode baseline (N_SAA, K), drawn once like the SAA uniforms."""
        n = n_saa or self.scenario.optimizer.n_saa
        return stream(self.scenario.seed, "modes", round_index).random((n, self.scenario.devices.count))


def build_instance(scenario: Scenario, round_index: int = 0) -> Instance:
    """Round ``round_index``'s `Instance` of a scenario (shortcut for ``World(s).instance(r)``)."""
    return World(scenario).instance(round_index)
