"""Rank 0's locks on the folders a training writes (dtrain.workloads.rank0), where taking one fails other than
as another training's: the lock file's own open, and a folder lock on a file system that takes no flock on a
folder (NFS)."""

from __future__ import annotations

import dataclasses
import errno
import os
import re

import pytest
import torch

from test_cifar10_leftovers import _clean_env

from dtrain.errors import SpecError
from dtrain.training import DistInfo
from dtrain.workloads.cifar10.train import CHECKPOINT_LOCK, parse_args

MAIN = DistInfo(rank=0, local_rank=0, world_size=2, local_world_size=2, device=torch.device("cpu"), backend="gloo",
                runtime="torchrun")
OTHER = dataclasses.replace(MAIN, rank=1, local_rank=1)


def _fake_all_reduce(monkeypatch) -> None:
    """The all-reduce of what rank 0 found, as two ranks called one after the other see it."""
    from dtrain.workloads import rank0

    reduced: list[int] = []
    monkeypatch.setattr(rank0, "max_over_ranks", lambda value, device: reduced.append(value) or max(reduced))


@pytest.mark.parametrize("err", [errno.EIO, errno.EACCES, errno.EROFS], ids=["EIO", "EACCES", "EROFS"])
def test_a_lock_file_that_does_not_open_is_one_line_on_every_rank(monkeypatch, tmp_path, err):
    """The open of a folder's .training.lock failing other than as a link (an I/O error of a network disk; a lock
    file another user left, which this one may not open) was the OSError itself on rank 0: a traceback for EIO,
    and for EACCES a line sending the user to 'a folder you can write to' that they could write to. It is the
    line of a lock that failed, naming the folder and the flag, on rank 0 and on every other rank."""
    from dtrain.workloads.cifar10.outputs import _one_training_writes, check_outputs

    _clean_env(monkeypatch)
    folder = tmp_path / "model"
    folder.mkdir()
    real_open = os.open

    def refused(path, flags, *args, **kwargs):
        if os.fspath(path) == str(folder / CHECKPOINT_LOCK):
            raise OSError(err, os.strerror(err), os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refused)
    cfg = parse_args(["--data-dir", str(tmp_path), "--model-dir", str(folder), "--metrics-file",
                      str(tmp_path / "own.jsonl")])
    cfg = dataclasses.replace(cfg, checkpoint_dir=str(check_outputs(cfg)))
    _fake_all_reduce(monkeypatch)
    why, fix = os.strerror(err), "give this run another --model-dir"
    with pytest.raises(SpecError) as e:
        _one_training_writes(cfg, MAIN)
    assert str(e.value) == (f"cannot lock {folder} to make this run the one training writing it ({why}): try again, "
                            f"or {fix}")
    with pytest.raises(SpecError) as e:
        _one_training_writes(cfg, OTHER)
    assert str(e.value) == f"rank 0 could not lock {folder} ({why}), so rank 1 stops too: try again, or {fix}"


def _no_flock_on_folders(monkeypatch) -> None:
    """NFS: flock is a POSIX lock there, taken only on a file open for writing, so a folder's descriptor is EBADF."""
    import fcntl
    import stat

    real_flock = fcntl.flock

    def flock(fd, op):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        return real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)


