"""What the server does with the journal it starts on, without sockets: restore every session and
the next round, refuse settings that differ from the journal's, set a finished run aside."""

from __future__ import annotations

import pytest

from multispin.errors import ConfigError
from multispin.models.base import LoadedPair
from multispin.models.synthetic import MarkovBatchedLM, make_tables
from multispin.runtime.net.server import EdgeServer
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.store.journal import DeviceRound, Journal, SessionRecord

V = 16
SECRET = "journal-test-secret"
PAIR = LoadedPair(name="markov", tokenizer=None, target=None, drafts={}, vocab_size=V)


def _server(path, **config):
    target, _ = make_tables(V, seed=0)
    cfg = ServerConfig.make(**{"port": 0, "max_new_tokens": 6, "seed": 4, **config})
    return EdgeServer(cfg, PAIR, SECRET, journal=path, target_lm=MarkovBatchedLM(target))


def _journal_of_a_crashed_run(path, **overrides):
    """What a server with the defaults of `_server` leaves after two rounds for devices 0 and 1."""
    server = _server(path, **overrides)
    params, ul, dl = server._session_params, server.ul_codec.name, server.dl_codec.name
    server.journal.close()
    with Journal(path) as j:
        for d in (0, 1):
            j.open_session(SessionRecord(d, f"key-{d}", (1, 2, 3), params, ul, dl, 4))
        j.commit_round(0, {0: DeviceRound((5, 6), 1), 1: DeviceRound((7,), 0)})
        j.commit_round(1, {0: DeviceRound((8, 9, 10, 11), 3)})  # device 0 reaches max_new_tokens


def test_a_restart_restores_every_session_and_the_next_round(tmp_path):
    path = tmp_path / "j.sqlite"
    _journal_of_a_crashed_run(path)
    server = _server(path)
    try:
        assert server.records == {0: [1, 2, 3, 5, 6, 8, 9, 10, 11], 1: [1, 2, 3, 7]}
        assert server.round_idx == 2 and server.recovered == [1]  # device 0 is done, 1 resumes
        assert server.proto.devices[0].finished and not server.proto.devices[1].finished
        assert server.proto.devices[1].num_prompt == 3 and server.proto.devices[1].conn is None
    finally:
        server.journal.close()


@pytest.mark.parametrize(
    "change, field",
    [({"seed": 5}, "seed"), ({"temperature": 0.5}, "settings"), ({"ul_codec": "dense-fp16"}, "UL codec")],
)
def test_settings_that_differ_from_the_journal_are_refused(tmp_path, change, field):
    path = tmp_path / "j.sqlite"
    _journal_of_a_crashed_run(path)
    with pytest.raises(ConfigError, match=f"journal: .* was written with {field}"):
        _server(path, **change)


def test_a_finished_run_is_set_aside_and_a_fresh_journal_started(tmp_path):
    path = tmp_path / "j.sqlite"
    _journal_of_a_crashed_run(path)
    with Journal(path) as j:
        j.complete("done")
    server = _server(path)
    try:
        assert server.records == {} and server.round_idx == 0
        kept = sorted(p for p in tmp_path.iterdir() if p.name.startswith("j.sqlite.done-"))
        assert len(kept) == 2 and kept[1].name == kept[0].name + "-head"  # the head goes with it
        with Journal(kept[0], readonly=True) as old:
            assert old.recover().sessions[0].tokens == [5, 6, 8, 9, 10, 11]
    finally:
        server.journal.close()
