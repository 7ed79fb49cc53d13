"""A device's jobs, one after another: the body of every local testbed device, and the entry point
of a device process that reads its job description from a file.

What: `run_jobs` builds each job's `DeviceClient` and runs it (each job a session of its own)
until the server leaves one unfinished, writing the outcomes to a result file after every job.
``python -m multispin.runtime.net.device_job JOB.json`` does the same in a fresh interpreter: the
file names the pair, the torch threads, where the result goes, and each job's device id, draft,
prompt, key folder and `DeviceClient` options (`job_description`). The shared secret of a
plaintext run never goes in the file or on the command line: it travels in $MULTISPIN_SECRET.

Why: the launcher's subprocess runner starts a device this way instead of building the argv of
the ``multispin device`` command, a layer above the runtime whose flags it would have to follow.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from multispin.lifeline import exit_with_parent
from multispin.models.registry import resolve_pair
from multispin.runtime.net.device import build_device_client

if TYPE_CHECKING:  # the device module (zmq, the models' roles) loads when a job runs
    from multispin.runtime.net.device import DeviceClient


def run_jobs(
    jobs: Sequence[dict], result_path: Path | None = None, on_client: Callable[[DeviceClient], None] | None = None
) -> dict:
    """One device's jobs (`build_device_client` keyword arguments each), one after another, until
    the server leaves one unfinished (the run stopped). Returns ``{"jobs": [outcome, ...]}``, also
    written to `result_path` after every job: the server may stop before a finished job's
    successor is admitted, and the launcher then ends this runner without losing the jobs it
    completed."""

    done: list[dict] = []
    for kwargs in jobs:
        try:
            client = build_device_client(**kwargs)
            if on_client is not None:
                on_client(client)
            outcome = client.run()
        except Exception as exc:
            done.append({"device_id": kwargs["device_id"], "error": f"{type(exc).__name__}: {exc}"})
        else:
            outcome.text = kwargs["pair"].tokenizer.decode(outcome.generated, skip_special_tokens=True)
            done.append(outcome.to_dict())
        if result_path is not None:
            write_result(result_path, {"jobs": done})
        if "error" in done[-1] or not done[-1]["finished"]:
            break
    return {"jobs": done}


def write_result(path: Path, payload: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)  # a reader never sees half a file


def job_description(pair: str, threads: int, result: Path, jobs: Sequence[dict]) -> dict:
    """What a device process runs: each job's `build_device_client` keyword arguments, less the
    pair (named once here) and the secret (never written down), with a key folder as a path."""
    return {
        "pair": pair,
        "threads": threads,
        "result": str(result),
        "jobs": [
            {k: (str(v) if isinstance(v, Path) else v) for k, v in job.items() if k not in ("pair", "secret")}
            for job in jobs
        ],
    }


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m multispin.runtime.net.device_job JOB.json", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    exit_with_parent()  # a killed launcher leaves no device process behind
    job = json.loads(Path(argv[0]).read_text())
    result = Path(job["result"])
    try:
        import torch

        torch.set_num_threads(int(job["threads"]))
        pair = resolve_pair(job["pair"])
        # no key folder: the secret comes from $MULTISPIN_SECRET (`resolve_credentials`)
        payload = run_jobs([{**kwargs, "pair": pair, "secret": None} for kwargs in job["jobs"]], result)
    except Exception as exc:  # reported in the result file, as a forked device reports it
        write_result(result, {"error": f"{type(exc).__name__}: {exc}"})
        return 1
    return 0 if all("error" not in j and j["finished"] for j in payload["jobs"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
