"""Download the real CIFAR10 python batches: `python -m dtrain.workloads.cifar10 download --out DIR`.

1. The archive (default: the dataset page's cifar-10-python.tar.gz) goes to `DIR/NAME.part`
   first; a dropped connection or an interrupted run leaves the part, and the next run asks
   for the rest with a Range request (a server that ignores Range sends the whole file again).
   Redirects are followed.
2. Its md5 must be the official one (`--md5` for another archive); a wrong one removes the
   part, so the next run starts clean.
3. Unpacking reads every member first and refuses the archive when one is not a plain file or
   folder under cifar-10-batches-py/ (an absolute path, '..', a link, a device): nothing is
   written then. The batches are written into a new hidden folder, checked with the reader
   and only then renamed to DIR/cifar-10-batches-py, so a half-unpacked folder never appears.

A DIR that already holds readable batches is left as it is. `--url` may also name a file on this
machine (a path or file://), as `lanes prepare --url` takes: its md5 is checked and it is unpacked
in place, never moved or removed.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zlib
from pathlib import Path, PurePosixPath

from dtrain.errors import DataError, SpecError, StorageError
from dtrain.workloads.cifar10.data import PY_DIR, load_split
from dtrain.workloads.cifar10.failure import CommandParser, reports_failure
from dtrain.workloads.inputs import MACHINE_ERRNOS, input_file, local_path, out_folder, split_url

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
MD5 = "c58f30108f718f92721af3b95e74349a"  # the dataset page's md5sum of cifar-10-python.tar.gz
TIMEOUT_S = 60
CHUNK = 1 << 20


def md5_file(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def _open_part(part: Path, append: bool):
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
    try:
        return os.fdopen(os.open(part, flags, 0o666), "ab" if append else "wb")
    except OSError as e:
        if part.is_symlink():
            raise SpecError(f"{part} is a symbolic link: remove it (downloads never write through a link)") from None
        raise DataError(f"cannot write {part}: {e.strerror or e}; check free space and permissions") from None


def _start_of(content_range: str) -> int | None:
    """'bytes 100-199/200' -> 100."""
    try:
        return int(content_range.removeprefix("bytes ").partition("-")[0])
    except ValueError:
        return None


def download(url: str, dest: Path) -> Path:
    """Fetch `url` to `dest`, resuming `dest.part`; DataError (one line) when it stops short."""
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.is_file() and not part.is_symlink() else 0
    req = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        resp = urllib.request.urlopen(req, timeout=TIMEOUT_S)  # noqa: S310 (the user's URL, redirects followed)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # nothing left past the part: it is the whole file
            os.replace(part, dest)
            return dest
        raise DataError(f"download of {url} failed: HTTP {e.code} {e.reason}; check the URL") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        raise DataError(f"cannot download {url}: {reason}; check the URL and the network") from None
    with resp:
        if getattr(resp, "status", 200) == 206:
            if _start_of(resp.headers.get("Content-Range", "")) != have:
                part.unlink()
                raise DataError(f"{url} answered another byte range than asked; run the same command again")
        else:
            have = 0  # the server ignored Range (200): the whole file again
        length = resp.headers.get("Content-Length")
        total = have + int(length) if length and length.isdigit() else None
        got, cut = have, False
        with _open_part(part, append=have > 0) as f:
            while True:
                try:
                    block = resp.read(CHUNK)
                except (OSError, ValueError, http.client.HTTPException):  # reset, timeout, IncompleteRead
                    cut = True
                    break
                if not block:
                    break
                try:
                    f.write(block)
                except OSError as e:
                    raise DataError(f"cannot write {part}: {e.strerror or e}; check free space") from None
                got += len(block)
    if cut or (total is not None and got < total):
        raise DataError(f"download of {url} stopped after {got} of {total or 'unknown'} bytes; run the same "
                        f"command again to resume ({part.name} is kept)")
    os.replace(part, dest)
    return dest


def _members(tf: tarfile.TarFile, archive: Path) -> list[tarfile.TarInfo]:
    """Every member, checked before anything is written: plain files and folders under PY_DIR only."""
    members = tf.getmembers()
    for m in members:
        path = PurePosixPath(m.name)
        if path.is_absolute() or ".." in path.parts or not path.parts or path.parts[0] != PY_DIR:
            raise DataError(f"archive {archive.name} holds {m.name!r}, outside {PY_DIR}/: refusing to unpack it")
        if not (m.isfile() or m.isdir()):
            kind = "a link" if m.issym() or m.islnk() else "a special file"
            raise DataError(f"archive {archive.name} holds {kind} {m.name!r}: refusing to unpack it")
    return members


def _read_to_end(tf: tarfile.TarFile) -> None:
    """Read the rest of the archive's stream: tarfile ends its member list quietly at a cut or
    corrupt block, so only the compressed stream's own end (its length and CRC) shows the damage."""
    while tf.fileobj.read(CHUNK):
        pass