def test_a_folder_lock_on_nfs_locks_a_file_for_the_folder(monkeypatch, tmp_path):
    """A folder rank 0 locks as itself (SageMaker's /opt/ml/checkpoints and /opt/ml/model, which SageMaker puts in
    S3) took no lock on NFS (flock of a folder's descriptor: EBADF), and the run went on unguarded. NFS locks a
    regular file: the lock is on a file named after the folder in the folder above it, where SageMaker uploads
    nothing, so a second training is still refused and the folders get no file; a folder SageMaker does not
    upload gets its .training.lock."""
    from test_cifar10_leftovers import _holding, _in_sagemaker_container

    from dtrain.errors import ConflictError
    from dtrain.workloads.cifar10.outputs import _one_training_writes, check_outputs

    opt_ml = _in_sagemaker_container(monkeypatch, tmp_path)
    _no_flock_on_folders(monkeypatch)
    _fake_all_reduce(monkeypatch)
    cfg = parse_args(["--metrics-file", str(tmp_path / "own.jsonl")])
    cfg = dataclasses.replace(cfg, checkpoint_dir=str(check_outputs(cfg)))
    assert cfg.checkpoint_dir == str(opt_ml / "checkpoints")
    metrics, locks = _one_training_writes(cfg, MAIN)
    for f in (metrics, *locks):
        if f is not None:  # None: no lock taken
            f.close()
    above = opt_ml.resolve()
    assert sorted(p.name for p in opt_ml.iterdir() if p.name.startswith(".")) == [".checkpoints.training.lock",
                                                                                  ".model.training.lock"]
    assert list((opt_ml / "checkpoints").iterdir()) == [] and list((opt_ml / "model").iterdir()) == []
    fix = ("start one training per SageMaker job (each job's checkpoint folder is its own: the other training is one "
           "this job started)")
    first = _holding(above / ".checkpoints.training.lock")
    try:
        with pytest.raises(ConflictError) as e:
            _one_training_writes(cfg, MAIN)
        with pytest.raises(ConflictError) as other:
            _one_training_writes(cfg, OTHER)
    finally:
        first.communicate("")
    assert str(e.value) == (f"another training is writing {opt_ml / 'checkpoints'} (it holds "
                            f"{above / '.checkpoints.training.lock'}): wait for it to end, or {fix}")
    assert str(other.value) == (f"rank 0 found another training writing {opt_ml / 'checkpoints'}, so rank 1 stops "
                                f"too: wait for it to end, or {fix}")
    # a checkpoint folder SageMaker does not sync, locked as itself in a SageMaker container: a file in it
    mine = tmp_path / "mine"
    cfg = parse_args(["--metrics-file", str(tmp_path / "own.jsonl"), "--checkpoint-dir", str(mine)])
    cfg = dataclasses.replace(cfg, checkpoint_dir=str(check_outputs(cfg)))
    first = _holding(mine / CHECKPOINT_LOCK)
    try:
        with pytest.raises(ConflictError) as e:
            _one_training_writes(cfg, MAIN)
    finally:
        first.communicate("")
    assert str(e.value).startswith(f"another training is writing {mine} (it holds .training.lock): ")


def test_a_folder_lock_file_on_nfs_lies_above_every_folder_sagemaker_uploads(monkeypatch, tmp_path):
    """$SM_OUTPUT_DATA_DIR lies in /opt/ml/output, which SageMaker uploads too: its file is in /opt/ml."""
    from dtrain.workloads.rank0 import folder_lock_file

    _clean_env(monkeypatch)
    opt_ml = tmp_path / "opt" / "ml"
    (opt_ml / "output" / "data").mkdir(parents=True)
    monkeypatch.setenv("SM_OUTPUT_DIR", str(opt_ml / "output"))
    monkeypatch.setenv("SM_OUTPUT_DATA_DIR", str(opt_ml / "output" / "data"))
    assert folder_lock_file(opt_ml / "output" / "data") == opt_ml.resolve() / ".output-data.training.lock"
    assert folder_lock_file(tmp_path) == tmp_path / ".training.lock"


def test_a_link_at_a_folders_lock_file_on_nfs_is_named_on_every_rank(monkeypatch, tmp_path):
    """The other ranks name the file rank 0 found a link at, not the folder it locks that file for."""
    from test_cifar10_leftovers import _in_sagemaker_container

    from dtrain.workloads.cifar10.outputs import _one_training_writes, check_outputs

    opt_ml = _in_sagemaker_container(monkeypatch, tmp_path)
    _no_flock_on_folders(monkeypatch)
    _fake_all_reduce(monkeypatch)
    lock = opt_ml.resolve() / ".checkpoints.training.lock"
    lock.symlink_to(tmp_path / "elsewhere")
    cfg = parse_args(["--metrics-file", str(tmp_path / "own.jsonl")])
    cfg = dataclasses.replace(cfg, checkpoint_dir=str(check_outputs(cfg)))
    with pytest.raises(SpecError, match=f"^{re.escape(str(lock))} is a symbolic link: training locks a file of its"):
        _one_training_writes(cfg, MAIN)
    with pytest.raises(SpecError) as e:
        _one_training_writes(cfg, OTHER)
    assert str(e.value).startswith(f"rank 0 found a symbolic link at {lock}, so rank 1 stops too: remove the link, ")
    assert not (tmp_path / "elsewhere").exists()


