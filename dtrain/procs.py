"""Process identity: a recorded pid means nothing without its start time and the boot it belongs to.

Pids are reused: after a rank dies, after a crash, after a reboot, the number in a record may name
someone else's process. Every pid dtrain records is stored as an `Ident` (pid, the kernel's start
time in clock ticks from /proc/PID/stat, the boot id), and nothing is signalled unless all three
still match. Signals go through a pidfd opened *before* the check, so the process checked is the
process signalled even if it dies and its pid is reused in between.

A rank's command runs in its own session (its pid is the session id), so `signal_session` reaches
its children too; processes that left the session on purpose (setsid) are the cgroup's business.
Standard library only: rankrun imports this on every start.
"""

from __future__ import annotations

import fcntl
import os
import signal
from pathlib import Path
from typing import NamedTuple


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name: [state, ppid, pgrp, session, ...]; None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2:].split()


def start_time(pid: int) -> str | None:
    """The kernel's start time of a live, non-zombie pid."""
    fields = _stat(pid)
    return None if fields is None or fields[0] in ("Z", "X") else fields[19]


class Ident(NamedTuple):
    pid: int
    start: str  # /proc/PID/stat field 22: clock ticks after boot
    boot: str  # /proc/sys/kernel/random/boot_id when recorded

    @classmethod
    def of(cls, pid: int) -> "Ident | None":
        """The identity of a child we just started; a zombie counts (it still holds its pid)."""
        fields = _stat(pid)
        return None if fields is None else cls(pid=pid, start=fields[19], boot=boot_id())

    @classmethod
    def from_record(cls, rec: dict) -> "Ident | None":
        """From a rank record's pid/start/boot; None when any is missing (an old or foreign record)."""
        try:
            return cls(pid=int(rec["pid"]), start=str(rec["start"]), boot=str(rec["boot"]))
        except (KeyError, TypeError, ValueError):
            return None

    def to_record(self) -> dict:
        return self._asdict()

    def alive(self) -> bool:
        return self.boot == boot_id() and start_time(self.pid) == self.start


def signal_process(ident: Ident | None, sig: int) -> bool:
    """Send `sig` to exactly that process, if it is still the one recorded; True if sent."""
    if ident is None or ident.boot != boot_id():
        return False
    try:
        fd = os.pidfd_open(ident.pid)
    except OSError:
        return False
    try:
        if start_time(ident.pid) != ident.start:
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def session_members(leader: Ident) -> list[int]:
    """Pids whose session is the leader's: its whole tree (unless a child started its own session).

    If the leader's pid now names another process, the pid was reused, which the kernel does only
    once no process is left in the old session: nothing of ours remains.
    """
    if leader.boot != boot_id():
        return []
    fields = _stat(leader.pid)
    if fields is not None and fields[19] != leader.start:
        return []
    members = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and fields[3] == str(leader.pid) and fields[0] not in ("Z", "X"):
                members.append(int(entry.name))
    return members


def signal_session(leader: Ident | None, sig: int) -> int:
    """Signal every process of the leader's session (see session_members); returns how many were sent."""
    if leader is None:
        return 0
    sent = 0
    for pid in session_members(leader):
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            fields = _stat(pid)  # re-read through the pinned pid: still in the session?
            now = _stat(leader.pid)
            reused = now is not None and now[19] != leader.start  # the leader's pid now names a stranger
            if fields is not None and fields[3] == str(leader.pid) and not reused:
                signal.pidfd_send_signal(fd, sig)
                sent += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return sent


def _open_log(log: Path) -> int:
    """LOG opened to append, above 0-2 (free in a caller started without them, where the child's own
    streams go): never through a link, nor into a fifo or device, that a job's processes left there."""
    import errno

    from dtrain.replace import open_for_append

    try:
        fd = open_for_append(log.parent, log.name)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO, errno.EINVAL):  # a link; a fifo; a device
            raise OSError(e.errno, "not a regular file (a link or fifo left there?): remove it", str(log)) from None
        raise
    return _above_std(fd)


def _above_std(fd: int) -> int:
    """`fd` moved above 0-2 (which a caller started without them hands out first)."""
    if fd > 2:
        return fd
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    finally:
        os.close(fd)


def spawn_detached(argv: list[str], *, log: Path, cwd: str, what: str = "the process") -> int:
    """Start `argv` in a session of its own (no terminal's signal reaches it), its output appended
    to `log`, and return its pid.

    subprocess forks and execs in C: no Python code runs in the child. A fork made from Python
    runs the interpreter's after-fork code there (other threads' thread-locals are freed, their
    finalizers run), which hangs for good on a lock another thread held at the fork, as SQLite's
    did in the multi-threaded server. The process stays our child until it ends: a daemon thread
    waits for it, so it never lingers as a zombie in a long-lived caller (a short-lived one's exit
    hands it to init).

    What stops it before it runs (its log cannot be opened, `cwd` is gone, `argv[0]` cannot be
    executed) is SetupError, never a pid that was never the program."""
    import subprocess
    import threading

    from dtrain.errors import SetupError

    try:
        fd = _open_log(log)
    except OSError as e:
        raise SetupError(f"{what} could not be started: {e.strerror} ({e.filename or log})") from None
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, cwd=cwd,
                                start_new_session=True, close_fds=True)
    except OSError as e:
        why = f"{e.strerror} ({e.filename or argv[0]})" if e.strerror else str(e)
        raise SetupError(f"{what} could not be started: {why}") from None
    finally:
        os.close(fd)
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
    return proc.pid
