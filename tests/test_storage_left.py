"""Left open by the storage round: a name beginning with '-' on a verb whose names are optional, a
snapshot or volume deleted on a full home disk, and hints that dropped -p/--backend."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from conftest import Dtrain, assert_usage_error, fill, tmpfs

from dtrain import db
from dtrain.names import NAME_RULE
from dtrain.storage.engine import Engine
from dtrain.storage.volumes import Storage


@pytest.mark.parametrize("words", [("delete", "-x"), ("delete", "job", "-x"), ("delete", "a", "-x"),
                                   ("suspend", "-x"), ("resume", "-x"), ("describe", "a", "-x"),
                                   ("snapshot", "verify", "-x"), ("snapshot", "wait", "a", "-x")])
def test_a_name_beginning_with_a_dash_meets_the_naming_rule_where_names_are_optional(dt, words):
    """`dtrain delete -x` said argparse's 'unrecognized arguments: -x' (its names are nargs='*'),
    where `volume delete -x` names the rule."""
    proc = dt(*words, check=False)
    prog = " ".join(w for w in ("dtrain", *words[:2]) if w not in ("a", "job", "-x"))
    assert_usage_error(proc, f"'-x' is neither an option of '{prog}' nor a name: names are {NAME_RULE}",
                       f"(see '{prog} --help')")


def test_a_long_option_left_over_keeps_the_unrecognized_line_and_its_hints(dt):
    """A '--word' is an option's spelling: the verb's own hint still answers it."""
    assert_usage_error(dt("delete", "a", "--prge", check=False), "unrecognized arguments: --prge")
    assert_usage_error(dt("list", "-x", check=False), "unrecognized arguments: -x")  # `list` takes no name


# ---- a delete on a full home disk -------------------------------------------------------------
def _reserve(home: Path) -> int:
    """The bytes the home's reserve holds on its disk (0: none)."""
    path = home / db.RESERVE
    return path.stat().st_blocks * 512 if path.exists() else 0


def test_a_snapshot_or_volume_delete_frees_a_full_home_disk(tmp_path):
    """`snapshot delete` on a full home disk was refused: the state database could not be opened
    (its -wal and -shm files) or written, so dtrain could not free the space itself. The home keeps
    a reserve that the delete gives up first; it is made again once there is room."""
    with tmpfs(tmp_path / "disk", f"size={db.RESERVE_FROM + (8 << 20)}") as disk:
        dt = Dtrain(disk / "home")
        dt("volume", "create", "data", "--size", "1Mi")
        (dt.home / "volumes" / "data" / "data" / "w.bin").write_bytes(os.urandom(2_000_000))
        dt("snapshot", "create", "data", "--name", "s1")
        assert _reserve(dt.home) == db.RESERVE_BYTES
        fill(disk)
        freed = dt.json("snapshot", "delete", "s1")
        assert freed["snapshot"] == "s1" and freed["bytes"] >= 2_000_000
        assert dt.json("snapshot", "list", "--json") == []
        (disk / "fill").unlink()
        assert dt.json("volume", "list", "--json")[0]["name"] == "data"  # a storage command makes it again
        assert _reserve(dt.home) == db.RESERVE_BYTES
        fill(disk)
        dt("volume", "delete", "data")
        assert dt.json("volume", "list", "--json") == []
        assert "data" not in os.listdir(dt.home / "volumes")


def test_a_reserve_lost_or_cut_short_by_a_crash_is_made_again(tmp_path):
    """Killed after giving the reserve up, or while making it: nothing is stored in it, and the
    next storage command makes it whole again (where the disk has room)."""
    dt = Dtrain(tmp_path / "home")
    dt("volume", "create", "data")
    (dt.home / db.RESERVE).unlink()
    dt("volume", "list")
    assert _reserve(dt.home) == db.RESERVE_BYTES
    os.truncate(dt.home / db.RESERVE, 0)
    dt("snapshot", "list")
    assert _reserve(dt.home) == db.RESERVE_BYTES


def test_a_reserve_takes_no_room_from_a_small_disk(tmp_path):
    """Never more than 1/16 of what is free: a home on a small disk gets none."""
    with tmpfs(tmp_path / "disk", "size=4m") as disk:
        dt = Dtrain(disk / "home")
        dt("volume", "create", "data")
        assert _reserve(dt.home) == 0


# ---- hints carry -p / --backend --------------------------------------------------------------
def test_no_job_named_names_the_list_command_with_the_project_and_backend_given(dt):
    """"no job named X; see 'dtrain list jobs'" dropped -p and --backend: that command listed
    another project's jobs, or another backend's."""
    dt("project", "create", "team")
    assert_usage_error(dt("delete", "nope", "-p", "team", check=False),
                       "no job named 'nope'; see 'dtrain list jobs -p team' for the jobs there are")
    assert_usage_error(dt("logs", "nope", check=False), "see 'dtrain list jobs' for the jobs there are")
    dt("config", "backend", "kubernetes")
    assert_usage_error(dt("--backend", "local", "describe", "nope", check=False),
                       "see 'dtrain --backend local list jobs' for the jobs there are")


class _FillsOnSweep(Engine):
    """An engine whose sweep meets a full disk once `full` is set (index.db's write refused)."""
    full = False

    def sweep(self, live_ids, *, force=False):
        if self.full:
            raise sqlite3.OperationalError("database or disk is full")
        return super().sweep(live_ids, force=force)


def test_a_sweep_refused_for_room_leaves_the_snapshot_deleted_and_its_freeing_requested(tmp_path):
    """With the row gone, a sweep the disk refused made the delete fail with "nothing stored was
    changed", which was untrue: it is deleted, and the next command with room frees its data."""
    home = tmp_path / "home"
    storage = Storage(home, engine=_FillsOnSweep(home / "store"))
    (storage.create_volume("data").path / "w.bin").write_bytes(os.urandom(100_000))
    storage.create_snapshot("data", name="s1")
    storage.engine.full = True
    freed = storage.delete_snapshot("s1")
    assert freed.pending and freed.bytes == 0 and storage.list_snapshots() == []
    assert (home / "store" / "sweep-pending").exists()
    storage.close()
    again = Storage(home)
    assert again.verify().garbage_bytes >= 100_000  # the requested sweep frees it
    again.close()
