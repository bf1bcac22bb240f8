"""Local backend: what a full disk must not take from the user."""

from __future__ import annotations

import contextlib
import os

import pytest

from conftest import Dtrain, assert_usage_error, fill, job_store, rank_record, tmpfs, wait_supervisor_gone
from dtrain.procs import Ident


def _fill(folder) -> None:
    fill(folder)
    assert os.statvfs(folder).f_bavail == 0


def test_delete_stops_a_running_job_even_when_the_home_disk_is_full(tmp_path):
    with tmpfs(tmp_path / "disk", "size=8m") as disk:
        dt = Dtrain(disk / "home")
        dt("submit", "runaway", "--", "sleep", "300")
        rank = Ident.from_record(rank_record(dt.home, "runaway", 0))
        try:
            assert rank.alive()
            _fill(disk)
            # the job (say, one whose checkpoints filled the disk) is stopped although nothing can be recorded
            assert_usage_error(dt("delete", "runaway", check=False), "job 'runaway' was stopped",
                               "free space there (df -h) and run 'dtrain delete runaway' again")
            assert not rank.alive()
        finally:
            (disk / "fill").unlink(missing_ok=True)
            dt("delete", "runaway", check=False)
        assert dt.status("runaway") == "Deleted"  # recorded by the retry the line asked for
        assert not rank.alive()


def test_a_full_home_disk_still_lets_the_user_read_what_is_stored(tmp_path):
    """Opening a WAL database makes its -wal and -shm files, which a full disk refuses; `list`,
    `describe`, `logs` and the storage listings read the main file alone instead. Writes stay refused."""
    with tmpfs(tmp_path / "disk", "size=8m") as disk:
        dt = Dtrain(disk / "home")
        dt("volume", "create", "data", "--size", "1Mi")
        dt("snapshot", "create", "data", "--name", "first")
        dt("submit", "done", "--", "echo", "a line of output")
        dt.wait_for("done", {"Succeeded"})
        wait_supervisor_gone(dt.home, "done")  # its connection's close checkpoints the -wal into state.db
        assert not (dt.home / "state.db-wal").exists()  # else a later command's close would do it
        state = (dt.home / "state.db").read_bytes()
        _fill(disk)
        try:
            assert "done" in dt("list", "jobs").stdout
            assert dt.json("describe", "job", "done")["status"] == "Succeeded"
            assert dt("logs", "done").stdout == "a line of output\n"
            assert "first" in dt("snapshot", "list").stdout and "data" in dt("volume", "list").stdout
            assert_usage_error(dt("submit", "more", "--", "true", check=False), "state database",
                               "free space there (df -h) and retry")
            assert_usage_error(dt("logs", "done", "-f", check=False), "free space there")  # it would watch for good
            assert (dt.home / "state.db").read_bytes() == state
        finally:
            (disk / "fill").unlink()
        dt("submit", "more", "--", "true")  # space freed: the database is writable again
        assert {j["name"] for j in dt.json("list", "jobs")} == {"done", "more"}


def test_a_database_without_the_job_indexes_is_read_on_a_full_disk_and_indexed_once_there_is_room(tmp_path):
    """The job table's indexes are made at the first open of a database made before them; a full
    disk refuses that write, which must not refuse the reads (they work without the indexes)."""
    import sqlite3

    def indexes(full: bool = False) -> set[str]:  # on a full disk, the main file alone (as dtrain reads it)
        where = f"file:{dt.home / 'state.db'}" + ("?mode=ro&immutable=1" if full else "")
        with contextlib.closing(sqlite3.connect(where, uri=True)) as conn:
            return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index' "
                                               "AND tbl_name='jobs' AND name LIKE 'jobs_by_%'")}

    with tmpfs(tmp_path / "disk", "size=8m") as disk:
        dt = Dtrain(disk / "home")
        dt("submit", "done", "--", "echo", "a line of output")
        dt.wait_for("done", {"Succeeded"})
        assert indexes() == {"jobs_by_created", "jobs_by_status", "jobs_by_project"}
        with contextlib.closing(sqlite3.connect(dt.home / "state.db")) as conn:  # as a dtrain before them left it
            for name in indexes():
                conn.execute(f"DROP INDEX {name}")
        _fill(disk)
        try:
            assert "done" in dt("list", "jobs").stdout
            assert dt.json("describe", "job", "done")["status"] == "Succeeded"
            assert dt("logs", "done").stdout == "a line of output\n"
            assert indexes(full=True) == set()
        finally:
            (disk / "fill").unlink()
        assert "done" in dt("list", "jobs").stdout
        assert indexes() == {"jobs_by_created", "jobs_by_status", "jobs_by_project"}


