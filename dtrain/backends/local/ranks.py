"""A local job's processes as recorded on disk, and how to stop them.

The supervisor writes `jobs/<name>/launcher.json` and `ranks/rank-<i>.json` (pid, start time,
boot id, its wrapper's, its cgroup); a command that reads or stops a job needs only these
helpers, not the supervisor's machinery (launchers, notebooks, sockets), which a `dtrain list`
would otherwise import on every start.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import stat
import time
from pathlib import Path

from dtrain.backends.local.cgroups import ROOT as CGROUPS_ROOT
from dtrain.backends.local.cgroups import RankCgroup
from dtrain.procs import Ident, signal_process, signal_session
from dtrain.replace import open_for_append, open_regular, replace_file

GRACE_S = 30.0  # SIGTERM -> SIGKILL: time for the workloads to finish a step and write a checkpoint
KILLED_WAIT_S = 2.0  # how long a rank's cgroup may take to empty after SIGKILL before it is left
MAX_RECORD_BYTES = 1 << 20  # a record is a few hundred bytes
_RANK_FILE = re.compile(r"rank-(0|[1-9][0-9]{0,8})\.(log|json)")  # the names rankrun gives its files


def rank_of(name: str, suffix: str) -> int | None:
    """The rank a file of a job's logs/ (`rank-N.log`) or ranks/ (`rank-N.json`) folder belongs to;
    None for any other name (a copy such as rank-0-old.log is no rank's)."""
    m = _RANK_FILE.fullmatch(name)
    return int(m.group(1)) if m and m.group(2) == suffix else None


class LogRefused(Exception):
    """A log file that must not be written: a link, a fifo or a folder at its name, or its folder a link."""


def open_log(folder: Path, name: str) -> int:
    """`folder`/`name` opened to append (created if missing), as a file descriptor: never through a
    link at the file or at its folder, and only when it is a regular file (a fifo is neither waited
    on nor written). A job's processes can write its folder, and a log appended through a link they
    left there would land in any file of the user's. LogRefused says, in one line, what is there."""
    try:
        return open_for_append(folder, name)
    except OSError:
        raise LogRefused(_refused(folder, name)) from None


def _refused(folder: Path, name: str) -> str:
    fix = "remove it and submit the job again"
    for path in (folder, folder / name):
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            if path == folder:
                return f"{folder} was removed (by hand?) while the job ran: submit the job again"
            continue
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            return f"{path} is a symbolic link, and a log is never written through one: {fix}"
        if path == folder and not stat.S_ISDIR(mode):
            return f"{path} is not a folder: {fix}"
        if path != folder and not stat.S_ISREG(mode):
            return f"{path} is not a regular file (a fifo, a socket, a folder or a device): {fix}"
    return f"{folder / name} cannot be opened for writing: check that folder's permissions and free space (df -h)"


def rank_records(job_dir: Path) -> list[dict]:
    """The rank records rankrun wrote, by rank. Anything else in the folder (a copy such as
    rank-0-old.json, a fifo, a link, a record naming another rank) is skipped: every `dtrain list`
    reads these, and one stray file must not stop them (a traceback) or hang them (a fifo)."""
    out = []
    for path in (job_dir / "ranks").glob("rank-*.json"):
        rank = rank_of(path.name, "json")
        f = open_regular(path) if rank is not None else None
        if f is None:
            continue
        try:
            with f:
                rec = json.loads(f.read(MAX_RECORD_BYTES))
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and rec.get("rank") == rank:
            out.append(rec)
    return sorted(out, key=lambda r: r["rank"])


TERMINATING = "Terminating"  # a rank's status while its job stops it (kubectl's word for such a pod)


def still_stopping(rec: dict) -> bool:
    """Whether a rank its record calls Running still has a process: its wrapper (rankrun) or its
    command, each by pid, start time and boot id. A job no longer Running (preempted, suspended,
    deleted) shows such a rank Terminating until it has exited; a record left Running by a wrapper
    killed with SIGKILL names processes that are gone."""
    if rec.get("status") != "Running":
        return False
    return any(ident is not None and ident.alive()
               for ident in (Ident.from_record(rec.get("wrapper") or {}), Ident.from_record(rec)))


ATTEMPTS_FILE = "attempts.json"  # where each of the job's last two launches began its ranks' logs
KEPT_LAUNCHES = 2  # the latest launch's lines are `logs`, the one before's `logs --previous`


def record_log_starts(job_dir: Path, attempt: int, processes: int) -> None:
    """Before a launch's ranks start (the previous launch's have all exited): where each rank's log
    ends now, so where this launch's lines begin. A rank's log holds every attempt's lines, one
    after the other; `logs` reads from the latest launch's offsets, `logs --previous` between the
    two last launches', a few blocks from the end as ever, never the whole file. Only the last two
    launches are kept (kubectl too keeps a container's previous instance only)."""
    starts = {}
    for rank in range(processes):
        f = open_regular(job_dir / "logs" / f"rank-{rank}.log")
        if f is not None:  # none yet: this launch's lines begin at 0
            with f:
                starts[str(rank)] = os.fstat(f.fileno()).st_size
    launches = log_launches(job_dir)[-(KEPT_LAUNCHES - 1):]
    launches.append({"attempt": attempt, "time": time.time(), "starts": starts})
    replace_file(job_dir / ATTEMPTS_FILE, json.dumps({"launches": launches}))


def log_launches(job_dir: Path) -> list[dict]:
    """The launches record_log_starts recorded, oldest first: {attempt, time, starts: {rank: offset}}.
    A record missing (a job from before it was written, or never launched), unreadable or rewritten
    by the job into something else reads as none."""
    f = open_regular(job_dir / ATTEMPTS_FILE)
    if f is None:
        return []
    try:
        with f:
            rec = json.loads(f.read(MAX_RECORD_BYTES))
    except (OSError, ValueError):
        return []
    launches = rec.get("launches") if isinstance(rec, dict) else None
    if not isinstance(launches, list):
        return []
    out = []
    for run in launches[-KEPT_LAUNCHES:]:
        starts = run.get("starts") if isinstance(run, dict) else None
        if not isinstance(starts, dict) or not isinstance(run.get("attempt"), int):
            return []
        out.append({"attempt": run["attempt"], "time": run.get("time"),
                    "starts": {int(r): o for r, o in starts.items()
                               if isinstance(r, str) and r.isdigit() and isinstance(o, int) and o >= 0}})
    return out


def failing_rank(records: list[dict]) -> dict | None:
    """The rank that failed first: the others usually fail because their launcher stopped them."""
    failed = [r for r in records if r.get("exit_code") not in (None, 0)]
    return min(failed, key=lambda r: (r.get("finished") or float("inf"), r["rank"])) if failed else None


def describe_exit(rec: dict, fix: str | None = None) -> str:
    """How a rank ended; `fix`: what to do about a log its disk had no room for, where the caller knows more
    ('' where the caller says it after)."""
    if rec.get("log_refused"):
        return f"rank {rec['rank']} was not started: {rec['log_refused']}"
    if rec.get("log_error"):
        told = "" if fix == "" else f"; {fix or 'free space on that disk (df -h) and submit the job again'}"
        return (f"rank {rec['rank']} was stopped (exit code {rec['exit_code']}) because its log could not be "
                f"written: {rec['log_error']}{told}")
    if rec.get("oom"):
        return f"rank {rec['rank']} ran out of memory (limit {rec['oom']}) and was killed (exit code {rec['exit_code']})"
    how = f"was killed by {rec['signal']}" if rec.get("signal") else "exited"
    return f"rank {rec['rank']} {how} (exit code {rec['exit_code']})"


FULL_BELOW = 1 << 20  # less free than this (the home's reserve, db.RESERVE_BYTES) reads as a full disk


def disk_full(folder: Path, given_up: int = 0) -> str | None:
    """'the disk holding FOLDER is full (60 KiB free)' (or has no free inodes) where a write there most
    likely failed for want of room; None on a disk with room, or one that cannot be asked. `given_up`:
    the bytes of the home's reserve (db.room_to_free) given up to record this, counted in what is free
    now and said so: the figure is what `df` shows once the record is written."""
    try:
        fs = os.statvfs(folder)
    except OSError:
        return None
    if fs.f_files and fs.f_favail == 0:
        return f"the disk holding {folder} has no free inodes"
    free = fs.f_bavail * fs.f_frsize
    if fs.f_blocks and free < FULL_BELOW + given_up:
        reserve = f", the {given_up // 1024} KiB reserve given up to record this included" if given_up else ""
        return f"the disk holding {folder} is full ({free // 1024} KiB free{reserve})"
    return None


def largest_logs(home: Path) -> tuple[str, int] | None:
    """(job, bytes) of the job whose logs take the most room under `home`: what to delete first on a
    full disk (`dtrain delete JOB --purge` removes them); None where no job has any."""
    best = None
    try:
        jobs = list((home / "jobs").iterdir())
    except OSError:
        return None
    for job in jobs:
        try:
            size = sum(f.stat().st_size for f in (job / "logs").iterdir() if f.is_file() and not f.is_symlink())
        except OSError:
            continue
        if size and (best is None or size > best[1]):
            best = (job.name, size)
    return best


def full_disk_advice(home: Path, purge_cmd) -> str:
    """What to do about a full home disk, naming the largest job logs there; `purge_cmd(job)` words
    the `dtrain delete JOB --purge` that removes them (with the -p/--backend the caller needs)."""
    largest = largest_logs(home)
    them = (f"; the largest job logs there are job {largest[0]!r}'s, {largest[1] / 2**20:.1f} MiB "
            f"(rm -r {home / 'jobs' / largest[0] / 'logs'}, or '{purge_cmd(largest[0])}' once it has ended)"
            if largest else "")
    return f"free space there (df -h {home}){them}"


def local_command(home: Path, words: str, project: str | None) -> str:
    """`dtrain WORDS` for a job of `project` in `home`, as the Client's hints word it: with -p and --backend
    where config.yaml sends the default project elsewhere (read when said: the user may have changed it
    since the job started); plain where config.yaml cannot be read. (dtrain.config is imported here
    only: a rank's wrapper needs it on a full disk alone.)"""
    from dtrain.config import UserConfig
    from dtrain.errors import DtrainError

    try:
        config = UserConfig.load(home, apart=False)
    except DtrainError:
        return f"dtrain {words}"
    return config.command_for(words, backend="local", project=project)


def room_advice(home: Path, project: str | None) -> str:
    """'free space there (df -h HOME); the largest job logs ..., then submit the job again': what a job
    that failed on a full home disk says to do."""
    purge = full_disk_advice(home, lambda job: local_command(home, f"delete {job} --purge", project))
    return f"{purge}, then submit the job again"


_NO_ROOM = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT), "database or disk is full", "has no free inodes")
_TAIL_BYTES = 8192  # of supervisor.log and launcher.log: a lost supervisor's last words are at their end


