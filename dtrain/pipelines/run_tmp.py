"""The $TMPDIR of a run's steps (runner.py re-exports every name here): a folder of the run's own
under ROOT/.tmp, emptied of the program folders KFP's component command leaves there, what ended
runs left tidied, and the steps still running ended when a run is interrupted.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from dtrain.errors import SpecError
from dtrain.names import cut, shown

# KFP's lightweight-component command: `program_path=$(mktemp -d)`, then the step's source is
# written to "$program_path/ephemeral_component.py" and run. In a pod the folder goes with the
# container; under the local runner it stayed in /tmp, one folder per step, for good.
_KFP_PROGRAM = "ephemeral_component.py"


@dataclass
class _StepTmp:
    path: Path
    finished: bool = False  # every step ended well: no job a step started can still need the folder


@contextlib.contextmanager
def _step_tmpdir(root: Path) -> Iterator[_StepTmp]:
    """A $TMPDIR for one run's steps, under ROOT/.tmp (a folder of this run only, so no other
    run's steps can be in it). However the run ends, the folders KFP's command made there (a
    `tmp.*` folder holding only its program file and that file's bytecode) are removed; the
    folder itself goes too if that left it empty and the run finished: after a failed or
    interrupted run a step's process may not have ended yet. Anything else there stays, for the
    user to see. The jobs the steps start do not get it: steps.restore_tmpdir gives them the
    user's $TMPDIR (what they write there, torch's torchinductor_<user> cache among it, is theirs).
    What earlier runs left there is tidied first (_make_run_folder)."""
    parent = root / ".tmp"
    if parent.is_symlink():
        raise SpecError(f"{parent} is a symbolic link: remove it (a run makes that folder itself)")
    tmp, held = _make_run_folder(root, parent)
    try:
        yield tmp
    finally:
        try:
            _remove_step_programs(tmp.path, remove_folder=tmp.finished)
        finally:
            os.close(held)


def _make_run_folder(root: Path, parent: Path) -> tuple[_StepTmp, int]:
    """A new folder for this run in PARENT and its lock (an open descriptor), then what ended runs
    left there tidied: all under a lock on PARENT, so that no other run's sweep sees this folder
    between its making and its lock."""
    def refused(err: OSError) -> SpecError:  # a --root this user may not write to, a read-only file system
        return SpecError(f"cannot use --root {shown(str(root))}: making {parent} failed ({cut(err.strerror or err)}); "
                         f"give a folder you can write to")

    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        parent.mkdir(exist_ok=True)
        guard = os.open(parent, flags)
    except OSError as err:
        raise refused(err) from None
    try:
        fcntl.flock(guard, fcntl.LOCK_EX)
        try:
            tmp = _StepTmp(Path(tempfile.mkdtemp(prefix="run-", dir=parent)))
            held = os.open(tmp.path, flags)
        except OSError as err:
            raise refused(err) from None
        fcntl.flock(held, fcntl.LOCK_EX)  # this run's while it lasts: _sweep_ended_runs leaves it
        _sweep_ended_runs(parent, tmp.path)
        return tmp, held
    finally:
        os.close(guard)


def _sweep_ended_runs(parent: Path, own: Path) -> None:
    """Tidy what earlier runs left in PARENT: the folder of a run killed before its own clean-up
    (SIGKILL, a lost machine) or of a failed one (kept while its steps might still run). A folder
    is another run's while that run holds its lock, and a step's while any process of this user
    has it as $TMPDIR (a step outlives a runner killed alone); those are left as they are. Of the
    rest, the same rule as at a run's end: KFP's program folders go, then the folder if empty."""
    candidates = []
    with os.scandir(parent) as entries:
        for e in entries:
            if e.name.startswith("run-") and e.name != own.name and e.is_dir(follow_symlinks=False):
                candidates.append(os.path.abspath(e.path))
    if not candidates:
        return
    in_use = _tmpdirs_in_use()
    for path in candidates:
        if path in in_use:
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:  # gone meanwhile, or replaced by a link: not ours to tidy
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # a run still going
                continue
            with contextlib.suppress(OSError):  # changed meanwhile: left as it is
                _remove_step_programs(Path(path), remove_folder=True)
        finally:
            os.close(fd)


def _tmpdirs_in_use() -> set[str]:
    """The $TMPDIR of every process whose start-up environment can be read (this user's)."""
    return set(_process_tmpdirs().values())


def _process_tmpdirs() -> dict[int, str]:
    """pid -> the $TMPDIR it started with, for every process whose environment can be read."""
    found = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit() and (tmpdir := _tmpdir_of(int(pid))) is not None:
            found[int(pid)] = tmpdir
    return found


def _tmpdir_of(pid: int) -> str | None:
    """The $TMPDIR PID started with; None without one, or when its environment cannot be read
    (another user's process, one ended meanwhile, a zombie's reads empty)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:
        return None
    for item in environ.split(b"\0"):
        if item.startswith(b"TMPDIR="):
            return os.path.abspath(os.fsdecode(item[len(b"TMPDIR="):]))
    return None


STEP_STOP_S = 5.0  # how long an interrupted run's steps get to end on SIGTERM before SIGKILL


@contextlib.contextmanager
def _steps_ended(tmp: Path) -> Iterator[None]:
    """End the steps still running when a run is interrupted. kfp.local gives a step's process a
    quarter of a second after Ctrl-C and leaves it running: killed from a terminal, the step got
    SIGINT with its process group, but after SIGTERM to `dtrain pipeline run` alone (a CI timeout,
    `kill`) a step went on by itself, following its job or waiting on it, with no one reading it.
    A step is a process that started with this run's own $TMPDIR (the jobs the steps start get
    the user's back, so they go on, as the run's message says)."""
    try:
        yield
    except BaseException:
        _end_processes_with_tmpdir(tmp)
        raise


def _end_processes_with_tmpdir(tmp: Path) -> None:
    own, me = os.path.abspath(tmp), os.getpid()
    pids = [pid for pid, where in _process_tmpdirs().items() if where == own and pid != me]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STEP_STOP_S
    while pids:
        for pid in pids:  # reap the ones that are this process's children (KFP's `sh -ec`)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        pids = [pid for pid in pids if _tmpdir_of(pid) == own]
        if not pids or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _remove_step_programs(tmp: Path, *, remove_folder: bool) -> None:
    with os.scandir(tmp) as entries:
        folders = [e.path for e in entries if e.name.startswith("tmp.") and e.is_dir(follow_symlinks=False)]
    for folder in folders:
        with contextlib.suppress(OSError):  # changed meanwhile: left as it is; the run's result stands
            files = _kfp_program_files(folder)
            if files is None:
                continue
            for path in files:
                os.unlink(path)
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(f"{folder}/__pycache__")
            os.rmdir(folder)
    if remove_folder:
        with contextlib.suppress(OSError):  # not empty: a step or a job left something of its own
            tmp.rmdir()


def _kfp_program_files(folder: str) -> list[str] | None:
    """The files of FOLDER if it is what KFP's command made: its program file and, where
    Python wrote bytecode, `__pycache__/ephemeral_component.*.pyc`; else None (links included)."""
    with os.scandir(folder) as inside:
        found = {e.name: e for e in inside}
    program, cache = found.pop(_KFP_PROGRAM, None), found.pop("__pycache__", None)
    if found or program is None or not program.is_file(follow_symlinks=False):
        return None
    files = [program.path]
    if cache is not None:
        if not cache.is_dir(follow_symlinks=False):
            return None
        with os.scandir(cache.path) as inside:
            compiled = list(inside)
        if not all(e.name.startswith("ephemeral_component.") and e.name.endswith(".pyc")
                   and e.is_file(follow_symlinks=False) for e in compiled):
            return None
        files += [e.path for e in compiled]
    return files

