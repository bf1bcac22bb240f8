"""The lock a --local job's runner holds on its checkpoint folder for as long as it runs.

Every --local job given one checkpoint URI gets one folder as its /opt/ml/checkpoints. Inside, rank 0
locks that folder itself (workloads.rank0); where its file system takes no flock on a folder (NFS), it
locked a file of its own host's /opt/ml instead, which no other job sees, so two jobs wrote the same
checkpoints. SageMaker gives each job its instances' own checkpoint folder and syncs it to S3; here the
folder is shared, so the runner holds a lock on one file that every job given the folder takes: a POSIX
lock (lockf), which NFS servers keep (NLM, NFSv4), on a regular file opened for writing, never through a
link. It goes with the runner however it ends. The file records the holder, for the refusal to name it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
from pathlib import Path

from dtrain.replace import open_in

LOCK_SUFFIX = ".training.lock"
LOCKS = "checkpoint-locks"  # beside the local S3 folder: a lock file in it would be an object of a bucket
MAX_RECORD = 4096


class CheckpointsInUse(Exception):
    """Another --local job holds the checkpoint folder."""


def lock_path(folder: Path, s3_root: Path) -> Path:
    """The file locked for `folder`: beside it, named after it (.NAME.training.lock), so every job given the
    folder, from any home or machine that mounts it, takes the same one; for a folder of the local S3, the
    same place under LOCKS beside that S3 folder, where no bucket shows it."""
    folder = Path(os.path.abspath(folder))
    s3_root = Path(os.path.abspath(s3_root))
    if folder == s3_root or s3_root in folder.parents:
        folder = s3_root.parent / LOCKS / folder.relative_to(s3_root)
    return folder.parent / f".{folder.name or 'root'}{LOCK_SUFFIX}"


def hold(folder: Path, s3_root: Path, uri: str, job: str) -> int | None:
    """The descriptor of the lock file, held for `job` (keep it open while the job runs; closing any
    descriptor of the file lets the lock go); None where the file system locks nothing. CheckpointsInUse,
    a one-line refusal naming the job that holds it and the fix, where another job does."""
    path = lock_path(folder, s3_root)
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
        raise CheckpointsInUse(
            f"the checkpoint folder of {uri} is in use by {holder}, which writes its checkpoints "
            f"there: wait for it to end, or give this job another --checkpoint-s3-uri") from None
    record = json.dumps({"job": job, "host": socket.gethostname(), "pid": os.getpid()}).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, record, 0)
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
