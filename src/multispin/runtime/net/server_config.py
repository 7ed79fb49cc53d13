"""The edge server's settings: everything it needs besides the model pair, its keys and its policy.

A pydantic model, so that ``serve``'s flags, the testbed's launcher and the tests build it alike and
a bad value is one line naming the field.
"""

from __future__ import annotations

from pydantic import Field

from multispin.runtime.security.limits import MAX_SERVED_DEVICES, ConnectionLimits
from multispin.runtime.wire import messages as P
from multispin.speculative.verify import DEFAULT_GAMMA_MAX
from multispin.speculative.warp import SamplingFields

# handshakes in flight at once unless max_pending says otherwise
DEFAULT_MAX_PENDING = 64


class ServerConfig(SamplingFields):
    """Everything the server needs besides the model pair, the secret and the round policy."""

    host: str = "127.0.0.1"
    port: int = Field(5555, ge=0, le=65535, description="0 = any free port")
    expected_devices: int = Field(1, ge=1, le=MAX_SERVED_DEVICES, description="devices to wait for before round 0")
    max_devices: int = Field(256, ge=1, le=MAX_SERVED_DEVICES, description="distinct device ids this server serves")
    rounds: int | None = Field(None, ge=1, description="stop after this many rounds (None: when all done)")
    max_new_tokens: int = Field(32, ge=1, le=1 << 20)
    max_prompt_tokens: int = Field(4096, ge=1, le=1 << 20)
    gamma_max: int = Field(DEFAULT_GAMMA_MAX, ge=0, le=256)
    seed: int = Field(0, ge=0, le=P.MAX_SEED)
    ul_codec: str = "dense-fp32"
    dl_codec: str = "dense-fp32"
    round_timeout_s: float = Field(30.0, gt=0, description="longest wait for one phase (draft, correction) of a round")
    join_timeout_s: float = Field(120.0, gt=0, description="longest wait for expected_devices before round 0")
    handshake_timeout_s: float = Field(10.0, gt=0)
    idle_timeout_s: float = Field(60.0, gt=0, description="how long to wait for detached, unfinished devices")
    bye_timeout_s: float = Field(5.0, ge=0, description="how long to wait for devices' final BYE")
    max_connections: int | None = Field(
        None, ge=1, le=65536, description="sessions + handshakes at once (None: max_devices + max_pending)"
    )
    max_pending: int | None = Field(
        None,
        ge=1,
        le=65536,
        description="handshakes in flight at once (None: "
        f"{DEFAULT_MAX_PENDING}, at most max_connections; given, it must fit in them)",
    )
    max_silent_per_key: int = Field(
        4,
        ge=0,
        le=4096,
        description="with keys: connections of one key that have authenticated and sent nothing yet, "
        "counted over one handshake timeout; more are refused at the handshake, which stops a "
        "ZeroMQ client from reconnecting (0: no quota)",
    )
    refusal_log_interval_s: float = Field(
        10.0,
        gt=0,
        description="one log line per refusal cause per interval (and per device and cause for drops and resumes)",
    )
    max_draft_misses: int = Field(
        2,
        ge=1,
        description="draft deadlines (round_timeout_s) a device may miss in "
        "a row; at the last it is told to back off (ERROR busy, HELLOs busy for "
        "straggler_backoff_s)",
    )
    straggler_backoff_s: float | None = Field(
        None,
        gt=0,
        description="how long a straggler is kept out (None: 10 × max_draft_misses × round_timeout_s); "
        "at most half the idle and join timeouts either way, so that it is back before the server "
        "stops waiting for it",
    )
    max_replacements_per_min: int = Field(
        10,
        ge=1,
        description="new sessions of one device (replacing its "
        "live one or resuming) in a minute; the next is told to retry later",
    )
    history: bool = Field(
        False,
        description="keep every round's event and record in memory for the "
        "summary (experiments); off: rounds stream to the log, aggregates stay",
    )
    job_slots: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="steady-state runs: device ids d, d + "
        "job_slots, d + 2·job_slots, … are one device's successive jobs (prompts); "
        "when one finishes, the next round waits for its successor to join",
    )

    @property
    def bind_endpoint(self) -> str:
        return f"tcp://{self.host}:{self.port if self.port else '*'}"

    def straggler_backoff(self) -> float:
        """Seconds a device that missed max_draft_misses draft deadlines in a row is kept out:
        straggler_backoff_s (default 10 × max_draft_misses × round_timeout_s), bounded by half
        of idle_timeout_s and of join_timeout_s. The bound keeps the back-off shorter than the
        server's own waits, so a device that was only slow for a while (a host suspended, a lid
        closed) is back, resumes its session and finishes its text, before the server gives up
        on it; a device that stays slow costs the others one deadline per back-off."""
        wanted = self.straggler_backoff_s or 10 * self.max_draft_misses * self.round_timeout_s
        return min(wanted, self.idle_timeout_s / 2, self.join_timeout_s / 2)

    def connection_limits(self) -> ConnectionLimits:
        """Sessions and handshakes at once: only the default max_pending adapts to
        max_connections; one given larger is refused (`ConnectionLimits`)."""
        max_connections = self.max_connections or self.max_devices + (self.max_pending or DEFAULT_MAX_PENDING)
        max_pending = self.max_pending or min(DEFAULT_MAX_PENDING, max_connections)
        return ConnectionLimits(max_connections, max_pending, self.handshake_timeout_s)

    def welcome(self, pair_name: str, vocab_size: int, ul_codec: str, dl_codec: str, eos_ids: tuple[int, ...]) -> dict:
        """The WELCOME fields that are the same for every device: what a device must agree with
        to draft for this server (the pair, the sampling, the codecs, the budgets)."""
        return dict(
            pair=pair_name[: P.MAX_NAME_CHARS],
            vocab_size=vocab_size,
            gamma_max=self.gamma_max,
            seed=self.seed,
            temperature=float(self.temperature),
            top_k=self.top_k,
            top_p=float(self.top_p),
            ul_codec=ul_codec,
            dl_codec=dl_codec,
            max_new_tokens=self.max_new_tokens,
            max_prompt_tokens=self.max_prompt_tokens,
            eos_ids=eos_ids,
        )


__all__ = ["DEFAULT_MAX_PENDING", "ServerConfig"]
