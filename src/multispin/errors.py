"""One exception type per family of failure; user mistakes carry a one-line message."""

from __future__ import annotations

import difflib
import re
from typing import Any


class MultispinError(Exception):
    """Base of every error multispin raises on purpose."""


class ConfigError(MultispinError, ValueError):
    """A user-supplied value is out of range or inconsistent (names the field and what is allowed).

    ``locs``: the key paths of the bad fields where known (a file loader turns them into line and
    column)."""

    def __init__(self, *args: Any, locs: tuple = ()) -> None:
        super().__init__(*args)
        self.locs = tuple(locs)


class VocabularyMismatchError(ConfigError):
    """Draft and target models do not share a vocabulary."""


class ModelError(MultispinError):
    """A model cannot be found, fetched or loaded."""


class RunFailed(MultispinError):
    """A job's runs did not complete (a testbed run ended before its rounds: its devices were lost,
    a process was killed) and nothing comparable is left."""


class ProtocolError(MultispinError):
    """A message or a step of the round protocol is invalid."""


class LocalProtocolError(ProtocolError):
    """This side tried a step its protocol state does not allow (a bug in its own loop)."""


class RemoteProtocolError(ProtocolError):
    """The peer sent a message its protocol state does not allow."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) or SIGTERM stopped a long job. Still a KeyboardInterrupt (nothing that
    catches ``Exception`` swallows it); ``str()`` says how far the job got and how to go on,
    ``signum`` which signal stopped it (the exit code is 128 + signum) and ``partial`` holds what
    was done, where a verb can show it (``generate``: the texts so far)."""

    def __init__(self, message: str = "interrupted", signum: int = 2, partial: Any = None) -> None:
        super().__init__(message)
        self.signum = signum
        self.partial = partial

    @classmethod
    def after(cls, exc: BaseException, message: str, partial: Any = None) -> Interrupted:
        """The same interruption as ``exc`` (its signal), told with ``message``."""
        return cls(message, getattr(exc, "signum", 2), partial)


def did_you_mean(word: Any, choices) -> str:
    """`` (did you mean X?)`` when one of ``choices`` is a likely misspelling's target, else ``""``.
    The cutoff is high on purpose: a far-fetched suggestion (paper-llama → paper-r1) misleads."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.8)
    return f" (did you mean {close[0]}?)" if close else ""


# a message that starts with the dotted field it is about: ``devices.distances_m: needs ...``
_FIELD_HEAD = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*): ")
_MAX_GOT = 60


def _got(err: dict) -> str:
    """`` (got X)`` for a value the user gave; nothing for a missing field or for a whole table
    (a cross-field error's input is every field of its model: the message names the fields)."""
    got = err.get("input")
    if err.get("type") == "missing" or isinstance(got, dict):
        return ""
    text = repr(got)
    return f" (got {text if len(text) <= _MAX_GOT else text[: _MAX_GOT - 3] + '...'})"


def config_error_from_validation(exc: Any, prefix: str = "") -> ConfigError:
    """Turn a pydantic ValidationError into a one-line ConfigError naming the field(s).

    Example: ``temperature: Input should be greater than or equal to 0 (got -1.0)``. A
    model-level (cross-field) error whose message starts with a field name is given under that
    field (``devices.distances_m: needs devices.count = 5 entries (got 2)``), never with the
    whole input.
    """
    parts, locs = [], []
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        msg = str(err.get("msg", "invalid"))
        head = _FIELD_HEAD.match(msg) if not loc else None
        if head:
            loc, msg = tuple(head.group(1).split(".")), msg[head.end() :]
        locs.append(loc)
        field = ".".join(str(p) for p in loc) or "value"
        if prefix:
            field = f"{prefix}.{field}"
        parts.append(f"{field}: {msg}{_got(err)}")
    return ConfigError("; ".join(parts), locs=tuple(locs))


class JournalError(MultispinError):
    """The crash-safe journal cannot be opened, read or written as asked (names the file)."""


class JournalDamaged(JournalError):
    """The journal was a journal but is damaged or lost rounds (names what and what to do); the
    server resumes from it only when told to repair it."""


class SecurityError(MultispinError):
    """Keys cannot be created or loaded, or a peer's key does not match the identity it claims."""