def full_disk_signs(job_dir: Path) -> str | None:
    """What the job's own files tell of a write refused for want of room, from the end of supervisor.log
    (the supervisor's last words) and launcher.log (a rank's record refused), or a rank stopped because
    its log was refused, or an empty launcher.log (a supervisor that could write nothing at all):
    'supervisor.log says: ...'; None where nothing does."""
    for name in ("supervisor.log", "launcher.log"):
        f = open_regular(job_dir / name)
        if f is None:
            continue
        with f:
            try:
                start = max(0, os.fstat(f.fileno()).st_size - _TAIL_BYTES)
                f.seek(start)
                lines = f.read(_TAIL_BYTES).decode("utf-8", "replace").splitlines()
                last = [i for i, line in enumerate(lines) if line.startswith("--- attempt ")][-1:]  # launcher.log's
                first = last[0] if last else 0  # the last attempt's: an earlier one's full disk was survived
                said = next((i for i in reversed(range(first, len(lines))) if any(w in lines[i] for w in _NO_ROOM)),
                            None)
                if said is None:
                    continue
                line = lines[said]
                cut, over = _before(f, start) if said == 0 and start else (0, False)  # the read began inside it
            except OSError:
                continue
        if cut:  # the read part's own leading blanks, stripped, are cut too
            cut += len(line) - len(line.lstrip())
        return f"{name} says: {_cut(line.strip(), cut, over, keep=next(w for w in _NO_ROOM if w in line))}"
    if any(r.get("log_error") for r in rank_records(job_dir)):
        return "its ranks' logs were refused too"
    if _empty(job_dir / "launcher.log"):  # made by its open, then its first write refused: the disk was full
        return "launcher.log is empty: not even an attempt's first line could be written there"
    return None


