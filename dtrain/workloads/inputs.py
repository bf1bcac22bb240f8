"""Checks of what a user gives a workload command: numbers, input files, output folders.

Each failure is one DtrainError line naming the value and what to give instead; the
workloads' own argparse parsers report usage errors on one line too (`Parser`).
Imports nothing from dtrain but dtrain.errors, dtrain.names and dtrain.numbers, so the workloads still run without the platform.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import difflib
import errno
import fcntl
import math
import os
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dtrain.errors import ConflictError, DataError, DtrainError, NotFoundError, SpecError
from dtrain.names import abbreviated, near_choice
from dtrain.numbers import Typed, TypedFloat, exact, typed  # a number keeps its typed text: a refusal quotes 1e9, not 1000000000

MAX_SEED = 2**32 - 1  # numpy's and most tools' seed range; torch takes it as is
MAX_STEPS = 10_000_000  # optimizer steps of one run (the paper recipe plans 60 000)
MAX_EPOCHS = 10_000  # passes over the training set of one run
MAX_BATCH = 65_536  # images per process per step, as `dtrain bench scaling` and the pipelines allow
MAX_WORKERS = 64  # data loader processes per training process
MAX_LR = 10.0  # SGD learning rates in use are 0.001 to 0.1
MACHINE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES)  # a full, read-only or forbidden disk
PASSING_ERRNOS = (errno.EIO,)  # an I/O error, of a network disk as a rule (NFS, EFS): gone when tried again


def write_fix(err: int | None, fix: str, advice: str = "") -> str:
    """What a file or folder that cannot be written for `err` asks of the user: 'try again, or FIX' for an I/O error
    (a network disk's, which passes: another folder is no fix for it), else 'ADVICE, or FIX' for a full, read-only
    or forbidden disk (ADVICE: 'use a folder you can write to, with free space' unless given)."""
    if err in PASSING_ERRNOS:
        return f"try again, or {fix}"
    return f"{advice or 'use a folder you can write to, with free space'}, or {fix}"


def real_number(text: str) -> float:
    """argparse's `type` for a number (every `type=float` of a `Parser`): float's, keeping what was
    typed for a refusal ('--cpu-per-process 1e9 is out of range', not 1e+09). Another script's digits
    ('١٢', which float() reads as 12) are NaN as typed: never in range (in_range names them)."""
    if not text.isascii():
        return TypedFloat(math.nan, text.strip())
    return TypedFloat(float(text), text.strip())  # always: '2048.0' is not quoted as 2048


class NotWhole(TypedFloat):
    """What a whole-number flag was given that is no whole number (1.5, nan, a word): whole_number passes it
    on to the command's own check (in_range), which refuses it naming the flag, its range and an example,
    where argparse could only say "give a whole number"."""


def whole_number(text: str) -> int:
    """argparse's `type` for a whole number (every `type=int` of a `Parser`): what int() takes, and a
    float that is whole as typed (1e3 is 1000, 5. is 5). A fraction, nan, inf or a word is a NotWhole
    that the command's range check (in_range, which names the flag) refuses; a run of digits past
    what int() reads is infinite, out of any range. Another script's digits ('١٢', which int() reads as
    12) are a word here, as they are to dtrain's own flags (numbers.whole_number)."""
    t = text.strip()
    if not t.isascii():
        return NotWhole(math.nan, text)
    try:
        return typed(int(t), t)
    except ValueError:
        if t.lstrip("+-").replace("_", "").isdigit():  # past the 4300 digits int() reads
            return TypedFloat(math.copysign(math.inf, -1 if t.startswith("-") else 1), t)
    try:
        value = float(t)
    except ValueError:  # an empty one is named '' ('--batch  is not ...' read as nan's)
        return NotWhole(math.nan, text if t else repr(text))
    if math.isfinite(value) and exact(TypedFloat(value, t)).denominator == 1:  # 2.0000000000000001 is no 2
        return typed(int(value), t)
    return NotWhole(value, t)


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line (exit 2) instead of the whole usage text; a `type=int`
    argument takes whole_number (its refusal says a whole number is wanted); an unknown flag close to
    one of the command's is named with it (`--n-train`: did you mean --train?), and so is a choice close to
    the one typed (`--recipe tinny`: did you mean 'tiny'?). Flags are not abbreviated,
    as the dtrain CLI's are not: `--ou` is refused naming --out (argparse took it for --out)."""

    def __init__(self, *args, **kwargs):
        self.flags: list[str] = []  # option strings added with add_argument, for the did-you-mean hint
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.register("type", int, whole_number)
        self.register("type", float, real_number)

    def add_argument(self, *args, **kwargs):
        action = super().add_argument(*args, **kwargs)
        self.flags.extend(action.option_strings)
        return action

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)  # for error(): a flag's start went unsaid
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            message += self._near_flag(message[len(prefix):].split())
        elif message.startswith("the following arguments are required: ") and (
                start := next((w for w in getattr(self, "_given", []) if abbreviated(w, self._long_flags())), None)):
            # `--pre p.json` for the required --pred: said as the CLI says it, not only that --pred is missing
            message = f"{prefix}{start} ({abbreviated(start, self._long_flags())}); {message}"
        elif near := near_choice(message):  # `--recipe tinny`: the choice meant, as the dtrain CLI says it
            message = near
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def require(self, args: argparse.Namespace, *flags: str) -> None:
        """argparse's check of required options, for those a command checks after its numbers (so that
        `--train -1` is named before a missing --out, as train names a bad number before a missing
        folder): a usage error naming every flag of `flags` left out."""
        missing = [flag for flag in flags if getattr(args, flag.lstrip("-").replace("-", "_")) is None]
        if missing:
            self.error(f"the following arguments are required: {', '.join(missing)}")

    def _long_flags(self) -> list[str]:
        return [f for f in self.flags if f.startswith("--")]

    def _near_flag(self, words: list[str]) -> str:
        """'; flags are not abbreviated: give --out' for the first unknown flag that starts a known one,
        ' (did you mean --train?)' for one close to a known one, or ''. The cutoff, 0.75: '--no-such-flag'
        is 0.62 like '--no-use-val' (no hint), a misspelt '--tset' 0.83 like '--test'."""
        for word in words:
            if whole := abbreviated(word, self._long_flags()):
                return f"; {whole}"
            if word.startswith("--"):
                near = difflib.get_close_matches(word.split("=", 1)[0], self.flags, n=1, cutoff=0.75)
                if near:
                    return f" (did you mean {near[0]}?)"
        return ""


