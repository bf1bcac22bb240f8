"""--cpu pins each local rank to its own cores (what `dtrain bench scaling` relies on)."""

from __future__ import annotations

import os
import sys
import time

import pytest

from conftest import Dtrain, job_store
from dtrain.backends.local.launch import job_env, physical_cores, pick_cores, rank_cores
from dtrain.backends.local.rankrun import rank_cpus
from dtrain.spec import JobSpec


def test_rank_cores_gives_each_rank_its_own_cores_in_order():
    assert rank_cores([3, 1, 0, 2], 2, 2) == [[0, 1], [2, 3]]
    assert rank_cores([0, 1, 2, 3], 3, 1) == [[0], [1], [2]]
    assert rank_cores([4, 5, 6, 7], 2, 1.5) == [[4, 5], [6, 7]]  # a fraction of a core rounds up
    assert rank_cores([0, 1], 3, 1) is None  # not enough cores: the ranks share, unpinned


def test_rank_cores_spreads_ranks_over_the_free_cores():
    sixteen = list(range(16))
    assert rank_cores(sixteen, 2, 1) == [[0], [8]]  # not neighbours: a VM's vCPU 0 and 1 can be one host core
    assert rank_cores(sixteen, 3, 1) == [[0], [5], [10]]
    assert rank_cores(sixteen, 2, 2) == [[0, 1], [8, 9]]
    assert rank_cores([0, 1, 2, 3, 6, 7], 2, 1) == [[0], [3]]  # over what is free (other jobs hold 4, 5)
    for processes, per_rank in ((2, 1), (3, 1), (2, 3), (3, 5), (4, 4)):  # the launcher picks again from
        groups = rank_cores(sixteen, processes, per_rank)                  # the scheduler's choice
        assert rank_cores([c for g in groups for c in g], processes, per_rank) == groups


def test_rank_cores_keeps_ranks_off_each_others_hyperthreads():
    core_of = {c: c % 8 for c in range(16)}  # 8 cores x 2 threads, numbered as many clouds do: c and c+8
    assert rank_cores(range(16), 2, 1, core_of) == [[0], [4]]
    assert rank_cores(range(16), 2, 4, core_of) == [[0, 1, 2, 3], [4, 5, 6, 7]]  # a thread per core first
    assert rank_cores(range(16), 2, 8, core_of) == [[0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]]
    adjacent = {c: c // 2 for c in range(8)}  # 4 cores x 2 threads numbered side by side
    assert rank_cores(range(8), 2, 2, adjacent) == [[0, 2], [4, 6]]
    assert rank_cores(range(8), 4, 2, adjacent) == [[0, 1], [2, 3], [4, 5], [6, 7]]  # whole cores each


def test_physical_cores_reads_the_thread_siblings(tmp_path):
    for cpu, siblings in ((0, "0,8"), (8, "0,8"), (1, "1-2"), (2, "1-2")):
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(siblings + "\n")
    (tmp_path / "cpu3" / "topology").mkdir(parents=True)
    (tmp_path / "cpu3" / "topology" / "thread_siblings_list").write_text("garbage\n")
    assert physical_cores([0, 8, 1, 2, 3, 4], sysfs=str(tmp_path)) == {0: 0, 8: 0, 1: 1, 2: 1, 3: 3, 4: 4}


def test_job_env_names_the_cores_only_when_cpu_is_given():
    spec = JobSpec(name="p", command=("python",), processes=2, launcher="torchrun", cpu=1, project="default")
    env = job_env(spec, devices=[[], []], master_port=1, attempt=0, available=[0, 1, 2, 3])
    assert env["DTRAIN_RANK_CPUS"] == "0;2" and env["OMP_NUM_THREADS"] == "1"  # spread out (rank_cores)
    free = JobSpec(name="p", command=("python",), processes=2, launcher="torchrun", project="default")
    assert "DTRAIN_RANK_CPUS" not in job_env(free, devices=[[], []], master_port=1, attempt=0, available=[0, 1])


def test_rank_cpus_reads_the_local_ranks_share():
    assert rank_cpus({"DTRAIN_RANK_CPUS": "0,1;2,3", "LOCAL_RANK": "1"}) == {2, 3}
    assert rank_cpus({"DTRAIN_RANK_CPUS": "0;1", "LOCAL_RANK": "0"}) == {0}
    assert rank_cpus({"LOCAL_RANK": "0"}) is None


PRINT_AFFINITY = "import os; print('cores', sorted(os.sched_getaffinity(0)), 'threads', os.environ['OMP_NUM_THREADS'])"


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to pin two ranks apart")
def test_two_ranks_with_cpu_run_on_their_own_cores(dt: Dtrain):
    cores = sorted(os.sched_getaffinity(0))
    expected = pick_cores(cores, 2, 1)  # spread out: cores 0 and 1 on a 2-core machine
    dt("submit-dist", "pinned", "--processes", "2", "--launcher", "torchrun", "--cpu", "1", "--",
       sys.executable, "-c", PRINT_AFFINITY)
    dt("submit-dist", "free", "--processes", "2", "--launcher", "torchrun", "--", sys.executable, "-c", PRINT_AFFINITY)
    for name in ("pinned", "free"):
        assert dt("wait", name, "--timeout", "120").returncode == 0
    for rank in (0, 1):
        assert dt("logs", "pinned", "--rank", str(rank)).stdout.split() == ["cores", str(expected[rank]), "threads", "1"]
        assert dt("logs", "free", "--rank", str(rank)).stdout.startswith(f"cores {cores}")


HOLD = ("import os, sys, time; print('cores', sorted(os.sched_getaffinity(0)), flush=True)\n"
        "while not os.path.exists(sys.argv[1]): time.sleep(0.05)")


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to pin two jobs apart")
def test_concurrent_cpu_jobs_get_different_cores_and_share_when_none_is_free(dt: Dtrain, tmp_path):
    """Two --cpu 1 jobs at once must not both sit on the first core while another idles; a third
    that finds no free core runs unpinned; a finished job's cores are free again."""
    cores = sorted(os.sched_getaffinity(0))
    go = tmp_path / "go"
    names = [f"p{i}" for i in range(len(cores))] + ["extra"]
    for name in names:  # one at a time: each is Running (its cores pinned) before the next arrives
        dt("submit", name, "--cpu", "1", "--", sys.executable, "-c", HOLD, str(go))
        dt.wait_for(name, {"Running"})
    seen = {}
    for name in names:
        for _ in range(600):
            out = dt("logs", name).stdout.split("\n")[0]
            if out.startswith("cores"):
                break
            time.sleep(0.05)
        seen[name] = out
    assert sorted(seen[f"p{i}"] for i in range(len(cores))) == sorted(f"cores [{c}]" for c in cores)
    assert seen["extra"] == f"cores {cores}"  # nothing free: unpinned, not stacked on core 0
    with job_store(dt.home) as store:
        assert sorted(store.pinned_cores()) == cores and store.job_cores("extra") == []
    go.touch()
    for name in names:
        assert dt("wait", name, "--timeout", "120").returncode == 0
    with job_store(dt.home) as store:
        assert store.pinned_cores() == {}
    dt("submit", "again", "--cpu", "1", "--", sys.executable, "-c", HOLD, str(go))
    assert dt("wait", "again", "--timeout", "120").returncode == 0
    assert dt("logs", "again").stdout.split("\n")[0] == f"cores [{cores[0]}]"
