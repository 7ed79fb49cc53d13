"""Per-device, per-round channel gains from a CSV file (``channel.trace``): a measured or
simulated channel replaces the scenario's path loss and fading, in every verb that draws a
channel (optimize, sweep, testbed, demo).

Format (docs/own-channel.md): a header line, then one line per round and device::

    round,device,gain_ul_db,gain_dl_db
    0,0,-95.2,-97.0
    0,1,-101.4,-100.9
    1,0,-94.8,-96.1

``gain_ul_db``: the uplink power gain in dB (path loss, shadowing and fading together; negative);
``gain_dl_db`` (optional column): the downlink's, else the uplink's (reciprocity). Rounds are
0, 1, …, R−1 and devices 0, …, K−1, each pair exactly once, K the scenario's device count.
Round r of a run takes trace round r mod R (a run longer than the trace cycles through it).
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from multispin.errors import ConfigError

COLUMNS = ("round", "device", "gain_ul_db", "gain_dl_db")
REQUIRED = ("round", "device", "gain_ul_db")
MIN_GAIN_DB, MAX_GAIN_DB = -300.0, 0.0


@dataclass(frozen=True)
class ChannelTrace:
    """Gains (linear power) per round and device: ``gain_ul``, ``gain_dl`` of shape (R, K)."""

    gain_ul: np.ndarray
    gain_dl: np.ndarray

    @property
    def rounds(self) -> int:
        return int(self.gain_ul.shape[0])

    @property
    def devices(self) -> int:
        return int(self.gain_ul.shape[1])

    def at(self, round_index: int) -> tuple[np.ndarray, np.ndarray]:
        r = int(round_index) % self.rounds
        return self.gain_ul[r].copy(), self.gain_dl[r].copy()

    @property
    def mean_gain(self) -> np.ndarray:
        """Each device's mean UL gain over the trace (its large-scale gain, for reports)."""
        return self.gain_ul.mean(axis=0)


def _number(text: str, column: str, line: int, where: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ConfigError(f"channel.trace: {where}:{line}: {column} must be a number (got {text!r})") from None
    if not math.isfinite(value):
        raise ConfigError(f"channel.trace: {where}:{line}: {column} must be finite (got {text!r})")
    return value


def _read_rows(path: Path) -> tuple[list[tuple[int, int, float, float | None]], bool]:
    where = str(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"channel.trace: cannot read {where} ({exc.strerror or exc})") from None
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in REQUIRED if c not in header]
    unknown = [c for c in header if c not in COLUMNS]
    if missing or unknown:
        raise ConfigError(
            f"channel.trace: {where}:1: header must name {', '.join(REQUIRED)} (and optionally gain_dl_db); "
            + (f"missing {', '.join(missing)}" if missing else f"unknown column {', '.join(unknown)}")
        )
    has_dl = "gain_dl_db" in header
    rows = []
    for line, raw in enumerate(reader, start=2):
        row = {k.strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        r, d = _number(row["round"], "round", line, where), _number(row["device"], "device", line, where)
        if r != int(r) or d != int(d) or r < 0 or d < 0:
            raise ConfigError(f"channel.trace: {where}:{line}: round and device must be integers ≥ 0")
        ul = _number(row["gain_ul_db"], "gain_ul_db", line, where)
        dl = _number(row["gain_dl_db"], "gain_dl_db", line, where) if has_dl else None
        for column, v in (("gain_ul_db", ul), ("gain_dl_db", dl)):
            if v is not None and not MIN_GAIN_DB <= v <= MAX_GAIN_DB:
                raise ConfigError(
                    f"channel.trace: {where}:{line}: {column} must be a power gain in dB in "
                    f"[{MIN_GAIN_DB:g}, {MAX_GAIN_DB:g}] (got {v:g})"
                )
        rows.append((int(r), int(d), ul, dl))
    return rows, has_dl


@lru_cache(maxsize=16)
def _load(path: str, mtime_ns: int) -> ChannelTrace:
    rows, has_dl = _read_rows(Path(path))
    if not rows:
        raise ConfigError(f"channel.trace: {path}: no data lines after the header")
    n_rounds = 1 + max(r for r, _, _, _ in rows)
    n_devices = 1 + max(d for _, d, _, _ in rows)
    ul = np.full((n_rounds, n_devices), np.nan)
    dl = np.full((n_rounds, n_devices), np.nan)
    for r, d, g_ul, g_dl in rows:
        if not np.isnan(ul[r, d]):
            raise ConfigError(f"channel.trace: {path}: round {r}, device {d} appears twice")
        ul[r, d] = g_ul
        dl[r, d] = g_dl if g_dl is not None else g_ul
    holes = np.argwhere(np.isnan(ul))
    if holes.size:
        r, d = holes[0]
        raise ConfigError(
            f"channel.trace: {path}: no line for round {r}, device {d} (each of rounds 0..{n_rounds - 1} "
            f"needs every device 0..{n_devices - 1})"
        )
    trace = ChannelTrace(10.0 ** (ul / 10.0), 10.0 ** (dl / 10.0))
    trace.gain_ul.setflags(write=False)
    trace.gain_dl.setflags(write=False)
    return trace


def load_trace(path: str | os.PathLike, devices: int | None = None) -> ChannelTrace:
    """The trace in ``path`` (cached while the file is unchanged), checked to hold ``devices``
    devices when given; every problem is a one-line error naming the file and line."""
    p = Path(path)
    try:
        mtime = p.stat().st_mtime_ns
    except OSError:
        raise ConfigError(f"channel.trace: no such file {str(path)!r}") from None
    trace = _load(str(p.resolve()), mtime)
    if devices is not None and trace.devices != devices:
        raise ConfigError(
            f"channel.trace: {path} holds {trace.devices} device(s), the scenario {devices} "
            "(set devices.count to the trace's)"
        )
    return trace


def write_trace(path: str | os.PathLike, gain_ul_db: np.ndarray, gain_dl_db: np.ndarray | None = None) -> Path:
    """Write gains (dB, shape (R, K)) in the trace format (for tests and for exporting a run's channel)."""
    ul = np.asarray(gain_ul_db, dtype=float)
    dl = None if gain_dl_db is None else np.asarray(gain_dl_db, dtype=float)
    lines = ["round,device,gain_ul_db" + (",gain_dl_db" if dl is not None else "")]
    for r in range(ul.shape[0]):
        for d in range(ul.shape[1]):
            lines.append(f"{r},{d},{float(ul[r, d])!r}" + (f",{float(dl[r, d])!r}" if dl is not None else ""))
    p = Path(path)
    p.write_text("\n".join(lines) + "\n")
    return p
