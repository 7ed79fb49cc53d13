"""The journal's records: a device's session, its part of a committed round, what a restart
recovers and what a repair did. Plain data, shared by the journal and its repair."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SessionRecord:
    """What a device's session needs to be resumed: everything but the tokens."""

    device_id: int
    identity: str
    prompt_ids: tuple[int, ...]
    sampling: Mapping[str, Any]
    ul_codec: str
    dl_codec: str
    seed: int
    first_round: int = 0


@dataclass(frozen=True)
class DeviceRound:
    """One device's part of a committed round."""

    tokens: tuple[int, ...]
    draft_len: int
    mode: str | None = None
    bits: int = 0


@dataclass
class RecoveredSession:
    session: SessionRecord
    tokens: list[int] = field(default_factory=list)  # every committed token id, in order
    rounds: int = 0  # rounds this device has committed tokens in


@dataclass(frozen=True)
class Repair:
    """What ``Journal(path, repair=True)`` did to a damaged journal."""

    problem: str  # the refusal it overrode
    kept_rounds: int  # rounds 0..kept_rounds-1 were kept
    lost_rounds: int | None  # rounds committed after those (from the head file), if known
    kept_aside: tuple[Path, ...]  # the damaged files, renamed
    sessions_lost: bool = False  # the sessions could not be read: the journal starts afresh

    def describe(self) -> str:
        lost = f" ({self.lost_rounds} committed round(s) will be regenerated)" if self.lost_rounds else ""
        aside = ", ".join(str(p) for p in self.kept_aside) or "nothing"
        where = f"after round {self.kept_rounds - 1}" if self.kept_rounds else "from round 0"
        lost_sessions = (
            "; its sessions were unreadable: every device starts again from its prompt" if self.sessions_lost else ""
        )
        return (
            f"journal repaired: resuming {where}{lost}{lost_sessions}; damaged files kept as {aside}; "
            f"it was refused because: {self.problem}"
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(
            problem=self.problem,
            kept_rounds=self.kept_rounds,
            lost_rounds=self.lost_rounds,
            kept_aside=[str(p) for p in self.kept_aside],
            sessions_lost=self.sessions_lost,
        )


@dataclass
class Recovery:
    sessions: dict[int, RecoveredSession]
    next_round: int
    completed: str | None = None  # the run ended for good (see Journal.complete): nothing to resume
