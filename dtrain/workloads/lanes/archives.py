"""Unpacking the inputs of `dtrain lanes prepare` (step 3 of prepare.py): zip and tar(.gz) archives,
safely (no member leaves the folder, no links or devices, a damaged archive named), and the progress
lines every step shows on stderr. Moved unchanged from prepare.py, which re-exports these names.
"""

from __future__ import annotations

import gzip
import lzma
import os
import shutil
import stat
import sys
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from tqdm import tqdm

from dtrain.errors import DataError
from dtrain.workloads.lanes.tusimple import writable

CHUNK = 1 << 20  # bytes per read while downloading, hashing and copying
ARCHIVES = (".zip", ".tar", ".tar.gz", ".tgz")  # what extract() unpacks; other inputs must be .json label files
# What a damaged archive raises while it is read (a bad CRC, a cut-off or corrupt compressed stream)
DAMAGED = (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError)


class Progress:
    """Byte or item progress on stderr: tqdm on a terminal, a plain line every 10% otherwise."""

    def __init__(self, desc: str, total: int | None, unit: str = "B"):
        self.desc, self.total, self.done, self._next = desc, total, 0, 0.1
        self._bar = None
        if sys.stderr.isatty():
            self._bar = tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "B", file=sys.stderr)

    def update(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.total and self.done >= self._next * self.total:
            print(f"{self.desc}: {100 * self.done // self.total}% ({self.done} of {self.total})", file=sys.stderr)
            while self._next * self.total <= self.done:
                self._next += 0.1

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _safe_members(names: list[str], archive: Path) -> Iterator[tuple[str, PurePosixPath]]:
    """(member name, relative destination) pairs; refuses members that would leave the destination."""
    parts = []
    for name in names:
        p = PurePosixPath(name.replace("\\", "/"))
        if p.is_absolute() or ".." in p.parts or (p.parts and ":" in p.parts[0]):
            raise DataError(f"archive {archive.name} holds unsafe path {name!r}: refusing to unpack it")
        parts.append(p)
    # drop one top folder shared by every member (train_set/clips/... -> clips/...)
    tops = {p.parts[0] for p in parts if p.parts}
    strip = (
        len(tops) == 1
        and tops != {"clips"}
        and all(len(p.parts) > 1 or name.endswith("/") for p, name in zip(parts, names))
    )
    for name, p in zip(names, parts):
        rel = p.parts[1:] if strip else p.parts
        if rel:
            yield name, PurePosixPath(*rel)


def _open_new(path: Path, mode: str = "wb"):
    """Open for writing without following a link at the last component (a race after writable())."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if "w" in mode else 0)
    return os.fdopen(os.open(path, flags, 0o644), mode)


def _copy_stream(src, dest: Path, out: Path) -> None:
    with _open_new(writable(out, dest)) as f:
        shutil.copyfileobj(src, f, CHUNK)


def extract(archive: Path, out: Path) -> int:
    """Unpack a zip or tar(.gz) archive into out (safely); returns the number of files written."""
    try:
        if zipfile.is_zipfile(archive):
            return _extract_zip(archive, out)
        try:
            tf = tarfile.open(archive, "r:*")
        except tarfile.ReadError:
            raise DataError(f"archive {archive.name} is damaged or not a zip or tar archive: "
                            "download it again") from None
        with tf:
            return _extract_tar(tf, archive, out)
    except DAMAGED as e:
        why = " ".join(str(e).split())  # one line, whatever the library wrote
        raise DataError(f"archive {archive.name} is damaged ({why}): download it again") from None


def _extract_zip(archive: Path, out: Path) -> int:
    n = 0
    with zipfile.ZipFile(archive) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        progress = Progress(f"unpack {archive.name}", len(infos), unit="file")
        for name, rel in _safe_members(list(infos), archive):
            if stat.S_ISLNK(infos[name].external_attr >> 16):  # a Unix symlink entry (zip -y)
                raise DataError(f"archive {archive.name} holds a symlink {name!r}: refusing to unpack it")
            if not infos[name].is_dir():
                with zf.open(infos[name]) as src:
                    _copy_stream(src, out / rel, out)
                n += 1
            progress.update(1)
        progress.close()
    return n


def _extract_tar(tf: tarfile.TarFile, archive: Path, out: Path) -> int:
    n = 0
    members = {m.name: m for m in tf.getmembers()}
    progress = Progress(f"unpack {archive.name}", len(members), unit="file")
    for name, rel in _safe_members(list(members), archive):
        m = members[name]
        if m.isfile():
            with tf.extractfile(m) as src:
                _copy_stream(src, out / rel, out)
            n += 1
        elif not m.isdir():
            raise DataError(f"archive {archive.name} holds a link or device {name!r}: refusing to unpack it")
        progress.update(1)
    progress.close()
    # tarfile ends the member list quietly at a bad header after the first one: only zeros may
    # follow the last member of a whole archive (read to the end, which also checks a gzip CRC)
    tf.fileobj.seek(tf.offset)
    while chunk := tf.fileobj.read(CHUNK):
        if chunk.strip(b"\0"):
            raise DataError(f"archive {archive.name} is damaged (a bad header after {len(members)} members): "
                            "download it again")
    return n


def is_archive(path: Path) -> bool:
    return path.name.endswith(ARCHIVES)
