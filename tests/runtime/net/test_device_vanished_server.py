"""`multispin device` on a server that never returns keeps its --help's promise: exit 1, the
partial text printed and written to --result with ``finished: false``. It used to exit 2 with one
line and no result file, as if the server had never been reached."""

from __future__ import annotations

import json
import threading

import pytest

from multispin.models.registry import resolve_pair
from multispin.runtime.net.server import EdgeServer
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.round.local import fixed_policy

pytestmark = [pytest.mark.slow, pytest.mark.integration]  # real sockets and processes

SECRET = "vanished-server-test-secret"


def test_a_device_whose_server_never_returns_exits_1_with_its_partial_text(multispin, tmp_path):
    pair = resolve_pair("tiny")
    hang, hung = threading.Event(), threading.Event()

    def freeze_after_round_2(out) -> None:  # the server's loop stops answering, mid-text
        if out.round == 2:
            hung.set()
            hang.wait(120)

    cfg = ServerConfig.make(
        host="127.0.0.1",
        port=0,
        expected_devices=1,
        max_new_tokens=500,
        temperature=0.0,
        seed=0,
        join_timeout_s=60,
    )
    srv = EdgeServer(cfg, pair, SECRET, policy=fixed_policy(3, seed=cfg.seed), before_commit=freeze_after_round_2)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    assert srv.ready.wait(30) and srv.endpoint
    result = tmp_path / "device0.json"
    try:
        res = multispin(
            "device",
            "--insecure",
            "--secret",
            SECRET,
            "--server",
            srv.endpoint,
            "--device-id",
            "0",
            "--pair",
            "tiny",
            "--prompt",
            "Hello edge",
            "--server-timeout",
            "1",
            "--reconnects",
            "1",
            "--result",
            str(result),
        )
    finally:
        hang.set()
        srv.request_stop("test over")
        thread.join(30)
    assert hung.is_set()
    assert res.code == 1, res.err
    last = res.err.strip().splitlines()[-1]
    assert last.startswith("error: device 0: did not finish its text (") and "gave up after 1 reconnects" in last
    saved = json.loads(result.read_text())
    assert saved["finished"] is False and "gave up after 1 reconnects" in saved["reason"]
    # rounds 0 and 1 were committed before the server froze: the partial text is theirs
    assert len(saved["generated"]) >= 2
    assert saved["text"] == pair.tokenizer.decode(saved["generated"], skip_special_tokens=True)
