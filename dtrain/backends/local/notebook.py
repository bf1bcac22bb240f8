"""A local notebook's address: the port and token its supervisor chose, in a file only the user reads.

The token never goes on a command line (every user can read /proc/PID/cmdline): Jupyter takes it
from JUPYTER_TOKEN, and the supervisor records port and token in `jobs/<name>/notebook.json`,
created 0600 with O_EXCL|O_NOFOLLOW so it is never written through a planted link.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from dtrain.errors import ConflictError
from dtrain.replace import open_regular

ACCESS_FILE = "notebook.json"
MAX_ACCESS_BYTES = 4096  # a port and a token


@dataclass(frozen=True, kw_only=True)
class NotebookAccess:
    port: int  # 127.0.0.1 port the server listens on
    token: str  # Jupyter's token: the only credential

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/?token={self.token}"

    @classmethod
    def new(cls, port: int) -> "NotebookAccess":
        return cls(port=port, token=secrets.token_urlsafe(32))


def write_access(job_dir: Path, access: NotebookAccess) -> None:
    """Replace the access file; a fresh name, then an atomic rename over the old one."""
    tmp = job_dir / f".{ACCESS_FILE}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"port": access.port, "token": access.token}, f)
    os.replace(tmp, job_dir / ACCESS_FILE)


def read_access(job_dir: Path, name: str) -> NotebookAccess:
    path = job_dir / ACCESS_FILE
    f = open_regular(path)  # a link is never followed, a fifo never waited on
    if f is None:
        if not os.path.lexists(path):
            raise ConflictError(f"notebook {name!r} has not started yet: see 'dtrain describe job {name}' "
                                f"and try again when it is Running")
        raise ConflictError(f"{path} is not a file the notebook's supervisor wrote (a link or a special "
                            f"file): remove it and restart the notebook (dtrain delete {name}, then dtrain "
                            f"notebook start {name})")
    try:
        with f:
            data = json.loads(f.read(MAX_ACCESS_BYTES))
        return NotebookAccess(port=int(data["port"]), token=str(data["token"]))
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ConflictError(f"{path} cannot be read ({type(err).__name__}: {err}): remove it and restart the "
                            f"notebook (dtrain delete {name}, then dtrain notebook start {name})") from None
