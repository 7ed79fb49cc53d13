"""The testbed's per-round hooks on the server: link emulation on the wall clock (``before_commit``:
each round delayed by the airtime of the bits it moved, as the planner charged them, before its
COMMITs go out), one rounds.jsonl row per round (``on_round``: the server's `RoundEvent` next to
the planner's `RoundCost`), progress reports."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from multispin.runtime.round.planner import ScenarioPlanner


def round_row(event, cost) -> dict:
    """One rounds.jsonl line: the server's `RoundEvent` next to the planner's `RoundCost`."""
    def keyed(d: dict) -> dict:
        return {str(k): v for k, v in d.items()}

    recs = event.records
    return {
        "round": event.round, "gamma": keyed(cost.draft_len), "rejected": cost.rejected,
        "modes": keyed(cost.modes), "power_w": keyed(cost.power_w), "bandwidth_hz": keyed(cost.bandwidth_hz),
        "gain": keyed(cost.gain), "charged_bits": keyed(cost.charged_bits),
        "payload_bits": {str(d): r.payload_bits for d, r in recs.items()},
        "correction_bits": {str(d): r.correction_bits for d, r in recs.items()},
        "uplink_bits": {str(d): r.uplink_bits for d, r in recs.items()},
        "downlink_bits": {str(d): r.downlink_bits for d, r in recs.items()},
        "tokens_gained": {str(d): r.tokens_gained for d, r in recs.items()},
        "comp_latency_s": cost.comp_latency_s, "comm_latency_s": cost.comm_latency_s,
        "planned_goodput_tokens_per_s": cost.planned_goodput_tokens_per_s,
        "planning_cpu_s": cost.planning_cpu_s, "planning_wall_s": cost.planning_wall_s,
        "planning_charged_s": cost.planning_charged_s,
        "verify_s": event.verify_s, "round_wall_s": event.round_wall_s, "dropped": keyed(event.dropped),
    }


class RoundSink:
    """The server's per-round hooks: `emulate_link` (``before_commit``) sleeps the airtime on the
    wall clock; the call (``on_round``) keeps and writes the rounds.jsonl row, reports progress."""

    def __init__(self, planner: ScenarioPlanner, wall_clock: bool, path: Path | None,
                 on_progress: Callable[[int, int], None] | None):
        self.planner, self.wall_clock, self.on_progress = planner, wall_clock, on_progress
        self.rows: list[dict] = []
        self.airtime_s = 0.0
        self.tokens = 0
        self._fh = open(path, "w") if path else None

    def emulate_link(self, round_idx: int) -> None:
        """The round's airtime on the wall clock, before its COMMITs: a COMMIT carries the next
        round's PLAN, so a sleep after it would let the devices draft during the airtime."""
        cost = self.planner.rounds[-1]  # the engine had the planner observe the round before this hook
        if self.wall_clock and cost.comm_latency_s > 0:
            time.sleep(cost.comm_latency_s)  # link emulation: the moved distributions' airtime
            self.airtime_s += cost.comm_latency_s

    def __call__(self, event) -> None:
        cost = self.planner.rounds[-1]
        self.tokens += cost.tokens
        row = round_row(event, cost)
        self.rows.append(row)
        if self._fh:
            self._fh.write(json.dumps(row) + "\n")
            self._fh.flush()
        if self.on_progress:
            self.on_progress(event.round, self.tokens)

    def close(self) -> None:
        if self._fh:
            self._fh.close()