def _num(x: float) -> str:
    """A number for a message: a whole one without '.0' (2, 1e+300), any other with all its digits
    (--lr 12.345678, which '%g' rounded to 12.3457: a refusal quoted a number nobody typed)."""
    if isinstance(x, Typed):
        return x.text if len(x.text) <= 40 else x.text[:37] + "..."
    if isinstance(x, int) or not math.isfinite(x) or (x.is_integer() and abs(x) < 1e16) or abs(x) >= 1e16:
        return str(x) if isinstance(x, int) else f"{x:g}"
    return repr(x)


def in_range(name: str, value: float, low: float, high: float) -> None:
    """SpecError unless low <= value <= high, compared as typed (--cpu-per-process 1024.0000000000001 is
    over 1024; NaN is never in range); a whole-number flag's NotWhole (1.5, nan) is refused here too. The
    refusal names the range and, as an example, the value in range nearest to the one given. A `name`
    ending in '=' is an environment variable's ('BATCH_SIZE='): 'BATCH_SIZE=1.5 ..., e.g. BATCH_SIZE=2'."""
    if isinstance(value, NotWhole) or not exact(low) <= exact(value) <= exact(high):
        trouble = "is not a whole number" if isinstance(value, NotWhole) else "is out of range"
        near = value  # a NotWhole in range: rounded below
        if math.isnan(value) or exact(value) < exact(low):
            near = low
        elif exact(value) > exact(high):
            near = high
        if isinstance(low, int) and isinstance(high, int):
            near = min(max(round(near), low), high)
        given = name if name.endswith("=") else name + " "  # BATCH_SIZE=1.5, --batch-size 1.5
        flag = name.endswith("=") or name.startswith("-") and " " not in name
        example = f"{given}{_num(near)}" if flag else _num(near)
        raise SpecError(f"{given}{_num(value)} {trouble}: give {_num(low)} to {_num(high)}, e.g. {example}")


