"""A SageMaker user's seventh round with `--local`: the check that no running job holds a checkpoint folder
within a file:// one looks in the home's lock files only, never through the folder (it walked every file of it),
and counts only the locks the runners take (it counted a plain .training.lock a training held in the folder)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dtrain.backends.sagemaker import checkpoint_lock
from dtrain.backends.sagemaker.checkpoint_lock import CheckpointsInUse
from dtrain.backends.sagemaker.runner import Runner
from tests.test_sagemaker_leftovers3 import _holding, _job


def _deep(folder: Path, depth: int, files: int) -> None:
    """`folder` with a chain of `depth` folders, each with `files` files: a checkpoint folder that is large."""
    here = folder
    for level in range(depth):
        here = here / f"step-{level}"
        here.mkdir(parents=True)
        for i in range(files):
            (here / f"shard-{i}.pt").write_bytes(b"x")


@pytest.mark.parametrize("depth", [3, 60])
def test_the_nested_check_of_a_file_uri_never_walks_the_checkpoint_folder(tmp_path, monkeypatch, depth):
    """Its os.walk listed every folder of the checkpoint folder: a folder of many checkpoints cost as many reads.
    Now no folder within it is listed, however deep it is, and a running job's folder within it is still found."""
    ckpt = tmp_path / "nfs" / "ckpt"
    _deep(ckpt, depth, files=5)
    _job(tmp_path, "j1", checkpoint={"S3Uri": f"file://{ckpt}/step-0/step-1"})
    listed: list[str] = []
    scandir = os.scandir

    def counting(path=".", *a, **k):
        listed.append(os.path.abspath(path))
        return scandir(path, *a, **k)

    with _holding(tmp_path, "j1"):
        monkeypatch.setattr(os, "scandir", counting)
        why = checkpoint_lock.in_use(ckpt, tmp_path / "s3", f"file://{ckpt}")
        monkeypatch.undo()
    assert why == (f"the checkpoint folder of file://{ckpt} holds the one the local job j1 writes its checkpoints "
                   f"to: wait for it to end, or give this job a --checkpoint-s3-uri that does not hold it")
    assert not [p for p in listed if p == str(ckpt) or p.startswith(f"{ckpt}/")]
    assert len(listed) <= 4  # the home's lock folders down to j1's: as many whatever the folder holds


def test_a_plain_training_lock_a_training_holds_in_the_folder_is_no_job_using_it(tmp_path):
    """A .training.lock a training locked in a folder within the checkpoint folder (rank 0's lock of a folder it
    writes, rank0.LOCK_FILE) refused the job as if a --local job wrote its checkpoints there; only the runners'
    locks are (checkpoint_lock.hold), and a running job's still refuses it."""
    ckpt = tmp_path / "nfs" / "ckpt"
    (ckpt / "run").mkdir(parents=True)
    workload = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
                               "fcntl.lockf(fd, fcntl.LOCK_EX); print('ready', flush=True); sys.stdin.read()",
         str(ckpt / "run" / ".training.lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert workload.stdout.readline() == "ready\n"
        assert checkpoint_lock.in_use(ckpt, tmp_path / "s3", f"file://{ckpt}") is None
    finally:
        workload.stdin.close()
        assert workload.wait(timeout=60) == 0
    _job(tmp_path, "j1", checkpoint={"S3Uri": f"file://{ckpt}/run"})
    _job(tmp_path, "j3", checkpoint={"S3Uri": f"file://{ckpt}"})
    with _holding(tmp_path, "j1"):
        with pytest.raises(CheckpointsInUse, match="holds the one the local job j1 writes"):
            Runner(tmp_path, "j3").prepare()


def test_a_collision_create_training_job_finds_after_the_submit_check_is_one_line(home, tmp_path, monkeypatch):
    """A job that took the checkpoint folder between submit's check and CreateTrainingJob: the refusal came back
    as 'SageMaker CreateTrainingJob: ValidationException: <the line>; fix the value SageMaker names above', two
    fixes in one wrapped line, the second one wrong (no value of SageMaker's is at fault). Now it is the line of
    submit's own check: the job that holds the folder and the fix."""
    from dtrain import Client
    from dtrain.backends.sagemaker.checks import SubmitChecks
    from dtrain.errors import ConflictError
    from dtrain.spec import JobSpec

    root = home / "sagemaker-local"
    uri = "s3://bucket/shared/ckpt"
    _job(root, "j1", checkpoint={"S3Uri": uri})
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("pass\n")
    monkeypatch.setattr(SubmitChecks, "_check_local_checkpoints", lambda self, req: None)  # j1 starts just after it
    with _holding(root, "j1"):
        with pytest.raises(ConflictError) as refused:
            Client(home=home, backend="sagemaker").submit(JobSpec(
                name="j2", command=["python", "train.py"], backend="sagemaker",
                sagemaker={"local": True, "checkpoint_uri": uri, "source_dir": str(tmp_path / "code")}))
    assert str(refused.value) == (f"the checkpoint folder of {uri} is in use by the local job j1, which writes its "
                                  f"checkpoints there: wait for it to end, or give this job another "
                                  f"--checkpoint-s3-uri")
    assert not (root / "jobs" / "j2").exists()