def _failing_open(monkeypatch, path, err) -> None:
    """os.open of `path` fails with `err` (EIO: a network disk's I/O error), as the lock file's does above."""
    real_open = os.open

    def refused(name, flags, *args, **kwargs):
        if os.fspath(name) == str(path):
            raise OSError(err, os.strerror(err), os.fspath(name))
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refused)


def _advice(err: int, fix: str) -> str:
    """What a file that cannot be written for `err` asks: an I/O error (a network disk's, which passes) to try again;
    a forbidden, read-only or full disk another folder."""
    if err == errno.EIO:
        return f"try again, or {fix}"
    return f"use a folder you can write to, with free space, or {fix}"


def _refused_on_every_rank(write, path, err: int, fix: str) -> None:
    """`write(rank)` refuses `path`, which cannot be written for `err`, in one line naming it and `fix`: rank 0 as it
    found it, rank 1 as rank 0 found it."""
    why = os.strerror(err)
    with pytest.raises(SpecError) as e:
        write(MAIN)
    assert str(e.value) == f"{path} cannot be written ({why}): {fix}"
    with pytest.raises(SpecError) as e:
        write(OTHER)
    assert str(e.value) == f"rank 0 found that {path} cannot be written ({why}), so rank 1 stops too: {fix}"


def _lanes_refused_then_written(monkeypatch, out, name: str, err: int):
    """lanes' files in `out` with out/name's open failing for `err`: refused in one line naming it and --out-dir on
    every rank; then, the disk back, rank 0's next run over `out` (returned: its train.log, open)."""
    from dtrain.workloads.lanes.train import one_training_writes

    _clean_env(monkeypatch)
    _failing_open(monkeypatch, out / name, err)
    _fake_all_reduce(monkeypatch)
    _refused_on_every_rank(lambda rank: one_training_writes(out, out, rank), out / name, err,
                           _advice(err, "give this run another --out-dir"))
    monkeypatch.undo()
    _clean_env(monkeypatch)
    _fake_all_reduce(monkeypatch)
    return one_training_writes(out, out, MAIN)


OPEN_ERRORS = pytest.mark.parametrize("err", [errno.EIO, errno.EACCES, errno.EROFS, errno.ENOSPC],
                                      ids=["EIO", "EACCES", "EROFS", "ENOSPC"])


@OPEN_ERRORS
def test_a_metrics_file_that_does_not_open_is_one_line_on_every_rank(monkeypatch, tmp_path, err):
    """The open of the metrics file failing (an I/O error of a network disk) was the OSError itself on rank 0: a
    traceback for EIO, and for EACCES a line without the flag to change. It is one line naming the file and the fix,
    as the other ranks' refusal names them; an I/O error, which passes, asks to try again (it sent the user to 'a
    folder you can write to, with free space', which they had)."""
    from dtrain.workloads.cifar10.outputs import _one_training_writes, check_outputs

    _clean_env(monkeypatch)
    metrics = tmp_path / "own.jsonl"
    cfg = parse_args(["--data-dir", str(tmp_path), "--model-dir", str(tmp_path / "model"), "--metrics-file",
                      str(metrics)])
    cfg = dataclasses.replace(cfg, checkpoint_dir=str(check_outputs(cfg)))
    _failing_open(monkeypatch, metrics, err)
    _fake_all_reduce(monkeypatch)
    _refused_on_every_rank(lambda rank: _one_training_writes(cfg, rank), metrics, err,
                           _advice(err, "give this run another --metrics-file"))


@OPEN_ERRORS
def test_a_train_log_that_does_not_open_is_one_line_on_every_rank(monkeypatch, tmp_path, err):
    """lanes' train.log, opened by rank 0 before any work: its open failing was the OSError itself on rank 0 (a
    traceback for EIO). It is one line naming the file and --out-dir, on rank 0 and on every other rank; nothing
    is left held."""
    out = tmp_path / "run"
    out.mkdir()
    log = _lanes_refused_then_written(monkeypatch, out, "train.log", err)  # the run holds its folder and logs
    log("step 1")
    log.close()
    assert (out / "train.log").read_text().endswith(" step 1\n")


