"""Where the work units of ``multispin reproduce`` run: in this process, a local process pool, or Ray.

A work unit is one call ``fn(*args)`` (the runner's chunk of drops of one point). Every executor
yields ``(key, result)`` pairs as the units finish, in whatever order; the runner sorts rows by
drop, and every drop's seed is fixed before it is sent, so the CSVs do not depend on the executor,
the number of workers or the order of completion.

Ray is optional (``pip install 'multispin[cluster]'``): ``executor="ray"`` without ``address``
starts a local Ray instance with ``workers`` CPUs (or joins the one this process already
initialised); with ``address`` it joins that cluster and ships this copy of the ``multispin``
package to it (``runtime_env.py_modules``), so the cluster computes with the driver's code, the
code whose hash is in the cache keys. The cluster's nodes need multispin's dependencies, and a
cluster that requires Ray's token authentication needs the token on this host as Ray documents it
(a failed connection is one line with Ray's reason).
"""

from __future__ import annotations

import importlib.util
import logging
import multiprocessing
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from multispin.errors import ConfigError
from multispin.lifeline import exit_with_parent

EXECUTORS = ("local", "ray")
_RAY_MISSING = "executor: --executor ray needs Ray: pip install 'multispin[cluster]'"


def check_executor(executor: str, address: str | None) -> None:
    """ConfigError (one line) for an unknown executor, an address without Ray, or Ray not installed."""
    if executor not in EXECUTORS:
        raise ConfigError(f"executor: unknown value {executor!r} (allowed: {', '.join(EXECUTORS)})")
    if address is not None and executor != "ray":
        raise ConfigError("address: a cluster address needs --executor ray")
    if executor == "ray" and importlib.util.find_spec("ray") is None:
        raise ConfigError(_RAY_MISSING)


def run_calls(
    fn: Callable[..., Any],
    calls: dict[Any, tuple],
    executor: str = "local",
    workers: int = 1,
    address: str | None = None,
) -> Iterator[tuple[Any, Any]]:
    """``(key, fn(*args))`` for every ``key: args`` of ``calls``, as they finish."""
    check_executor(executor, address)
    if executor == "ray":
        yield from _ray(fn, calls, workers, address)
    elif workers <= 1 or len(calls) <= 1:
        # in this process: what tests monkeypatch is what runs
        for key, args in calls.items():
            yield key, fn(*args)
    else:
        yield from _pool(fn, calls, workers)


def _pool_context():
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" not in methods:
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    # the forkserver watches this process and ends with it (`multispin.lifeline`)
    ctx.set_forkserver_preload(["__main__", "multispin._lifeline_preload"])
    return ctx


def _init_worker() -> None:
    """A worker leaves a terminal's Ctrl-C (sent to the whole process group) to the parent, which
    kills it: no KeyboardInterrupt traceback from every worker. And it ends with its parent,
    however that ended (`multispin.lifeline`): a killed run leaves no worker computing."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent()


def _pool(fn, calls, workers) -> Iterator[tuple[Any, Any]]:
    pool = ProcessPoolExecutor(
        max_workers=min(workers, len(calls)), mp_context=_pool_context(), initializer=_init_worker
    )
    try:
        pending = {pool.submit(fn, *args): key for key, args in calls.items()}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                yield pending.pop(fut), fut.result()
    except BaseException:
        # Ctrl-C or an error: stop the workers now (finished units are already with the caller).
        # Their handles first: shutdown() forgets them, and a worker left computing kept the
        # interpreter's exit waiting on the pool's thread for a minute or more.
        workers_alive = list((getattr(pool, "_processes", None) or {}).values())
        for proc in workers_alive:
            proc.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _ray(fn, calls, workers, address) -> Iterator[tuple[Any, Any]]:
    import ray

    started = False
    if not ray.is_initialized():
        kw: dict[str, Any] = {"logging_level": logging.WARNING}
        if address is None:
            # "local": a new instance of our own even where `ray start` runs a cluster on this host
            kw.update(address="local", num_cpus=workers, include_dashboard=False)
        else:  # a running cluster has its own resources and dashboard: ray.init refuses both
            kw["address"] = address
            # the package's folder (what Ray does with the module object), without importing the package's API
            kw["runtime_env"] = {"py_modules": [str(Path(__file__).resolve().parents[2])]}
        try:
            ray.init(**kw)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            where = f"join the Ray cluster at {address}" if address else "start a local Ray instance"
            raise ConfigError(f"executor: cannot {where}: {' '.join(str(exc).split())}") from None
        started = True
    remote = ray.remote(num_cpus=1)(fn)
    refs = {remote.remote(*args): key for key, args in calls.items()}
    try:
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            for ref in done:
                yield refs.pop(ref), ray.get(ref)
    except BaseException:
        for ref in refs:
            ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()
