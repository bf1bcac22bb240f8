"""The state database under concurrent first use, and a state file SQLite cannot use."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import subprocess

import pytest

from conftest import DTRAIN, assert_usage_error, tmpfs
from dtrain import db
from dtrain.errors import DtrainError


def _open(path: str, barrier, results) -> None:
    barrier.wait()
    try:
        conn = db.connect(path)
        conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        conn.close()
        results.put(mode)
    except Exception as err:  # reported, not raised: the parent counts them
        results.put(repr(err))


@pytest.mark.slow
def test_processes_opening_a_new_database_at_once_all_get_it_in_wal_mode(tmp_path):
    """Twelve processes open the same fresh database at the same instant (as six `dtrain submit`
    in a new home do), forty times over. Switching to WAL takes the exclusive lock, and SQLite
    refuses it at once, without waiting, to one that holds the shared lock while another waits:
    before `connect` retried that, about one database in fifteen left a process with
    "database is locked"."""
    ctx = multiprocessing.get_context("fork")
    outcomes = []
    for trial in range(40):
        path = str(tmp_path / f"{trial}.db")
        barrier, results = ctx.Barrier(12), ctx.Queue()
        procs = [ctx.Process(target=_open, args=(path, barrier, results)) for _ in range(12)]
        for p in procs:
            p.start()
        outcomes += [results.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
    assert outcomes.count("wal") == len(outcomes), sorted(set(outcomes))


def _dtrain_list(home):
    return subprocess.run([DTRAIN, "list"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "DTRAIN_HOME": str(home)})


def test_a_state_file_that_is_no_database_is_one_line_and_left_as_it_was(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "state.db").write_bytes(b"garbage\n")
    assert_usage_error(_dtrain_list(home), f"{home / 'state.db'} is not an SQLite database: put back a copy of it if you keep one, or move it away",
                       "DTRAIN_HOME")
    assert (home / "state.db").read_bytes() == b"garbage\n"
    assert sorted(p.name for p in home.iterdir()) == ["state.db"]  # no -wal, no -shm beside it


def test_a_folder_or_a_dangling_link_where_the_state_file_goes_is_one_line_error(tmp_path):
    folder = tmp_path / "a"
    (folder / "state.db").mkdir(parents=True)
    assert_usage_error(_dtrain_list(folder), "state.db is a folder, not a database file")
    assert list((folder / "state.db").iterdir()) == []
    linked = tmp_path / "b"
    linked.mkdir()
    (linked / "state.db").symlink_to(linked / "elsewhere.db")  # its folder exists: SQLite would make it
    assert_usage_error(_dtrain_list(linked), "is a symbolic link to", "which does not exist")
    assert not (linked / "elsewhere.db").exists() and (linked / "state.db").is_symlink()


def test_a_home_where_no_database_can_be_made_is_one_line_error():
    assert_usage_error(_dtrain_list("/proc/self"), "cannot open or create the database", "DTRAIN_HOME")


def test_a_database_damaged_past_its_header_is_one_line_error(tmp_path):
    home = tmp_path / "home"
    assert _dtrain_list(home).returncode == 0
    conn = sqlite3.connect(home / "state.db")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    with open(home / "state.db", "r+b") as f:  # the header stays: opening works, reading the jobs does not
        f.seek(4096)
        f.write(b"\xff" * 8192)
    assert_usage_error(_dtrain_list(home), "is damaged", "database disk image is malformed")


def test_connect_names_the_file_in_a_dtrain_error(tmp_path):
    (tmp_path / "x.db").write_text("not sqlite at all, but long enough to have a header of sorts" * 4)
    with pytest.raises(DtrainError, match="x.db is not an SQLite database"):
        db.connect(tmp_path / "x.db")


def test_a_damaged_snapshot_index_is_named_as_such_not_moved_away(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "index.db").write_text("not sqlite at all, but long enough to have a header of sorts" * 4)
    with pytest.raises(DtrainError, match="index.db is not an SQLite database: it is the snapshot store's index") as got:
        db.connect(store / "index.db")
    assert "put back a copy" in str(got.value) and "move it away, or" not in str(got.value)


def test_a_home_on_a_disk_without_free_inodes_says_so(tmp_path):
    with tmpfs(tmp_path / "disk", "size=4m,nr_inodes=8") as disk:
        (disk / "home").mkdir()
        n = 0
        while True:  # use up every inode
            try:
                (disk / f"f{n}").touch()
            except OSError:
                break
            n += 1
        assert_usage_error(_dtrain_list(disk / "home"), "has no free inodes", "df -i")
        assert_usage_error(_dtrain_list(disk / "home" / "deeper"), "No space left on device; free space on that disk")
