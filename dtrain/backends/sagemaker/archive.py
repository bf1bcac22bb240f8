"""sourcedir.tar.gz out, model.tar.gz in: bounded, no links followed, nothing outside the target.

Packing skips what never belongs in a job's code: hidden files and folders (a name starting with
'.': .git, and where credentials live, .env, .aws, .ssh, .netrc), virtual environments and caches;
the folder is the working folder unless --source-dir says otherwise, and its archive lands in S3
where whoever reads the bucket reads it. Symlinks are stored as links (never their targets),
leaving out those that point outside the folder.
Unpacking uses tarfile's 'data' filter (no absolute paths, no '..', no links leading out, no
devices) into a fresh folder that is renamed into place only when every member is out and the
compressed stream checks out to its end (gzip's CRC), so a refused or damaged archive leaves
nothing behind.
"""

from __future__ import annotations

import gzip
import io
import os
import posixpath
import tarfile
import zlib
from pathlib import Path

from dtrain.backends.targets import filled
from dtrain.errors import DataError, SpecError

SKIP = {"venv", "__pycache__", "node_modules"}  # and every hidden name (.git, .venv, .env, .aws): hidden()
MAX_SOURCE_BYTES = 512 * 2**20  # code, not data: data goes in channels
MAX_MODEL_BYTES = 64 * 2**30  # unpacked size of a model.tar.gz


def pack_source(folder: str | os.PathLike, extra: dict[str, str], out) -> int:
    """Write `folder` (plus generated files) as a gzip tar to the binary file `out`; bytes read."""
    root = Path(folder)
    if not root.is_dir():
        raise SpecError(f"source folder {root} does not exist: run from your code's folder or pass --source-dir")
    check_generated(root, extra)
    total = 0
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            kept = [d for d in dirnames if d not in SKIP and not hidden(d) and not d.endswith(".egg-info")]
            links = [d for d in kept if os.path.islink(os.path.join(dirpath, d))]  # walked as files: links
            dirnames[:] = sorted(d for d in kept if d not in links)
            for name in sorted(filenames + links):
                path = Path(dirpath) / name
                if name.endswith((".pyc", ".pyo")) or hidden(name):
                    continue
                if path.is_symlink() and link_leaves(str(path.relative_to(root)), os.readlink(path)):
                    continue  # the code could not use it in the job, and `--local` refuses to unpack it
                total += path.lstat().st_size
                if total > MAX_SOURCE_BYTES:
                    raise SpecError(f"{root} holds more than {MAX_SOURCE_BYTES >> 20} MiB of code: put data in a "
                                    f"channel (--channel) or point --source-dir at the code alone")
                tar.add(path, arcname=str(path.relative_to(root)), recursive=False)
        for name, text in extra.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return total


def hidden(name: str) -> bool:
    """A hidden file or folder: never packed (a .env, .aws/credentials or .ssh/id_rsa in the working
    folder would otherwise be uploaded with the code)."""
    return name.startswith(".")


def check_generated(folder: str | os.PathLike, extra: dict[str, str]) -> None:
    """Refuse a source folder whose top level holds a file the archive gets from dtrain instead."""
    for name in extra:
        if os.path.lexists(os.path.join(folder, name)):
            raise SpecError(f"{os.path.join(folder, name)} clashes with the {name} generated into the "
                            f"uploaded code to run a command that is not 'python FILE.py ...': rename your file")


def link_leaves(name: str, target: str) -> bool:
    """Whether a link stored as `name` (a path inside an archive) points outside the archive's
    folder: an absolute target, or one that climbs past the top. tarfile's 'data' filter refuses
    an archive holding such a link, and inside a job it would lead nowhere."""
    landing = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    return posixpath.isabs(target) or landing == ".." or landing.startswith("../")


def unpack(archive: str | os.PathLike, to: str | os.PathLike) -> Path:
    """Unpack a tar(.gz) into the new folder `to`, refusing anything that would land outside it;
    there whole or not at all (dtrain.backends.targets)."""
    def fill(staging: Path) -> None:
        try:
            with tarfile.open(archive) as tar:
                size = sum(m.size for m in tar.getmembers())
                if size > MAX_MODEL_BYTES:
                    raise DataError(f"{archive} unpacks to {size} bytes, more than {MAX_MODEL_BYTES}: unpack it by hand")
                tar.extractall(staging, filter="data")
                # gzip checks its CRC only at the end of the stream, which tarfile stops short of: read
                # to the end, or a damaged archive unpacks to wrong bytes without a word.
                while tar.fileobj.read(1 << 20):
                    pass
        except (tarfile.FilterError, tarfile.ReadError, EOFError, gzip.BadGzipFile, zlib.error) as err:
            raise DataError(f"refusing {archive}: {err}; the archive is damaged or holds paths or links that leave "
                            f"the target folder") from None

    return filled(to, fill)
