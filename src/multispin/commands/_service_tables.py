"""`demo --objectives`: the objectives side by side on common random numbers (docs/service.md)."""

from __future__ import annotations


def print_objectives(con, cmp) -> None:
    """Sum goodput per objective with its interval, what each device gets, and every objective's
    paired differences from the sum objective (goodput first, then the service metrics)."""
    from multispin.commands.testbed import _service_table
    from multispin.experiments.paired import goodput_interval

    for o, r in cmp.runs.items():
        g = goodput_interval(r.log)
        con.print(f"adaptive, {o} objective: {g.estimate:.1f} tokens/s [{g.low:.1f}, {g.high:.1f}]", highlight=False)
    con.print(
        _service_table(
            [(o, r.service()) for o, r in cmp.runs.items()], "what each device gets, per objective", "objective"
        )
    )
    for o, d in cmp.goodput.items():
        con.print(f"[bold]{d.verdict}", highlight=False)
        for s in cmp.service[o]:
            con.print("  " + s.verdict, highlight=False)
