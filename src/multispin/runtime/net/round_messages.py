"""One round's message traffic on the server: PLANs out and DRAFTs in, VERDICTs out and corrections in.

What: a `RoundMessages` is made at the start of each round for the devices it runs. It sends
every PLAN that no COMMIT carried, waits for the DRAFTs until the round timeout (a device that
misses it is skipped, and told to back off at its ``max_draft_misses``-th miss in a row), sends
each rejected device its VERDICT (with p_j in DL), and commits each correction (Q_PAYLOAD in UL,
CORRECTION in DL) to the engine as it arrives. It keeps what the traffic produced besides the
engine's outcome (who dropped out and why, the compute times the devices reported, the payload
and wire bytes), and makes the round's `RoundEvent` from both.

Why apart from the server loop: the loop (`server.EdgeServer`) decides the round's order, when to
plan, commit and stop; how long to wait for which message, and what a missing one costs, is the
same question in every round and the tests of slow and vanished devices are about it alone.
"""

from __future__ import annotations

import time

from multispin.errors import ConfigError, ProtocolError
from multispin.runtime.net.jsonlog import JsonlLog
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.net.server_link import POLL_SLICE_S, ServerLink
from multispin.runtime.round.engine import RoundEngine, RoundOutcome
from multispin.runtime.round.roles import Draft
from multispin.runtime.wire import messages as P
from multispin.runtime.wire.records import RoundEvent
from multispin.runtime.wire.server_protocol import Connection, ServerProtocol


def why_closed(proto: ServerProtocol, d: int) -> str:
    """Why device d's session ended: its last drop's reason."""
    drops = proto.devices[d].drops
    return drops[-1] if drops else "gone"


