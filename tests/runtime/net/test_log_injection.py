"""Untrusted strings never reach a console line raw: an authenticated device's ERROR reason with a
newline and a fake timestamp used to become a forged, complete line in the server's console log,
ESC/CR bytes recoloured or erased the operator's line, and a HELLO draft name with a newline was
accepted. Now every string field that holds a control character is refused on the wire, and the
console formatter writes any control character that still reaches a record as an escape."""

from __future__ import annotations

import logging
import re
import time

import pytest
import zmq
from tests.runtime.net.test_network import SECRET, RawClient, _server

from multispin.commands._options import setup_logging
from multispin.errors import ProtocolError
from multispin.models.tiny import load_tiny_pair
from multispin.runtime.wire import messages as P
from multispin.safe_text import escape_controls

pytestmark = pytest.mark.integration

FORGED = "2026-12-07 12:00:00,000 INFO multispin.server: device 7 finished"
INJECTED = f"oops\n{FORGED}\x1b[2K\r\x1b[31mred"
# a console line as setup_logging formats it: timestamp, level, logger
CONSOLE_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ multispin[.\w]*: ")


@pytest.fixture(scope="module")
def pair():
    return load_tiny_pair()


def _raw_error(code: str, reason: str) -> bytes:
    """An ERROR frame as a hostile peer would build it, past ErrorMsg.make's cleaning."""
    return P.encode_message(P.ErrorMsg(code, reason))


def test_a_string_field_with_control_characters_is_refused_on_the_wire():
    limits = P.Limits(vocab_size=100)
    assert P.decode_message(_raw_error("internal", "plain words"), limits).reason == "plain words"  # control
    for bad in (INJECTED, "a\rb", "x\x1b[2K", "rtl\u202eevil", "ls\u2028ep"):
        with pytest.raises(ProtocolError, match="control characters"):
            P.decode_message(_raw_error("internal", bad), limits)
    hello = P.encode_message(P.HelloMsg(3, (1, 2), True, "q5g64\nfake"))
    with pytest.raises(ProtocolError, match="HELLO.draft: holds control characters"):
        P.decode_message(hello, limits)


def test_our_own_reasons_never_carry_control_characters():
    msg = P.ErrorMsg.make("internal", f"ValueError: {INJECTED}")
    assert "\n" not in msg.reason and "\x1b" not in msg.reason and "\r" not in msg.reason
    assert "\\x1b[2K" in msg.reason  # shown, not dropped


def test_the_console_writes_one_line_per_record_with_controls_escaped(capsys):
    setup_logging("info")
    logging.getLogger("multispin.server").warning("dropped device %d: %s", 7, INJECTED)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "\r" not in err
    assert CONSOLE_LINE.match(err) and FORGED in err  # the words are there, on the one line
    # negative control: a plain formatter lets the same record forge a line of its own
    plain = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    record = logging.LogRecord("multispin.server", logging.WARNING, "", 0, "%s", (INJECTED,), None)
    assert any(line.startswith(FORGED) for line in plain.format(record).splitlines())
    assert escape_controls(plain.format(record)).count("\n") == 0


def test_an_authenticated_devices_injected_error_is_one_escaped_line_on_the_servers_console(pair, tmp_path, capsys):
    setup_logging("info")
    server, th, box, events, limits = _server(pair, tmp_path, expected=1, idle_timeout_s=1)
    ctx = zmq.Context()
    try:
        raw = RawClient(ctx, server.endpoint, limits)
        raw.join(1, SECRET.encode())
        raw.send(_raw_error("internal", INJECTED))
        deadline = time.monotonic() + 20
        while not any(e.get("event") == "drop" for e in events) and time.monotonic() < deadline:
            time.sleep(0.05)
        server.request_stop("test")
        th.join(30)
    finally:
        ctx.destroy(linger=0)
    drops = [e for e in events if e.get("event") == "drop"]
    assert drops and drops[0]["device"] == 1  # the hostile frame really reached the server
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\r" not in err
    lines = err.splitlines()
    assert lines and all(CONSOLE_LINE.match(line) for line in lines), err
    assert not any(line.startswith(FORGED) for line in lines)
    assert any("control characters" in line for line in lines)
