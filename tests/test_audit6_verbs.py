"""The everyday job verbs as a Run:AI or kubectl user types them: exec, wait, delete, logs,
describe (audit 6, verbs)."""

from __future__ import annotations

import pytest


@pytest.fixture
def done(dt):
    """A finished one-process job named train-1."""
    dt("submit", "train-1", "--", "sh", "-c", "echo hello")
    assert dt.wait_for("train-1", {"Succeeded"})["status"] == "Succeeded"
    return dt


def test_a_missing_job_names_the_near_one(done):
    dt = done
    for verb in (["describe", "job"], ["logs"], ["wait"], ["delete"], ["exec"]):
        proc = dt(*verb, "train1", *(["--", "true"] if verb == ["exec"] else []), check=False)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert "no job named 'train1'" in proc.stderr and "did you mean 'train-1'?" in proc.stderr, proc.stderr
    far = dt("describe", "job", "zzzzzz", check=False)
    assert far.returncode == 2 and "did you mean" not in far.stderr