def env_int(env: Mapping[str, str], name: str, limits: tuple[int, int]) -> int | None:
    """A whole number from the environment (`-e BATCH_SIZE=64`), read as its flag reads it (1e3 is 1000);
    refused in its flag's line, naming the range and a value in it ('BATCH_SIZE=1.5 is not a whole number:
    give 1 to 65536, e.g. BATCH_SIZE=2'), as typed."""
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    number = whole_number(value)
    in_range(f"{name}=", number, *limits)
    return number


def schedule_steps(epochs: int, steps_per_epoch: int, flag: str = "--epochs") -> int:
    """epochs x steps per epoch, the steps a run plans; SpecError when that is over MAX_STEPS (each
    factor alone is in range, but a large data set and a small batch multiply them)."""
    steps = epochs * steps_per_epoch
    if steps > MAX_STEPS:
        raise SpecError(f"{flag} {epochs} x {steps_per_epoch} steps per epoch plans {steps} steps, more than "
                        f"the {MAX_STEPS} one run may: give {flag} {max(1, MAX_STEPS // steps_per_epoch)} or "
                        f"fewer, or a larger batch")
    return steps


def learning_rate(name: str, value: float, example: float) -> None:
    """SpecError unless 0 < value <= MAX_LR (so never NaN or infinite)."""
    if not 0 < value <= MAX_LR:
        raise SpecError(f"{name} {_num(value)} is out of range: give a number above 0 and at most "
                        f"{_num(MAX_LR)}, e.g. {_num(example)}")


def input_file(path: str | os.PathLike, what: str, fix: str) -> Path:
    """`path` if it is a readable regular file; else NotFoundError or SpecError: '<what> <path> ...: <fix>'."""
    path = Path(path)
    if not path.exists():
        raise NotFoundError(f"{what} {path} does not exist: {fix}")
    if path.is_dir():
        raise SpecError(f"{what} {path} is a folder, not a file: {fix}")
    if not path.is_file():
        raise SpecError(f"{what} {path} is not a regular file: {fix}")
    if not os.access(path, os.R_OK):
        raise SpecError(f"{what} {path} cannot be read (permission denied): {fix}")
    return path


def split_url(url: str, flag: str = "--url") -> urllib.parse.ParseResult:
    """urlparse(url); SpecError instead of its ValueError (an unclosed '[' of an IPv6 host)."""
    try:
        return urllib.parse.urlparse(url)
    except ValueError as e:
        raise SpecError(f"{flag} {url} is not a URL ({e}): give http(s)://HOST/FILE, file:///PATH or a path") from None


def check_found(urls, flag: str = "--url", timeout: float = 60.0) -> None:
    """Refuse, before anything is downloaded or unpacked, an http(s) URL its server says is not there
    (HEAD answered 404 or 410): a typo in the last of several URLs showed only after the first ones
    were fetched and unpacked; nor one whose host is not known (DNS) or whose server refuses the
    connection, which no retry mends. Any other answer (a server that refuses HEAD: 405, 501; a presigned
    URL signed for GET: 403) or none (a timeout) is left to the download, which retries and says so."""
    import urllib.error

    for url in urls:
        if local_path(url, flag) is not None:
            continue
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
        except urllib.error.HTTPError as err:
            err.close()
            if err.code in (404, 410):
                raise NotFoundError(f"{url} is not there (HTTP {err.code} {err.reason}): check that {flag} and "
                                    f"run again; nothing was downloaded or unpacked") from None
        except OSError as err:  # no answer: the download's retries say what happens, unless none can come
            if problem := _unreachable(err):
                raise DataError(f"{url}: {problem}: check the URL and this machine's network, or download the file "
                                f"yourself and give its path ({flag} /path/to/the/file); "
                                f"nothing was downloaded or unpacked") from None