_QUOTED_CHARS = 300  # of a log line quoted in a message: its start says what was refused


_BEFORE_BYTES = 1 << 20  # read back at most for the start of a line longer than the tail read


def _before(f, start: int) -> tuple[int, bool]:
    """How many characters of the line that the read at byte `start` of `f` begins inside lie before
    `start` (0 where a line starts there), and whether there are more than that (no line start found
    within _BEFORE_BYTES)."""
    back = b""
    pos = start
    while pos > 0 and start - pos < _BEFORE_BYTES:
        n = min(_TAIL_BYTES, pos)
        pos -= n
        f.seek(pos)
        block = f.read(n)
        if b"\n" in block:
            return len((block[block.rindex(b"\n") + 1:] + back).decode("utf-8", "replace")), False
        back = block + back
    return len(back.decode("utf-8", "replace")), pos > 0


_CAUSE_CONTEXT = 40  # characters quoted before the cause's words, where the middle of a line is cut (an errno)


def _cut(line: str, before: int = 0, over: bool = False, keep: str = "") -> str:
    """`line`, its end cut visibly where it is long: '... (N more characters)', and its start where
    `before` characters of it were not read: '(N more characters) ...' ('(over N more ...' with `over`).
    The words `keep` (the cause: 'No space left on device') stay, with what comes just before them, where
    they lie past the cut: its middle is cut instead, '... (N more characters) ...' (a long path before
    them left only the path)."""
    front = f"({'over ' if over else ''}{before} more characters) ..." if before else ""
    if len(line) <= _QUOTED_CHARS:
        return front + line
    at = line.find(keep) if keep else -1
    end = at + len(keep) if at >= 0 else 0
    if end <= _QUOTED_CHARS:
        return f"{front}{line[:_QUOTED_CHARS]}... ({len(line) - _QUOTED_CHARS} more characters)"
    start = max(0, at - _CAUSE_CONTEXT)
    head = max(0, _QUOTED_CHARS - (end - start))  # the quote stays _QUOTED_CHARS long
    after = f"... ({len(line) - end} more characters)" if end < len(line) else ""
    if head >= start:
        return f"{front}{line[:end]}{after}"
    return f"{front}{line[:head]}... ({start - head} more characters) ...{line[start:end]}{after}"


