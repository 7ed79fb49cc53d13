"""Executors of `multispin reproduce`: the same seed gives the same CSV bytes in-process, on the
local process pool and on Ray; bad executor flags fail in one line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from multispin.errors import ConfigError
from multispin.experiments.reproduce import executor, fig_resources
from multispin.experiments.reproduce.config import RunConfig
from multispin.experiments.reproduce.pipeline import export_figures


def _cfg(out: Path, **kw) -> RunConfig:
    base = dict(
        out=out,
        quick=True,
        preset="paper-qwen",
        seed=5,
        workers=1,
        drops=2,
        n_saa=40,
        progress=False,
        figures=(fig_resources.NAME,),
        use_cache=False,
    )
    base.update(kw)
    return RunConfig(**base)


def _csvs(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*.csv"))}


def test_bad_executor_flags_are_config_errors(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="executor: unknown value 'dask'"):
        _cfg(tmp_path, executor="dask")
    with pytest.raises(ConfigError, match="address: a cluster address needs --executor ray"):
        _cfg(tmp_path, address="head:6379")
    real = executor.importlib.util.find_spec
    monkeypatch.setattr(
        executor.importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a)
    )
    with pytest.raises(ConfigError, match=r"pip install 'multispin\[cluster\]'"):
        _cfg(tmp_path, executor="ray")


def test_cli_executor_errors_are_one_line(multispin, tmp_path):
    res = multispin("reproduce", "--executor", "dask", "--out", str(tmp_path))
    assert res.code == 2 and len(res.err.strip().splitlines()) == 1
    res = multispin("reproduce", "--address", "head:6379", "--out", str(tmp_path))
    assert res.code == 2 and "needs --executor ray" in res.err


@pytest.mark.slow
def test_ray_gives_the_csvs_of_the_local_pool(tmp_path, one_ray_instance):
    # not skipped when Ray is missing: `make test` installs the cluster extra, and CI runs this
    import ray

    # (1 and 2 local workers give the same bytes: test_reproduce_runner.py)
    export_figures(_cfg(tmp_path / "w2", workers=2), [fig_resources])
    assert not ray.is_initialized()
    t0 = time.perf_counter()
    # no cluster address: a local Ray instance with num_cpus = workers = 2, shut down afterwards
    export_figures(_cfg(tmp_path / "ray", workers=2, executor="ray"), [fig_resources])
    print(f"ray: {time.perf_counter() - t0:.1f} s including the start of the local instance")
    assert not ray.is_initialized()
    a, b = _csvs(tmp_path / "w2"), _csvs(tmp_path / "ray")
    assert set(a) == {"drops/resources.csv", f"{fig_resources.NAME}.csv", "settings.csv"}
    assert a == b
