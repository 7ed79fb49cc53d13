"""A process that runs testbed run after run gives each run's freed heap back (`release_freed_heap`):
without it a K = 20 study's process grew by gigabytes, and every run forks its server and pool from it."""

from __future__ import annotations

import ctypes
import os

import pytest

from multispin.experiments import testbed
from multispin.experiments.testbed import TestbedConfig, release_freed_heap


def _rss_mb() -> float:
    return int(open(f"/proc/{os.getpid()}/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


@pytest.mark.skipif(_libc() is None or not hasattr(_libc(), "malloc_trim"), reason="glibc only")
def test_freed_heap_pages_go_back_only_when_released():
    libc = _libc()
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    size, count = 100_000, 2000  # below glibc's mmap threshold: these live on the heap, as a run's buffers do
    pointers = [libc.malloc(size) for _ in range(count)]
    for p in pointers:
        libc.memset(p, 1, size)
    full = _rss_mb()
    for i, p in enumerate(pointers):
        if i % 10:  # free nine in ten: every kept one pins the heap's top, so free() returns nothing
            libc.free(p)
    freed = _rss_mb()
    released = release_freed_heap()
    after = _rss_mb()
    for p in pointers[::10]:
        libc.free(p)
    allocated_mb = size * count / 2**20
    assert released
    assert full - freed < 0.2 * allocated_mb  # the negative control: freed, yet still resident
    assert freed - after > 0.6 * allocated_mb  # released: most of the nine tenths go back


@pytest.mark.skipif(_libc() is None or not hasattr(_libc(), "malloc_trim"), reason="glibc only")
def test_garbage_in_reference_cycles_is_collected_before_the_release():
    # a run's server, threads and buffers sit in reference cycles: freed by the collector, not by
    # the run's end; a release that only trims (the negative control) gives none of it back
    size, count = 100_000, 2000
    allocated_mb = size * count / 2**20

    def cycle_of_buffers() -> None:
        holder: dict = {"buffers": [bytes([i % 251]) * size for i in range(count)]}
        holder["self"] = holder

    def released_mb(release) -> float:
        import gc

        gc.collect()
        gc.disable()  # so that only the release collects the cycle
        try:
            cycle_of_buffers()
            before = _rss_mb()
            release()
            return before - _rss_mb()
        finally:
            gc.enable()
            gc.collect()
            release_freed_heap()

    trim_only = released_mb(lambda: _libc().malloc_trim(0))
    assert trim_only < 0.2 * allocated_mb
    assert released_mb(release_freed_heap) > 0.6 * allocated_mb


def test_a_run_releases_the_heap_even_when_it_fails(monkeypatch):
    calls = []
    monkeypatch.setattr(testbed, "release_freed_heap", lambda: calls.append(1))

    def broken(*args):
        raise RuntimeError("pool died")

    monkeypatch.setattr(testbed, "_run_testbed", broken)
    with pytest.raises(RuntimeError, match="pool died"):
        testbed.run_testbed(TestbedConfig.make(pair="tiny", devices=2, rounds=2))
    assert calls == [1]
