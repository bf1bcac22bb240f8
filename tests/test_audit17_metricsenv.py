"""DTRAIN_METRICS_FILE is the platform's, as the other variables dtrain sets per process (OWNED_ENV): a
user's `-e DTRAIN_METRICS_FILE=...` won over dtrain's own value (env.setdefault), so the dashboard read a
metrics.jsonl nothing wrote, and the metrics-copy lines named a job folder the file was not in. It is refused
at submit, in one line naming it and the fix, through every door (CLI, YAML, SDK, HTTP)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import Dtrain, assert_usage_error
from dtrain.errors import SpecError

NAME = "DTRAIN_METRICS_FILE"


def _said_by_the_spec() -> str:
    from dtrain.spec import JobSpec

    with pytest.raises(SpecError) as err:
        JobSpec(name="j", command=("true",), env={NAME: "/tmp/m.jsonl"})
    return str(err.value)


def test_the_metrics_file_variable_is_refused_in_one_line_naming_it_and_the_fix():
    said = _said_by_the_spec()
    assert said.startswith(f"invalid env name {NAME}: every process gets it from the job's folder"), said
    assert "MetricsWriter(PATH)" in said and said.endswith("drop it from -e / env:") and "\n" not in said, said


def test_every_door_refuses_it_and_starts_nothing(dt: Dtrain, tmp_path: Path):
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from fastapi.testclient import TestClient

    import dtrain
    from dtrain.server.app import create_app
    from dtrain.spec import JobSpec

    said = _said_by_the_spec()
    cli = dt("submit", "by-cli", "-e", f"{NAME}={tmp_path / 'm.jsonl'}", "--", "true", check=False)
    assert_usage_error(cli, f"invalid env name {NAME}", "the job's folder")
    job = tmp_path / "job.yaml"
    job.write_text(f"name: by-yaml\ncommand: [\"true\"]\nenv: {{{NAME}: {tmp_path / 'm.jsonl'}}}\n")
    assert_usage_error(dt("submit", "-f", str(job), check=False), f"invalid env name {NAME}", "the job's folder")
    client = dtrain.Client(home=dt.home)
    with pytest.raises(SpecError) as sdk:
        client.submit(JobSpec(name="by-sdk", command=("true",), env={NAME: str(tmp_path / "m.jsonl")}))
    assert str(sdk.value) == said
    http = TestClient(create_app(lambda: dtrain.Client(home=dt.home), sample_every=3600),
                      base_url="http://127.0.0.1:8000")
    r = http.post("/api/v1/jobs", json={"name": "by-api", "command": ["true"], "env": {NAME: "/tmp/m.jsonl"}})
    assert r.status_code == 422 and r.json()["error"].startswith(f"invalid env name {NAME}: "), r.text
    assert dt.json("list") == []  # nothing was started


def test_a_job_stored_with_it_and_a_submitters_own_get_the_job_folders_copy(tmp_path, monkeypatch):
    """A spec stored before the rule still reads back, and a job submitted from inside another (whose
    processes have the other's DTRAIN_METRICS_FILE) inherits none: each writes its own folder's copy."""
    from dtrain.backends.local import launch
    from dtrain.spec import JobSpec

    job_dir = tmp_path / "h" / "jobs" / "old"
    stored = JobSpec.from_stored({**JobSpec(name="old", command=("true",)).to_dict(), "env": {NAME: "/tmp/x"}})
    assert stored.env == {NAME: "/tmp/x"}
    env = launch.plan(stored, job_dir=job_dir, cwd=str(tmp_path), mounts=[], devices=[[]], master_port=1).env
    assert env[NAME] == str(job_dir / "metrics.jsonl")
    outer = {**os.environ, NAME: str(tmp_path / "h" / "jobs" / "outer" / "metrics.jsonl")}
    assert NAME not in launch.inherited_env(outer)