@OPEN_ERRORS
def test_lanes_metrics_file_that_does_not_open_is_one_line_on_every_rank(monkeypatch, tmp_path, err):
    """lanes opened metrics.jsonl after rank 0's checks: its open failing was the OSError itself on rank 0 alone (a
    traceback for EIO) while the other ranks went on to their first collective. It is opened with the checked files:
    one line naming it and --out-dir, on rank 0 and on every other rank, with train.log let go."""
    out = tmp_path / "run"
    out.mkdir()
    log = _lanes_refused_then_written(monkeypatch, out, "metrics.jsonl", err)  # train.log was let go
    log.metrics.log(step=1)
    log.close()
    assert '"step": 1' in (out / "metrics.jsonl").read_text()


@pytest.mark.parametrize("err", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
def test_a_folder_whose_probe_fails_for_an_io_error_asks_to_try_again_on_every_rank(monkeypatch, tmp_path, err):
    """rank 0's probe of --out-dir (can_write) failing for an I/O error of a network disk sent every rank to 'a folder
    you can write to', which it was; a full disk still does."""
    import tempfile

    from dtrain.workloads.lanes.train import one_training_writes

    _clean_env(monkeypatch)
    out = tmp_path / "run"
    out.mkdir()

    def mkstemp(*args, **kwargs):
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    _fake_all_reduce(monkeypatch)
    why = os.strerror(err)
    with pytest.raises((SpecError, OSError)) as e:
        one_training_writes(out, out, MAIN)
    if err == errno.EIO:
        assert str(e.value) == f"--out-dir {out} cannot be written ({why}): try again, or give a folder you can write to"
    else:  # one_line_errors' line names it (a full disk)
        assert isinstance(e.value, OSError) and e.value.errno == err and e.value.filename == str(out)
    with pytest.raises(SpecError) as e:
        one_training_writes(out, out, OTHER)
    assert str(e.value) == (f"rank 0 found that {out} cannot be written ({why}), so rank 1 stops too: "
                            f"{_advice(err, 'give this run another --out-dir')}")


def test_a_custom_checkpoint_local_path_on_nfs_gets_its_lock_file_beside_it(monkeypatch, tmp_path):
    """A job's CheckpointConfig may give its own LocalPath (SageMaker writes it to checkpointconfig.json), which
    SageMaker syncs to S3 as it does /opt/ml/checkpoints. On NFS its folder lock fell back to a .training.lock in
    it, which landed in S3 beside the checkpoints. The file is named after it in the folder above, as
    /opt/ml/checkpoints' is, and a second training is still refused; a folder no CheckpointConfig names keeps its
    .training.lock."""
    import json

    from test_cifar10_leftovers import _holding, _in_sagemaker_container

    from dtrain.errors import ConflictError
    from dtrain.workloads.cifar10.outputs import _one_training_writes, check_outputs
    from dtrain.workloads.rank0 import folder_lock_file

    opt_ml = _in_sagemaker_container(monkeypatch, tmp_path)
    local = tmp_path / "mnt" / "ckpt"
    (opt_ml / "input/config/checkpointconfig.json").write_text(json.dumps({"LocalPath": str(local),
                                                                           "S3Uri": "s3://bucket/ckpt"}))
    _no_flock_on_folders(monkeypatch)
    _fake_all_reduce(monkeypatch)
    cfg = parse_args(["--metrics-file", str(tmp_path / "own.jsonl"), "--checkpoint-dir", str(local)])
    cfg = dataclasses.replace(cfg, checkpoint_dir=str(check_outputs(cfg)))
    metrics, locks = _one_training_writes(cfg, MAIN)
    for f in (metrics, *locks):
        if f is not None:
            f.close()
    lock = local.parent.resolve() / ".ckpt.training.lock"
    assert lock.is_file() and list(local.iterdir()) == []
    assert folder_lock_file(local / "run-1") == lock.parent / ".ckpt-run-1.training.lock"  # within it too
    assert folder_lock_file(tmp_path / "mnt") == tmp_path / "mnt" / ".training.lock"  # not synced
    first = _holding(lock)
    try:
        with pytest.raises(ConflictError) as e:
            _one_training_writes(cfg, MAIN)
    finally:
        first.communicate("")
    assert str(e.value).startswith(f"another training is writing {local} (it holds {lock}): wait for it to end, ")
    assert list(local.iterdir()) == []


def _mirror_advice(err: int, job: os.PathLike) -> str:
    """What the platform's copy of the metrics (DTRAIN_METRICS_FILE, in the job's folder) asks when it cannot be
    written for `err`: its job's folder and home, never the run's own flags."""
    fix = "submit the job under another home (dtrain's --home or $DTRAIN_HOME; a job's folder is HOME/jobs/NAME)"
    if err == errno.EIO:
        return f"try again, or {fix}"
    return (f"free space or fix permissions in {job} (the job's folder, which holds dtrain's copy of the metrics), "
            f"or {fix}")


def _cifar10_outputs(tmp_path):
    from dtrain.workloads.cifar10.outputs import _one_training_writes, check_outputs

    cfg = parse_args(["--data-dir", str(tmp_path), "--model-dir", str(tmp_path / "model")])
    cfg = dataclasses.replace(cfg, checkpoint_dir=str(check_outputs(cfg)))
    return lambda info: _one_training_writes(cfg, info)[0]


def _lanes_outputs(tmp_path):
    from dtrain.workloads.lanes.train import one_training_writes

    out = tmp_path / "run"
    out.mkdir()
    return lambda info: one_training_writes(out, out, info)


@OPEN_ERRORS
@pytest.mark.parametrize("workload", [_cifar10_outputs, _lanes_outputs], ids=["cifar10", "lanes"])
def test_a_metrics_mirror_that_does_not_open_is_named_with_its_own_fix_on_every_rank(monkeypatch, tmp_path, err,
                                                                                       workload):
    """The platform's copy of the metrics (DTRAIN_METRICS_FILE, which dtrain sets to the job's folder's
    metrics.jsonl) failing to open: rank 0 named it but sent the user to another --metrics-file or --out-dir, which
    changes nothing there, and the other ranks named the run's own metrics file. Every rank names the copy and the
    fix of the job's folder; with the disk back, the run opens both."""
    _clean_env(monkeypatch)
    job = tmp_path / "home" / "jobs" / "j"
    job.mkdir(parents=True)
    mirror = job / "metrics.jsonl"
    monkeypatch.setenv("DTRAIN_METRICS_FILE", str(mirror))
    start = workload(tmp_path)
    _failing_open(monkeypatch, mirror, err)
    _fake_all_reduce(monkeypatch)
    _refused_on_every_rank(start, mirror, err, _mirror_advice(err, job))
    monkeypatch.undo()
    _clean_env(monkeypatch)
    monkeypatch.setenv("DTRAIN_METRICS_FILE", str(mirror))
    _fake_all_reduce(monkeypatch)
    opened = start(MAIN)  # the disk is back: nothing was left held
    metrics = opened.metrics if hasattr(opened, "metrics") else opened
    metrics.log(step=1)
    opened.close()
    assert '"step": 1' in mirror.read_text()


def test_a_link_at_the_metrics_mirror_is_named_on_every_rank(monkeypatch, tmp_path):
    """A symbolic link at the platform's copy of the metrics: rank 0 refused it by name, and the other ranks named
    the run's own metrics file instead. They name the copy; rank 0 offered 'write the run to another folder', which
    changes nothing at the job's folder's copy: it names that copy's fix as every other rank does."""
    _clean_env(monkeypatch)
    job = tmp_path / "home" / "jobs" / "j"
    job.mkdir(parents=True)
    mirror = job / "metrics.jsonl"
    mirror.symlink_to(tmp_path / "victim.txt")
    monkeypatch.setenv("DTRAIN_METRICS_FILE", str(mirror))
    start = _cifar10_outputs(tmp_path)
    _fake_all_reduce(monkeypatch)
    fix = "submit the job under another home (dtrain's --home or $DTRAIN_HOME; a job's folder is HOME/jobs/NAME)"
    with pytest.raises(SpecError) as e:
        start(MAIN)
    assert str(e.value) == f"{mirror} is a symbolic link: remove it, or {fix}"
    with pytest.raises(SpecError) as e:
        start(OTHER)
    assert str(e.value) == f"rank 0 found a symbolic link at {mirror}, so rank 1 stops too: remove the link, or {fix}"
    assert not (tmp_path / "victim.txt").exists()
