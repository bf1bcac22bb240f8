"""A job's logs copied into a volume, so that a snapshot of it holds data, model and logs together.

Before the `--snapshot-on-success` snapshot (and `dtrain snapshot create VOL --job J` once J has
ended) the job's logs go to `.dtrain/logs/<job>/` in the volume: `launcher.log`, `attempts.json`
(where each launch's lines begin, which `dtrain logs` and `logs --previous` read) and each rank's
`rank-N.log`, as they are in the job's folder of the dtrain home. Its records (pids, exit codes)
are state, not logs, and stay out.

The volume is the user's: a job may have put a link at `.dtrain` or below. Nothing is written
through a link or into something that is not a folder; the copy is made in a new folder of its
own and renamed into place whole, so a failed copy (a full disk) leaves what was there before.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from pathlib import Path

from dtrain.backends.local.ranks import ATTEMPTS_FILE, rank_of
from dtrain.storage import folders

LOGS_PATH = (".dtrain", "logs")  # in the volume: .dtrain/logs/<job>/
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class LogsNotCopied(Exception):
    """One line: why the job's logs are not in the volume."""


def logs_path(job: str) -> str:
    """Where a job's logs are in its volume (and in a volume restored from its snapshot)."""
    return "/".join((*LOGS_PATH, job))


def copy_job_logs(job_dir: Path, volume_dir: Path, job: str) -> str:
    """Copy the logs of the job whose folder is `job_dir` into `volume_dir`/.dtrain/logs/`job`/,
    replacing an earlier copy there; returns that path relative to the volume. LogsNotCopied says
    why not, in one line: a link or a file in the way, a full disk, any error of the copy."""
    where = logs_path(job)
    fds: list[int] = []
    try:
        sources = _sources(job_dir, fds)
        at = _open(str(volume_dir), None, fds, shown=str(volume_dir), make=False)
        shown = ""
        for part in LOGS_PATH:
            shown = f"{shown}/{part}" if shown else part
            at = _open(part, at, fds, shown=shown, make=True)
        _place(at, job, sources, where)
    except LogsNotCopied:
        raise
    except OSError as err:
        raise LogsNotCopied(f"{where} could not be written in the volume: {err.strerror or err}") from None
    finally:
        for fd in reversed(fds):
            os.close(fd)
    return where


def _sources(job_dir: Path, fds: list[int]) -> list[tuple[int, str]]:
    """(folder fd, name) of each log in the job's folder: regular files only, never through a link
    (the job's processes can write where its logs are)."""
    try:
        top = os.open(job_dir, _DIR)
    except OSError as err:
        raise LogsNotCopied(f"the job's folder {job_dir} cannot be read ({err.strerror}): it has no logs "
                            f"to copy") from None
    fds.append(top)
    out = [(top, name) for name in ("launcher.log", ATTEMPTS_FILE)]
    try:
        logs = os.open("logs", _DIR, dir_fd=top)
    except OSError:
        return out
    fds.append(logs)
    ranks = sorted((rank, name) for name in os.listdir(logs) if (rank := rank_of(name, "log")) is not None)
    return out + [(logs, name) for _, name in ranks]


def _open(name: str, at: int | None, fds: list[int], *, shown: str, make: bool) -> int:
    """The folder `name` (under the folder fd `at`), made when missing where `make`; refused when a
    link or anything but a folder is there."""
    if make:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=at)
    try:
        fd = os.open(name, _DIR, dir_fd=at)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise LogsNotCopied(_in_the_way(name, at, shown)) from None
        raise
    fds.append(fd)
    return fd


def _in_the_way(name: str, at: int | None, shown: str) -> str:
    try:
        link = stat.S_ISLNK(os.lstat(name, dir_fd=at).st_mode)
    except OSError:
        link = False
    what = "a symbolic link" if link else "not a folder"
    return f"{shown} in the volume is {what}, and logs are never written through one: remove it"


