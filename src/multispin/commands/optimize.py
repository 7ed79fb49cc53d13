"""`multispin optimize`: plan draft lengths and modes for one round of a scenario, with baselines."""

from __future__ import annotations

import json
import math
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from multispin.cli import app


def _clean(v):
    """JSON-safe: numpy scalars → Python, NaN/inf → None."""
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def build_report(
    preset: str = "paper-qwen",
    config: Optional[str] = None,
    devices: Optional[int] = None,
    pdl_dbm: Optional[float] = None,
    pul_dbm: Optional[float] = None,
    seed: Optional[int] = None,
    round_index: int = 0,
    n_saa: Optional[int] = None,
    policy: str = "greedy",
    split: Optional[str] = None,
    acceptance_profile=None,
    compute_profile: Optional[str] = None,
    baselines: bool = True,
) -> dict:
    """The report of ``multispin optimize`` as one JSON-ready dict (also used by the table view)."""
    from multispin.errors import ConfigError
    from multispin.optimize.baselines import DRAFT_POLICIES
    from multispin.optimize.plan import optimize_instance
    from multispin.system import World, get_preset, load_scenario
    from multispin.system.radio import linear_to_db

    if policy not in DRAFT_POLICIES:
        raise ConfigError(f"policy: unknown value {policy!r} (allowed: {', '.join(DRAFT_POLICIES)})")
    if round_index < 0:
        raise ConfigError(f"round: must be in [0, inf) (got {round_index})")
    scenario = load_scenario(config) if config else get_preset(preset)
    changes: dict = {}
    if devices is not None:
        changes["devices.count"] = devices
    if pdl_dbm is not None:
        changes["radio.p_dl_dbm"] = pdl_dbm
    if pul_dbm is not None:
        changes["radio.p_ul_dbm"] = pul_dbm
    if seed is not None:
        changes["seed"] = seed
    if n_saa is not None:
        changes["optimizer.n_saa"] = n_saa
    if split is not None:
        changes["radio.bandwidth_split"] = split
    if changes:
        scenario = scenario.override(changes)
    if acceptance_profile:
        scenario = scenario.with_acceptance_profile(acceptance_profile)
    if compute_profile:
        scenario = scenario.with_compute_profile(compute_profile)
    world = World(scenario)
    inst = world.instance(round_index)
    u = world.saa_uniforms(round_index)
    mu = world.mode_uniforms(round_index)
    split_used = scenario.radio.bandwidth_split
    rep = optimize_instance(inst, u, mu, policy=policy, split=split_used, with_baselines=baselines)
    p, st = rep.plan, rep.stats
    radio = scenario.radio
    devices_out = []
    for k in range(inst.num_devices):
        devices_out.append({
            "device": k,
            "task": world.drop.task[k],
            "distance_m": float(world.drop.distance_m[k]),
            "channel_gain": float(inst.gain_ul[k]),
            "channel_gain_db": float(linear_to_db(inst.gain_ul[k])),
            "channel_gain_dl": float(inst.gain_dl[k]),
            "alpha": float(world.drop.alpha[k]),
            "draft_latency_s": float(inst.draft_latency_s[k]),
            "draft_len": int(p.draft_len[k]),
            "rejection_prob": float(p.rejection_prob[k]),
            "expected_tokens": float(p.expected_tokens[k]),
            "ul_latency_s": float(st.ul_latency_s_given_rejected[k]),
            "ul_latency_s_full_band": float(st.ul_latency_s_alone[k]),
            "ul_share": float(st.ul_share[k]),
            "dl_share": float(st.dl_share[k]),
            "ul_share_given_rejected": float(st.ul_share_given_rejected[k]),
        })
    out = {
        "scenario": scenario.name,
        "seed": scenario.seed,
        "round": round_index,
        "policy": p.policy,
        "bandwidth_split": split_used,
        "acceptance_assumed": bool(world.drop.acceptance_assumed),
        "acceptance_source": scenario.tasks.source,
        "goodput_tokens_per_s": p.goodput.goodput_tokens_per_s,
        "g_max_tokens_per_s": p.goodput.g_max_tokens_per_s,
        "e_t_comm_s": p.goodput.e_t_comm_s,
        "t_comp_s": p.goodput.t_comp_s,
        "expected_tokens_per_round": p.goodput.expected_tokens,
        "baselines": dict(rep.baselines),
        "baseline_draft_len": dict(rep.baseline_draft_len),
        "devices": devices_out,
        "num_devices": inst.num_devices,
        "bandwidth_hz": radio.bandwidth_hz,
        "p_ul_dbm": radio.p_ul_dbm,
        "p_dl_dbm": radio.p_dl_dbm_value,
        "p_dl_w": radio.p_dl_watts,
        "noise_psd_dbm_per_hz": radio.noise_psd_dbm_per_hz,
        "noise_figure_db": radio.noise_figure_db,
        "path_loss_db_at_1m": radio.path_loss_db_at_1m,
        "path_loss_exponent": radio.path_loss_exponent,
        "reciprocity": radio.reciprocity,
        "codec": scenario.payload.codec,
        "payload_bits": int(scenario.payload.payload_bits),
        "count_signalling_bits": scenario.payload.count_signalling_bits,
        "t_ver0_s": scenario.compute.t_ver0_s,
        "t_ver1_s": scenario.compute.t_ver1_s,
        "t_ver_tok_s": scenario.compute.t_ver_tok_s,
        "gamma_max": scenario.optimizer.gamma_max,
        "n_saa": scenario.optimizer.n_saa,
    }
    return _clean(out)


