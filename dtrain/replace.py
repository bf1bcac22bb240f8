"""Writing a file whole, in place of the old one: a reader sees the old file or the new one, never
a part, and nothing is written through a link that someone else put at the temporary name.

A fixed temporary name (`config.tmp`, `.run.json.tmp`) in a folder that other people or jobs can
write, such as a shared volume, is a trap: a symbolic link left there is followed by `open`, and
the bytes land wherever it points. So the temporary file is always a new one (O_CREAT | O_EXCL,
with a random name), and O_NOFOLLOW refuses a link even at that name.

Reading has its twin of that trap: a link, or a fifo (whose `open` waits for a writer for ever),
put at the name of a file we read. `open_regular` opens a regular file only.

Standard library only: the training code (which runs without the platform), the rank wrapper
(which starts in a few milliseconds) and the platform all use it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import IO, BinaryIO, Iterator

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@contextlib.contextmanager
def replacing(path: str | os.PathLike, mode: str = "w", *, durable: bool = False) -> Iterator[IO]:
    """Open a new file beside `path` for writing ("w" text, "wb" bytes); when the block ends
    without an error it replaces `path` (os.replace: a link at `path` itself is replaced, never
    followed), else it is removed. `durable`: flushed to disk before the rename. The new file's
    permissions are 0666 less the umask, as a plain `open` makes them."""
    path = os.fspath(path)
    folder, name = os.path.split(path)
    for _ in range(100):  # a clash of 48 random bits means someone is guessing names: give up then
        tmp = os.path.join(folder, f".{name}.{os.urandom(6).hex()}.tmp")
        try:
            fd = os.open(tmp, _FLAGS, 0o666)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name beside {path}")
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def replace_file(path: str | os.PathLike, data: str | bytes, *, durable: bool = False) -> None:
    """`path` now holds `data`, written whole (see `replacing`)."""
    with replacing(path, "wb" if isinstance(data, bytes) else "w", durable=durable) as f:
        f.write(data)


def open_for_append(folder: str | os.PathLike, name: str) -> int:
    """`folder`/`name` opened to append (made 0644 when missing), as a blocking file descriptor:
    never through a link at the file or at its folder, and only when it is a regular file (a fifo
    is neither waited on nor written). A job's processes can write where its logs are, and a log
    appended through a link they left there would land in any file of the user's. OSError with the
    file's path otherwise: ELOOP or ENOTDIR (a link), ENXIO (a fifo nobody reads), EINVAL (another
    kind of file), or what opening it met (ENOENT, EACCES, EISDIR, ...)."""
    path = os.path.join(os.fspath(folder), name)
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW,
                         0o644, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as e:
        raise OSError(e.errno, e.strerror, path) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", path)
    os.set_blocking(fd, True)
    return fd


def open_regular(path: str | os.PathLike) -> BinaryIO | None:
    """`path` opened for reading in binary when it is a regular file; None when it is missing, a
    link (never followed), a fifo (never waited on), a folder or a device."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def open_in(folder: str | os.PathLike, name: str, flags: int, mode: int = 0o644) -> int | None:
    """`folder`/`name` opened with `flags`, a link followed at neither (a job may have put one at
    the file or at its folder); None where that fails."""
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return os.open(name, flags | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
    except OSError:
        return None
    finally:
        os.close(dir_fd)
