"""Crash injection (audit 9): a process killed at a chosen step of a storage or job-log
operation leaves nothing behind that the next operation does not tidy."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import DTRAIN

from dtrain.backends.local.joblogs import copy_job_logs


def _job_dir(tmp_path: Path) -> Path:
    job_dir = tmp_path / "jobs" / "j1"
    (job_dir / "logs").mkdir(parents=True)
    (job_dir / "launcher.log").write_text("launch\n")
    for rank in range(3):
        (job_dir / "logs" / f"rank-{rank}.log").write_text(f"rank {rank}\n" * 100)
    return job_dir


def _copy_killed(job_dir: Path, volume: Path, *, step: str) -> None:
    """copy_job_logs in a child that dies (os._exit, as SIGKILL: no cleanup runs) at `step`:
    'copy' after the first file is copied, 'swap' once the earlier copy was moved aside."""
    code = textwrap.dedent(f"""
        import os, sys
        from dtrain.backends.local import joblogs
        step = {step!r}
        if step == "copy":
            real = joblogs._copy
            def dying(*a):
                real(*a)
                os._exit(137)
            joblogs._copy = dying
        else:
            real_rename = os.rename
            calls = []
            def dying(src, dst, **kw):
                real_rename(src, dst, **kw)
                calls.append(dst)
                if str(src) == "j1":  # the earlier copy moved aside, the new one not yet in place
                    os._exit(137)
            joblogs.os.rename = dying
        joblogs.copy_job_logs({str(job_dir)!r}, {str(volume)!r}, "j1")
        sys.exit(0)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 137, proc.stderr


@pytest.mark.parametrize("step", ["copy", "swap"])
def test_job_logs_copy_killed_midway_leaves_nothing_once_copied_again(tmp_path, step):
    job_dir = _job_dir(tmp_path)
    volume = tmp_path / "vol"
    volume.mkdir()
    copy_job_logs(job_dir, volume, "j1")  # an earlier copy (a first snapshot)
    _copy_killed(job_dir, volume, step=step)
    logs = volume / ".dtrain" / "logs"
    assert sorted(os.listdir(logs)) != ["j1"]  # the kill left its folders (else the test tests nothing)
    (job_dir / "logs" / "rank-0.log").write_text("later\n")
    copy_job_logs(job_dir, volume, "j1")  # the retry: `dtrain snapshot create VOL --job j1`
    assert sorted(os.listdir(logs)) == ["j1"]
    assert (logs / "j1" / "rank-0.log").read_text() == "later\n"


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
