"""A full home disk: the deletes that free it commit (the reserve, `db.room_to_free`), and a delete
whose freeing the disk put off says so and is finished by the next command with room."""

from __future__ import annotations

import errno
import os
import re
import shutil
import sqlite3
import sys

import pytest
from conftest import Dtrain, fill, tmpfs, usage_line
from test_storage_left import _FillsOnSweep

from dtrain import db
from dtrain.backends.base import FreedInfo
from dtrain.cli.storage import _freed
from dtrain.storage.volumes import Storage

_LOGS = "import sys; sys.stdout.write('x' * 3_000_000 + '\\n')"  # 3 MB of log to free


@pytest.mark.slow  # a job run and a filled tmpfs: about 8 s
def test_a_purge_on_a_full_home_disk_commits_and_frees_the_jobs_logs(tmp_path):
    """`dtrain delete --purge` was refused on a full home disk ("the state database could not be
    opened or written"): it never gave up the reserve, which a home that never used volumes did not
    even have. The way out of a full disk is now the one that works."""
    with tmpfs(tmp_path / "disk", f"size={db.RESERVE_FROM + (8 << 20)}") as disk:
        dt = Dtrain(disk / "home")
        dt("submit", "j1", "--", sys.executable, "-c", _LOGS)
        dt("wait", "j1")
        assert (dt.home / db.RESERVE).stat().st_blocks * 512 == db.RESERVE_BYTES  # jobs alone make it
        fill(disk)
        assert dt("delete", "j1", "--purge").stdout.strip() == "The job 'j1' has been purged"
        assert not (dt.home / "jobs" / "j1").exists()
        assert dt.json("list", "jobs", "--show-deleted") == []



@pytest.mark.slow  # a job run and a filled tmpfs: about 8 s
def test_a_purge_a_small_full_disk_refuses_names_the_logs_to_delete_first(tmp_path):
    """A disk never 16 MiB free has no reserve: the purge is refused, and the line named no way out
    but "free space there (df -h)"; it now names the job's logs, which the purge removes anyway."""
    with tmpfs(tmp_path / "disk", "size=8m") as disk:
        dt = Dtrain(disk / "home")
        dt("submit", "j1", "--", sys.executable, "-c", _LOGS)
        dt("wait", "j1")
        logs = dt.home / "jobs" / "j1" / "logs"
        kept = sorted((p.name, p.stat().st_size) for p in logs.iterdir())
        fill(disk)
        line = usage_line(dt("delete", "job", "j1", "--purge", check=False))
        assert line.startswith("not purged: the disk holding the home folder ($DTRAIN_HOME) is full")
        assert f"delete the logs of job 'j1' first (rm -r {logs}: 2.9 MiB, which the purge removes anyway)" in line
        assert line.endswith("then run 'dtrain delete j1 --purge' again; nothing stored was changed")
        assert sorted((p.name, p.stat().st_size) for p in logs.iterdir()) == kept
        assert [j["name"] for j in dt.json("list", "jobs")] == ["j1"]
        shutil.rmtree(logs)
        dt("delete", "j1", "--purge")
        assert dt.json("list", "jobs", "--show-deleted") == []


def _pack_bytes(home) -> int:
    return sum(f.stat().st_size for f in (home / "store" / "packs").rglob("*") if f.is_file())


def test_a_delete_the_disk_put_off_is_said_so_and_finished_by_the_next_list_with_room(tmp_path):
    """A delete too large for the reserve commits its row and leaves its sweep requested. It said
    "0 B freed (more once running snapshots finish)", with no snapshot running, and only the next
    create, delete or verify freed the data: `volume list` and `snapshot list` left it in place."""
    home = tmp_path / "home"
    storage = Storage(home, engine=_FillsOnSweep(home / "store"))
    (storage.create_volume("data").path / "w.bin").write_bytes(os.urandom(300_000))
    storage.create_snapshot("data", name="s1")
    storage.delete_volume("data")
    before = _pack_bytes(home)
    storage.engine.full = True
    freed = storage.delete_snapshot("s1")
    assert freed.pending and freed.no_room and freed.bytes == 0
    assert storage.list_snapshots() == [] and storage.list_volumes() == []  # still full: stays requested
    assert (home / "store" / "sweep-pending").exists() and _pack_bytes(home) == before
    storage.close()
    again = Storage(home)
    assert again.list_volumes() == []
    assert not (home / "store" / "sweep-pending").exists() and _pack_bytes(home) < before - 250_000
    again.close()


