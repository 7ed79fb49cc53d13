"""What a server reports when it stops: each device's record next to its digests, and the run's totals.

What: `device_records` turns the protocol's device table and the verifier's token records into
one `DeviceRecord` per device (with whether the device's final digest matched the server's) and
writes one ``device`` line per device to the log; `server_summary` adds the run's totals (rounds,
refusals, churn, stragglers) and writes the ``shutdown`` line.

Why apart: the summary is read by `serve --summary`, the testbed and the tests; its shape is
the records' (`wire/records.py`), and building it needs nothing of the round or the socket.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from multispin.runtime.net.jsonlog import JsonlLog
from multispin.runtime.wire.records import DeviceRecord, RoundEvent, ServerSummary
from multispin.runtime.wire.server_protocol import DeviceEntry


def device_records(
    devices: Mapping[int, DeviceEntry], records: Mapping[int, Sequence[int]], log: JsonlLog
) -> dict[int, DeviceRecord]:
    """One record per device, in id order, each also written to the log."""
    out = {}
    for d, dev in sorted(devices.items()):
        server_digest = dev.digest.digest()
        rec = DeviceRecord(
            device_id=d,
            draft=dev.draft,
            num_prompt=dev.num_prompt,
            tokens=list(records[d]),
            finished=dev.finished,
            sessions=dev.sessions,
            drops=list(dev.drops),
            rounds=list(dev.rounds),
            num_rounds=dev.num_rounds,
            digest=server_digest.hex(),
            client_digest=dev.client_digest.hex() if dev.client_digest else None,
            digest_match=None if dev.client_digest is None else dev.client_digest == server_digest,
        )
        out[d] = rec
        log.write(
            "device",
            device=d,
            tokens=len(rec.tokens),
            generated=len(rec.generated),
            finished=rec.finished,
            sessions=rec.sessions,
            drops=rec.drops,
            digest=rec.digest,
            device_digest=rec.client_digest,
            match=rec.digest_match,
        )
    return out


def server_summary(
    log: JsonlLog,
    *,
    rounds: int,
    stop_reason: str,
    wall_s: float,
    devices: dict[int, DeviceRecord],
    refused: int,
    events: Sequence[RoundEvent],
    refusals: Mapping[str, int],
    churn: Mapping[str, int],
    stragglers: Mapping[str, float],
) -> ServerSummary:
    """The run's summary; its totals also go to the log's ``shutdown`` line."""
    summary = ServerSummary(
        rounds,
        stop_reason,
        wall_s,
        devices,
        refused,
        list(events),
        dict(refusals),
        dict(churn),
        dict(stragglers),
    )
    log.write(
        "shutdown",
        reason=stop_reason,
        rounds=rounds,
        refused=refused,
        refusals=refusals,
        churn=churn,
        stragglers=stragglers,
        wall_s=wall_s,
    )
    return summary


__all__ = ["device_records", "server_summary"]