class RoundMessages:
    """The messages of round ``out.round`` with the devices it runs (``conns``: their connections,
    those whose session is still open at the round's start). ``stragglers`` accumulates the
    deadlines missed and the back-offs over the run."""

    def __init__(
        self,
        out: RoundOutcome,
        conns: dict[int, Connection],
        link: ServerLink,
        engine: RoundEngine,
        config: ServerConfig,
        log: JsonlLog,
        stragglers: dict[str, float],
    ) -> None:
        self.out, self.conns = out, conns
        self.link, self.proto, self.engine = link, link.proto, engine
        self.config, self.log, self.stragglers = config, log, stragglers
        self.dropped: dict[int, str] = {}  # device -> why its session ended
        self.draft_s: dict[int, float] = {}  # reported in DRAFT
        self.correction_s: dict[int, float] = {}  # reported in CORRECTION (DL)
        self.payload_bytes: dict[int, int] = {}  # codec bytes of the distribution

    def closed(self, d: int) -> None:
        """Device d's session ended outside this round's waits: say why in the round's record."""
        self.dropped.setdefault(d, why_closed(self.proto, d))

    def drop(self, d: int, code: str, reason: str) -> None:
        self.dropped[d] = reason
        self.proto.drop(self.conns[d], code, reason)
        self.link.flush()

    def collect_drafts(self) -> dict[int, Draft]:
        """PLAN to every device whose last COMMIT did not carry it, then every DRAFT that arrives
        within the round timeout."""
        out, proto = self.out, self.proto
        r, timeout = out.round, self.config.round_timeout_s
        for d, c in self.conns.items():
            if not proto.planned(c, r):  # else its last COMMIT carried this PLAN
                proto.plan(c, r, out.gammas[d], d in out.coupled)
        self.link.flush()
        # the connections still owing their DRAFT, fewer at each wake-up (a DRAFT taken or a
        # session ended stays so): a round's DRAFTs wake the loop up to K times, and each wake-up
        # looks at the ones left, not at all K
        owing = list(self.conns.values())

        def all_in() -> bool:
            owing[:] = [c for c in owing if c.alive and c.inbox is None]
            return not owing

        self.link.pump_until(all_in, time.monotonic() + timeout)
        drafts: dict[int, Draft] = {}
        for d, c in self.conns.items():
            if not c.alive:
                self.closed(d)
                continue
            if c.inbox is None:
                self._skip_straggler(d)
                continue
            proto.drafted(d)
            msg = c.inbox
            assert isinstance(msg, P.DraftMsg)
            c.inbox = None
            drafts[d] = Draft(list(msg.tokens), msg.q_values)
            if msg.compute_s is not None:
                self.draft_s[d] = msg.compute_s
        return drafts

    def _skip_straggler(self, d: int) -> None:
        """No DRAFT by the deadline: the round goes on without device d, whose record stays (it
        resumes at its next HELLO); at its max_draft_misses-th miss in a row it is told to back
        off, so one slow device costs the others at most that many deadlines per back-off."""
        cfg, r = self.config, self.out.round
        timeout = cfg.round_timeout_s
        backoff = cfg.straggler_backoff()
        self.stragglers["missed"] += 1
        self.stragglers["held_at_most_s"] += timeout
        backed_off = self.proto.missed_draft(d, time.monotonic(), cfg.max_draft_misses, backoff)
        self.log.write(
            "straggler",
            device=d,
            round=r,
            waited_s=timeout,
            misses=self.proto.devices[d].draft_misses,
            backed_off=backed_off,
        )
        if backed_off:
            self.stragglers["backed_off"] += 1
            cause = f"no DRAFT within {timeout:g} s in round {r}, {cfg.max_draft_misses} rounds in a row"
            self.drop(d, "busy", P.busy_reason(cause, backoff))
        else:
            self.drop(d, "timeout", f"no DRAFT within {timeout:g} s in round {r}")

    def send_verdicts(self) -> dict[int, str]:
        """Accepted devices commit now (their COMMIT is their verdict); a rejected device gets its
        VERDICT, with p_j in DL. Returns the rejected devices whose correction is still owed,
        with their modes."""
        out, engine = self.out, self.engine
        waiting: dict[int, str] = {}
        for d, v in out.verdicts.items():
            c = self.conns[d]
            if not c.alive:
                self.closed(d)
                continue
            if not v.rejected:
                engine.commit(out, d, v.bonus_token)  # type: ignore[arg-type]  # sent with the round's commit
                continue
            mode = out.modes[d]
            p_payload = None
            if mode == "dl":
                p_payload = engine.p_payload(out, d)
                self.payload_bytes[d] = len(p_payload)
            self.proto.verdict(c, out.round, v.num_accepted, mode, p_payload)
            waiting[d] = mode
        self.link.flush()  # a VERDICT that could not be sent dropped its session: the wait sees it
        return waiting

    def collect_corrections(self, waiting: dict[int, str]) -> None:
        """Each rejected device commits as soon as its Q_PAYLOAD (UL) or CORRECTION (DL) arrives."""
        timeout = self.config.round_timeout_s
        deadline = time.monotonic() + timeout
        while waiting:
            for d in list(waiting):
                c = self.conns[d]
                if not c.alive:
                    waiting.pop(d)
                    self.closed(d)
                elif c.inbox is not None:
                    msg, c.inbox = c.inbox, None
                    self._on_correction(d, waiting.pop(d), msg)
            if not waiting:
                break
            if time.monotonic() >= deadline:
                for d in list(waiting):
                    what = "Q_PAYLOAD" if waiting.pop(d) == "ul" else "CORRECTION"
                    self.drop(d, "timeout", f"no {what} within {timeout:g} s in round {self.out.round}")
                break
            self.link.pump(min(POLL_SLICE_S * 4, max(0.0, deadline - time.monotonic())))

    def _on_correction(self, d: int, mode: str, msg: P.Message) -> None:
        out = self.out
        if mode == "ul":
            assert isinstance(msg, P.QPayloadMsg)
            self.payload_bytes[d] = len(msg.payload)
            try:
                final = self.engine.correct_remotely(out, d, msg.payload)
            except (ProtocolError, ConfigError) as exc:
                self.drop(d, "protocol", f"Q_PAYLOAD.payload: {exc}")
                return  # the COMMIT carries the correction to the device
        else:
            assert isinstance(msg, P.CorrectionMsg)
            final = msg.token
            if msg.compute_s is not None:
                self.correction_s[d] = msg.compute_s
        self.engine.commit(out, d, final)  # sent with the round's commit

    def event(self, round_wall_s: float) -> RoundEvent:
        """The round's record: the engine's outcome and what its messages produced. The devices'
        byte counts start again from zero for the next round."""
        out = self.out
        event = RoundEvent(
            round=out.round,
            gammas=out.gammas,
            records=out.records,
            rejected=list(out.rejected),
            modes=dict(out.modes),
            dropped=self.dropped,
            verify_s=out.verify_s,
            server_correction_s=out.server_correction_s,
            draft_compute_s=self.draft_s,
            device_correction_s=self.correction_s,
            payload_bytes=self.payload_bytes,
            wire_bytes_up={d: c.bytes_in for d, c in self.conns.items()},
            wire_bytes_down={d: c.bytes_out for d, c in self.conns.items()},
            round_wall_s=round_wall_s,
            cost=out.cost,
            expected_tokens={d: out.expected_tokens[d] for d in out.records if d in out.expected_tokens},
        )
        for c in self.conns.values():  # from here on, bytes count towards the next round
            c.bytes_in = c.bytes_out = 0
        return event


__all__ = ["RoundMessages", "why_closed"]
