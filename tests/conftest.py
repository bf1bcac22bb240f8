"""Shared fixtures: a private DTRAIN_HOME per test and a runner for the real `dtrain` command."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DTRAIN = str(BIN / "dtrain")


def shared_dir() -> Path | None:
    """../shared beside the repo (CI and sessions), or $DTRAIN_SHARED."""
    for cand in (os.environ.get("DTRAIN_SHARED"), REPO.parent / "shared", Path("/work/shared")):
        if cand and Path(cand).is_dir():
            return Path(cand)
    return None


class Dtrain:
    """Runs the installed `dtrain` console command against one DTRAIN_HOME."""

    def __init__(self, home: Path, env: dict[str, str] | None = None):
        self.home = home
        self.env = {**os.environ, **(env or {}), "DTRAIN_HOME": str(home)}  # the home always wins: CI exports one

    def __call__(self, *args: str, check: bool = True, timeout: float = 120, cwd=None) -> subprocess.CompletedProcess:
        proc = subprocess.run([DTRAIN, *args], env=self.env, capture_output=True, text=True, timeout=timeout,
                              cwd=cwd)
        if check and proc.returncode != 0:
            raise AssertionError(f"dtrain {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def json(self, *args: str):
        return json.loads(self(*args, "--json").stdout)

    def status(self, name: str) -> str:
        return self.json("describe", "job", name)["status"]

    def wait_for(self, name: str, statuses: set[str], timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = self.json("describe", "job", name)
            if info["status"] in statuses:
                return info
            time.sleep(0.2)
        raise AssertionError(f"job {name} never reached {statuses}; last: {info['status']} {info['message']}")

    def wait_running(self, name: str, timeout: float = 60) -> dict:
        """Wait until the job and every one of its processes read Running (a job reads Running as soon
        as its first process does); returns the job's description."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = self.json("describe", "job", name)
            if info["status"] == "Running" and all(p["status"] == "Running" for p in info["processes"]):
                return info
            time.sleep(0.2)
        raise AssertionError(f"job {name} never ran on every process: {info['status']} {info['message']}")


def wait_supervisor_gone(home: Path, job: str, timeout: float = 60) -> None:
    """Wait until the finished job's supervisor has exited. It records the job's end, then exits,
    and closing its database connection checkpoints the -wal file into state.db: a test that
    compares state.db's bytes must start after that."""
    import sqlite3

    from dtrain.backends.local.ranks import parse_ident

    with contextlib.closing(sqlite3.connect(home / "state.db")) as conn:
        pid, token = conn.execute("SELECT supervisor_pid, supervisor_start FROM jobs WHERE name=?", (job,)).fetchone()
    supervisor = parse_ident(pid, token)
    deadline = time.monotonic() + timeout
    while supervisor is not None and supervisor.alive():
        if time.monotonic() > deadline:
            raise AssertionError(f"the supervisor of job {job} never exited")
        time.sleep(0.05)


@contextlib.contextmanager
def job_store(home: Path):
    """The local backend's JobStore over home's state.db, closed at the end: a test sets its jobs up
    or reads them there directly (a dtrain command would reconcile them first)."""
    from dtrain.backends.local.store import JobStore

    store = JobStore(home / "state.db")
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def store(tmp_path):
    """A JobStore of the test's own (tmp_path/state.db): a test of the store, or of the scheduler over it."""
    with job_store(tmp_path) as s:
        yield s


def stored_job(home: Path, name: str):
    """Job `name`'s row in home's state.db (a sqlite3.Row), read directly; see job_store."""
    with job_store(home) as store:
        return store.job(name)


def gated(folder: Path, name: str = "go") -> tuple[str, Path]:
    """Python code for a job's process that waits until the file folder/name appears, and that file: the
    test writes it when the job may end (code to run after the wait follows on a line of its own)."""
    gate = folder / name
    return f"import os,time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)", gate


def wait_through(event, wait, *, after: float = 0.3):
    """`wait()`'s answer, while `event()` (a controller's, a driver's) happens `after` seconds into it, on a
    timer's thread (joined before this returns)."""
    import threading

    timer = threading.Timer(after, event)
    timer.start()
    try:
        return wait()
    finally:
        timer.join()


