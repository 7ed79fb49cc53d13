"""The job description a subprocess device reads instead of flags: what it holds and what it never
holds, and the entry point's answer to a bad invocation."""

from __future__ import annotations

import json
from pathlib import Path

from multispin.runtime.net.device_job import job_description, main

SECRET = "job-secret-0123456789abcdef"


def _jobs():
    return [
        dict(
            server="tcp://127.0.0.1:1",
            device_id=d,
            secret=SECRET,
            keys=Path(f"/k/device-{d}"),
            pair=object(),
            draft="tiny-draft",
            prompt=f"p{d}",
            fault=None,
            server_timeout_s=5.0,
        )
        for d in (1, 4)
    ]


def test_the_description_names_the_pair_once_and_never_holds_the_secret(tmp_path):
    doc = job_description("tiny", 2, tmp_path / "r.json", _jobs())
    text = json.dumps(doc)  # JSON as written: a Path or a model object would not serialise
    assert SECRET not in text
    assert doc["pair"] == "tiny" and doc["threads"] == 2 and doc["result"] == str(tmp_path / "r.json")
    assert [j["device_id"] for j in doc["jobs"]] == [1, 4]
    assert all("pair" not in j and "secret" not in j for j in doc["jobs"])
    assert doc["jobs"][1]["keys"] == "/k/device-4" and doc["jobs"][0]["server_timeout_s"] == 5.0


def test_a_failed_set_up_is_reported_in_the_result_file(tmp_path):
    job = tmp_path / "job.json"
    result = tmp_path / "result.json"
    job.write_text(json.dumps({"pair": "no-such-pair", "threads": 1, "result": str(result), "jobs": []}))
    assert main([str(job)]) == 1
    assert "error" in json.loads(result.read_text())
    assert main([]) == 2  # usage


def test_each_job_reaches_the_device_set_up_with_the_secret_from_the_environment(tmp_path, monkeypatch):
    """The job's arguments are the device's: with the secret in $MULTISPIN_SECRET (never in the
    file) the set-up gets as far as the draft's name, which is refused with its one-line reason."""
    monkeypatch.setenv("MULTISPIN_SECRET", SECRET)
    job, result = tmp_path / "job.json", tmp_path / "result.json"
    jobs = [dict(server="tcp://127.0.0.1:1", device_id=0, keys=None, draft="no-such-draft", prompt="hi", fault=None)]
    job.write_text(json.dumps(job_description("tiny", 1, result, jobs)))
    assert main([str(job)]) == 1
    (outcome,) = json.loads(result.read_text())["jobs"]
    assert outcome["error"].startswith("ConfigError: draft: unknown draft 'no-such-draft'"), outcome