def test_artifacts_that_cannot_be_written_leave_nothing_and_say_why_in_one_line(dt, tmp_path):
    """`dtrain artifacts --to` where a part of the path is a file, or on a disk the model does not
    fit: one line, exit 2, and no folder left (a model file cut short looks like a model)."""
    code = ("import os, pathlib; d = pathlib.Path(os.environ['DTRAIN_MODEL_DIR']); d.mkdir(); "
            "(d / 'w.bin').write_bytes(os.urandom(600_000)); (d / 'sub').mkdir(); (d / 'sub' / 'a.txt').write_text('a'); "
            "os.symlink('w.bin', d / 'latest')")
    dt("submit", "m", "--", "python", "-c", code)
    assert dt.wait_for("m", {"Succeeded", "Failed"})["status"] == "Succeeded"
    (tmp_path / "afile").write_text("x")
    assert_usage_error(dt("artifacts", "m", "--to", str(tmp_path / "afile" / "model"), check=False),
                       f"cannot write {tmp_path / 'afile' / 'model'}", "is a file, not a folder", "nothing was left")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")  # dangling: never written through
    assert_usage_error(dt("artifacts", "m", "--to", str(tmp_path / "link"), check=False), "pick a new --to folder")
    assert not (tmp_path / "elsewhere").exists()
    with tmpfs(tmp_path / "small", "size=256k") as disk:
        assert_usage_error(dt("artifacts", "m", "--to", str(disk / "model"), check=False),
                           f"cannot write {disk / 'model'}: No space left on device", "df -h", "nothing was left")
        assert os.listdir(disk) == []
    dt("artifacts", "m", "--to", str(tmp_path / "model"))
    got = tmp_path / "model"
    assert (got / "w.bin").stat().st_size == 600_000 and (got / "sub" / "a.txt").read_text() == "a"
    assert os.readlink(got / "latest") == "w.bin"
    made = dt.home / "jobs" / "m" / "model"
    assert [(got / p).stat().st_mtime_ns for p in ("", "sub")] == [(made / p).stat().st_mtime_ns for p in ("", "sub")]
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no staging folder left


def test_a_job_that_filled_the_home_disk_and_lost_its_supervisor_is_still_shown(tmp_path):
    """The job's log fills the home's disk, its rank is stopped and its supervisor ends without
    recording it: `list`, `describe` and `logs` read the state as it is (its last changes still in
    the -wal file, or the main file alone) and show the job lost, saying the record waits for room;
    the first command once there is room records it."""
    import subprocess

    with tmpfs(tmp_path / "disk", "size=300k") as disk:
        dt = Dtrain(disk / "home")
        dt("submit", "filler", "--", "sh", "-c", "yes hello | head -c 400000")
        dt.wait_for("filler", {"Failed"})  # its supervisor gone: read, not recorded
        listed = dt("list", "jobs")
        assert "filler" in listed.stdout and "Failed" in listed.stdout
        info = dt.json("describe", "job", "filler")
        assert info["status"] == "Failed" and info["message"].startswith("lost: its supervisor")
        assert "could not be written: No space left on device" in info["message"]
        home = disk / "home"  # the supervisor died writing on that full disk: said, with what to delete
        assert info["message"].startswith(f"lost: its supervisor (pid {info['message'].split()[4]} is gone: most "
                                          f"likely a write it needed failed, as the disk holding {home} is full (")
        # one sentence: the rank's exit code where it is said, the disk's advice once, at its end
        assert (f"; before that, rank 0 was stopped (exit code 143) because its log could not be written: No space "
                f"left on device ({home}/jobs/filler/logs/rank-0.log); this is not recorded yet, as the disk holding "
                f"$DTRAIN_HOME is full or read-only: free space there (df -h {home}); the largest job logs there are "
                f"job 'filler''s, ") in info["message"]
        assert info["message"].endswith(f" MiB (rm -r {home}/jobs/filler/logs, or 'dtrain delete filler --purge' "
                                        f"once it has ended)")
        assert info["message"].count("free space") == 1 and ") (" not in info["message"], info["message"]
        assert dt("logs", "filler").stdout.startswith("hello\n")
        assert_usage_error(dt("submit", "more", "--", "true", check=False), "free space there (df -h) and retry")
        subprocess.run(["mount", "-o", "remount,size=4m", str(disk)], check=True)  # room again
        info = dt.json("describe", "job", "filler")
        assert info["status"] == "Failed" and "not recorded yet" not in info["message"]
        assert info["message"].endswith("no restarts left (--max-restarts 0)")


