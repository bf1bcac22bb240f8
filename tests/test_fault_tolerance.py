"""Faults injected into real local jobs: killed ranks, a killed supervisor, a simulated reboot with a
reused pid, children left behind, a failing rank among stopped ones, absurd sizes.

Each fault test prints what it injected and what it lost (pytest -s shows it); docs/reliability.md
quotes those figures.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import torch

from conftest import Dtrain, rank_record
from dtrain.training import read_metrics
from dtrain.training.checkpoint import CKPT_RE
from dtrain.workloads.cifar10.data import write_synthetic

CKPT_EVERY = 10


def wait_for_step(metrics: Path, step: int, timeout: float = 240) -> int:
    """Block until rank 0 has logged `step`; returns the newest step logged."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if metrics.exists():
            steps = [m["step"] for m in read_metrics(metrics) if "loss" in m]
            if steps and steps[-1] >= step:
                return steps[-1]
        time.sleep(0.05)
    raise AssertionError(f"{metrics} never reached step {step}")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_dead(pid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(pid):
        ps = subprocess.run(["ps", "-o", "pid,ppid,pgid,sid,stat,cmd", "-p", str(pid)], capture_output=True, text=True)
        raise AssertionError(f"process {pid} is still running:\n{ps.stdout}")


def lost_work(metrics: Path) -> int:
    """Steps done twice, from rank 0's metrics: the work a fault cost. A graceful stop checkpoints
    the step it stopped at (and a kill may land right after a checkpoint): then nothing is lost."""
    steps = [m["step"] for m in read_metrics(metrics) if "loss" in m]
    repeated = len(steps) - len(set(steps))
    assert sorted(set(steps)) == list(range(1, max(steps) + 1)), "a step was skipped"
    return repeated


def resumed_step(info: dict, *, saved: list[int] | None = None) -> int:
    """The step attempt 1 resumed from; 0 when no checkpoint existed yet (the workload then starts over
    and prints no resume line). `saved`, the steps checkpointed before the kill, rules out a missed one."""
    found = re.search(r"attempt 1: resumed from step (\d+)", events(info))
    if saved is not None and not saved and found is None:
        return 0
    assert found, events(info)
    step = int(found.group(1))
    assert step >= max(saved or [0]), (step, saved)
    return step


def saved_steps(folder: Path) -> list[int]:
    return [int(m.group(1)) for p in folder.glob("ckpt-*.pt") if (m := CKPT_RE.match(p.name))]


def events(info: dict) -> str:
    return "\n".join(e["message"] for e in info["events"])


@pytest.fixture(scope="module")
def cifar_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cifar")
    write_synthetic(root, fmt="python", n_train=2000, n_test=40, seed=4)
    return root


def cifar_cmd(data: Path, out: Path, *extra: str) -> list[str]:
    return ["python", "-m", "dtrain.workloads.cifar10", "train", "--data-dir", str(data), "--model-dir", str(out),
            "--epochs", "2", "--max-steps", "300", "--batch-size", "4", "--checkpoint-every", str(CKPT_EVERY), "--log-interval", "0", *extra]


# ------------------------------------------------------------------ killed rank, per workload


@pytest.mark.slow
def test_cifar10_rank_killed_at_a_random_step_resumes_within_one_interval(dt: Dtrain, cifar_data, tmp_path):
    rng = random.Random()
    target, victim = rng.randint(15, 150), rng.randint(0, 1)
    out = tmp_path / "model"
    dt("submit-dist", "c10", "--processes", "2", "--max-restarts", "1", "--", *cifar_cmd(cifar_data, out))
    wait_for_step(out / "metrics.jsonl", target)
    os.kill(rank_record(dt.home, "c10", victim)["pid"], signal.SIGKILL)
    info = dt.wait_for("c10", {"Succeeded", "Failed"}, timeout=400)
    assert info["status"] == "Succeeded", info["message"]
    lost, resumed = lost_work(out / "metrics.jsonl"), resumed_step(info)
    print(f"cifar10: SIGKILL rank {victim} near step {target}; resumed from step {resumed}, "
          f"lost {lost} steps (interval {CKPT_EVERY})")
    assert 0 <= lost <= CKPT_EVERY and resumed >= target - CKPT_EVERY
    assert f"attempt 0 failed: rank {victim} was killed by SIGKILL (exit code 137)" in events(info)
    assert info["restarts"] == 1
    assert (out / "model.pth").exists()


@pytest.fixture(scope="module")
def lanes_data(tmp_path_factory) -> Path:
    from dtrain.workloads.lanes import synth

    root = tmp_path_factory.mktemp("tusimple")
    synth.generate(root, frames_per_file={"label_data_0313.json": 48, "label_data_0601.json": 8,
                                          "label_data_0531.json": 4}, seed=3, test_frames=4)
    return root


@pytest.mark.slow
def test_lanes_rank_killed_at_a_random_step_ends_with_the_uninterrupted_weights(dt: Dtrain, lanes_data, tmp_path):
    rng = random.Random()
    target, victim = rng.randint(2, 9), rng.randint(0, 1)
    common = ["python", "-m", "dtrain.workloads.lanes", "train", "--recipe", "tiny", "--data-dir", str(lanes_data),
              "--max-steps", "12", "--batch-size", "2", "--checkpoint-every", "3", "--seed", "5"]
    env = ["-e", "NUM_WORKERS=0", "-e", "OMP_NUM_THREADS=1"]
    dt("submit-dist", "straight", "--processes", "2", *env, "--", *common, "--out-dir", str(tmp_path / "a"))
    dt("submit-dist", "lanes", "--processes", "2", "--max-restarts", "1", *env, "--",
       *common, "--out-dir", str(tmp_path / "b"))
    wait_for_step(tmp_path / "b" / "metrics.jsonl", target)
    saved = saved_steps(tmp_path / "b")  # listed before the kill: a checkpoint may still land in between
    os.kill(rank_record(dt.home, "lanes", victim)["pid"], signal.SIGKILL)
    for job in ("straight", "lanes"):
        info = dt.wait_for(job, {"Succeeded", "Failed"}, timeout=600)
        assert info["status"] == "Succeeded", info["message"]
    lost, resumed = lost_work(tmp_path / "b" / "metrics.jsonl"), resumed_step(info, saved=saved)
    print(f"lanes: SIGKILL rank {victim} near step {target}; resumed from step {resumed}, lost {lost} steps "
          f"(interval 3)")
    assert 0 <= lost <= 3 and resumed >= target - 3
    assert f"rank {victim} was killed by SIGKILL" in events(info)
    a = torch.load(tmp_path / "a" / "model.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "b" / "model.pt", weights_only=True)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ------------------------------------------------------------------ lost supervisor, reboot


def supervisor_pid(home: Path, job: str) -> int:
    with sqlite3.connect(home / "state.db") as conn:
        return conn.execute("SELECT supervisor_pid FROM jobs WHERE name=?", (job,)).fetchone()[0]


@pytest.mark.slow
def test_killed_supervisor_is_relaunched_from_the_checkpoint(dt: Dtrain, cifar_data, tmp_path):
    out = tmp_path / "model"
    dt("submit", "sup", "--max-restarts", "1", "--", *cifar_cmd(cifar_data, out))
    step = wait_for_step(out / "metrics.jsonl", 2 * CKPT_EVERY + 3)
    first = supervisor_pid(dt.home, "sup")
    rank = rank_record(dt.home, "sup", 0)["pid"]
    os.kill(first, signal.SIGKILL)
    wait_dead(rank)  # the launcher dies with its supervisor, the rank with its launcher
    info = dt.json("describe", "job", "sup")  # this command finds the supervisor gone and relaunches
    assert info["status"] == "Running" and "lost: its supervisor" in events(info) and "relaunching" in events(info)
    assert supervisor_pid(dt.home, "sup") != first
    info = dt.wait_for("sup", {"Succeeded", "Failed"}, timeout=400)
    assert info["status"] == "Succeeded", info["message"]
    lost, resumed = lost_work(out / "metrics.jsonl"), resumed_step(info)
    print(f"supervisor SIGKILL at step ~{step}: resumed from step {resumed}, lost {lost} steps "
          f"(interval {CKPT_EVERY})")
    assert lost <= CKPT_EVERY and resumed >= step - CKPT_EVERY


@pytest.mark.slow
def test_reboot_never_signals_a_process_that_reused_a_recorded_pid(dt: Dtrain, tmp_path):
    """All job processes die (as in a reboot); the recorded pids now belong to strangers started by this
    test. No later command may signal them; the job ends Failed ("lost") as it has no restarts."""
    dt("submit-dist", "rb", "--processes", "2", "--", "python", "-c", "import time; time.sleep(300)")
    recs = [rank_record(dt.home, "rb", r) for r in (0, 1)]
    job_dir = dt.home / "jobs" / "rb"
    os.kill(supervisor_pid(dt.home, "rb"), signal.SIGKILL)
    for rec in recs:
        wait_dead(rec["pid"])
    strangers = [subprocess.Popen(["sleep", "300"]) for _ in range(4)]
    try:
        # rank 0's records: a stranger's pid with the old start time (the pid was reused);
        # rank 1's: a stranger's pid AND its real start time, but from another boot.
        s0, s1, s2, s3 = (p.pid for p in strangers)
        start1 = Path(f"/proc/{s1}/stat").read_text().rsplit(")", 1)[1].split()[19]
        rewrite(job_dir / "ranks" / "rank-0.json", pid=s0, wrapper={**recs[0]["wrapper"], "pid": s2})
        rewrite(job_dir / "ranks" / "rank-1.json", pid=s1, start=start1, boot="another-boot", exit_code=None)
        rewrite(job_dir / "launcher.json", pid=s3)
        with sqlite3.connect(dt.home / "state.db") as conn:
            conn.execute("UPDATE jobs SET supervisor_pid=? WHERE name='rb'", (s2,))
        for args in (("list",), ("describe", "job", "rb"), ("logs", "rb"), ("delete", "rb"), ("list", "-A")):
            dt(*args)
            assert all(p.poll() is None for p in strangers), f"dtrain {' '.join(args)} signalled a stranger"
        info = dt.json("describe", "job", "rb")
        assert [e["status"] for e in info["events"]][-2:] == ["Failed", "Deleted"]
        assert "lost: its supervisor" in events(info) and info["status"] == "Deleted"
    finally:
        for p in strangers:
            p.kill()
            p.wait()


def rewrite(path: Path, **fields) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


# ------------------------------------------------------------------ F: children; G: which rank


def test_a_child_holding_the_output_open_does_not_keep_the_job_running(dt: Dtrain, tmp_path):
    pidfile = tmp_path / "child"
    dt("submit", "bg", "--", "sh", "-c", f"sleep 300 & echo $! > {pidfile}; echo started")
    info = dt.wait_for("bg", {"Succeeded", "Failed"}, timeout=60)
    assert info["status"] == "Succeeded" and "started" in dt("logs", "bg").stdout
    wait_dead(int(pidfile.read_text()))


@pytest.mark.slow
def test_delete_stops_the_whole_tree(dt: Dtrain, tmp_path):
    pidfile = tmp_path / "child"
    dt("submit-dist", "tree", "--processes", "2", "--", "sh", "-c",
       f"sleep 300 & echo $! > {pidfile}.$RANK; wait")
    deadline = time.monotonic() + 60
    while not all(Path(f"{pidfile}.{r}").exists() for r in (0, 1)) and time.monotonic() < deadline:
        time.sleep(0.05)
    children = [int(Path(f"{pidfile}.{r}").read_text()) for r in (0, 1)]
    commands = [rank_record(dt.home, "tree", r)["pid"] for r in (0, 1)]
    dt("delete", "tree")
    for pid in children + commands:
        wait_dead(pid, timeout=5)


@pytest.mark.slow
def test_the_failure_names_the_rank_that_failed_and_its_exit_code(dt: Dtrain):
    code = "import os,sys,time\nif os.environ['RANK']=='1':\n    time.sleep(1); sys.exit(3)\ntime.sleep(120)"
    dt("submit-dist", "g", "--processes", "2", "--", "python", "-c", code)
    info = dt.wait_for("g", {"Failed", "Succeeded"}, timeout=120)
    assert info["message"].startswith("rank 1 exited (exit code 3)"), info["message"]
    assert info["extra"]["exit_code"] == 3


# ------------------------------------------------------------------ B: sizes


def test_absurd_process_counts_are_refused_and_the_list_still_answers(dt: Dtrain):
    huge = dt("submit-dist", "huge", "--processes", "1000000000", "--", "true", check=False)
    assert huge.returncode == 2 and "from 1 to 4096" in huge.stderr and len(huge.stderr.strip().splitlines()) == 1
    big = dt("submit-dist", "big", "--processes", "4000", "--", "true", check=False)
    assert big.returncode == 2 and "this machine can run at most" in big.stderr
    assert dt.json("list", "-A") == []


# ------------------------------------------------------------------ resources


def _enforced() -> bool:
    from dtrain.backends.local.cgroups import support

    return support().enforced


@pytest.mark.skipif(not _enforced(), reason="no cgroup delegation on this machine: limits are advisory")
def test_a_job_over_its_memory_is_stopped_and_reported(dt: Dtrain):
    hog = "x = bytearray(600 * 2**20)\nfor i in range(0, len(x), 4096): x[i] = 1\nprint('survived')"
    dt("submit", "hog", "--memory", "100Mi", "--", "python", "-c", hog)
    info = dt.wait_for("hog", {"Failed", "Succeeded"}, timeout=120)
    assert info["status"] == "Failed" and "survived" not in dt("logs", "hog").stdout
    assert info["message"].startswith("rank 0 ran out of memory (limit 100Mi)"), info["message"]
    assert "enforced" in info["extra"]["limits"]


@pytest.mark.skipif(not _enforced(), reason="no cgroup delegation on this machine: limits are advisory")
def test_cpu_becomes_a_cgroup_quota(dt: Dtrain):
    show = ("from pathlib import Path\n"
            "for line in Path('/proc/self/cgroup').read_text().splitlines():\n"
            "    _i, c, p = line.split(':', 2)\n"
            "    if 'cpu' in c.split(','):\n"
            "        print('quota', Path('/sys/fs/cgroup/cpu' + p, 'cpu.cfs_quota_us').read_text().strip())\n"
            "    if c == '' and Path('/sys/fs/cgroup' + p, 'cpu.max').exists():\n"
            "        print('quota', Path('/sys/fs/cgroup' + p, 'cpu.max').read_text().split()[0])\n")
    dt("submit", "cpu", "--cpu", "0.5", "--", "python", "-c", show)
    assert dt.wait_for("cpu", {"Failed", "Succeeded"}, timeout=120)["status"] == "Succeeded"
    assert "quota 50000" in dt("logs", "cpu").stdout


# ------------------------------------------------------------------ E: mount points


@pytest.mark.parametrize("parent", ["/opt", "/"])
def test_missing_mount_points_are_made_inside_the_sandbox_not_on_the_host(dt: Dtrain, parent):
    top = os.path.join(parent, f"dtrain-mount-{os.getpid()}-{random.randrange(10**6)}")
    assert not os.path.lexists(top)
    dt("volume", "create", "vol")
    dt("submit", "mnt", "--pvc", f"vol:{top}/deep", "--", "sh", "-c", f"echo inside > {top}/deep/proof; ls {parent}")
    info = dt.wait_for("mnt", {"Succeeded", "Failed"}, timeout=120)
    assert info["status"] == "Succeeded", info["message"]
    assert not os.path.lexists(top), f"{top} was created on the host"
    listing = dt("logs", "mnt").stdout
    assert os.path.basename(top) in listing  # the sandbox saw it
    assert all(name in listing for name in os.listdir(parent)[:5])  # and still sees the host's entries
    volume = dt.json("volume", "describe", "vol")
    assert (Path(volume["extra"]["path"]) / "proof").read_text() == "inside\n"
