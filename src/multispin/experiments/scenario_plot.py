"""The picture of a scenario's world (`multispin scenario show NAME --plot PNG`): where its drop put
the devices on the path-loss curve, with their tasks, and how long one correction's distribution
takes over the air for each of them in UL and in DL mode under the scenario's own fading."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from multispin.experiments.reproduce._figure import pyplot, save
from multispin.system.channel import World
from multispin.system.radio import latency_s, linear_to_db, path_loss_linear
from multispin.system.scenario import Scenario

FADING_ROUNDS = 200  # rounds of the scenario's fading stream behind each device's airtime spread


def correction_airtime_s(world: World, rounds: int = FADING_ROUNDS) -> dict[str, np.ndarray]:
    """Seconds to move one distribution (the payload's S bits) for each device alone on the whole
    band (UL at P^ul, DL at the whole P^dl), over rounds 0..rounds−1 of the scenario's block
    fading: arrays (rounds, K) per link."""
    sc, radio = world.scenario, world.radio_params()
    bits = float(sc.payload.payload_bits)
    states = [world.channel.draw(r) for r in range(rounds)]
    gains = {"UL": np.array([s.gain_ul for s in states]), "DL": np.array([s.gain_dl for s in states])}
    power = {"UL": radio.p_ul_w, "DL": radio.p_dl_w}
    return {
        link: latency_s(bits, radio.bandwidth_hz, power[link], g, radio.noise_psd_w_per_hz) for link, g in gains.items()
    }


def plot_scenario(scenario: Scenario, name: str, path) -> Path:
    """Left: path loss (dB) against distance, the drop's devices on it, one colour per task (α in
    the legend). Right: per device (sorted by distance) the median airtime of one correction in UL
    and DL mode with its 10–90% range over the fading rounds (log scale). Returns the PNG's path."""
    plt = pyplot()
    world = World(scenario)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    _draw_drop(ax1, world)
    _draw_airtime(ax2, world)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    radio = scenario.radio
    fig.suptitle(f"scenario {name}: noise figure {radio.noise_figure_db:g} dB, {radio.fading} fading")
    path = Path(path)
    save(fig, path)
    return path


def _draw_drop(ax, world: World) -> None:
    """The left panel: the path-loss law against distance and the drop's devices on it, by task."""
    scenario, drop = world.scenario, world.drop
    radio, rule = scenario.radio, scenario.devices.drop
    lo, hi = min(rule.min_distance_m, drop.distance_m.min()), max(rule.max_distance_m, drop.distance_m.max())
    d = np.linspace(lo, hi, 200)
    ax.plot(
        d,
        linear_to_db(path_loss_linear(d, radio.path_loss_db_at_1m, radio.path_loss_exponent)),
        color="gray",
        linewidth=1,
        label=f"{radio.path_loss_db_at_1m:g} dB at 1 m, exponent {radio.path_loss_exponent:g}",
    )
    pl_db = linear_to_db(world.channel.path_loss)
    for i, task in enumerate(sorted(set(drop.task))):
        at = [k for k, t in enumerate(drop.task) if t == task]
        ax.scatter(
            drop.distance_m[at],
            pl_db[at],
            color=f"C{i}",
            zorder=3,
            label=f"{task} (α {drop.alpha[at[0]]:.2f}) ×{len(at)}",
        )
    ax.set(
        xlabel="distance to the server (m)",
        ylabel="path loss (dB)",
        title=f"the drop: {scenario.devices.count} devices (seed {scenario.seed})",
    )
    ax.legend(fontsize=7)


def _draw_airtime(ax, world: World) -> None:
    """The right panel: per device, nearest first, the airtime of one correction in UL and DL mode."""
    scenario, drop = world.scenario, world.drop
    radio = scenario.radio
    order = np.argsort(drop.distance_m)
    rank = np.arange(1, order.size + 1)
    for (link, t), color, shift in zip(correction_airtime_s(world).items(), ("tab:orange", "tab:green"), (-0.15, 0.15)):
        ms = 1e3 * t[:, order]
        mid, p10, p90 = np.median(ms, 0), np.percentile(ms, 10, 0), np.percentile(ms, 90, 0)
        power = radio.p_ul_dbm if link == "UL" else radio.p_dl_dbm_value
        ax.errorbar(
            rank + shift,
            mid,
            yerr=[mid - p10, p90 - mid],
            fmt="o",
            markersize=3,
            capsize=2,
            color=color,
            label=f"{link} mode ({power:.1f} dBm)",
        )
    ax.set_yscale("log")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set(
        xlabel="device, nearest first",
        ylabel="airtime of one correction (ms)",
        title=f"{scenario.payload.payload_bits:,} bits alone on {radio.bandwidth_hz / 1e6:g} MHz "
        f"(median, 10–90% over {FADING_ROUNDS} fading rounds)",
    )
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7)
