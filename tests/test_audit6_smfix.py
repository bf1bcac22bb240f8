"""SageMaker as its users expect it: `list` without AWS credentials still shows the --local jobs,
a --local job's FailureReason follows SageMaker's contract, and `logs` shows a host's current
container start (--previous the one before), as local and Kubernetes show the current attempt."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import DTRAIN


def _no_aws_env(home: Path, tmp_path: Path) -> dict[str, str]:
    """The environment of a machine without any AWS credentials (and no instance role to ask)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(DTRAIN_HOME=str(home), AWS_CONFIG_FILE=str(tmp_path / "no-config"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"), AWS_EC2_METADATA_DISABLED="true")
    return env


def _dtrain(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([DTRAIN, *args], env=env, capture_output=True, text=True, timeout=120, cwd=cwd)


def _wait(env: dict[str, str], name: str, timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = json.loads(_dtrain(env, "describe", "job", name, "--json").stdout)
        if info["status"] in ("Succeeded", "Failed"):
            return info
        time.sleep(0.3)
    raise AssertionError(f"{name} did not end: {info}")


def test_list_without_aws_credentials_shows_the_local_jobs_and_says_why_aws_is_missing(tmp_path):
    home, code = tmp_path / "home", tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    env = _no_aws_env(home, tmp_path)
    assert _dtrain(env, "config", "backend", "sagemaker").returncode == 0
    assert _dtrain(env, "config", "sagemaker", "--role", "arn:aws:iam::123456789012:role/R",
                   "--bucket", "my-training-bucket").returncode == 0
    # Nothing could be listed at all (no --local job, AWS unreachable): the AWS error, non-zero
    empty = _dtrain(env, "--backend", "sagemaker", "list")
    assert empty.returncode != 0 and "no AWS credentials" in empty.stderr and "NAME" not in empty.stdout
    assert _dtrain(env, "submit", "here", "--backend", "sagemaker", "--local", "--", "python", "train.py",
                   cwd=code).returncode == 0
    _wait(env, "here")
    shown = _dtrain(env, "--backend", "sagemaker", "list")
    assert shown.returncode == 0, shown.stderr
    assert "here" in shown.stdout and "Succeeded" in shown.stdout
    lines = shown.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dtrain: warning: ") and "not listed" in lines[0]
    assert "credentials" in lines[0] and "AWS_PROFILE" in lines[0]  # what is wrong and how to fix it
    js = _dtrain(env, "--backend", "sagemaker", "list", "--json")
    assert js.returncode == 0 and [j["name"] for j in json.loads(js.stdout)] == ["here"]
    assert "not listed" in js.stderr
