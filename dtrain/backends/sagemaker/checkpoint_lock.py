"""The lock a --local job's runner holds on its checkpoint folder for as long as it runs.

Every --local job given one checkpoint URI gets one folder as its /opt/ml/checkpoints. Inside, rank 0
locks that folder itself (workloads.rank0); where its file system takes no flock on a folder (NFS), it
locked a file of its own host's /opt/ml instead, which no other job sees, so two jobs wrote the same
checkpoints. SageMaker gives each job its instances' own checkpoint folder and syncs it to S3; here the
folder is shared, so the runner holds a lock on one file that every job given the folder takes: a POSIX
lock (lockf), which NFS servers keep (NLM, NFSv4), on a regular file opened for writing, never through a
link. It goes with the runner however it ends. The file records the holder, for the refusal to name it.
A folder within another's (one URI a prefix of the other) is shared too: a job is refused while a running job
holds a folder holding its own or one within it (in_use, also asked at submit). Those within it are looked up in
the home's LOCKS folder alone, where a runner holding a file:// folder locks a second file (FILES), never in the
folder itself: walking a checkpoint folder of millions of files took as long as they were many, and counted a
plain .training.lock a training held in it (rank0.LOCK_FILE), which no job's checkpoint location is.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import struct
from pathlib import Path

from dtrain.replace import open_in

LOCK_SUFFIX = ".training.lock"
LOCKS = "checkpoint-locks"  # beside the local S3 folder: a lock file in it would be an object of a bucket
FILES = ".files"  # under LOCKS, a file:// folder's place (no bucket's name begins with a dot)
MAX_RECORD = 4096


class CheckpointsInUse(Exception):
    """Another --local job holds the checkpoint folder."""


def lock_path(folder: Path, s3_root: Path) -> Path:
    """The file locked for `folder`: beside it, named after it (.NAME.training.lock), so every job given the
    folder, from any home or machine that mounts it, takes the same one; for a folder of the local S3, the
    same place under LOCKS beside that S3 folder, where no bucket shows it."""
    return _beside(_keyed(folder, s3_root))


def _keyed(folder: Path, s3_root: Path) -> Path:
    """The folder whose lock file lies beside it: `folder`, or its place under LOCKS for a folder of the local S3."""
    folder = Path(os.path.abspath(folder))
    s3_root = Path(os.path.abspath(s3_root))
    if folder == s3_root or s3_root in folder.parents:
        folder = s3_root.parent / LOCKS / folder.relative_to(s3_root)
    return folder


def _mirrored(folder: Path, s3_root: Path) -> Path:
    """The folder whose lock file lies beside it under LOCKS: a local S3 folder's (_keyed), or a file:// folder's
    place under LOCKS/FILES, named by its absolute path."""
    key, locks = _keyed(folder, s3_root), _keyed(s3_root, s3_root)
    return key if key == locks or locks in key.parents else locks / FILES / key.relative_to(key.anchor)


def _beside(folder: Path) -> Path:
    return folder.parent / f".{folder.name or 'root'}{LOCK_SUFFIX}"


def hold(folder: Path, s3_root: Path, uri: str, job: str) -> list[int]:
    """The descriptors of the lock files, held for `job` (keep them open while the job runs; closing any
    descriptor of a file lets its lock go): lock_path's, and for a file:// folder its place under LOCKS too
    (_mirrored), where a job given a folder holding it finds it; none of a file system that locks nothing.
    CheckpointsInUse, a one-line refusal naming the job that holds it and the fix, where another job does."""
    held = [fd] if (fd := _take(lock_path(folder, s3_root), uri)) is not None else []
    mirror = _beside(_mirrored(folder, s3_root))
    if mirror != lock_path(folder, s3_root):
        try:
            if (fd := _take(mirror, uri)) is not None:
                held.append(fd)
        except BaseException:
            for fd in held:
                os.close(fd)
            raise
    if why := _nested(folder, s3_root, uri):  # taken first, then looked at: of two starting at once, one sees the other
        for fd in held:
            os.close(fd)
        raise CheckpointsInUse(why)
    record = json.dumps({"job": job, "host": socket.gethostname(), "pid": os.getpid()}).encode()
    for fd in held:
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
    return held


def _take(path: Path, uri: str) -> int | None:
    """The descriptor of the lock file at `path`, locked; None where its file system locks nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_in(path.parent, path.name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
    if fd is None:
        raise OSError(errno.ELOOP if path.is_symlink() else errno.EACCES,
                      f"cannot open the checkpoint folder's lock file {path} (a link there is never followed)")
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
            os.close(fd)
            return None
        holder = _holder(fd)
        os.close(fd)
        if e.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        raise CheckpointsInUse(_same(uri, holder)) from None
    return fd


def _holder(fd: int) -> str:
    """The job the lock file names ('the local job NAME', '... (on HOST)' for another machine's); 'another
    local job' where it names none yet (the holder took the lock a moment ago)."""
    try:
        record = json.loads(os.pread(fd, MAX_RECORD, 0) or b"{}")
    except (OSError, ValueError):
        record = {}
    job = record.get("job") if isinstance(record, dict) else None
    if not isinstance(job, str) or not job:
        return "another local job"
    host = record.get("host")
    return f"the local job {job}" + (f" (on {host})" if isinstance(host, str) and host != socket.gethostname() else "")


def _same(uri: str, holder: str) -> str:
    return (f"the checkpoint folder of {uri} is in use by {holder}, which writes its checkpoints there: wait for it "
            f"to end, or give this job another --checkpoint-s3-uri")


def in_use(folder: Path, s3_root: Path, uri: str) -> str | None:
    """The one-line refusal hold would give a job given `folder` now (a running job holds it, a folder holding it
    or one within it), None where none does; nothing is taken (submit asks before the runner starts)."""
    if (holder := _held(lock_path(folder, s3_root))) is not None:
        return _same(uri, holder)
    return _nested(folder, s3_root, uri)


def _nested(folder: Path, s3_root: Path, uri: str) -> str | None:
    """The refusal where a running job holds a folder that holds `folder` or lies within it, naming that job."""
    key, locks = _keyed(folder, s3_root), _keyed(s3_root, s3_root)
    for above in key.parents:
        if above == locks:  # the local S3's folders end at its buckets
            break
        if (holder := _held(_beside(above))) is not None:
            return (f"the checkpoint folder of {uri} lies within the one {holder} writes its checkpoints to: wait "
                    f"for it to end, or give this job a --checkpoint-s3-uri outside it")
    for here, _, files in os.walk(_mirrored(folder, s3_root)):  # the runners' lock files only; links not followed
        for name in sorted(files):
            if len(name) > len(LOCK_SUFFIX) + 1 and name.startswith(".") and name.endswith(LOCK_SUFFIX) and \
                    (holder := _held(Path(here) / name)) is not None:
                return (f"the checkpoint folder of {uri} holds the one {holder} writes its checkpoints to: wait "
                        f"for it to end, or give this job a --checkpoint-s3-uri that does not hold it")
    return None


_FLOCK = "hhqqi4x"  # Linux's struct flock: l_type, l_whence, l_start, l_len, l_pid


def _held(path: Path) -> str | None:
    """The job holding the lock file at `path` (_holder), None where none does or there is no file. Asked with
    F_GETLK, which takes nothing: a probe that took the lock would refuse a job starting at that moment."""
    fd = open_in(path.parent, path.name, os.O_RDONLY | os.O_CLOEXEC)
    if fd is None:
        return None
    try:
        got = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
        return None if struct.unpack(_FLOCK, got)[0] == fcntl.F_UNLCK else _holder(fd)
    except OSError:
        return None
    finally:
        os.close(fd)
