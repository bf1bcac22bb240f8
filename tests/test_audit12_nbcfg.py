"""Notebooks and config, audit 12: a HOME the user sets in a notebook's terminal, a broken default
kubeconfig, YAML 1.1's number forms in config.yaml and job files, every Kubernetes setting from
`dtrain config kubernetes`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import Dtrain, assert_usage_error


# ---------------------------------------------------------------- a HOME set in a notebook's terminal

def _terminal(tmp_path: Path, monkeypatch) -> tuple[dict[str, str], Path, Path]:
    """The environment of a local notebook's terminal (its HOME: the workspace), started by a user
    whose HOME is host-home; and those two folders."""
    from dtrain.backends.local import launch
    from dtrain.spec import notebook_spec

    host_home, workspace = tmp_path / "host-home", tmp_path / "ws"
    host_home.mkdir()
    workspace.mkdir()
    spec = notebook_spec("nb", volumes=[f"ws:{workspace}"])
    monkeypatch.setenv("HOME", str(host_home))
    plan = launch.plan(spec, job_dir=tmp_path / "h" / "jobs" / "nb", cwd=str(workspace), mounts=[], devices=[[]],
                       master_port=1, notebook_token="t")
    return {**launch.inherited_env(os.environ), **plan.env}, host_home, workspace


def test_a_home_typed_in_a_notebooks_terminal_is_the_jobs_home(tmp_path, monkeypatch):
    """`HOME=/x dtrain submit ...` in a notebook's terminal gave the job the HOME the notebook replaced,
    not /x: a HOME the user sets there is kept, as outside a notebook; the notebook's own HOME (the
    workspace) still is not handed on, and -e HOME=... is the job's whatever the terminal's HOME."""
    from dtrain.backends.local.launch import inherited_env, job_env
    from dtrain.spec import JobSpec

    terminal, host_home, workspace = _terminal(tmp_path, monkeypatch)
    assert inherited_env(terminal)["HOME"] == str(host_home)  # untouched: the HOME the notebook replaced
    typed = {**terminal, "HOME": str(tmp_path / "x")}
    assert inherited_env(typed)["HOME"] == str(tmp_path / "x")
    assert not {"DTRAIN_OUTER_HOME", "DTRAIN_NOTEBOOK_HOME"} & set(inherited_env(typed))
    given = JobSpec(name="j", command=("true",), env={"HOME": "/given"})
    assert job_env(given, devices=[[]], master_port=1, attempt=0)["HOME"] == "/given"
    # a notebook started from that terminal hands the typed HOME on to its own jobs, as it would be outside
    monkeypatch.setattr(os, "environ", typed)
    from dtrain.backends.local.launch import plan
    from dtrain.spec import notebook_spec

    inner = plan(notebook_spec("nb2"), job_dir=tmp_path / "h" / "jobs" / "nb2", cwd=str(tmp_path), mounts=[],
                 devices=[[]], master_port=2, notebook_token="t").env
    assert inherited_env({**inherited_env(typed), **inner})["HOME"] == str(tmp_path / "x")


def test_a_home_typed_in_a_notebooks_terminal_reaches_the_job(dt: Dtrain, tmp_path, monkeypatch):
    """End to end: `HOME=/x dtrain submit` with a notebook terminal's environment."""
    terminal, host_home, workspace = _terminal(tmp_path, monkeypatch)
    typed = tmp_path / "typed"
    typed.mkdir()
    user = Dtrain(dt.home, env={**terminal, "HOME": str(typed)})
    user("submit", "typed", "--", "python", "-c", "import os; print(os.environ['HOME'])")
    assert user.wait_for("typed", {"Succeeded", "Failed"})["status"] == "Succeeded"
    assert user("logs", "typed").stdout == f"{typed}\n"
