"""Rank 0's locks on the folders a training writes (dtrain.workloads.rank0), where taking one fails other than
as another training's: the lock file's own open, and a folder lock on a file system that takes no flock on a
folder (NFS)."""

from __future__ import annotations

import dataclasses
import errno
import os

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
    assert str(e.value) == f"cannot lock {folder} to make this run the one training writing it ({why}): try again, or {fix}"
    with pytest.raises(SpecError) as e:
        _one_training_writes(cfg, OTHER)
    assert str(e.value) == f"rank 0 could not lock {folder} ({why}), so rank 1 stops too: try again, or {fix}"