def _empty(path: Path) -> bool:
    """Whether `path` is a regular file holding nothing (not a link, a fifo, nor missing)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == 0


def own_causes(job_dir: Path, fix: str | None = None) -> str:
    """A clause `; before that, rank R ...` for each rank stopped for a cause of its own (a log its disk
    had no room for, its memory limit): what ended an attempt whose supervisor could not record it
    (a full disk refuses the database's writes too) still says why the job ended. `fix`: describe_exit's."""
    return "".join(f"; before that, {describe_exit(r, fix)}" for r in rank_records(job_dir)
                   if r.get("log_error") or r.get("oom"))


def launcher_ident(job_dir: Path) -> Ident | None:
    """The recorded launcher; None when its record is missing, unreadable, or not a regular file: a
    fifo the job's processes left at its name would otherwise hang `dtrain delete` for good."""
    f = open_regular(job_dir / "launcher.json")
    if f is None:
        return None
    try:
        with f:
            rec = json.loads(f.read(MAX_RECORD_BYTES))
    except (OSError, ValueError):
        return None
    return Ident.from_record(rec) if isinstance(rec, dict) else None


def kill_ranks(job_dir: Path, sig: int = signal.SIGKILL) -> None:
    """Signal the job's launcher, every rank's wrapper and every rank's session: only processes whose
    recorded identity (pid + start time + boot id) still matches; a reused pid is left alone."""
    signal_session(launcher_ident(job_dir), sig)
    for rec in rank_records(job_dir):
        signal_process(Ident.from_record(rec.get("wrapper") or {}), sig)
        signal_session(Ident.from_record(rec), sig)
        cgroup = rank_cgroup(rec, job_dir.name)
        if cgroup is not None:  # a cgroup named after this job's rank holds only its processes
            for pid in cgroup.pids():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            # killed processes leave their cgroup only once the kernel has taken them down
            cgroup.remove(wait_s=KILLED_WAIT_S if sig == signal.SIGKILL else 0.0)


def rank_cgroup(rec: dict, job: str) -> RankCgroup | None:
    """The rank's cgroup as its record names it: only a folder under /sys/fs/cgroup named as rankrun
    names this job's rank cgroups (dtrain-<job>-a<attempt>-r<rank>-<wrapper pid>), so a record a job
    rewrote cannot point `delete` at the processes of another cgroup."""
    cg = rec.get("cgroup")
    if not isinstance(cg, dict) or not isinstance(cg.get("paths"), list):
        return None
    name = re.compile(rf"dtrain-{re.escape(job)}-a[0-9]+-r{rec.get('rank')!s}-[0-9]+")
    paths = tuple((c, Path(p)) for c, p in (e for e in cg["paths"] if isinstance(e, list | tuple) and len(e) == 2)
                  if isinstance(c, str) and isinstance(p, str) and _under_cgroups(p) and name.fullmatch(Path(p).name))
    return RankCgroup(mode=cg.get("mode", "v1"), paths=paths) if paths else None


def _under_cgroups(path: str) -> bool:
    parts = Path(path).parts
    return os.path.isabs(path) and ".." not in parts and Path(path).is_relative_to(CGROUPS_ROOT)


CLAIM = "claim:"  # a supervisor_start token naming a command that is replacing a lost supervisor


def supervisor_token(ident: Ident, *, claim: bool = False) -> str:
    """How a supervisor's start time and boot id are stored in the jobs table's supervisor_start.

    `claim`: the token of a command that has taken over a job whose supervisor was lost, for as
    long as it stops the lost attempt's leftovers and starts the next supervisor. Other commands
    see a live process and leave the job alone (so none of them stops the new attempt's ranks as
    the old one's); `delete` never signals it (it is a dtrain command, maybe the HTTP server)."""
    return f"{CLAIM if claim else ''}{ident.start}@{ident.boot}"


def is_claim(token: str | None) -> bool:
    return bool(token) and str(token).startswith(CLAIM)


def parse_ident(pid: int | None, token: str | None) -> Ident | None:
    if pid is None or not token:
        return None
    start, _, boot = str(token).removeprefix(CLAIM).partition("@")
    return Ident(pid=int(pid), start=start, boot=boot)
