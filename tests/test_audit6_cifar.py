"""Audit 6 of the CIFAR10 workload: damaged archives, full or read-only folders, archives as data."""

from __future__ import annotations

import errno
import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from dtrain.errors import DataError, StorageError
from dtrain.workloads.cifar10 import download as dl
from dtrain.workloads.cifar10.data import write_synthetic
from dtrain.workloads.cifar10.download import fetch_cifar10


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> bytes:
    root = tmp_path_factory.mktemp("src")
    write_synthetic(root, fmt="python", n_train=50, n_test=10, seed=4)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        tf.add(root / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    return buf.getvalue()


def _local(tmp_path: Path, data: bytes) -> tuple[Path, str]:
    path = tmp_path / "cifar-10-python.tar.gz"
    path.write_bytes(data)
    return path, hashlib.md5(data).hexdigest()


def test_a_corrupt_archive_is_named_damaged_not_a_missing_folder(tmp_path, archive):
    # Flipped bytes inflate to a garbage header, where tarfile ends its member list quietly: the
    # batches behind it were simply absent, and the message named a hidden temporary folder and
    # suggested synthetic data. The gzip stream's CRC shows the damage.
    data = bytearray(archive)
    for i in range(len(data) * 3 // 5, len(data) * 3 // 5 + 64):
        data[i] ^= 0x55
    path, md5 = _local(tmp_path, bytes(data))
    out = tmp_path / "out"
    with pytest.raises(DataError) as e:
        fetch_cifar10(out, url=str(path), md5=md5)
    assert str(e.value).startswith(f"archive {path.name} is damaged") and "download again" in str(e.value)
    assert ".tmp" not in str(e.value) and "synth" not in str(e.value)
    assert list(out.iterdir()) == []


def test_an_archive_without_a_batch_names_it_as_in_the_archive(tmp_path, archive):
    with tarfile.open(fileobj=io.BytesIO(archive)) as tf:
        kept = [(m, tf.extractfile(m).read() if m.isfile() else None) for m in tf.getmembers()
                if not m.name.endswith("data_batch_3")]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for info, blob in kept:
            tf.addfile(info, io.BytesIO(blob) if blob is not None else None)
    path, md5 = _local(tmp_path, buf.getvalue())
    with pytest.raises(DataError, match=f"^archive {path.name} is incomplete or damaged .*cifar-10-batches-py/"
                                        "data_batch_3 is missing") as e:
        fetch_cifar10(tmp_path / "out", url=str(path), md5=md5)
    assert ".tmp" not in str(e.value)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_a_full_or_read_only_folder_is_not_blamed_on_the_archive(tmp_path, archive, monkeypatch, code):
    # "archive ... is damaged; delete it and download again" sent the user to delete a good 163 MB
    # archive when the disk was full or the folder read-only.
    def no_room(src, dst, length=0):
        raise OSError(code, "No space left on device" if code == errno.ENOSPC else "Read-only file system")

    monkeypatch.setattr(dl.shutil, "copyfileobj", no_room)
    path, md5 = _local(tmp_path, archive)
    out = tmp_path / "out"
    with pytest.raises(StorageError, match=f"^cannot unpack {path.name} into {out}: .*; free some space or give "
                                           f"--out a folder you can write to \\({path} is kept\\)$"):
        fetch_cifar10(out, url=str(path), md5=md5)
    assert path.read_bytes() == archive and list(out.iterdir()) == []