def test_the_delete_line_says_what_is_pending_and_the_command_that_finishes_it():
    words = []
    line = _freed(FreedInfo(snapshot="s1", backend="local", bytes=0, pending=True, no_room=True),
                  lambda w: words.append(w) or f"dtrain -p team {w}")
    assert words == ["snapshot list"] and "running snapshots" not in line
    assert line.startswith(", its data not freed yet: the disk holding the home folder ($DTRAIN_HOME) had no room")
    assert line.endswith("free some space there (df -h), then run 'dtrain -p team snapshot list', which frees it")
    busy = _freed(FreedInfo(snapshot="s1", backend="local", bytes=0, pending=True), str)
    assert busy == ", 0B freed (more once running snapshots finish)"


def test_a_transaction_sqlite_rolled_back_for_a_full_disk_raises_the_full_disk_error(tmp_path):
    """SQLite may roll a transaction back itself when the disk fills mid-statement (a large sweep's
    index changes): `transaction`'s own ROLLBACK then raised "cannot rollback - no transaction is
    active", a traceback in place of the full-disk line."""
    conn = db.connect(tmp_path / "x.db")
    conn.execute("CREATE TABLE t (a)")
    conn.execute("PRAGMA max_page_count=20")  # a full disk, as SQLite sees it
    with pytest.raises(sqlite3.OperationalError, match="database or disk is full"):
        with db.transaction(conn):
            conn.executemany("INSERT INTO t VALUES (?)", [(os.urandom(500),) for _ in range(1000)])
    assert not conn.in_transaction
    conn.close()


def test_a_ranks_first_record_refused_by_a_full_disk_says_the_disk_is_full(tmp_path, monkeypatch):
    """A rank's first record on a full disk (no old file to overwrite in place) said "No such file or
    directory: .../rank-0.json" in the launcher log, hiding the full disk that refused it."""
    from dtrain.backends.local import rankrun

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rankrun, "replace_file", full)
    with pytest.raises(OSError) as refused:
        rankrun._write_json(tmp_path / "rank-0.json", {"status": "Running"})
    assert refused.value.errno == errno.ENOSPC and not (tmp_path / "rank-0.json").exists()
    (tmp_path / "rank-0.json").write_text('{"status": "Pending", "pid": 123456}')
    rankrun._write_json(tmp_path / "rank-0.json", {"status": "Running"})  # an old one: overwritten in place
    assert (tmp_path / "rank-0.json").read_text() == '{"status": "Running"}'


def _fill_but(disk, kib: int) -> None:
    """Fill the disk of `disk`, then give back `kib` KiB of it."""
    fill(disk)
    os.truncate(disk / "fill", (disk / "fill").stat().st_size - kib * 1024)


@pytest.mark.slow  # a filled tmpfs and a job run: about 4 s
def test_a_job_submitted_on_a_nearly_full_home_disk_fails_naming_the_disk(tmp_path):
    """72 KiB free when the job starts: its rank's first record is refused, and the supervisor died
    recording the failure on the full disk; the job read "lost: its supervisor ... is gone: killed, or
    the machine restarted". It now ends Failed (the home's reserve given up for that record), naming
    the full disk and `df -h`, with one line and no traceback in launcher.log."""
    with tmpfs(tmp_path / "disk", f"size={db.RESERVE_FROM + (8 << 20)}") as disk:
        dt = Dtrain(disk / "home")
        dt("list", "jobs")  # makes the home and its reserve
        _fill_but(disk, 72)
        dt("submit", "j1", "--", sys.executable, "-c", "print('hi')")
        info = dt.wait_for("j1", {"Failed", "Succeeded"})
        home = dt.home
        assert info["status"] == "Failed" and not info["message"].startswith("lost"), info["message"]
        # measured once the home's 1 MiB reserve was given up to record it, and said so (it read "0 KiB
        # free" while `df` showed that MiB free)
        said = re.search(rf"; the disk holding {re.escape(str(home))} is full \((\d+) KiB free, the 1024 KiB reserve "
                         rf"given up to record this included\): free space there \(df -h {re.escape(str(home))}\), "
                         rf"then submit the job again$", info["message"])
        assert said and int(said[1]) >= 512, info["message"]
        job = home / "jobs" / "j1"
        assert "Traceback" not in (job / "supervisor.log").read_text()
        if info["message"].startswith("the supervisor could not write what it needs: "):
            # The database took the last room before the launch: how many pages its start writes varies (a
            # supervisor whose submit was slow, on a loaded machine, records itself: one more transaction).
            assert not (job / "launcher.log").exists() and not (job / "ranks" / "rank-0.json").exists()
            return
        launcher = (job / "launcher.log").read_text()
        assert "Traceback" not in launcher
        assert (f"dtrain: rank 0 was stopped: its record {home}/jobs/j1/ranks/rank-0.json could not be written: "
                f"No space left on device") in launcher


