"""Notebook defects found by the sixth audit (local backend; the real jupyter-server where one runs)."""

from __future__ import annotations

import socket

from conftest import Dtrain
from dtrain.backends.local.notebook import taken_by_another


def test_a_port_is_taken_by_another_only_while_something_outside_the_job_holds_it(tmp_path):
    job_dir = tmp_path / "jobs" / "nb"
    job_dir.mkdir(parents=True)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        assert taken_by_another(job_dir, port)  # the job has no process: the listener is another program's
    assert not taken_by_another(job_dir, port)  # closed: free again


def test_notebook_list_names_the_volume_a_notebook_created_as_training_jobs_mount_it(dt: Dtrain):
    """It showed `local:1Gi:/home/jovyan/work`, the flag, not the volume (pvc-NAME-0) to mount elsewhere."""
    dt("volume", "create", "data")
    dt("notebook", "made", "--pvc", "local:1Gi:/home/jovyan/work", "--pvc", "data:/data:ro")
    try:
        created = [v["name"] for v in dt.json("volume", "list")]
        (row,) = [line for line in dt("notebook", "list").stdout.splitlines() if line.startswith("made ")]
        new = next(name for name in created if name != "data")
        assert f"{new}:/home/jovyan/work, data:/data:ro" in row, row
    finally:
        dt("delete", "made")


def test_a_suspended_notebook_says_what_resume_brings_back_not_a_checkpoint(dt: Dtrain):
    """It said "'dtrain resume nb' starts it again from its last checkpoint": a notebook has none."""
    dt("notebook", "paused")
    try:
        dt("suspend", "paused")
        info = dt.json("describe", "job", "paused")
        assert info["status"] == "Suspended" and "checkpoint" not in info["message"], info["message"]
        assert "'dtrain resume paused' starts it again" in info["message"] and "files are kept" in info["message"]
    finally:
        dt("delete", "paused")
