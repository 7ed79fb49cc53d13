"""The testbed's per-round hooks on the server: link emulation on the wall clock (``before_commit``:
each round delayed by the airtime of the bits it moved, as the planner charged them (the cost on
the round's outcome), before its
COMMITs go out), one rounds.jsonl row per round (``on_round``: a `RoundRow`, the server's
`RoundEvent` next to the clock's `RoundCost` that rides on it), progress reports."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from multispin.runtime.round.engine import RoundOutcome
from multispin.runtime.wire.records import RoundEvent
from multispin.runtime.wire.round_row import RoundRow
from multispin.side_output import SideFile


class RoundSink:
    """The server's per-round hooks: `emulate_link` (``before_commit``) sleeps the airtime on the
    wall clock; the call (``on_round``) keeps and writes the rounds.jsonl row, reports progress."""

    def __init__(self, wall_clock: bool, path: Path | None, on_progress: Callable[[int, int], None] | None):
        self.wall_clock, self.on_progress = wall_clock, on_progress
        self.rows: list[RoundRow] = []
        self.airtime_s = 0.0
        self.tokens = 0
        self._file = SideFile(path, "rounds log", mode="w") if path else None

    def emulate_link(self, outcome: RoundOutcome) -> None:
        """The round's airtime on the wall clock, before its COMMITs: a COMMIT carries the next
        round's PLAN, so a sleep after it would let the devices draft during the airtime."""
        if not self.wall_clock:
            return
        cost = outcome.cost  # the planner observed the round before this hook and charged it
        assert cost is not None, "emulate_link: a round charged on the scenario's clock"
        if cost.comm_latency_s > 0:
            time.sleep(cost.comm_latency_s)  # link emulation: the moved distributions' airtime
            self.airtime_s += cost.comm_latency_s

    def __call__(self, event: RoundEvent) -> None:
        cost = event.cost
        assert cost is not None, "on_round: a round charged on the scenario's clock"
        self.tokens += cost.tokens
        row = RoundRow.of(event, cost)
        self.rows.append(row)
        if self._file is not None:  # side output: a full disk stops it with one line, not the run
            self._file.write_line(json.dumps(row.to_dict()))
        if self.on_progress:
            self.on_progress(event.round, self.tokens)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