def extract(archive: Path, out: Path) -> Path:
    """Unpack the python batches of `archive` into out/cifar-10-batches-py (see the module doc)."""
    tmp = out / f".{PY_DIR}.{os.urandom(6).hex()}.tmp"
    try:
        with tarfile.open(archive, "r:*") as tf:
            members = _members(tf, archive)
            tmp.mkdir()
            for m in members:
                rel = PurePosixPath(m.name).relative_to(PY_DIR)
                target = tmp.joinpath(*rel.parts)
                if m.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tf.extractfile(m)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
                with src, os.fdopen(fd, "wb") as dst:
                    shutil.copyfileobj(src, dst, CHUNK)
            _read_to_end(tf)
        try:
            for split in ("train", "test"):
                load_split(tmp, split)  # DataError names a missing or damaged batch
        except DataError as e:  # named as in the archive, not in the hidden folder removed below
            raise DataError(f"archive {archive.name} is incomplete or damaged ({str(e).replace(str(tmp), PY_DIR)}); "
                            "delete it and download again") from None
        os.rename(tmp, out / PY_DIR)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
        if isinstance(e, OSError) and e.errno in MACHINE_ERRNOS:  # the folder, not the archive
            raise StorageError(f"cannot unpack {archive.name} into {out}: {e.strerror}; free some space or give "
                               f"--out a folder you can write to ({archive} is kept)") from None
        raise DataError(f"archive {archive.name} is damaged ({e}); delete it and download again") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / PY_DIR


def fetch_cifar10(out: str | os.PathLike, *, url: str = URL, md5: str = MD5) -> Path:
    """Download, check and unpack the CIFAR10 python batches into out/cifar-10-batches-py."""
    md5 = md5.strip().lower()
    if len(md5) != 32 or any(c not in "0123456789abcdef" for c in md5):
        raise SpecError(f"--md5 {md5!r} is not an md5 digest: give 32 hex digits, e.g. {MD5}")
    out = out_folder(out, "--out")
    ready = out / PY_DIR
    if ready.exists() or ready.is_symlink():
        try:
            for split in ("train", "test"):
                load_split(ready, split)
        except DataError as e:
            raise DataError(f"{ready} exists but is not a complete CIFAR10 folder ({e}); move it away and run "
                            "again") from None
        return ready
    path = local_path(url)
    if path is not None:  # a file on this machine, as `lanes prepare --url` takes: used in place, never removed
        archive = input_file(path, "--url", "give the CIFAR10 python archive (cifar-10-python.tar.gz) or its URL")
        actual = md5_file(archive)
        if actual != md5:
            raise DataError(f"md5 of {archive} is {actual}, expected {md5}: another file or a damaged copy; "
                            "give the official archive (or --md5 for another one)")
        return extract(archive, out)
    name = PurePosixPath(split_url(url).path).name or "cifar-10-python.tar.gz"
    archive = out / name
    if archive.is_symlink() or (archive.exists() and not archive.is_file()):
        raise SpecError(f"{archive} is not a regular file: move it away (the download is saved there)")
    if not (archive.is_file() and md5_file(archive) == md5):
        download(url, archive)
        actual = md5_file(archive)
        if actual != md5:
            archive.unlink()
            raise DataError(f"md5 of {url} is {actual}, expected {md5}: the download is damaged or another file; "
                            "run again (give --md5 for another archive)")
    return extract(archive, out)


@reports_failure
def download_main(argv: list[str] | None = None) -> int:
    """`python -m dtrain.workloads.cifar10 download --out DIR [--url URL] [--md5 HEX]`."""
    p = CommandParser(prog="dtrain cifar10 download", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help=f"folder that receives {PY_DIR}/ (and the archive)")
    p.add_argument("--url", default=URL, help=f"the archive (default {URL})")
    p.add_argument("--md5", default=MD5, help=f"its md5 (default the official {MD5})")
    a = p.parse_args(argv)
    folder = fetch_cifar10(a.out, url=a.url, md5=a.md5)
    print(f"CIFAR10 python batches in {folder}: {len(load_split(folder, 'train')[1])} train, "
          f"{len(load_split(folder, 'test')[1])} test images")
    return 0