def _place(at: int, job: str, sources: list[tuple[int, str]], where: str) -> None:
    """Copy `sources` into a new folder beside `job`, then rename it over `job`."""
    try:
        mode = os.stat(job, dir_fd=at, follow_symlinks=False).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISDIR(mode):
        what = "a symbolic link" if stat.S_ISLNK(mode) else "not a folder"
        raise LogsNotCopied(f"{where} in the volume is {what}, and logs are never written through one: remove it")
    _remove_leftovers(at, job)
    tmp = _new_folder(at, job, "tmp")
    try:
        new = os.open(tmp, _DIR, dir_fd=at)
        try:
            for folder, name in sources:
                _copy(folder, name, new)
        finally:
            os.close(new)
        if mode is None:
            os.rename(tmp, job, src_dir_fd=at, dst_dir_fd=at)
            return
        old = _new_folder(at, job, "old")
        os.rmdir(old, dir_fd=at)
        os.rename(job, old, src_dir_fd=at, dst_dir_fd=at)  # the earlier copy: a folder (checked), no link
        os.rename(tmp, job, src_dir_fd=at, dst_dir_fd=at)
        shutil.rmtree(old, dir_fd=at, ignore_errors=True)  # fd-based: removes links, never follows them
    except BaseException:
        shutil.rmtree(tmp, dir_fd=at, ignore_errors=True)
        raise


def _new_folder(at: int, job: str, kind: str) -> str:
    """'.<job>.<owner>-<hex>.<kind>': the owner (pid, start time, boot: folders.owner_tag) tells a
    killed copy's leftover (_remove_leftovers), even once its pid names another process."""
    for _ in range(100):
        name = f".{job}.{folders.owner_tag()}-{os.urandom(6).hex()}.{kind}"
        try:
            os.mkdir(name, 0o755, dir_fd=at)
            return name
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", name)


def _remove_leftovers(at: int, job: str) -> None:
    """The folders of a copy of `job`'s logs killed midway (SIGKILL, a reboot): its new copy
    ('.tmp') and the earlier one it had moved aside ('.old'). Left there they stayed in the volume,
    and in each of its snapshots, for good. A copy still running (its pid alive) is left alone;
    a name without a pid is an older dtrain's leftover; a name with the pid alone (an older
    dtrain's) is judged by the pid. Links are removed, never followed."""
    prefix = f".{job}."
    for name in os.listdir(at):
        middle = name[len(prefix):-len(".tmp")]
        if not (name.startswith(prefix) and name.endswith((".tmp", ".old")) and middle):
            continue
        owner, _, _ = middle.partition("-")
        if folders.tag_gone(owner) is False:  # its copy still running
            continue
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.stat(name, dir_fd=at, follow_symlinks=False).st_mode):
                shutil.rmtree(name, dir_fd=at, ignore_errors=True)
            else:
                os.unlink(name, dir_fd=at)


def _copy(folder: int, name: str, dst_folder: int) -> None:
    """`name` copied whole (its bytes, mode bits and mtime) when it is a regular file; skipped otherwise."""
    try:
        src = os.open(name, _READ, dir_fd=folder)
    except OSError:
        return  # missing (a job that never launched), or a link: not a log to copy
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode):
            return
        dst = os.open(name, _NEW, 0o644, dir_fd=dst_folder)
        try:
            _copy_bytes(src, dst)
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _copy_bytes(src: int, dst: int) -> None:
    """Every byte of `src` to `dst`: copy_file_range (a clone where the file system can), else reads."""
    try:
        while os.copy_file_range(src, dst, 1 << 30):
            pass
        return
    except OSError as err:
        if err.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF):
            raise
    os.lseek(src, 0, os.SEEK_SET)
    os.lseek(dst, 0, os.SEEK_SET)
    os.ftruncate(dst, 0)
    while chunk := os.read(src, 1 << 20):
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view):]