def _unreachable(err: OSError) -> str | None:
    """What a HEAD's failure says when no retry can help: a host name no DNS server knows, or a server
    that refused the connection (nothing listens on that port); None for a timeout or a dropped connection."""
    import socket

    reason = getattr(err, "reason", err)  # urllib wraps the socket's error in a URLError
    if isinstance(reason, socket.gaierror):
        return f"its host name cannot be resolved ({reason.strerror or reason})"
    if isinstance(reason, ConnectionRefusedError):
        return "its server refused the connection (nothing listens on that port)"
    return None


def local_path(url: str, flag: str = "--url") -> Path | None:
    """The file a file:// URL or a path names; None for http(s). The download commands take both,
    so a file already on the machine (or a mounted volume) needs no server."""
    parsed = split_url(url, flag)
    if parsed.scheme in ("http", "https"):
        return None
    if parsed.scheme == "file":
        return Path(urllib.request.url2pathname(parsed.path))
    if parsed.scheme == "" or len(parsed.scheme) == 1:  # a path (or a Windows drive letter)
        return Path(url)
    raise SpecError(f"unsupported URL scheme {parsed.scheme!r} in {url}: use http(s)://, file:// or a path")


def out_folder(path: str | os.PathLike, flag: str, *, create: bool = True) -> Path:
    """Create the folder `path` (and its parents) if missing; SpecError when it cannot be a folder.
    `create=False`: only the check that it can be one (a file there or above it is refused), so that
    the other inputs can be checked before anything is written."""
    path = Path(path)
    if not create:
        if os.path.lexists(path):
            if not path.is_dir():
                raise SpecError(f"{flag} {path} is a file, not a folder: give a folder (it is created if missing)")
            return path
        above = next((p for p in path.parents if os.path.lexists(p)), None)
        if above is not None and not above.is_dir():
            raise SpecError(f"{flag} {path}: a part of the path is a file, not a folder: give a folder path")
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise SpecError(f"{flag} {path} is a file, not a folder: give a folder (it is created if missing)") from None
    except NotADirectoryError:
        raise SpecError(f"{flag} {path}: a part of the path is a file, not a folder: give a folder path") from None
    except OSError as e:
        if e.errno in MACHINE_ERRNOS:
            raise  # the dtrain command names these in one line of its own (dtrain.db.machine_refused)
        raise SpecError(f"{flag} {path} cannot be created ({e.strerror}): give a folder you can write to") from None
    return path


def can_write(folder: Path, what: str) -> None:
    """Nothing when a new file can be made in `folder`; else SpecError '<what> FOLDER cannot be written (...)',
    or the OSError of a full, read-only or forbidden disk (one_line_errors names it). A probe, not
    os.access: that says yes to root everywhere, and /proc took no file only after all the work was done."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=folder)  # O_EXCL | O_NOFOLLOW: no link followed
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        if e.errno in MACHINE_ERRNOS:
            raise OSError(e.errno, e.strerror, str(folder)) from None
        again = "try again, or " if e.errno in PASSING_ERRNOS else ""
        raise SpecError(f"{what} {folder} cannot be written ({e.strerror}): {again}give a folder you can write "
                        "to") from None


def hold(file, path: Path, fix: str, folder: Path | None = None) -> None:
    """Mark this process as the one training that writes `path`'s folder (or `folder`, whose lock file lies
    outside it: rank0.folder_lock_file): an exclusive lock on `file` (`path` opened for writing, a file rank 0
    appends to for the whole run), or ConflictError 'another training is writing FOLDER (it holds NAME): wait
    for it to end, or <fix>' with `file` closed. Two jobs on one volume
    and one output folder both ran, interleaving their metrics and replacing each other's checkpoints and model.

    A POSIX lock: held by the process (a second run in one process is no conflict), gone when it ends however it
    ends (a restarted or resumed job finds no stale lock), and kept by NFS servers (a NetApp volume). It lasts
    while the process keeps any descriptor of the file open: closing one (even another) lets it go. A file
    system without locks (ENOLCK, EOPNOTSUPP) is no refusal: the run goes on unguarded."""
    folder = path.parent if folder is None else folder
    try:
        fcntl.lockf(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
            return
        file.close()
        if e.errno not in (errno.EAGAIN, errno.EACCES):
            raise lock_failed(folder, e, fix) from None
        holds = path.name if path.parent == folder else str(path)
        raise ConflictError(f"another training is writing {folder} (it holds {holds}): wait for it to end, or "
                            f"{fix}") from None


def lock_failed(folder: Path, e: OSError, fix: str) -> SpecError:
    """The one line for a lock that failed other than as another training's (an I/O error of a network disk):
    it was a traceback on rank 0. Raised inside the OSError's except (rank0.found_in reads its errno there)."""
    return SpecError(f"cannot lock {folder} to make this run the one training writing it ({e.strerror}): try "
                     f"again, or {fix}")


