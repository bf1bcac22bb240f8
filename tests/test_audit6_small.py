"""Small defects of the job and snapshot verbs and the HTTP API (audit 6, small): kubectl's
--tail=-1, `wait job X` and several jobs, snapshot verify's words, snapshot list of an unknown
volume or job, a NaN `since`."""

from __future__ import annotations

import pytest


@pytest.fixture
def done(dt):
    """A finished one-process job named three printing three lines."""
    dt("submit", "three", "--", "sh", "-c", "echo a; echo b; echo c")
    assert dt.wait_for("three", {"Succeeded"})["status"] == "Succeeded"
    return dt


def test_logs_tail_minus_one_is_every_line_as_kubectl(done):
    """kubectl's --tail default is -1 (all lines): `dtrain logs JOB --tail=-1` was refused."""
    dt = done
    every = dt("logs", "three").stdout
    assert every.splitlines() == ["a", "b", "c"]
    for argv in (["--tail=-1"], ["-t", "-1"]):
        assert dt("logs", "three", *argv).stdout == every
    assert dt("logs", "three", "-t", "1").stdout == "c\n"
    for bad in ("-2", "-100"):  # only -1 among the negatives
        proc = dt("logs", "three", f"--tail={bad}", check=False)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert f"invalid tail {bad}" in proc.stderr and "-1 for all" in proc.stderr
    assert "-1" in dt("logs", "--help").stdout
