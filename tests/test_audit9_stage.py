"""Local storage: a killed process's staging folders are judged by pid *and* start time (a reused
pid keeps nothing for good); `snapshot verify` checks what is stored on a full disk."""

from __future__ import annotations

import os

from conftest import Dtrain, fill, tmpfs


def test_snapshot_verify_checks_what_is_stored_on_a_full_home_disk(tmp_path):
    """verify tidied leftovers first (a write transaction on state.db, a sweep of index.db), so on
    a full disk it refused with "the state database could not be opened or written", though a
    check only reads. Now it checks, reports, and changes nothing."""
    with tmpfs(tmp_path / "disk", "size=3m") as disk:
        dt = Dtrain(disk / "home")
        dt("volume", "create", "data", "--size", "1Mi")
        (dt.home / "volumes" / "data" / "data" / "weights.bin").write_bytes(os.urandom(50_000))
        dt("snapshot", "create", "data", "--name", "first")
        dbs = {p: p.read_bytes() for p in (dt.home / "state.db", dt.home / "store" / "index.db")}
        assert not any(p.with_name(p.name + "-wal").exists() for p in dbs)  # all in the main files
        fill(disk)
        try:
            report = dt.json("snapshot", "verify", "first")
            assert report["ok"] and report["snapshots"] == ["first"] and report["objects"] >= 1
            assert dt.json("snapshot", "verify")["ok"]
            assert "first" in dt("snapshot", "list").stdout and "data" in dt("volume", "list").stdout
            assert dt.json("snapshot", "describe", "first")["name"] == "first"
            assert {p: p.read_bytes() for p in dbs} == dbs
        finally:
            (disk / "fill").unlink()
        assert dt.json("snapshot", "verify", "first")["ok"]  # with room again: as ever


def _sleeper():
    """A live process unrelated to dtrain (as one holding a killed restore's pid after a reboot)."""
    import subprocess

    proc = subprocess.Popen(["sleep", "300"])
    from dtrain import procs
    for _ in range(100):
        if (start := procs.start_time(proc.pid)) is not None:
            return proc, start, procs.boot_id()[:8]
    raise AssertionError("sleep did not start")


def test_a_killed_restores_staging_folder_is_removed_though_its_pid_now_names_another_process(tmp_path):
    """Leftovers were judged by pid alone: one whose pid a long-lived process reused (after a
    reboot, a wrap) stayed, volume-sized, until that process ended. Their names now carry the
    maker's start time and boot: another start time or boot is another process, so the leftover
    goes; the same one is work in progress and stays; a name of an older dtrain (the pid alone)
    is judged by the pid, as before."""
    dt = Dtrain(tmp_path / "home")
    dt("volume", "create", "a")
    root, proc = dt.home / "volumes", None
    try:
        proc, start, boot = _sleeper()
        pid, other_boot = proc.pid, "0" * 8 if boot != "0" * 8 else "1" * 8
        reused = [root / f".restore-{pid}.{int(start) + 1}.{boot}-0123abcd",  # the pid, another start time
                  root / f".tmp-{pid}.{start}.{other_boot}-0123abcd",  # ... the same start time in another boot
                  root / f".deleting-{pid}.{int(start) + 7}.{boot}-{'e' * 32}",
                  root / "a" / f".restore-{pid}.{int(start) + 1}.{boot}-89abcdef"]  # in a volume's folder
        running = [root / f".restore-{pid}.{start}.{boot}-0123abcd",  # the process that made it runs
                   root / f".tmp-{pid}-0123abcd"]  # an older dtrain's name: its pid runs
        for folder in reused + running:
            (folder / "data").mkdir(parents=True)
            (folder / "data" / "weights.bin").write_bytes(b"w" * 4096)
        dt("volume", "create", "b")  # tidies what killed processes left
        assert [f.name for f in reused if f.exists()] == []
        assert [f.name for f in running if not f.exists()] == []
        assert (root / "a" / "data").is_dir() and (root / "b" / "data").is_dir()
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
    dt("volume", "create", "c")  # the sleep is gone: its leftovers too
    assert [f.name for f in running if f.exists()] == []


def test_a_killed_job_log_copy_is_removed_though_its_pid_now_names_another_process(tmp_path):
    from dtrain.backends.local.joblogs import copy_job_logs

    job_dir = tmp_path / "jobs" / "j1"
    (job_dir / "logs").mkdir(parents=True)
    (job_dir / "logs" / "rank-0.log").write_text("now\n")
    logs = tmp_path / "volume" / ".dtrain" / "logs"
    proc = None
    try:
        proc, start, boot = _sleeper()
        reused = [logs / f".j1.{proc.pid}.{int(start) + 1}.{boot}-0123456789ab.tmp",
                  logs / f".j1.{proc.pid}.{int(start) + 1}.{boot}-0123456789ab.old"]
        running = [logs / f".j1.{proc.pid}.{start}.{boot}-ba9876543210.tmp", logs / f".j1.{proc.pid}-0123456789ab.tmp"]
        for folder in reused + running:
            folder.mkdir(parents=True)
            (folder / "rank-0.log").write_text("earlier\n")
        copy_job_logs(job_dir, tmp_path / "volume", "j1")
        assert sorted(os.listdir(logs)) == sorted(["j1", *(f.name for f in running)])
        assert (logs / "j1" / "rank-0.log").read_text() == "now\n"
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