class FolderLock:
    """The lock hold_folder takes on a folder itself: held until close() (or the process ends)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def hold_folder(folder: Path, fix: str, unflocked: Callable[[], Any] | None = None) -> Any:
    """Mark this process as the one training that writes `folder` with a lock on the folder itself (flock on a
    descriptor of it), where no file of the lock's may be made (a folder SageMaker uploads: rank0.lock_place);
    ConflictError 'another training is writing FOLDER: wait for it to end, or <fix>'. Unlike hold's POSIX lock,
    a second lock from the same process conflicts too. On NFS, which takes a flock only as a POSIX lock of a file
    open for writing (EBADF for a folder's descriptor), unflocked()'s lock instead (rank0 locks a file for the
    folder): the run went on unguarded there. None where the file system locks nothing (ENOLCK, EOPNOTSUPP), or
    on NFS without `unflocked`: the run goes on unguarded."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise lock_failed(folder, e, fix) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno == errno.EBADF:
            return unflocked() if unflocked is not None else None
        if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
            return None
        if e.errno not in (errno.EAGAIN, errno.EACCES):
            raise lock_failed(folder, e, fix) from None
        raise ConflictError(f"another training is writing {folder}: wait for it to end, or {fix}") from None
    return FolderLock(fd)


# True while the dtrain CLI runs a workload's command (`dtrain cifar10 train`): a hint then names the
# CLI's command, which plain torchrun's `python -m dtrain.workloads.cifar10 train` cannot (run_by_cli)
_BY_CLI = contextvars.ContextVar("dtrain_workload_by_cli", default=False)


@contextlib.contextmanager
def run_by_cli():
    """The dtrain CLI runs a workload's command inside this: `command` names the CLI's verbs."""
    token = _BY_CLI.set(True)
    try:
        yield
    finally:
        _BY_CLI.reset(token)


def command(workload: str, verb: str) -> str:
    """A workload's command as the user can type it here: 'dtrain cifar10 synth' under the dtrain CLI,
    'python -m dtrain.workloads.cifar10 synth' under a plain torchrun (a container without the CLI)."""
    return f"dtrain {workload} {verb}" if _BY_CLI.get() else f"python -m dtrain.workloads.{workload} {verb}"


def one_line_errors(main, *args) -> int:
    """main(*args), with what a user can fix printed as one line and exit code 2: a DtrainError,
    or a full, read-only or forbidden disk (as the dtrain command prints it); anything else raises."""
    try:
        return main(*args) or 0
    except DtrainError as err:
        say_line(f"error: {err}")
    except OSError as err:
        if err.errno not in MACHINE_ERRNOS:
            raise
        where = f" writing {err.filename}" if err.filename else ""
        say_line(f"error: {err.strerror}{where}: use a folder you can write to, with free space")
    return 2


def say_line(text: str) -> None:
    """`text` and its newline on stderr in one write. A piped stderr is unbuffered, so print() makes two
    writes, and the ranks of one torchrun share that pipe: another rank's line could land between a
    line and its newline, joining two ranks' errors into one line."""
    import sys

    sys.stderr.write(text + "\n")
    sys.stderr.flush()
