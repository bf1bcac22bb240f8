"""Faults found by auditing docs/reliability.md against the local backend: a relaunch race between
two commands, a job log filling its disk, a job folder removed by hand, a stop that comes while a
launcher is being started."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import Dtrain, job_store, rank_record, stored_job, tmpfs
from dtrain.backends.local import ranks
from dtrain.backends.local.backend import LocalBackend
from dtrain.backends.local.store import JobStore
from dtrain.procs import Ident, start_time
from dtrain.spec import JobSpec


def live_rank(home: Path, job: str, *, not_pid: int | None = None, timeout: float = 60) -> dict:
    """Rank 0's record once a live command other than `not_pid` is recorded in it."""
    path = home / "jobs" / job / "ranks" / "rank-0.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            rec = {}
        ident = Ident.from_record(rec)
        if ident is not None and ident.pid != not_pid and ident.alive():
            return rec
        time.sleep(0.05)
    raise AssertionError(f"no live rank 0 of {job} (other than {not_pid})")


def wait_gone(ident: Ident, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while ident.alive():
        assert time.monotonic() < deadline, f"{ident.pid} still alive"
        time.sleep(0.05)


def exits_within(pid: int, seconds: float) -> bool:
    """True if the process exits within `seconds` (a pidfd becomes readable when it does)."""
    fd = os.pidfd_open(pid)
    try:
        poll = select.poll()  # select() refuses a descriptor past 1023
        poll.register(fd, select.POLLIN)
        return bool(poll.poll(seconds * 1000))
    finally:
        os.close(fd)


def events(info: dict) -> str:
    return "\n".join(e["message"] for e in info["events"])


# ------------------------------------------------------------------ a relaunch race


def test_a_command_that_read_the_job_before_another_relaunched_it_leaves_the_new_attempt_alone(home):
    """Two commands find the same lost supervisor; one relaunches the job before the other acts on
    what it read. The late one used to stop "the lost attempt's leftovers" from the job's folder,
    which by then were the new attempt's rank: the relaunch it lost still killed the job's work
    (and cost it a restart)."""
    early, late = LocalBackend(home), LocalBackend(home)
    early.submit(JobSpec(name="r", command=("sleep", "300"), max_restarts=2))
    try:
        first = live_rank(home, "r")
        os.kill(early.store.job("r")["supervisor_pid"], signal.SIGKILL)
        wait_gone(Ident.from_record(first))  # the rank dies with its supervisor
        stale = late.store.job("r")  # read by the late command before the early one relaunches
        early._reconcile(early.store.job("r"))
        second = live_rank(home, "r", not_pid=first["pid"])
        late._reconcile(stale)
        assert not exits_within(second["pid"], 1.0), "the relaunched attempt's rank was stopped"
        row = late.store.job("r")
        assert (row["status"], row["restarts"]) == ("Running", 1)
    finally:
        early.delete("r")


def test_a_command_relaunching_a_job_is_never_signalled_by_delete(dt: Dtrain):
    """While a command relaunches a job it is recorded as the job's supervisor (a claim): a delete
    at that moment must not send it the supervisor's SIGTERM (it may be the HTTP server)."""
    dt("submit", "c", "--", "sleep", "300")
    rec = rank_record(dt.home, "c", 0)
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        ident = Ident(pid=bystander.pid, start=start_time(bystander.pid), boot=Ident.of(os.getpid()).boot)
        with job_store(dt.home) as store:
            row = store.job("c")
            assert store.replace_supervisor("c", old=(row["supervisor_pid"], row["supervisor_start"]),
                                            pid=ident.pid, token=ranks.supervisor_token(ident, claim=True))
            assert dt.status("c") == "Running"  # a live claim: nobody else takes the job over
            os.kill(row["supervisor_pid"], signal.SIGKILL)
            dt("delete", "c")
            assert bystander.poll() is None and dt.status("c") == "Deleted"
            wait_gone(Ident.from_record(rec))
    finally:
        bystander.kill()
        bystander.wait()


# ------------------------------------------------------------------ a log that cannot be written


def run_rank(job_dir: Path, code: str, timeout: float = 60) -> tuple[int, dict]:
    proc = subprocess.Popen([sys.executable, "-m", "dtrain.backends.local.rankrun", "--job-dir", str(job_dir), "--",
                             sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        ranks.kill_ranks(job_dir)
        proc.kill()
        proc.wait()
        raise AssertionError("the rank never ended: its command blocked on a pipe nobody read") from None
    return proc.returncode, {**json.loads((job_dir / "ranks" / "rank-0.json").read_text()), "out": out}


@contextlib.contextmanager
def full_logs(job_dir: Path):
    """The job's logs folder on a tmpfs with no free block left (rankrun opens no log through a link,
    so a link to /dev/full no longer stands for a full disk)."""
    job_dir.mkdir()
    with tmpfs(job_dir / "logs", "size=64k") as logs:
        (logs / "rank-0.log").touch()
        with open(logs / "fill", "wb", buffering=0) as f:
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * 4096)
        yield


def test_a_rank_whose_log_cannot_be_written_is_stopped_with_the_reason(tmp_path):
    """The log on a full disk. The copying thread used to die at the first failed write; the
    command then blocked for good on its full output pipe and the job stayed Running forever."""
    job_dir = tmp_path / "job"
    with full_logs(job_dir):
        code, rec = run_rank(job_dir, "import time\nfor i in range(10**6): print('x' * 100)\ntime.sleep(60)")
    assert rec["status"] == "Failed" and code == rec["exit_code"] != 0, rec
    assert "No space left on device" in rec["log_error"] and "rank-0.log" in rec["log_error"]
    assert b"Traceback" not in rec["out"], rec["out"]
    assert ranks.describe_exit(rec).startswith(f"rank 0 was stopped (exit code {code}) because its log could not be "
                                               "written: "
                                               "No space left on device")


def test_a_rank_that_ends_before_its_log_failure_stops_it_still_records_it(tmp_path):
    job_dir = tmp_path / "job"
    with full_logs(job_dir):
        code, rec = run_rank(job_dir, "print('one line')")
    assert "No space left on device" in rec["log_error"] and rec["exit_code"] is not None
    assert rec["status"] in ("Succeeded", "Failed") and code == rec["exit_code"]


def test_an_endless_output_line_is_kept_in_bounded_records(tmp_path):
    """A line with no end (a progress bar without newlines, binary output) used to be read whole
    into the rank wrapper's memory before a byte of it was logged."""
    from dtrain.backends.local.rankrun import LINE_MAX, parse_line

    job_dir = tmp_path / "job"
    size = 3 * LINE_MAX + 5
    code, rec = run_rank(job_dir, f"import sys; sys.stdout.write('y' * {size})")
    assert code == rec["exit_code"] == 0
    records = [parse_line(line)[1] for line in (job_dir / "logs" / "rank-0.log").read_text().splitlines()]
    assert len(records) > 1 and all(len(r) <= LINE_MAX for r in records)
    assert "".join(records) == "y" * size


def test_a_job_filling_the_disk_with_its_log_ends_and_says_why(tmp_path):
    """DTRAIN_HOME on a 2 MiB tmpfs, a job printing far more: the job ends (it used to stay Running
    for good), and once space is freed the job says what happened, whether its supervisor could
    record it on the full disk or the next command found it lost."""
    with tmpfs(tmp_path / "disk", "size=2m") as disk:
        dt = Dtrain(disk / "home")
        try:
            dt("submit", "spam", "--", "python", "-c", "for i in range(10**6): print('x' * 100)")
            job_dir = disk / "home" / "jobs" / "spam"
            deadline = time.monotonic() + 60
            rec: dict = {}
            while rec.get("finished") is None:
                assert time.monotonic() < deadline, f"the rank never ended: {rec}"
                time.sleep(0.1)
                try:
                    rec = json.loads((job_dir / "ranks" / "rank-0.json").read_text())
                except (OSError, ValueError):
                    pass
            assert "No space left on device" in rec["log_error"]
            (job_dir / "logs" / "rank-0.log").unlink()  # the user frees space
            info = dt.wait_for("spam", {"Failed", "Succeeded"}, timeout=60)
            assert info["status"] == "Failed" and "its log could not be written: No space left on device" in \
                info["message"], info["message"]
        finally:
            _cleanup_home(dt)


def _cleanup_home(dt: Dtrain) -> None:
    for job in json.loads(dt("list", "-A", "--json", check=False).stdout or "[]"):
        if job["status"] in ("Pending", "Running"):
            dt("delete", job["name"], check=False)
    for path in (dt.home / "jobs").glob("*"):
        ranks.kill_ranks(path)


# ------------------------------------------------------------------ a job folder removed by hand


def test_a_queued_job_whose_folder_was_removed_fails_saying_so(dt_gpus: Dtrain):
    dt = dt_gpus
    dt("submit", "holder", "--gpu", "2", "--", "sleep", "300")
    dt("submit", "queued", "--gpu", "1", "--", "true")
    assert dt.status("queued") == "Pending"
    shutil.rmtree(dt.home / "jobs" / "queued")
    info = dt.wait_for("queued", {"Failed", "Succeeded", "Running"}, timeout=60)
    assert info["status"] == "Failed" and "was removed" in info["message"] and "submit it again" in \
        info["message"], info["message"]
    assert "killed, or the machine restarted" not in info["message"]


@pytest.mark.slow
def test_a_lost_job_holding_the_devices_does_not_block_the_queue_until_a_command_runs(dt_gpus: Dtrain):
    """The supervisor of a job holding both GPUs is killed; nobody runs a dtrain command after
    that. The job waiting for a GPU used to stay Pending until one did: its own supervisor now
    finds the lost job (Failed, no restarts left), and the devices go to the job that waits."""
    dt = dt_gpus
    dt("submit", "holder", "--gpu", "2", "--max-restarts", "0", "--", "sleep", "300")
    rec = rank_record(dt.home, "holder", 0)
    dt("submit", "queued", "--gpu", "1", "--", "true")
    with job_store(dt.home) as store:  # read directly: a dtrain command would reconcile by itself
        assert store.job("queued")["status"] == "Pending"
        os.kill(store.job("holder")["supervisor_pid"], signal.SIGKILL)
        wait_gone(Ident.from_record(rec))
        deadline = time.monotonic() + 90
        while store.job("queued")["status"] in ("Pending", "Running") and time.monotonic() < deadline:
            time.sleep(0.2)
        holder, queued = store.job("holder"), store.job("queued")
    assert queued["status"] == "Succeeded", (queued["status"], queued["message"])
    assert holder["status"] == "Failed" and "lost: its supervisor" in holder["message"], holder["message"]


def _lose_supervisor(dt: Dtrain, name: str) -> None:
    """A job `name` (sleep 300, 2 restarts) whose supervisor is killed, its rank gone with it."""
    dt("submit", name, "--max-restarts", "2", "--", "sleep", "300")
    rec = rank_record(dt.home, name, 0)
    os.kill(stored_job(dt.home, name)["supervisor_pid"], signal.SIGKILL)
    wait_gone(Ident.from_record(rec))


def test_a_lost_job_whose_folder_was_removed_is_failed_not_relaunched(dt: Dtrain):
    """A relaunch there starts a supervisor that cannot even open its log: it used to spend a
    restart on one that never ran, then fail as "its supervisor never started"."""
    _lose_supervisor(dt, "gone")
    shutil.rmtree(dt.home / "jobs" / "gone")
    info = dt.json("describe", "job", "gone")
    assert info["status"] == "Failed" and info["restarts"] == 0, (info["status"], info["message"])
    assert "was removed" in info["message"] and "relaunching" not in events(info)


# ------------------------------------------------------------------ a stop while a launcher starts


def test_a_stop_that_came_while_the_launcher_was_started_stops_it(home):
    """SIGTERM (dtrain delete) between the supervisor's check for a stop and its launcher's start
    found no launcher to stop: the attempt then ran to its end, and delete waited its 35 s grace
    before it killed everything."""
    from dtrain.backends.local.supervisor import Supervisor

    store = JobStore(home / "state.db")
    store.insert_job(JobSpec(name="s", command=("sleep", "120")), cwd=str(home), node="here")
    (home / "jobs" / "s" / "logs").mkdir(parents=True)
    sup = Supervisor(home, "s")
    sup.stopping = True  # the handler ran while no launcher was there
    done: list[int] = []
    runner = threading.Thread(target=lambda: done.append(sup._run_once([], [[]], 0)), daemon=True)
    runner.start()
    try:
        runner.join(timeout=30)
        assert done, "the attempt went on after the stop"
    finally:
        ranks.kill_ranks(home / "jobs" / "s")
        runner.join(timeout=30)
        store.close()


# ------------------------------------------------------------------ a supervisor that cannot start


def test_a_process_that_cannot_start_is_an_error_not_a_pid(tmp_path):
    """spawn_detached returned a pid even when its child could not open its log or execute: the job
    then failed a minute later as "its supervisor never started", without the reason."""
    from dtrain.errors import EnvironmentError_
    from dtrain.procs import spawn_detached

    with pytest.raises(EnvironmentError_, match=r"^the runner could not be started: .*\(.*nowhere/x.log\)"):
        spawn_detached([sys.executable, "-c", "pass"], log=tmp_path / "nowhere" / "x.log", cwd=str(tmp_path),
                       what="the runner")
    with pytest.raises(EnvironmentError_, match="could not be started: .*missing-python"):
        spawn_detached([str(tmp_path / "missing-python")], log=tmp_path / "x.log", cwd=str(tmp_path))
    marker = tmp_path / "ran"
    pid = spawn_detached([sys.executable, "-c", f"open({str(marker)!r}, 'w')"], log=tmp_path / "x.log",
                         cwd=str(tmp_path))
    assert pid > 0
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists()


def test_a_spawns_log_is_never_opened_through_a_link_or_into_a_fifo(tmp_path):
    """supervisor.log is opened again when a lost job is relaunched: a link a job left there was
    followed (its output appended to the file it named), and a fifo hung the caller for good."""
    from dtrain.errors import EnvironmentError_
    from dtrain.procs import spawn_detached

    victim = tmp_path / "victim"
    victim.write_text("the user's\n")
    (tmp_path / "linked.log").symlink_to(victim)
    os.mkfifo(tmp_path / "fifo.log")
    for name in ("linked.log", "fifo.log"):
        with pytest.raises(EnvironmentError_, match=rf"^the runner could not be started: not a regular file "
                                                    rf"\(a link or fifo left there\?\): remove it \(.*/{name}\)$"):
            spawn_detached([sys.executable, "-c", "print('out')"], log=tmp_path / name, cwd=str(tmp_path),
                           what="the runner")
    assert victim.read_text() == "the user's\n"


def test_no_python_code_runs_in_the_child_of_a_spawn_and_it_never_stays_a_zombie(tmp_path):
    """A fork made from Python runs the interpreter's after-fork code in the child (at-fork hooks,
    other threads' thread-locals freed and their finalizers run): in the multi-threaded server, a
    finalizer waiting on a lock another thread held at the fork hung the child, and the submit
    with it. An at-fork hook stands for that code here: it must never run."""
    script = tmp_path / "caller.py"
    script.write_text(
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "from dtrain.procs import spawn_detached\n"
        "tmp = Path(sys.argv[1])\n"
        "os.register_at_fork(after_in_child=lambda: (tmp / 'python-ran-in-child').touch())\n"
        "pid = spawn_detached([sys.executable, '-c', 'pass'], log=tmp / 'x.log', cwd=str(tmp))\n"
        "deadline = time.monotonic() + 30\n"
        "while os.path.exists(f'/proc/{pid}') and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "print('reaped' if not os.path.exists(f'/proc/{pid}') else 'zombie')\n")
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], timeout=60, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "python-ran-in-child").exists()
    assert proc.stdout.strip() == "reaped"  # its caller still runs: it waited for its child


def test_a_lost_job_whose_supervisor_cannot_start_fails_saying_why(dt: Dtrain):
    _lose_supervisor(dt, "nolog")
    log = dt.home / "jobs" / "nolog" / "supervisor.log"
    log.unlink()
    log.mkdir()  # the next supervisor cannot open its log
    listed = dt("list", "jobs")  # what noticed goes on
    assert "nolog" in listed.stdout
    info = dt.json("describe", "job", "nolog")
    assert info["status"] == "Failed", (info["status"], info["message"])
    assert "job nolog's supervisor could not be started: Is a directory" in info["message"], info["message"]


def test_a_caller_without_standard_streams_still_starts_its_process(tmp_path):
    """With 0-2 closed (a daemon's caller), the pipes and the child's log take those numbers: the
    child's dup2s onto 0-2 closed its log (its output went to /dev/null)."""
    script = tmp_path / "caller.py"
    script.write_text(
        "import os, sys\n"
        "from pathlib import Path\n"
        "from dtrain.procs import spawn_detached\n"
        "tmp = Path(sys.argv[1])\n"
        "for fd in (0, 1, 2):\n"
        "    os.close(fd)\n"
        "spawn_detached([sys.executable, '-c', 'print(\"to the log\"); open(\"ran\", \"w\")'], log=tmp / 'x.log',"
        " cwd=str(tmp))\n"
        "try:\n"
        "    spawn_detached(['/nonexistent-program'], log=tmp / 'y.log', cwd='/')\n"
        "except Exception as e:\n"
        "    (tmp / 'error').write_text(str(e))\n")
    subprocess.run([sys.executable, str(script), str(tmp_path)], timeout=60, check=True,
                   env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    deadline = time.monotonic() + 30
    while not (tmp_path / "ran").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "ran").exists()
    assert (tmp_path / "x.log").read_text() == "to the log\n"  # not lost to /dev/null
    assert "could not be started: No such file or directory (/nonexistent-program)" in (tmp_path / "error").read_text()
