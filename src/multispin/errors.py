"""One exception type per family of failure; user mistakes carry a one-line message."""

from __future__ import annotations

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


class ProtocolError(MultispinError):
    """A message or a step of the round protocol is invalid."""


class LocalProtocolError(ProtocolError):
    """This side tried a step its protocol state does not allow (a bug in its own loop)."""


class RemoteProtocolError(ProtocolError):
    """The peer sent a message its protocol state does not allow."""


def did_you_mean(word: Any, choices) -> str:
    """`` (did you mean X?)`` when one of ``choices`` is a likely misspelling's target, else ``""``.
    The cutoff is high on purpose: a far-fetched suggestion (paper-llama → paper-r1) misleads."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.8)
    return f" (did you mean {close[0]}?)" if close else ""


def config_error_from_validation(exc: Any, prefix: str = "") -> ConfigError:
    """Turn a pydantic ValidationError into a one-line ConfigError naming the field(s).

    Example: ``temperature: Input should be greater than or equal to 0 (got -1.0)``.
    """
    parts, locs = [], []
    for err in exc.errors():
        locs.append(tuple(err.get("loc", ())))
        field = ".".join(str(p) for p in err.get("loc", ())) or "value"
        if prefix:
            field = f"{prefix}.{field}"
        got = err.get("input")
        got_txt = "" if err.get("type") == "missing" else f" (got {got!r})"
        parts.append(f"{field}: {err.get('msg', 'invalid')}{got_txt}")
    return ConfigError("; ".join(parts), locs=tuple(locs))


class JournalError(MultispinError):
    """The crash-safe journal cannot be opened, read or written as asked (names the file)."""


class JournalDamaged(JournalError):
    """The journal was a journal but is damaged or lost rounds (names what and what to do); the
    server resumes from it only when told to repair it."""


class SecurityError(MultispinError):
    """Keys cannot be created or loaded, or a peer's key does not match the identity it claims."""
