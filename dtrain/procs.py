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


def _above_std(fd: int) -> int:
    return fd if fd > 2 else fcntl.fcntl(fd, fcntl.F_DUPFD, 3)


def spawn_detached(argv: list[str], *, log: Path, cwd: str, what: str = "the process") -> int:
    """Double fork so the process is nobody's child: it outlives the CLI and never lingers as a zombie.

    What stops it before it runs (its log cannot be opened, `cwd` is gone, `argv[0]` cannot be
    executed) comes back as EnvironmentError_ through a pipe that its exec closes, instead of a
    pid that was never the program."""
    read_fd, write_fd = os.pipe()
    err_read, err_write = os.pipe()  # close-on-exec: EOF as soon as the program runs
    # (made second, err_write is at least fd 3 even in a caller without 0-2: the dup2s keep it)
    pid = os.fork()
    if pid == 0:  # intermediate child
        try:
            os.close(read_fd)
            os.close(err_read)
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                try:
                    # above 0-2 (free in a caller started without them), or the dup2s would close them
                    fd = _above_std(os.open(str(log), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
                    null = _above_std(os.open(os.devnull, os.O_RDONLY))
                    os.dup2(null, 0)
                    os.dup2(fd, 1)
                    os.dup2(fd, 2)
                    os.closerange(3, err_write)
                    os.closerange(err_write + 1, 1024)
                    os.chdir(cwd)
                    os.execv(argv[0], argv)
                except BaseException as e:  # noqa: BLE001 - told to the parent, whatever it was
                    why = (f"{e.strerror} ({e.filename or argv[0]})" if isinstance(e, OSError) and e.strerror
                           else str(e))
                    os.write(err_write, why.encode("utf-8", "replace")[:2000])
                finally:
                    os._exit(127)
            os.write(write_fd, str(grandchild).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    os.close(err_write)
    os.waitpid(pid, 0)
    with os.fdopen(read_fd) as f:
        child = int(f.read())
    with os.fdopen(err_read, "rb") as f:
        failed = f.read().decode("utf-8", "replace")
    if failed:
        from dtrain.errors import EnvironmentError_

        raise EnvironmentError_(f"{what} could not be started: {failed}")
    return child
