"""Text from elsewhere (a peer's ERROR reason or draft name, a prompt, an exception's message) made
safe for a console or log line: control characters are shown as escapes, never passed through.

A newline or carriage return would let the text forge a line of its own (a fake timestamp and
level); ESC would let it recolour or erase the operator's terminal; the Unicode line separators
and direction overrides do the same on terminals that honour them. Each is written as ``\\n``,
``\\x1b``, ``\\u202e``…, so one event is one line and shows what was sent.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls, the Unicode line/paragraph separators and the bidi embeddings,
# overrides and isolates
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match) -> str:
    c = match.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def escape_controls(text: object) -> str:
    """``text`` as a string with every control character written as its escape."""
    return CONTROL.sub(_escape, str(text))


def has_controls(text: str) -> bool:
    return CONTROL.search(text) is not None


__all__ = ["CONTROL", "escape_controls", "has_controls"]