def _fmt_ms(v) -> str:
    return "-" if v is None else f"{1e3 * v:.1f}"


def _print_tables(r: dict) -> None:
    from rich.markup import escape

    out = Console()
    if not out.is_terminal:
        out = Console(width=160)
    t = Table(title=f"multispin optimize: {r['scenario']}, K={r['num_devices']}, P^dl={r['p_dl_dbm']:.1f} dBm, "
                    f"seed {r['seed']}, round {r['round']}, policy {r['policy']}, {r['bandwidth_split']} split")
    for col in ("dev", "task", "dist m", "gain dB", "α", "T^dft ms", "γ", "P(rej)", "E[N]",
                "UL ms | rej", "UL share", "DL share"):
        t.add_column(escape(col), justify="right")
    for d in r["devices"]:
        t.add_row(str(d["device"]), d["task"], f"{d['distance_m']:.0f}", f"{d['channel_gain_db']:.1f}",
                  f"{d['alpha']:.3f}", f"{1e3 * d['draft_latency_s']:.1f}", str(d["draft_len"]),
                  f"{d['rejection_prob']:.3f}", f"{d['expected_tokens']:.2f}", _fmt_ms(d["ul_latency_s"]),
                  f"{d['ul_share']:.2f}", f"{d['dl_share']:.2f}")
    out.print(t)
    s = Table(title="summary (per round; SAA over the same samples)")
    s.add_column("quantity")
    s.add_column("value", justify="right")
    s.add_row("G (tokens/s)", f"{r['goodput_tokens_per_s']:.2f}")
    s.add_row("G_max, free communication (tokens/s)", f"{r['g_max_tokens_per_s']:.2f}")
    s.add_row(escape("E[T_comm] (ms)"), _fmt_ms(r["e_t_comm_s"]))
    s.add_row("T_comp (ms)", _fmt_ms(r["t_comp_s"]))
    s.add_row(escape("E[tokens] per round"), f"{r['expected_tokens_per_round']:.2f}")
    for name, g in r["baselines"].items():
        gain = 100 * (r["goodput_tokens_per_s"] / g - 1) if g else float("nan")
        s.add_row(f"baseline {name} (tokens/s)", f"{g:.2f}  (ours {gain:+.1f}%)")
    out.print(s)
    out.print(f"radio: B={r['bandwidth_hz'] / 1e6:g} MHz, P^ul={r['p_ul_dbm']:g} dBm, P^dl={r['p_dl_dbm']:.2f} dBm, "
              f"N0={r['noise_psd_dbm_per_hz']:g} dBm/Hz + NF {r['noise_figure_db']:g} dB, "
              f"S={r['payload_bits']} bits ({r['codec']}); compute: T_ver0={1e3 * r['t_ver0_s']:g} ms, "
              f"T_ver1={1e3 * r['t_ver1_s']:g} ms, T_ver_tok={1e3 * r['t_ver_tok_s']:g} ms; N_SAA={r['n_saa']}")
    if r["acceptance_assumed"]:
        out.print("[yellow]note:[/yellow] per-task acceptance rates are assumed (the paper gives only a range); "
                  "pass --acceptance-profile with measured rates.")


@app.command()
def optimize(
    preset: str = typer.Option("paper-qwen", help="scenario preset: paper-qwen, paper-r1 or smollm2-cpu"),
    config: Optional[str] = typer.Option(None, help="scenario file (YAML/TOML; may start from `preset:`)"),
    devices: Optional[int] = typer.Option(None, help="number of devices K"),
    pdl_dbm: Optional[float] = typer.Option(None, "--pdl-dbm", help="server DL power budget P^dl (dBm)"),
    pul_dbm: Optional[float] = typer.Option(None, "--pul-dbm", help="device max UL power P^ul (dBm)"),
    seed: Optional[int] = typer.Option(None, help="scenario seed (drop, tasks, fading, SAA)"),
    round_index: int = typer.Option(0, "--round", help="round index (block fading is redrawn per round)"),
    n_saa: Optional[int] = typer.Option(None, "--n-saa", help="SAA outcome samples N_SAA"),
    policy: str = typer.Option("greedy", help="draft lengths: greedy, greedy_paper, best_uniform, "
                                              "computation_only, oracle"),
    split: Optional[str] = typer.Option(None, help="bandwidth split: equal (paper) or optimized"),
    acceptance_profile: Optional[list[str]] = typer.Option(
        None, "--acceptance-profile", help="measured acceptance-profile JSON (repeat for several tasks)"),
    compute_profile: Optional[str] = typer.Option(None, "--compute-profile",
                                                  help="measured compute-profile JSON (multispin profile)"),
    no_baselines: bool = typer.Option(False, "--no-baselines", help="skip the baselines"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of tables"),
) -> None:
    """Optimise one round: draft lengths per device, UL/DL modes and powers, against the baselines."""
    report = build_report(preset=preset, config=config, devices=devices, pdl_dbm=pdl_dbm, pul_dbm=pul_dbm,
                          seed=seed, round_index=round_index, n_saa=n_saa, policy=policy, split=split,
                          acceptance_profile=acceptance_profile, compute_profile=compute_profile,
                          baselines=not no_baselines)
    if as_json:
        typer.echo(json.dumps(report))
    else:
        _print_tables(report)
