"""Whether a finished `serve` or `device` run did what it was asked: the exit code scripts read.

Exit 0 only when the run delivered: the device finished its text and its digest is the server's;
the server's devices all finished (or the operator stopped it: SIGTERM, --rounds) with matching
digests. Otherwise one line says why and the verb exits 1 (2 stays for a bad flag or a run that
could not start). The texts and summaries are still printed first: a failed run's partial text
is worth keeping, but a script must not take it for a finished one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - the verbs import these lazily (the CLI starts fast)
    from multispin.runtime.net.device import DeviceOutcome
    from multispin.runtime.wire.records import ServerSummary

# why a server may stop with devices unfinished and still have done what it was told
_ASKED_TO_STOP = ("rounds", "signal", "SIGTERM", "SIGINT")


def device_failure(outcome: DeviceOutcome) -> str | None:
    """None when the device finished and its digest matches the server's, else why not."""
    who = f"device {outcome.device_id}"
    if not outcome.finished:
        return f"{who}: did not finish its text ({len(outcome.generated)} tokens; the session ended: {outcome.reason})"
    if outcome.server_digest is not None and outcome.server_digest != outcome.digest:
        return (
            f"{who}: its tokens differ from the server's record (digest {outcome.digest[:12]}…, "
            f"the server's {outcome.server_digest[:12]}…)"
        )
    return None


def serve_failure(summary: ServerSummary) -> str | None:
    """None when every device finished with the server's digest (or the run was stopped as asked)."""
    mismatched = sorted(d for d, rec in summary.devices.items() if rec.digest_match is False)
    if mismatched:
        return f"device(s) {_ids(mismatched)}: the device's digest differs from the server's record"
    if summary.stop_reason == "no devices":
        return "no device joined within --join-timeout"
    if summary.stop_reason in _ASKED_TO_STOP:
        return None
    unfinished = {d: rec for d, rec in sorted(summary.devices.items()) if not rec.finished}
    if not unfinished:
        return None
    d, rec = next(iter(unfinished.items()))
    last = f"; device {d}'s session ended: {rec.drops[-1]}" if rec.drops else ""
    return f"device(s) {_ids(unfinished)} did not finish (the server stopped: {summary.stop_reason}){last}"


def _ids(ids) -> str:
    return ", ".join(str(d) for d in ids)
