"""Writing a file whole, in place of the old one: a reader sees the old file or the new one, never
a part, and nothing is written through a link that someone else put at the temporary name.

A fixed temporary name (`config.tmp`, `.run.json.tmp`) in a folder that other people or jobs can
write, such as a shared volume, is a trap: a symbolic link left there is followed by `open`, and
the bytes land wherever it points. So the temporary file is always a new one (O_CREAT | O_EXCL,
with a random name), and O_NOFOLLOW refuses a link even at that name.

Standard library only: the training code (which runs without the platform), the rank wrapper
(which starts in a few milliseconds) and the platform all use it.
"""

from __future__ import annotations

import contextlib
import os
from typing import IO, Iterator

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
