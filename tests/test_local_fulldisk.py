"""A local job on a full home disk: each way it ends names the disk, what is free there and what to
delete, in one line, and a job lost there says so once space is freed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import Dtrain, fill, job_store, tmpfs

from dtrain import Client, JobSpec
from dtrain.backends.local.cgroups import support
from dtrain.backends.local.ranks import supervisor_token
from dtrain.procs import Ident


def _fill_but(disk, kib: int) -> None:
    """Fill the disk of `disk`, then give back `kib` KiB of it."""
    fill(disk)
    os.truncate(disk / "fill", (disk / "fill").stat().st_size - kib * 1024)


def _disk(tmp_path):
    return tmpfs(tmp_path / "disk", "size=24m")  # more than db.RESERVE_FROM: the home keeps its reserve


@pytest.mark.slow  # a filled tmpfs and a job run: about 4 s
@pytest.mark.skipif(not support().enforced, reason="no cgroup delegation here: --memory is advisory")
def test_a_limited_ranks_record_refused_before_its_command_starts_is_one_line(tmp_path):
    """With --memory (or --cpu) a rank records its cgroup before its command starts; a full disk refusing
    that record left a Python traceback in launcher.log (and the rank's cgroup behind). Now one line
    names the record, the disk's free space and what to do, and the job fails naming the disk."""
    with _disk(tmp_path) as disk:
        dt = Dtrain(disk / "home")
        dt("list", "jobs")  # makes the home and its reserve
        _fill_but(disk, 72)
        dt("submit", "j1", "--memory", "1Gi", "--", sys.executable, "-c", "print('hi')")
        info = dt.wait_for("j1", {"Failed", "Succeeded"})
        home = dt.home
        assert info["status"] == "Failed" and f"the disk holding {home} is full (" in info["message"], info["message"]
        launcher = (home / "jobs" / "j1" / "launcher.log").read_text()
        assert "Traceback" not in launcher, launcher
        said = [line for line in launcher.splitlines() if line.startswith("dtrain: rank 0")]
        assert len(said) == 1 and said[0].startswith(
            f"dtrain: rank 0 was not started: its record {home}/jobs/j1/ranks/rank-0.json could not be written: "
            f"No space left on device; the disk holding {home} is full ("), launcher
        assert said[0].endswith(f" KiB free): free space there (df -h {home}), then submit the job again")
        assert not [p for _, base in support().bases for p in base.glob("dtrain-j1-*")]  # its cgroup removed


@pytest.mark.slow  # a filled tmpfs and a job run: about 4 s
def test_a_failure_of_its_own_on_a_full_disk_says_why_its_restarts_were_not_tried(tmp_path):
    """A job that exited 3 with --max-restarts 2 while the home had under 1 MiB free ended Failed with
    no restart tried, its message naming the disk but not that it was why the restarts were skipped."""
    with _disk(tmp_path) as disk:
        dt = Dtrain(disk / "home")
        dt("list", "jobs")
        _fill_but(disk, 500)
        dt("submit", "j1", "--max-restarts", "2", "--", sys.executable, "-c", "raise SystemExit(3)")
        info = dt.wait_for("j1", {"Failed", "Succeeded"})
        home = dt.home
        assert info["status"] == "Failed" and info["restarts"] == 0, info
        assert info["message"].startswith(
            f"rank 0 exited (exit code 3); see 'dtrain logs j1 --rank 0'; not restarted (2 of --max-restarts 2 "
            f"left), as a restart would meet the full disk: the disk holding {home} is full ("), info["message"]
        assert info["message"].endswith("then submit the job again")


def _lost_job(home, launcher_log: str):
    """A Running job whose supervisor is gone, with `launcher_log` as its launcher.log; the disk has room."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = Ident.of(os.getpid())._replace(pid=dead.pid)
    with job_store(home) as store:
        store.insert_job(JobSpec(name="j1", command=("true",)), cwd="/", node="here")
        assert store.set_status("j1", "Running", "started on CPU")
        store.update("j1", supervisor_pid=gone.pid, supervisor_start=supervisor_token(gone))
    (home / "jobs" / "j1").mkdir(parents=True, exist_ok=True)
    (home / "jobs" / "j1" / "launcher.log").write_text(launcher_log)
    return gone.pid


_REFUSED = ("dtrain: rank 0 was stopped: its record /h/jobs/j1/ranks/rank-0.json could not be written: "
            "No space left on device; the disk holding /h is full (0 KiB free): free space there (df -h /h), "
            "then submit the job again\n")


def test_a_job_lost_on_a_full_disk_says_so_after_space_is_freed(home):
    """Its supervisor died unable to record anything on the full disk; once space was freed the job read
    "killed, or the machine restarted", though its launcher.log said the disk had refused a write."""
    pid = _lost_job(home, "--- attempt 0: rankrun\n" + _REFUSED)
    message = Client(home=home).get("j1").message
    assert message == (f"lost: its supervisor (pid {pid}) is gone: most likely a write it needed failed on the "
                       f"home disk, full then (launcher.log says: {_REFUSED.strip()}); no restarts left "
                       f"(--max-restarts 0)")


def test_a_job_lost_with_nothing_saying_the_disk_was_full_keeps_its_words(home):
    """An earlier attempt's full disk, survived, is not what ended the last one."""
    _lost_job(home, "--- attempt 0: rankrun\n" + _REFUSED + "--- attempt 1: rankrun\n")
    message = Client(home=home).get("j1").message
    assert "is gone: killed, or the machine restarted" in message and "full" not in message, message


def test_a_long_refused_line_is_quoted_cut_visibly_on_one_line(home):
    """The launcher.log line quoted in "full then" was cut at 300 characters with nothing saying how
    much was left out."""
    line = _REFUSED.strip() + " " + "x" * 500
    pid = _lost_job(home, "--- attempt 0: rankrun\n" + line + "\n")
    message = Client(home=home).get("j1").message
    assert message == (f"lost: its supervisor (pid {pid}) is gone: most likely a write it needed failed on the "
                       f"home disk, full then (launcher.log says: {line[:300]}... ({len(line) - 300} more "
                       f"characters)); no restarts left (--max-restarts 0)")


def test_a_refused_line_whose_cause_comes_late_keeps_the_cause(home):
    """A line naming a long path before its errno was cut at 300 characters: the quote kept the path
    and lost 'No space left on device', the words that say why. Its middle is cut instead."""
    deep = "/h/jobs/j1/work/" + "/".join(["checkpoints-of-the-long-run"] * 16) + "/epoch-7.pt"
    line = f"dtrain: rank 0 could not write {deep}: [Errno 28] No space left on device (1 more rank waits)"
    pid = _lost_job(home, "--- attempt 0: rankrun\n" + line + "\n")
    message = Client(home=home).get("j1").message
    start = line.index("No space") - 40
    end = line.index(" (1 more rank")
    head = 300 - (end - start)
    assert message == (f"lost: its supervisor (pid {pid}) is gone: most likely a write it needed failed on the "
                       f"home disk, full then (launcher.log says: {line[:head]}... ({start - head} more characters) "
                       f"...{line[start:end]}... ({len(line) - end} more characters)); no restarts left "
                       f"(--max-restarts 0)")
    assert "[Errno 28] No space left on device..." in message


def test_a_job_lost_having_written_nothing_on_a_full_disk_says_so_after_space_is_freed(tmp_path):
    """A supervisor started on a full home disk wrote nothing at all: supervisor.log and launcher.log
    were made, and their first line refused. Once space was freed, its job read "killed, or the machine
    restarted"."""
    with tmpfs(tmp_path / "disk", "size=8m") as disk:
        home = disk / "home"
        home.mkdir()
        pid = _lost_job(home, "")
        fill(disk)
        for name in ("supervisor.log", "launcher.log"):  # a full disk still makes a file: it refuses its blocks
            (home / "jobs" / "j1" / name).touch()
        (disk / "fill").unlink()
        message = Client(home=home).get("j1").message
    assert message == (f"lost: its supervisor (pid {pid}) is gone: most likely a write it needed failed on the "
                       f"home disk, full then (launcher.log is empty: not even an attempt's first line could be "
                       f"written there); no restarts left (--max-restarts 0)")


def test_a_supervisor_whose_stderr_line_is_refused_too_goes_on_to_the_launcher(home, monkeypatch):
    """Where an attempt's log starts could not be recorded (a full disk), the supervisor printed so to its
    supervisor.log, on the same full disk: that print raised and ended the supervisor before launcher.log
    existed, so the job read 'killed, or the machine restarted' with no sign of the disk."""
    import errno

    from dtrain.backends.local import supervisor
    from dtrain.backends.local.ranks import LogRefused

    def full(*_args, **_kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    class FullFile:
        write = flush = staticmethod(full)

    with job_store(home) as store:
        store.insert_job(JobSpec(name="full", command=("true",)), cwd="/", node="this-host")
    sup = supervisor.Supervisor(home, "full")
    monkeypatch.setattr(supervisor, "record_log_starts", full)
    monkeypatch.setattr(supervisor, "open_log", lambda *_: (_ for _ in ()).throw(LogRefused("launcher.log: no room")))
    monkeypatch.setattr(sys, "stderr", FullFile())
    assert sup._run_once([], [], 1) == 127  # on to launcher.log, whose refusal the job's failure then names
    assert sup.refused == "the launcher was not started: launcher.log: no room"


@pytest.mark.parametrize("filler", ["x", "é"])
def test_a_refused_line_longer_than_the_tail_read_is_marked_cut_at_its_front(home, filler):
    """Only launcher.log's last 8 KiB are read: a longer line was quoted from the middle, its front cut
    with no mark. Now its start says how many characters (not bytes) were left out there."""
    head = "--- attempt 0: rankrun\n"
    refused = _REFUSED.strip()
    pad = " " if (len(refused.encode()) + 1) % 2 else ""  # the read begins between two characters of é
    line = filler * 9000 + pad + refused  # over 8 KiB
    pid = _lost_job(home, head + line + "\n")
    size = len((head + line + "\n").encode())
    before = size - 8192 - len(head.encode())  # bytes of the line before the read
    unread = len(line.encode()[:before].decode())  # as characters
    rest = line[unread:]
    message = Client(home=home).get("j1").message
    # the cause's words, at the line's end, stay: its middle is cut (they were cut off with it)
    start = rest.index("No space left on device") - 40
    end = start + 40 + len("No space left on device")
    head = 300 - (end - start)
    assert message == (f"lost: its supervisor (pid {pid}) is gone: most likely a write it needed failed on the "
                       f"home disk, full then (launcher.log says: ({unread} more characters) ...{rest[:head]}... "
                       f"({start - head} more characters) ...{rest[start:end]}... ({len(rest) - end} more "
                       f"characters)); no restarts left (--max-restarts 0)"), message
    assert 0 < unread < len(line)


def test_a_refused_line_of_megabytes_says_over_how_much_was_cut(home):
    line = "x" * (2 << 20) + " " + _REFUSED.strip()
    _lost_job(home, "--- attempt 0: rankrun\n" + line + "\n")
    message = Client(home=home).get("j1").message
    assert "(launcher.log says: (over 1048576 more characters) ...xxx" in message, message[:400]


def test_a_refused_line_the_tail_read_begins_at_is_not_marked_at_its_front(home):
    line = _REFUSED.strip() + " " + "z" * (8191 - len(_REFUSED))  # with its newline, the last 8 KiB exactly
    _lost_job(home, "--- attempt 0: rankrun\n" + "y" * 50 + "\n" + line + "\n")
    message = Client(home=home).get("j1").message
    assert f"(launcher.log says: {line[:300]}... ({len(line) - 300} more characters));" in message, message