def test_a_supervisor_that_could_not_be_recorded_is_stopped(tmp_path, monkeypatch):
    """On a full home disk the compare-and-set recording a relaunched job's new supervisor fails:
    that supervisor, already started, must not live on unrecorded (every `dtrain list` made one)."""
    import sqlite3
    import subprocess
    import time

    import dtrain.procs
    from dtrain.backends.local.backend import LocalBackend

    backend = LocalBackend(home=tmp_path / "home")
    (tmp_path / "home" / "jobs" / "lost").mkdir(parents=True)
    started = []

    def spawn(argv, *, log, cwd, what=""):
        p = subprocess.Popen(["sleep", "60"], start_new_session=True)
        started.append(p)
        return p.pid

    def refused(*_a, **_kw):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(dtrain.procs, "spawn_detached", spawn)
    monkeypatch.setattr(backend.store, "replace_supervisor", refused)
    with pytest.raises(sqlite3.OperationalError):
        backend._start_supervisor("lost", replacing=(None, None))
    deadline = time.time() + 10
    while started[0].poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert started[0].returncode == -9


def test_a_read_only_home_still_lets_the_user_read_what_is_stored(tmp_path):
    """A home on a file system mounted read-only (a snapshot of a disk, a backup): reading what is
    stored works as on a full disk; a write is refused in one line."""
    import subprocess

    with tmpfs(tmp_path / "disk", "size=8m") as disk:
        dt = Dtrain(disk / "home")
        dt("volume", "create", "data", "--size", "1Mi")
        dt("submit", "done", "--", "echo", "a line of output")
        dt.wait_for("done", {"Succeeded"})
        wait_supervisor_gone(dt.home, "done")  # it records Succeeded, then exits: until then its files are open
        assert not (dt.home / "state.db-wal").exists()  # the last connection checkpointed: no -wal left
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        try:
            assert "done" in dt("list", "jobs").stdout
            assert dt.json("describe", "job", "done")["status"] == "Succeeded"
            assert dt("logs", "done").stdout == "a line of output\n"
            assert "data" in dt("volume", "list").stdout
            assert_usage_error(dt("submit", "more", "--", "true", check=False), "state.db",
                               "set DTRAIN_HOME to a folder you can write")
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)


def _lose_the_supervisor_while_snapshotting(dt, name: str, *, registered: bool) -> None:
    """Job `name` (running `sleep`) as its supervisor leaves it when killed while taking the
    --snapshot-on-success snapshot: every rank exited 0, the event said, the snapshot registered
    or not yet."""
    import signal
    import time

    from dtrain.backends.local.store import SNAPSHOTTING
    from dtrain.storage import Storage

    rank_record(dt.home, name, 0)
    with job_store(dt.home) as store:
        row = store.job(name)
        os.kill(row["supervisor_pid"], signal.SIGKILL)
        store.add_event(name, "Running", SNAPSHOTTING + "data")
        if registered:
            time.sleep(0.01)
            storage = Storage(dt.home)
            storage.create_snapshot("data", name="taken", job=name)
            storage.close()


