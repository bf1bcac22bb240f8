"""Audit 6 of the CIFAR10 workload: damaged archives, full or read-only folders, archives as data."""

from __future__ import annotations

import errno
import hashlib
import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from dtrain.errors import DataError, StorageError
from dtrain.workloads.cifar10 import download as dl
from dtrain.workloads.cifar10.data import load_split
from dtrain.workloads.cifar10.download import fetch_cifar10
from test_cifar10_download import archive  # noqa: F401  (the fixture: a small dataset packed as the official archive is)




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


@pytest.mark.slow
def test_the_python_archive_as_downloaded_is_data(tmp_path, archive):
    # A SageMaker channel of the one file (fit({"training": "s3://.../cifar-10-python.tar.gz"})) or a
    # folder holding the download: "no CIFAR10 batches ... create synthetic ones" before.
    unpacked = tmp_path / "unpacked"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tf:
        tf.extractall(unpacked, filter="data")
    (tmp_path / "channel").mkdir()
    path, _ = _local(tmp_path / "channel", archive)
    for given in (path.parent, path):
        for split in ("train", "test"):
            x, y = load_split(given, split)
            ex, ey = load_split(unpacked, split)
            assert (x == ex).all() and (y == ey).all() and len(y)
    r = subprocess.run([sys.executable, "-m", "dtrain.workloads.cifar10", "train", "--data-dir", str(path.parent),
                        "--model-dir", str(tmp_path / "out"), "--max-steps", "1", "--log-interval", "0"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "FINAL test_accuracy=" in r.stdout and "train_images=50" in r.stdout


def test_a_damaged_or_foreign_archive_as_data_is_one_line(tmp_path, archive):
    data = bytearray(archive)
    for i in range(len(data) * 3 // 5, len(data) * 3 // 5 + 64):
        data[i] ^= 0x55
    path, _ = _local(tmp_path, bytes(data))
    with pytest.raises(DataError, match=f"^{path}:cifar-10-batches-py/|^archive {path} cannot be read"):
        load_split(tmp_path, "train")
    other = tmp_path / "other" / "cifar-10-python.tar.gz"
    other.parent.mkdir()
    with tarfile.open(other, "w:gz") as tf:
        info = tarfile.TarInfo("readme.txt")
        tf.addfile(info, io.BytesIO(b""))
    with pytest.raises(DataError, match=f"^archive {other} holds no cifar-10-batches-py/data_batch_1: it is not"):
        load_split(other.parent, "train")
