"""A local notebook's address (the port and token its supervisor chose, in a file only the user
reads), and how its Jupyter writes files on a shared volume (VolumeContentsManager, below).

The token never goes on a command line (every user can read /proc/PID/cmdline): Jupyter takes it
from JUPYTER_TOKEN, and the supervisor records port and token in `jobs/<name>/notebook.json`,
created 0600 with O_EXCL|O_NOFOLLOW so it is never written through a planted link.

The address is handed out only once the notebook's own Jupyter listens on it: the port is chosen
before Jupyter starts, and until Jupyter binds it another program may take it (Jupyter then fails),
so a URL handed out earlier would send the token to that program, or to nothing.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
import stat
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import IO

from dtrain.backends.local.ranks import launcher_ident, rank_records
from dtrain.errors import ConflictError, NotReadyError
from dtrain.procs import Ident, session_members
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


def read_access(job_dir: Path, name: str, cmd=lambda words: f"dtrain {words}") -> NotebookAccess:
    """Notebook `name`'s port and token; `cmd(words)`: the `dtrain WORDS` its refusals name."""
    path = job_dir / ACCESS_FILE
    f = open_regular(path)  # a link is never followed, a fifo never waited on
    if f is None:
        if not os.path.lexists(path):
            raise NotReadyError(f"notebook {name!r} has not started yet: see '{cmd(f'describe job {name}')}' "
                                f"and try again when it is Running")
        raise ConflictError(f"{path} is not a file the notebook's supervisor wrote (a link or a special "
                            f"file): remove it, then restart the notebook with '{cmd(f'delete {name}')}' and "
                            f"'{cmd(f'notebook start {name}')}'")
    try:
        with f:
            data = json.loads(f.read(MAX_ACCESS_BYTES))
        access = NotebookAccess(port=int(data["port"]), token=str(data["token"]))
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ConflictError(f"{path} cannot be read ({type(err).__name__}: {err}): remove it, then restart the "
                            f"notebook with '{cmd(f'delete {name}')}' and '{cmd(f'notebook start {name}')}'") from None
    if not serving(job_dir, access.port):
        raise NotReadyError(f"notebook {name!r} is not serving on port {access.port} yet (Jupyter is starting, "
                            f"or another program holds the port): see '{cmd(f'logs {name}')}' and try again")
    return access


def serving(job_dir: Path, port: int) -> bool:
    """Whether a process of the job (its launcher's session or a rank's) listens on 127.0.0.1:`port`."""
    leaders = [launcher_ident(job_dir), *(Ident.from_record(r) for r in rank_records(job_dir))]
    sockets: set[str] = set()
    for leader in filter(None, leaders):
        for pid in session_members(leader):
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    sockets.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
                except OSError:
                    continue
    return any(f"socket:[{inode}]" in sockets for inode in listening(port))


def taken_by_another(job_dir: Path, port: int) -> bool:
    """Whether something outside the job holds 127.0.0.1:`port` (so its Jupyter could not bind it):
    a bind there fails (SO_REUSEADDR, as Jupyter binds: a closed connection's TIME_WAIT is no hold)
    and no process of the job listens on it."""
    import socket

    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as err:
            return err.errno == errno.EADDRINUSE and not serving(job_dir, port)
    return False


def listening(port: int, table: str = "/proc/net/tcp") -> list[str]:
    """The inodes of the sockets listening on 127.0.0.1:`port` (IPv4, the address Jupyter binds)."""
    address = int.from_bytes(bytes([127, 0, 0, 1]), sys.byteorder)  # /proc/net/tcp prints it in host order
    local = f"{address:08X}:{port:04X}"
    try:
        with open(table) as f:
            rows = [line.split() for line in f.readlines()[1:]]
    except OSError:
        return []
    return [r[9] for r in rows if len(r) > 9 and r[1] == local and r[3] == "0A"]  # 0A: LISTEN


# ---- an idle notebook (--idle-timeout) ---------------------------------------------------------
# As Kubeflow's notebook culler judges it: by the kernels (and terminals), not by requests. An open
# JupyterLab tab polls the server's API every few seconds, so Jupyter's own shutdown_no_activity
# never fires while one is open, and a forgotten tab would hold the notebook's GPUs for good. The
# supervisor asks Jupyter for its kernels and terminals (with no_track_activity, so the asking is
# not activity) and stops the notebook once nothing ran for --idle-timeout seconds.


def idle_check_interval(timeout: int) -> float:
    """How often the supervisor asks: a quarter of the timeout, at most a minute."""
    return min(60.0, timeout / 4)


def last_activity(kernels: list, terminals: list, started: float) -> float | None:
    """When the notebook last did something (unix seconds): the latest kernel or terminal activity,
    or its start; None while a kernel is busy or starting (a long cell is activity)."""
    latest = started
    for item in [*kernels, *terminals]:
        if not isinstance(item, dict):
            continue
        if item.get("execution_state") in ("busy", "starting"):
            return None
        when = item.get("last_activity")
        if isinstance(when, str):
            try:
                latest = max(latest, datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp())
            except ValueError:
                continue
    return latest


