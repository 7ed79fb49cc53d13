"""A server restarted on its journal: every session restored, and the round to go on from.

What: `session_settings` is what every journal session must agree with for a restart to continue
it exactly (the pair, the sampling, the budgets, the policy's name); `recover_sessions` checks each
session of the journal against this server's settings, codecs and seed, restores its prompt and
committed tokens into the verifier's records and the protocol's device table, and returns the
devices that still have work. A journal whose run ended with every device done is set aside
(renamed with the time) and a fresh one started in its place.

Why apart: the round driver needs only the result (who may resume, from which round); the
settings check is the one place a restart with other settings is refused, with one line naming
what differs.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from multispin.errors import ConfigError
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.round.engine import RoundEngine
from multispin.runtime.round.roles import VerifierServer
from multispin.runtime.store.journal import Journal
from multispin.runtime.wire.server_protocol import ServerProtocol

log = logging.getLogger("multispin.server")


def session_settings(pair_name: str, config: ServerConfig, policy: object) -> dict[str, Any]:
    """What every journal session must agree with for a restart to continue it exactly."""
    return dict(
        pair=pair_name,
        temperature=float(config.temperature),
        top_k=config.top_k,
        top_p=float(config.top_p),
        max_new_tokens=config.max_new_tokens,
        gamma_max=config.gamma_max,
        policy=journal_policy_name(policy),
    )


def journal_policy_name(policy: object) -> str:
    """The name a policy goes by in the journal and the log (its class's, unless it names itself)."""
    return getattr(policy, "name", type(policy).__name__)


@dataclass(frozen=True)
class ServerRecovery:
    """What a journal gave back: the journal to write on (a fresh one if the old run was done)
    and the devices restored with work left, in id order."""

    journal: Journal
    devices: list[int]


def recover_sessions(
    journal: Journal,
    settings: tuple[dict[str, Any], str, str, int],
    verifier: VerifierServer,
    engine: RoundEngine,
    proto: ServerProtocol,
) -> ServerRecovery:
    """Restore every session of ``journal`` (prompt + committed tokens) and the next round.
    ``settings``: this server's (session settings, UL codec, DL codec, seed), which every
    session must have been written with."""
    if journal.repaired is not None:
        log.warning("%s", journal.repaired.describe())
    rec = journal.recover()
    if rec.completed is not None:
        path = journal.path
        done = journal.set_aside(f"done-{time.strftime('%Y%m%d-%H%M%S')}")
        log.info("journal %s holds a finished run; kept as %s, starting a new one", path, done)
        return ServerRecovery(Journal(path, check=journal.check), [])
    recovered = []
    for d, s in sorted(rec.sessions.items()):
        theirs = (dict(s.session.sampling), s.session.ul_codec, s.session.dl_codec, s.session.seed)
        for name, a, b in zip(("settings", "UL codec", "DL codec", "seed"), theirs, settings):
            if a != b:
                raise ConfigError(
                    f"journal: {journal.path} was written with {name} {a}, this "
                    f"server has {b}; restart with the same settings or another --journal"
                )
        verifier.open(d, s.session.prompt_ids)
        verifier.commit(d, s.tokens)
        proto.restore(d, len(s.session.prompt_ids), engine.finished(d))
        if not engine.finished(d):
            recovered.append(d)
    proto.round_idx = rec.next_round
    if rec.sessions:
        log.info("recovered %d session(s) from %s at round %d", len(rec.sessions), journal.path, rec.next_round)
    return ServerRecovery(journal, recovered)


__all__ = ["ServerRecovery", "journal_policy_name", "recover_sessions", "session_settings"]
