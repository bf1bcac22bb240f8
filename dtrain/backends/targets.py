"""Where `dtrain artifacts` writes: a new folder, there whole or not at all.

A copy (local) or an unpacking (SageMaker) fills a staging folder beside the target, on the same
file system, which then takes the target's name: a full disk, a folder the user may not write or a
path that cannot be one leaves nothing behind (a model file cut short looks like a model), and the
refusal is one line naming the problem and the fix.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Callable

from dtrain.errors import ConflictError, StorageError
from dtrain.names import counted

_FIXES = {errno.ENOSPC: "free space there (df -h) or pick a --to folder on a larger disk",
          errno.EDQUOT: "free space within your disk quota, or pick a --to folder elsewhere",
          errno.EROFS: "that file system is read-only: pick a --to folder you can write",
          errno.EACCES: "you may not write there: pick a --to folder you own",
          errno.EPERM: "you may not write there: pick a --to folder you own",
          errno.ENOENT: "that folder cannot be made there: pick another --to folder"}


def refused(to: Path, err: OSError) -> StorageError:
    if err.errno in (errno.ENOTDIR, errno.EEXIST):  # a file where the path needs a folder
        part = next((str(p) for p in (to, *to.parents) if p.exists() and not p.is_dir()), "a part of it")
        return StorageError(f"cannot write {to}: {part} is a file, not a folder; pick another --to folder; "
                            f"nothing was left there")
    where = f" ({err.filename})" if err.filename and str(err.filename) != str(to) else ""
    fix = _FIXES.get(err.errno, "pick another --to folder")
    return StorageError(f"cannot write {to}: {err.strerror or err}{where}; {fix}; nothing was left there")


def new_folder(to: str | os.PathLike) -> Path:
    """`to` as a folder to fill: not there yet, or an empty folder (never a link); its parents made."""
    dest = Path(to)
    if dest.is_symlink() or (os.path.lexists(dest) and (not dest.is_dir() or any(dest.iterdir()))):
        raise ConflictError(f"{dest} exists and is not an empty folder: pick a new --to folder")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise refused(dest, err) from None
    return dest


def filled(to: str | os.PathLike, fill: Callable[[Path], None]) -> Path:
    """`fill(staging)` into a new folder beside `to`, which then becomes `to`; nothing is left on an
    OSError (said in one line) or any other error (raised as it is)."""
    dest = new_folder(to)
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    except OSError as err:
        raise refused(dest, err) from None
    try:
        fill(staging)
        if dest.exists():  # the empty folder new_folder allowed
            dest.rmdir()
        os.replace(staging, dest)
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise refused(dest, err) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return dest


def copy_tree(source: Path, into: Path) -> None:
    """`source`'s files and folders into the existing folder `into`; links are copied as links,
    never followed; folders keep their times, set once their contents are in (as shutil.copytree
    does). Stops at the first error (shutil.copytree goes on past each, on a full disk through
    every file)."""
    made, skipped = [], []
    for root, dirs, files in os.walk(source):
        here = into / os.path.relpath(root, source)
        for name in dirs + files:
            src, dst = os.path.join(root, name), here / name
            mode = os.lstat(src).st_mode
            if stat.S_ISLNK(mode):
                os.symlink(os.readlink(src), dst)
            elif stat.S_ISDIR(mode):
                os.mkdir(dst)
                made.append((src, dst))
            elif stat.S_ISREG(mode):
                shutil.copy2(src, dst, follow_symlinks=False)
            else:  # a fifo's open waits for a writer for ever, a device (/dev/zero) reads without end
                skipped.append(os.path.relpath(src, source))
    for src, dst in [*reversed(made), (source, into)]:  # a folder after the ones inside it
        shutil.copystat(src, dst)
    if skipped:
        logging.getLogger(__name__).warning("dtrain: warning: %s not copied "
                                            "(not files a model is made of), e.g. %s",
                                            counted(len(skipped), "fifo, socket or device node",
                                                    "fifos, sockets or device nodes"), skipped[0])