def rank_record(home: Path, job: str, rank: int, timeout: float = 90) -> dict:
    """A local job's rank record, once the rank has started (its pid is recorded)."""
    path = home / "jobs" / job / "ranks" / f"rank-{rank}.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            rec = json.loads(path.read_text())
            if rec.get("pid"):
                return rec
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"rank {rank} of {job} never started")


@pytest.fixture(scope="session", autouse=True)
def _dtrain_byte_compiled():
    """Byte-compile the checkout's dtrain package once (into its git-ignored __pycache__ folders).
    pip compiles what it installs, but not an editable checkout; where $PYTHONDONTWRITEBYTECODE is
    set (as on the CI machines) every `dtrain` command, supervisor and rank the tests start then
    compiled ~150 modules from source again: 0.9-1.0 s a `dtrain list` on a busy 2-core machine
    against 0.4-0.6 s with the .pyc files, and test_cli_items.py + test_jobs_local.py took 324 s
    against 267 s. Python checks each .pyc against its source's mtime and size, so an edited file
    is compiled afresh, never run stale."""
    import compileall

    compileall.compile_dir(str(REPO / "dtrain"), quiet=1)


@pytest.fixture(scope="session", autouse=True)
def _processes_temp_files(tmp_path_factory):
    """What the processes the tests start write to $TMPDIR (plain torchrun leaves a
    torchelastic_* folder per run there) goes under this run's pytest folder, which pytest
    prunes, instead of gathering in the machine's /tmp. Tests about temporary files set their own."""
    patch = pytest.MonkeyPatch()
    patch.setenv("TMPDIR", str(tmp_path_factory.mktemp("tmpdir")))
    yield
    patch.undo()


@pytest.fixture(scope="session", autouse=True)
def _no_aws_region_of_the_machine():
    """The SageMaker region follows $AWS_REGION / $AWS_DEFAULT_REGION where config.yaml sets none: a
    developer's own (eu-west-1) would move the tests' jobs out of us-east-1. Tests about them set them."""
    patch = pytest.MonkeyPatch()
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        patch.delenv(var, raising=False)
    yield
    patch.undo()


@pytest.fixture(scope="session", autouse=True)
def _server_threads_log_through_pytest():
    """moto's server (Flask on werkzeug) answers in threads of its own. werkzeug and Flask each add a
    stderr handler to their logger the first time they log, unless some handler already takes the
    records; one made while a test's captured stderr was in place then wrote, tests later, to that
    closed stream ("--- Logging error --- ... I/O operation on closed file" in the run's output, as
    moto logs the StopTrainingJob it lacks). With these, their records go to the root logger, which
    pytest captures per test. (The root logger itself once kept such a stream too, left there by a
    pipeline run's parallel tasks: see runner._print_and_logging_kept.)"""
    null = logging.NullHandler()
    for name in ("werkzeug", "moto"):
        logging.getLogger(name).addHandler(null)
    yield
    for name in ("werkzeug", "moto"):
        logging.getLogger(name).removeHandler(null)


@pytest.fixture
def home(tmp_path) -> Path:
    h = tmp_path / "dtrain-home"
    h.mkdir()
    return h


def _no_local_job_recorded(home: Path) -> bool:
    """True only where the home's state.db surely holds no job (none there, or its jobs table empty):
    then nothing can be left running, and the `dtrain list` below (a Python start, 0.3-0.5 s on a
    busy 2-core machine, after every one of ~2000 tests) is skipped. Any doubt (a damaged or
    locked database) answers False, and the command runs."""
    import sqlite3

    db = home / "state.db"
    if not db.exists():
        return True
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as conn:
            return conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
    except sqlite3.Error:
        return False


def _cleanup(d: Dtrain) -> None:
    """Leave nothing running behind a failed test (a Pending job's supervisor waits forever)."""
    if _no_local_job_recorded(d.home):
        return
    for job in json.loads(d("list", "-A", "--json", check=False).stdout or "[]"):
        if job["status"] in ("Pending", "Running"):
            d("delete", job["name"], check=False)


@pytest.fixture
def dt(home) -> Dtrain:
    d = Dtrain(home)
    yield d
    _cleanup(d)


