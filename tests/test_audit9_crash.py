"""Crash injection (audit 9): a process killed at a chosen step of a storage or job-log
operation leaves nothing behind that the next operation does not tidy."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import DTRAIN



def _cli(env, *args):
    return subprocess.run([DTRAIN, *args], capture_output=True, text=True, env=env, timeout=120)


def test_a_users_dot_folders_in_the_volume_root_are_neither_deleted_nor_a_traceback(tmp_path):
    env = {**os.environ, "DTRAIN_HOME": str(tmp_path / "home")}
    assert _cli(env, "volume", "create", "a").returncode == 0
    root = tmp_path / "home" / "volumes"
    mine = [root / ".bak-2024-x", root / ".backup-20240101123456-x", root / ".tmp-4000000-notmine"]
    for folder in mine:
        (folder / "data").mkdir(parents=True)
        (folder / "data" / "keep.txt").write_text("mine\n")
    dead = root / ".tmp-4194303-0123abcd"  # a killed restore's staging folder (no such pid)
    dead.mkdir()
    for args in (("volume", "create", "b"), ("snapshot", "create", "a", "--name", "s"),
                 ("snapshot", "restore", "s", "--to", "c"), ("snapshot", "verify")):
        proc = _cli(env, *args)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert all((folder / "data" / "keep.txt").read_text() == "mine\n" for folder in mine)
    assert not dead.exists()
