"""Every id range and count on the command line is checked before anything is built: a range such as
``--devices 0-2147483647`` used to build the whole id list first (a MemoryError traceback under a
6 GB cap, 23 GB without one)."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from multispin.errors import ConfigError
from multispin.experiments.reproduce.config import MAX_DROPS, RunConfig
from multispin.experiments.sweep import MAX_GRID_POINTS, check_grid_size
from multispin.runtime.net.pool import parse_device_ids
from multispin.runtime.security.limits import MAX_SERVED_DEVICES

# bytes a refusal may allocate: a 2**31-id list would take 17 GB, a 4096-id list about 150 kB
REFUSAL_BYTES = 256 * 1024


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
    except ConfigError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("spec", ["0-2147483647", "0-3,5-2147483647", "7-4103", "1-99999999999999999999999"])
def test_a_too_wide_device_range_is_refused_before_any_id_list_is_built(spec):
    t0 = time.perf_counter()
    assert _peak_bytes(lambda: parse_device_ids(spec)) < REFUSAL_BYTES
    assert time.perf_counter() - t0 < 1.0
    with pytest.raises(ConfigError, match=r"^devices: (a pool holds at most 4096|ids must lie in)"):
        parse_device_ids(spec)


def test_the_measure_would_catch_a_list_built_first():
    """Negative control: building the ids of a refused range (the old behaviour, here only 10**6 of
    them) is far above the refusal's allowance, so the bound above is not vacuous."""
    assert _peak_bytes(lambda: list(range(10**6))) > 10 * REFUSAL_BYTES


def test_the_largest_pool_one_server_serves_still_parses():
    assert len(parse_device_ids(f"0-{MAX_SERVED_DEVICES - 1}")) == MAX_SERVED_DEVICES
    assert parse_device_ids("2147483647") == [2147483647]


def test_run_counts_and_sweep_grids_are_bounded():
    with pytest.raises(ConfigError, match=rf"^drops: must be in \[2, {MAX_DROPS}\]"):
        RunConfig(drops=10**9)
    with pytest.raises(ConfigError, match=r"^workers: must be in \[1, "):
        RunConfig(workers=10**6)
    with pytest.raises(ConfigError, match=r"^n_saa: must be in \[1, "):
        RunConfig(n_saa=10**9)
    # 11 × 10 × 10 × 10 points: counted from the lists, never built
    over = {"a": list(range(11)), "b": list(range(10)), "c": list(range(10)), "d": list(range(10))}
    assert _peak_bytes(lambda: check_grid_size(over)) < REFUSAL_BYTES
    with pytest.raises(ConfigError, match=f"^over: the grid has 11000 points, at most {MAX_GRID_POINTS}"):
        check_grid_size(over)
    check_grid_size({"a": list(range(100)), "b": list(range(100))})  # 10,000: the bound itself passes


@pytest.mark.parametrize(
    "args, field",
    [
        (["device", "--devices", "0-2147483647", "--insecure", "--secret", "x" * 16, "--pair", "tiny"], "devices"),
        (["keys", "device", "k", "--device-id", "99999999999"], "--device-id"),
        (["sweep", "--over", "radio.p_dl_dbm=10,16", "--drops", "1000000000"], "drops"),
        (["reproduce", "--quick", "--drops", "1000000000"], "drops"),
        (["reproduce", "--quick", "--workers", "1000000"], "workers"),
    ],
)
def test_the_cli_refuses_a_huge_count_in_one_line(multispin, args, field):
    run = multispin(*args)
    assert run.code == 2, run.err
    lines = run.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}"), run.err