@pytest.mark.parametrize("registered", [False, True])
def test_a_supervisor_lost_while_snapshotting_never_runs_the_trained_job_again(tmp_path, registered):
    """Killed after every rank exited 0, during --snapshot-on-success: the next command must not
    relaunch the job (it would train again) nor fail it without saying the training succeeded."""
    dt = Dtrain(tmp_path / "home")
    dt("volume", "create", "data")
    dt("submit", "snap", "--snapshot-on-success", "data", "--max-restarts", "2", "--pvc", "data:/mnt/data", "--",
       "bash", "-c", "echo run >> /mnt/data/runs.txt; sleep 600")
    _lose_the_supervisor_while_snapshotting(dt, "snap", registered=registered)
    job = dt.wait_for("snap", {"Succeeded", "Failed"}, timeout=60)
    if registered:
        assert (job["status"], job["snapshot"]) == ("Succeeded", "taken"), job
    else:
        assert job["status"] == "Failed" and job["restarts"] == 0, job
        assert job["message"].startswith("lost: its supervisor (pid ")
        assert job["message"].endswith(", after every process exited 0, while taking the snapshot of volume data: "
                                       "the results are on the volume; take it with 'dtrain snapshot create data "
                                       "--job snap'")
        # the advice taken: that snapshot is the job's (it stayed "Snapshot: -", and a second one was made
        # each time the advice, still shown, was followed again)
        taken = dt("snapshot", "create", "data", "--job", "snap", "--name", "late").stdout
        assert "late" in taken
        job = dt.json("describe", "job", "snap")
        assert (job["status"], job["snapshot"]) == ("Failed", "late"), job
        assert job["events"][-1]["message"] == "snapshot late of volume data taken by 'dtrain snapshot create data --job snap'"
        dt("snapshot", "create", "data", "--job", "snap", "--name", "later")  # another is linked, not the job's
        assert dt.json("describe", "job", "snap")["snapshot"] == "late"
    assert (dt.home / "volumes" / "data" / "data" / "runs.txt").read_text() == "run\n"  # ran once


def test_a_killed_launcher_is_named_as_what_ended_the_job_not_a_rank(tmp_path):
    """torchrun killed (the OOM killer, kill -9): its ranks got SIGTERM because it died."""
    import signal

    from dtrain.backends.local.ranks import launcher_ident

    dt = Dtrain(tmp_path / "home")
    dt("submit-dist", "d", "--processes", "2", "--", "python", "-c", "import time; time.sleep(600)")
    for rank in (0, 1):
        rank_record(dt.home, "d", rank)
    ident = launcher_ident(dt.home / "jobs" / "d")
    assert ident is not None
    os.kill(ident.pid, signal.SIGKILL)
    job = dt.wait_for("d", {"Failed"}, timeout=90)
    assert job["message"] == (f"the launcher (torchrun) was killed by SIGKILL, and its ranks were stopped with it; "
                              f"see {dt.home / 'jobs' / 'd' / 'launcher.log'}"), job["message"]


@pytest.mark.slow
def test_a_submit_killed_before_recording_its_supervisor_does_not_block_the_queue(tmp_path, monkeypatch):
    """The job's row was written and its supervisor started, then the submit died before recording
    that supervisor: the supervisor records itself, and the job runs (it waited a minute, holding up
    every job behind it, then read 'never started')."""
    from dtrain.backends.local.backend import LocalBackend
    from dtrain.spec import JobSpec

    home = tmp_path / "home"
    backend = LocalBackend(home=home)

    def killed(*_a, **_kw):
        raise KeyboardInterrupt  # as the submit's end, before the write

    monkeypatch.setattr(backend.store, "replace_supervisor", killed)
    with pytest.raises(KeyboardInterrupt):
        backend.submit(JobSpec(name="orphan", command=("true",)))
    monkeypatch.undo()
    job = Dtrain(home).wait_for("orphan", {"Succeeded", "Failed"}, timeout=45)
    assert job["status"] == "Succeeded", job["message"]
