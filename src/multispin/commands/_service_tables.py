"""The tables of what each device gets (testbed, demo) and `demo --objectives`: the objectives side by
side on common random numbers (docs/service.md)."""

from __future__ import annotations

from rich.table import Table


def right_aligned(title: str, caption: str, columns: tuple[str, ...]) -> Table:
    t = Table(title=title, caption=caption)
    for col in columns:
        t.add_column(col, justify="right")
    return t


_SERVICE_CAPTION = (
    "worst G: the lowest per-device goodput (tokens/s); Jain: fairness index of the per-device "
    "goodputs (1 = equal); γ=0: share of device-rounds not drafting; TTFT p95 and TPOT p50/p95/p99 "
    "(ms) on the run's clock; J/tok: device energy per generated token (docs/service.md)"
)


def _ms(x) -> str:
    return "—" if x is None else f"{1e3 * x:.0f}"


def service_table(rows, title: str, label: str = "policy") -> Table:
    """One line per (label, service metrics dict) pair: what each device gets and spends."""
    t = right_aligned(
        title, _SERVICE_CAPTION, (label, "worst G", "Jain", "γ=0", "TTFT p95", "TPOT p50", "p95", "p99", "J/tok")
    )
    for label, s in rows:
        e = s.get("energy_per_token_j")
        t.add_row(
            label,
            f"{s['worst_device_goodput_tokens_per_s']:.1f}",
            f"{s['jain_index']:.3f}",
            f"{s['gamma0_share']:.2f}",
            _ms(s["ttft_s"]["p95"]),
            _ms(s["tpot_s"]["p50"]),
            _ms(s["tpot_s"]["p95"]),
            _ms(s["tpot_s"]["p99"]),
            "—" if e is None else f"{e:.3f}",
        )
    return t


def print_objectives(con, cmp) -> None:
    """Sum goodput per objective with its interval, what each device gets, and every objective's
    paired differences from the sum objective (goodput first, then the service metrics)."""
    from multispin.experiments.paired import goodput_interval

    if cmp.pdl_offset_db is not None:
        con.print(f"[bold]objectives at P^dl = P^ul + {cmp.pdl_offset_db:g} dB", highlight=False)
    for o, r in cmp.runs.items():
        g = goodput_interval(r.log)
        con.print(f"adaptive, {o} objective: {g.estimate:.1f} tokens/s [{g.low:.1f}, {g.high:.1f}]", highlight=False)
    con.print(
        service_table(
            [(o, r.service()) for o, r in cmp.runs.items()], "what each device gets, per objective", "objective"
        )
    )
    for o, d in cmp.goodput.items():
        con.print(f"[bold]{d.verdict}", highlight=False)
        for s in cmp.service[o]:
            con.print("  " + s.verdict, highlight=False)