@pytest.mark.slow  # a job filling a 24 MiB tmpfs with its log: about 6 s
def test_a_job_whose_log_fills_the_home_disk_fails_once_saying_what_to_free(tmp_path):
    """The rank whose log met the full disk was stopped, then the supervisor died recording a restart
    on it: "lost ... killed, or the machine restarted". Now the job fails at once (a restart would meet
    the same full disk; Kubernetes evicts such a pod, saying why), recorded, naming the disk and the
    logs to delete; `dtrain logs` shows what was written."""
    with tmpfs(tmp_path / "disk", f"size={db.RESERVE_FROM + (8 << 20)}") as disk:
        dt = Dtrain(disk / "home")
        dt("submit", "j1", "--max-restarts", "2", "--", sys.executable, "-c",
           "for i in range(10**6): print('line', i, 'x' * 200, flush=True)")
        info = dt.wait_for("j1", {"Failed", "Succeeded"})
        home, logs = dt.home, dt.home / "jobs" / "j1" / "logs"
        assert info["status"] == "Failed" and info["restarts"] == 0, info
        message = info["message"]
        assert message.startswith(f"rank 0 was stopped (exit code 143) because its log could not be written: No space "
                                  f"left on device "
                                  f"({logs}/rank-0.log); the disk holding {home} is full (")
        assert (f"free space there (df -h {home}); the largest job logs there are job 'j1''s, ") in message
        assert message.endswith(f" MiB (rm -r {logs}, or 'dtrain delete j1 --purge' once it has ended), then submit "
                                f"the job again; see 'dtrain logs j1 --rank 0'")
        assert [e["status"] for e in dt.json("describe", "job", "j1")["events"]] == ["Pending", "Running", "Failed"]
        shown = dt("logs", "j1").stdout.splitlines()
        assert shown[0].startswith("line 0 x") and len(shown) > 1000
        assert "Traceback" not in (home / "jobs" / "j1" / "supervisor.log").read_text()


def test_a_supervisor_write_the_disk_refuses_fails_the_job_naming_it_without_a_traceback(store, tmp_path,
                                                                                         monkeypatch, capsys):
    """A write the supervisor needed (launcher.json, an event) refused for want of room went to main's
    catch-all: "supervisor error: ..." and a re-raised traceback, or, with the database's write refused
    too, nothing recorded and the job read "killed, or the machine restarted"."""
    from dtrain.backends.local import supervisor
    from dtrain.spec import JobSpec

    store.insert_job(JobSpec(name="j", command=("true",)), cwd=str(tmp_path), node="here")
    (tmp_path / "jobs" / "j" / "logs").mkdir(parents=True)
    refused = tmp_path / "jobs" / "j" / "launcher.json"

    def run(self):
        self.owner = True
        raise OSError(errno.ENOSPC, "No space left on device", str(refused))

    monkeypatch.setattr(supervisor.Supervisor, "run", run)
    assert supervisor.main([str(tmp_path), "j"]) == 1
    row = store.job("j")
    assert row["status"] == "Failed"
    assert row["message"] == (f"the supervisor could not write what it needs: No space left on device ({refused}); "
                              f"the disk holding {tmp_path} refused it: free space there (df -h {tmp_path}), then "
                              f"submit the job again")
    assert capsys.readouterr().err == ""
