"""A job leaves nothing behind outside its own folder: a stopped rank no cgroup (kernel cgroups
outlive the processes that made them, and a leftover folder stays until the machine restarts),
and a torchrun job no folder in the temporary directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import Dtrain
from dtrain.backends.local.cgroups import RankCgroup, support
from dtrain.backends.local.ranks import kill_ranks
from dtrain.procs import Ident

cgroups = pytest.mark.skipif(not support().enforced, reason="no cgroup delegation here: limits are advisory")

BUSY = "while True: pass"


def _cgroup(name: str) -> RankCgroup:
    cg = RankCgroup.create(f"dtrain-{name}-{os.getpid()}-{time.monotonic_ns()}", memory=64 << 20, cpu=1.0)
    assert cg is not None and all(folder.is_dir() for _c, folder in cg.paths)
    return cg


@cgroups
def test_killing_a_jobs_ranks_removes_their_cgroups_once_the_processes_are_down(tmp_path):
    """SIGKILL is delivered, not done: a folder removed right after it is still busy (rmdir says
    EBUSY) and used to be left behind for good."""
    job_dir = tmp_path / "job"
    (job_dir / "ranks").mkdir(parents=True)
    cgroups, procs = [], []
    for rank in range(3):
        cg = RankCgroup.create(f"dtrain-job-a{time.monotonic_ns()}-r{rank}-{os.getpid()}", memory=64 << 20, cpu=1.0)
        assert cg is not None  # named as rankrun names a rank cgroup of job 'job' (kill_ranks takes no other)
        proc = subprocess.Popen([sys.executable, "-c", BUSY], preexec_fn=cg.join)
        cgroups.append(cg)
        procs.append(proc)
        record = {"rank": rank, "status": "Running", **Ident.of(proc.pid).to_record(),
                  "cgroup": {"mode": cg.mode, "paths": [[c, str(p)] for c, p in cg.paths]}}
        (job_dir / "ranks" / f"rank-{rank}.json").write_text(json.dumps(record))
    try:
        for cg, proc in zip(cgroups, procs):
            deadline = time.monotonic() + 10
            while proc.pid not in cg.pids() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert cg.pids() == [proc.pid]
        kill_ranks(job_dir)
        for proc in procs:
            assert proc.wait(timeout=10) == -signal.SIGKILL
        left = [str(folder) for cg in cgroups for _c, folder in cg.paths if folder.exists()]
        assert left == []
    finally:
        for cg, proc in zip(cgroups, procs):
            proc.kill()
            proc.wait()
            cg.remove(wait_s=2)


def test_a_rank_record_names_only_its_own_rank_cgroup():
    """A job can rewrite its rank records: one naming another cgroup (another job's, a folder outside
    /sys/fs/cgroup holding a cgroup.procs of its choosing) would have steered delete's SIGKILL."""
    from dtrain.backends.local.ranks import rank_cgroup

    def record(path: str, rank: int = 1) -> dict:
        return {"rank": rank, "cgroup": {"mode": "v1", "paths": [["memory", path]]}}

    own = "/sys/fs/cgroup/memory/dtrain-train-a0-r1-123"
    assert rank_cgroup(record(own), "train").paths == (("memory", Path(own)),)
    for path in ("/tmp/dtrain-train-a0-r1-123", "/sys/fs/cgroup/memory/dtrain-other-a0-r1-123",
                 "/sys/fs/cgroup/memory/dtrain-train-a0-r2-123", "/sys/fs/cgroup/memory/../../../tmp/dtrain-train-a0-r1-1",
                 "/sys/fs/cgroup/memory/user.slice", "sys/fs/cgroup/memory/dtrain-train-a0-r1-123"):
        assert rank_cgroup(record(path), "train") is None, path
    assert rank_cgroup({"rank": 1, "cgroup": {"paths": "x"}}, "train") is None
    assert rank_cgroup({"rank": 1, "cgroup": {"paths": [3, [1, 2]]}}, "train") is None


@cgroups
def test_remove_waits_only_as_long_as_it_is_told_for_a_process_that_stays(tmp_path):
    cg = _cgroup("stays")
    proc = subprocess.Popen([sys.executable, "-c", BUSY], preexec_fn=cg.join)
    try:
        deadline = time.monotonic() + 10
        while not cg.pids() and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        assert cg.remove(wait_s=0.3) is False  # never kills: a live process keeps its cgroup
        assert 0.3 <= time.monotonic() - started < 5
        assert all(folder.is_dir() for _c, folder in cg.paths) and proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    assert cg.remove(wait_s=2) is True
    assert not any(folder.exists() for _c, folder in cg.paths)


STOP_IN_THE_GAP = """
import os, signal, sys
from dtrain.backends.local import rankrun
made = rankrun._cgroup
def stopped_right_after_creating(env, rank):
    cg = made(env, rank)
    print("CGROUP", *[str(p) for _c, p in cg.paths], flush=True)
    os.kill(os.getpid(), signal.SIGTERM)  # what `dtrain delete` sends, arriving in that gap
    return cg
rankrun._cgroup = stopped_right_after_creating
sys.exit(rankrun.main(sys.argv[1:]))
"""


@cgroups
def test_a_rank_stopped_before_its_command_starts_runs_nothing_and_removes_its_cgroup(tmp_path):
    job_dir, ran = tmp_path / "job", tmp_path / "ran"
    env = {**os.environ, "DTRAIN_CPU": "1.0", "DTRAIN_JOB_NAME": "gap", "RANK": "0", "WORLD_SIZE": "1"}
    out = subprocess.run([sys.executable, "-c", STOP_IN_THE_GAP, "--job-dir", str(job_dir), "--",
                          sys.executable, "-c", f"open({str(ran)!r}, 'w')"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 128 + signal.SIGTERM, out.stderr
    folders = [Path(p) for line in out.stdout.splitlines() if line.startswith("CGROUP ") for p in line.split()[1:]]
    assert folders and not any(f.exists() for f in folders)
    assert not ran.exists()  # the command never started
    record = json.loads((job_dir / "ranks" / "rank-0.json").read_text())
    assert (record["status"], record["exit_code"], record["signal"]) == ("Failed", 143, "SIGTERM")


@pytest.mark.slow
def test_a_torchrun_job_keeps_torchruns_folder_in_its_own(home, tmp_path):
    """torchrun makes a torchelastic_* folder in the temporary directory for every run and never
    removes it (2,413 of them had gathered in /tmp here); a job's goes in the job's folder."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    dt = Dtrain(home, env={"TMPDIR": str(tmp)})  # where torchrun would put its folder
    dt("submit-dist", "two", "--processes", "2", "--launcher", "torchrun", "--", sys.executable, "-c", "print('ok')")
    assert dt("wait", "two", "--timeout", "120").returncode == 0
    assert sorted(dt("logs", "two").stdout.split()) == ["0]", "1]", "[rank", "[rank", "ok", "ok"]
    assert not list(tmp.glob("torchelastic_*"))
    assert [p.name for p in (home / "jobs" / "two" / "torchelastic").iterdir()]  # torchrun's run folder