def ask_activity(access: NotebookAccess, started: float, timeout: float = 10.0) -> float | None:
    """last_activity as the notebook's Jupyter reports it; None when Jupyter does not answer (starting,
    or gone: not idle either way)."""
    lists = []
    for path in ("/api/kernels", "/api/terminals"):
        req = urllib.request.Request(f"http://127.0.0.1:{access.port}{path}?no_track_activity=1",
                                     headers={"Authorization": f"token {access.token}"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                lists.append(json.loads(resp.read(1 << 20)))
        except urllib.error.HTTPError as err:
            if err.code != 404:  # 404: no terminals extension
                return None
            lists.append([])
        except (OSError, ValueError):
            return None
    kernels, terminals = (x if isinstance(x, list) else [] for x in lists)
    return last_activity(kernels, terminals, started)


# ---- what Jupyter writes on a shared volume ----------------------------------------------------
# Jupyter's own "atomic" save truncates the file and writes it in place, following a link at the
# file (and at `.~NAME`, its backup copy): a link that a job or a teammate's notebook left on the
# shared volume sends a save to any file of the user's, and a job reading the file meanwhile (or
# a second notebook saving it) sees it half written. VolumeContentsManager writes a new file and
# renames it over the old one, reaching its folder from Jupyter's root without following a link:
# a reader sees the old or the new file, never part of one, and a link is replaced, not followed.
# Jupyter loads it by name (--ServerApp.contents_manager_class=
# dtrain.backends.local.notebook.VolumeContentsManager); it is built on first use, so dtrain
# itself does not need jupyter-server.

LINK_REFUSED = ("is reached through a link: notebooks on a shared volume never write through one "
                "(replace the link by a folder or file of its own)")


def open_folder(root: str, folder: str) -> int:
    """A descriptor of `folder`, reached from `root` without following a link below `root`."""
    rel = os.path.relpath(folder, root)
    if rel == ".." or rel.startswith(".." + os.sep):
        raise PermissionError(errno.EACCES, "outside the notebook's root folder", folder)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for part in [] if rel == "." else rel.split(os.sep):
        try:
            fd_next = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR):
                raise LinkRefused(folder) from None
            raise
        finally:
            os.close(fd)
        fd = fd_next
    return fd


class LinkRefused(PermissionError):
    def __init__(self, path: str):
        super().__init__(errno.EACCES, LINK_REFUSED, path)


@contextmanager
def replace_writing(root: str, os_path: str, *, text: bool = True, encoding: str = "utf-8",
                    mode: int | None = None) -> Iterator[IO]:
    """A new file at `os_path`, in place once the block ends without error (a rename), with `mode`
    (default: the old file's). Nothing is written through a link at the file or at a folder below `root`."""
    folder, name = os.path.split(os_path)
    dir_fd = open_folder(root, folder)
    try:
        try:
            old = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            old = None
        tmp = f".~dtrain-{secrets.token_hex(8)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "w", encoding=encoding, newline="\n") if text else os.fdopen(fd, "wb") as f:
                yield f
                f.flush()
                if mode is None and old is not None and stat.S_ISREG(old.st_mode):
                    mode = stat.S_IMODE(old.st_mode)
                if mode is not None:
                    os.fchmod(f.fileno(), mode)
                os.fsync(f.fileno())
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)


def _copy_into(root: str, src: str, dest: str) -> None:
    """`src` copied to `dest` (a checkpoint, or a file's restore from one) by replace_writing."""
    with open(src, "rb") as f_in, replace_writing(root, dest, text=False,
                                                  mode=stat.S_IMODE(os.fstat(f_in.fileno()).st_mode)) as f_out:
        shutil.copyfileobj(f_in, f_out)


def _append(root: str, os_path: str, data: bytes) -> None:
    """A large upload's next chunk, appended without following a link."""
    folder, name = os.path.split(os_path)
    dir_fd = open_folder(root, folder)
    try:
        try:
            fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise LinkRefused(os_path) from None
            raise
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    finally:
        os.close(dir_fd)


@cache
def _volume_classes() -> dict[str, type]:
    """Jupyter's default contents manager and checkpoints, writing as replace_writing does."""
    import base64

    from jupyter_server.services.contents.filecheckpoints import AsyncFileCheckpoints
    from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
    from tornado import web
    from traitlets import default

    @contextmanager
    def writing(self, os_path, *args, text: bool = True, encoding: str = "utf-8", **kwargs):
        with self.perm_to_403(os_path), replace_writing(self.root_dir, os_path, text=text, encoding=encoding) as f:
            yield f

    @contextmanager
    def refused_links(self, os_path=""):
        try:
            yield
        except LinkRefused as err:
            raise web.HTTPError(403, f"{os.path.relpath(err.filename, self.root_dir)} {LINK_REFUSED}") from None
        except OSError as err:
            if err.errno in (errno.EPERM, errno.EACCES):
                shown = os.path.relpath(os_path or err.filename or ".", self.root_dir)
                raise web.HTTPError(403, f"Permission denied: {shown}") from None
            raise

    async def copy(self, src, dest):
        _copy_into(self.root_dir, src, dest)

    class VolumeCheckpoints(AsyncFileCheckpoints):
        perm_to_403 = refused_links
        atomic_writing = writing
        _copy = copy

    class VolumeContentsManager(AsyncLargeFileManager):
        perm_to_403 = refused_links
        atomic_writing = writing
        _copy = copy

        @default("checkpoints_class")
        def _checkpoints_class_default(self):
            return VolumeCheckpoints

        async def _save_large_file(self, os_path, content, format):
            if format not in {"text", "base64"}:
                raise web.HTTPError(400, "Must specify format of file contents as 'text' or 'base64'")
            try:
                data = content.encode("utf8") if format == "text" else base64.b64decode(content.encode("ascii"))
            except Exception as err:  # noqa: BLE001 - Jupyter's own answer to bad content
                raise web.HTTPError(400, f"Encoding error saving {os_path}: {err}") from err
            with self.perm_to_403(os_path):
                _append(self.root_dir, os_path, data)

    return {"VolumeContentsManager": VolumeContentsManager, "VolumeCheckpoints": VolumeCheckpoints}


def __getattr__(name: str):
    if name in ("VolumeContentsManager", "VolumeCheckpoints"):
        return _volume_classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