@pytest.fixture
def dt_gpus(home) -> Dtrain:
    """A DTRAIN_HOME whose device inventory is two injected GPUs."""
    d = Dtrain(home, env={"DTRAIN_GPUS": "2"})
    yield d
    _cleanup(d)


def assert_usage_error(proc, *needles: str) -> None:
    """A refused command: exit 2, one line on stderr holding every needle, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def one_torch_thread():
    """One intra-op thread: on a busy 2-core machine two threads wait on each other (4x slower)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@contextlib.contextmanager
def tmpfs(path: Path, options: str):
    """A tmpfs mounted at the new folder `path` with `options` (`size=2m`, `nr_inodes=8`), unmounted
    at the end; the test is skipped where it cannot be mounted (it needs root or CAP_SYS_ADMIN)."""
    path.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {proc.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(folder: Path) -> None:
    """Use up every free block of the file system holding `folder` (a file `fill` there)."""
    with open(folder / "fill", "wb", buffering=0) as f:  # unbuffered: a block the disk took in part leaves
        block = b"\0" * 65536                             # nothing for close() to write (and fail on) again
        try:
            while True:
                f.write(block)
        except OSError:
            pass


def usage_line(proc) -> str:
    """The one line a refused command printed (exit 2, no traceback), without "dtrain: error: "."""
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0].removeprefix("dtrain: error: ")


def counter_script(steps: int, *, exit_on_term: int = 143) -> str:
    """A workload that counts to `steps` in tenths of a second from count.txt (its checkpoint) and,
    on SIGTERM, writes where it was and exits `exit_on_term` (143, or 0 as many training scripts'
    graceful stops do: Lightning, a Trainer's signal handler)."""
    return f"""import pathlib, signal, sys, time
ck = pathlib.Path("count.txt")
start = int(ck.read_text()) if ck.exists() else 0
print("start at", start, flush=True)
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
for i in range(start, {steps}):
    if stop:
        ck.write_text(str(i)); print("checkpoint at", i, flush=True); sys.exit({exit_on_term})
    time.sleep(0.1)
ck.write_text("{steps}"); print("done", flush=True)
"""


def team_b_on_kubernetes(home: Path, tmp_path: Path, *, backend: str = "local",
                         project_backends: dict | None = None, **kubernetes):
    """A started in-memory Kubernetes API server, and config.yaml (in `home`) mapping project team-b
    to it while the rest stays local; or `backend` the default and `project_backends` the map (the
    reverse: Kubernetes the default, a project local); `kubernetes`: more settings. The caller
    closes the server."""
    import yaml

    from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer

    server = FakeKubeServer(FakeCluster()).start()
    kubeconfig = tmp_path / "kubeconfig"
    server.write_kubeconfig(kubeconfig)
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(yaml.safe_dump({
        "project": "default", "backend": backend, "project_backends": project_backends or {"team-b": "kubernetes"},
        "kubernetes": {"kubeconfig": str(kubeconfig), "image": "img:1", "notebook_image": "nbimg:1",
                       **kubernetes}}))
    return server


# Holds its SIGTERM (a checkpoint being written) until the file `gate` appears, then exits 143.
SLOW_STOP = """import os, signal, sys, time
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
print("up", flush=True)
while not stop:
    time.sleep(0.05)
print("writing a checkpoint", flush=True)
while not os.path.exists("gate"):
    time.sleep(0.05)
sys.exit(143)
"""


class Cli:
    """`dtrain` in this process (a subprocess costs half a second a call): exit code, stdout, stderr."""

    def __init__(self, capsys):
        self.capsys = capsys

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        from dtrain.cli.main import main

        self.capsys.readouterr()
        try:
            rc = main(list(argv))
        except SystemExit as exit_:
            rc = exit_.code
        out, err = self.capsys.readouterr()
        return rc, out, err

    def ok(self, *argv: str) -> str:
        rc, out, err = self(*argv)
        assert rc == 0, (argv, rc, out, err)
        return out

    def json(self, *argv: str):
        return json.loads(self.ok(*argv, "--json"))

    def refused(self, *argv: str) -> str:
        """A refusal: exit 2, one line on stderr, no traceback; the line."""
        rc, out, err = self(*argv)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (rc, out, err)
        return err.strip()
