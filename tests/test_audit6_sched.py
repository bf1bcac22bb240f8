"""Projects, GPU quotas and the queue of the local backend, as a Run:AI user meets them."""

from __future__ import annotations

import time

import pytest

from dtrain.backends.local import scheduler
from dtrain.backends.local.store import JobStore
from dtrain.spec import JobSpec
from conftest import Dtrain, gated


def queue(store: JobStore, name: str, *, project: str = "default", gpu: int = 1, processes: int = 1) -> JobSpec:
    spec = JobSpec(name=name, command=("true",), gpu=gpu, processes=processes, project=project)
    store.insert_job(spec, cwd="/", node="here")
    return spec


# ---- cross-project order: in-quota before over-quota, FIFO within ------------------------------
def test_an_in_quota_job_is_not_starved_by_younger_jobs_of_a_project_without_quota(store):
    """Two GPUs; project a has a quota of 2. Its 2-GPU job waited behind every 1-GPU job of
    `default` (no quota) submitted after it: each GPU freed went to the next small job. (The GPU
    in use is held by a project within its own quota here, so preempting cannot free it.)"""
    gpus = ["0", "1"]
    store.upsert_project("a", 2)
    store.upsert_project("b", 1)
    d1 = queue(store, "d1", project="b")
    assert scheduler.try_allocate(store, d1, gpus) == ["0"]
    a1 = queue(store, "a1", project="a", gpu=2)
    d2 = queue(store, "d2")
    assert scheduler.try_allocate(store, a1, gpus) is None  # one free, it needs two
    assert scheduler.try_allocate(store, d2, gpus) is None  # the free GPU is a1's
    message = store.job("d2")["message"]
    assert "job a1 of project 'a'" in message and "within its quota" in message, message
    assert store.set_status("d1", "Succeeded", "done")
    assert scheduler.try_allocate(store, d2, gpus) is None
    assert scheduler.try_allocate(store, a1, gpus) == ["0", "1"]
    assert store.set_status("a1", "Succeeded", "done")
    assert scheduler.try_allocate(store, d2, gpus) == ["0"]  # its turn once a1 no longer waits


def test_fifo_across_projects_without_quota(store):
    """An older 2-GPU job of one project without a quota is not overtaken by a younger 1-GPU job
    of another project without one."""
    gpus = ["0", "1"]
    store.upsert_project("c", None)
    hold = queue(store, "hold")
    assert scheduler.try_allocate(store, hold, gpus) == ["0"]
    big = queue(store, "big", project="c", gpu=2)
    small = queue(store, "small")
    assert scheduler.try_allocate(store, small, gpus) is None
    assert "job big of project 'c' (2 GPUs, queued earlier)" in store.job("small")["message"]
    assert store.set_status("hold", "Succeeded", "done")
    assert scheduler.try_allocate(store, big, gpus) == ["0", "1"]


def test_a_small_job_still_starts_beside_a_waiting_one_when_enough_gpus_are_free(store):
    gpus = ["0", "1", "2", "3"]
    store.upsert_project("a", 4)
    held = [queue(store, f"h{i}", project="a") for i in range(2)]
    for h in held:
        assert scheduler.try_allocate(store, h, gpus) is not None
    store.upsert_project("b", 1)  # within its quota: not preempted for a3
    d = queue(store, "d", project="b")
    assert scheduler.try_allocate(store, d, gpus) is not None  # holds the third GPU
    a3 = queue(store, "a3", project="a", gpu=2)   # within quota (2 + 2), waits for free GPUs
    assert scheduler.try_allocate(store, a3, gpus) is None
    small = queue(store, "small")
    assert scheduler.try_allocate(store, small, gpus) is None  # the one free GPU is a3's
    assert store.set_status("h0", "Succeeded", "done") and store.set_status("h1", "Succeeded", "done")
    # three free now: a3 keeps two, and one is left for the small job, which need not wait
    assert scheduler.try_allocate(store, small, gpus) is not None
    assert scheduler.try_allocate(store, a3, gpus) is not None


def test_an_in_quota_job_is_never_held_back_by_an_over_quota_one(store):
    gpus = ["0", "1"]
    store.upsert_project("b", 1)
    hold = queue(store, "hold")
    assert scheduler.try_allocate(store, hold, gpus) == ["0"]
    big = queue(store, "big", gpu=2)  # default, no quota: waits for two
    b1 = queue(store, "b1", project="b")
    assert scheduler.try_allocate(store, big, gpus) is None
    assert scheduler.try_allocate(store, b1, gpus) == ["1"]


@pytest.mark.parametrize("why", ["quota", "machine"])
def test_a_job_waiting_for_more_than_free_gpus_keeps_none(store, why):
    """A project's first job that its quota holds back (or that needs more GPUs than the machine
    has) waits for no free GPU: nothing is kept for it, so it blocks no other project."""
    gpus = ["0", "1"]
    store.upsert_project("a", 1)
    if why == "quota":
        running = queue(store, "running", project="a")
        assert scheduler.try_allocate(store, running, gpus) == ["0"]
        queue(store, "waits", project="a")
    else:
        queue(store, "waits", project="a", gpu=3)
    d = queue(store, "d")
    assert scheduler.try_allocate(store, d, gpus) is not None


def test_a_cpu_job_is_never_held_back_by_another_projects_queue(store):
    store.upsert_project("a", 2)
    queue(store, "a1", project="a", gpu=2)
    cpu = queue(store, "cpu", gpu=0)
    assert scheduler.try_allocate(store, cpu, []) == []


def test_a_suspended_job_keeps_nothing(store):
    gpus = ["0", "1"]
    store.upsert_project("a", 2)
    queue(store, "a1", project="a", gpu=2)
    assert store.set_status("a1", "Suspended", "suspended")
    d = queue(store, "d")
    assert scheduler.try_allocate(store, d, gpus) == ["0"]


@pytest.mark.slow
def test_cli_in_quota_job_runs_before_younger_default_jobs(dt_gpus: Dtrain, tmp_path):
    """Through the real commands: the waiting job says which job keeps the GPU, and the in-quota
    job starts before the default project's jobs submitted after it."""
    dt = dt_gpus
    dt("project", "create", "a", "--gpu-quota", "2")
    dt("project", "create", "b", "--gpu-quota", "1")  # d1 runs within it: not preempted for a1
    hold, gate = gated(tmp_path)
    dt("submit", "d1", "-p", "b", "--gpu", "1", "--", "python", "-c", hold)
    dt.wait_for("d1", {"Running"})
    dt("submit", "a1", "-p", "a", "--gpu", "2", "--", "true")
    dt("submit", "d2", "--gpu", "1", "--", "true")
    deadline = time.monotonic() + 60
    while "kept for job a1" not in (message := dt.json("describe", "job", "d2")["message"]):
        assert time.monotonic() < deadline, message
        time.sleep(0.2)
    assert dt.status("d2") == "Pending" and "describe" not in message
    assert "kept for job a1" in dt("describe", "job", "d2").stdout
    gate.write_text("x")
    a1 = dt.wait_for("a1", {"Succeeded"})
    d2 = dt.wait_for("d2", {"Succeeded"})
    assert a1["started"] <= d2["started"]


def test_lowering_a_quota_below_what_runs_says_what_happens(dt_gpus: Dtrain, tmp_path):
    """`project create P --gpu-quota N` below the GPUs its running jobs hold said only "a GPU quota
    of N now": nothing said the running jobs keep theirs, nor that a queued job needing more than
    N would now never start."""
    dt = dt_gpus
    dt("project", "create", "q", "--gpu-quota", "1")
    hold, gate = gated(tmp_path)
    dt("submit", "r1", "-p", "q", "--gpu", "1", "--", "python", "-c", hold)
    dt.wait_for("r1", {"Running"})
    dt("submit", "w", "-p", "q", "--gpu", "1", "--", "true")
    out = dt("project", "create", "q", "--gpu-quota", "0").stdout
    assert len(out.strip().splitlines()) == 1, out
    assert "a GPU quota of 0 now" in out and "hold 1 GPU" in out and "nothing is stopped" in out, out
    assert "queued job w needs more than 0 GPUs" in out, out
    assert dt.status("r1") == "Running"
    out = dt("project", "create", "q", "--gpu-quota", "1").stdout
    assert out.strip() == "project 'q' already exists; it has a GPU quota of 1 now", out
    gate.write_text("x")
    dt.wait_for("w", {"Succeeded"})


def test_quotas_adding_up_past_the_machines_gpus_are_named_when_set(dt_gpus: Dtrain):
    """Quotas are each bounded by the GPUs here, but their sum was not looked at: two projects with
    a quota of 2 on a 2-GPU machine were each promised GPUs the other may hold, and nothing said so."""
    dt = dt_gpus  # 2 GPUs
    first = dt("project", "create", "a", "--gpu-quota", "2").stdout
    assert first.strip() == "project 'a' created with a GPU quota of 2"  # within the machine: nothing to say
    second = dt("project", "create", "b", "--gpu-quota", "1").stdout
    assert len(second.strip().splitlines()) == 1, second
    assert "quotas now add up to 3, more than this machine's 2 GPUs" in second and "--gpu-quota N" in second
    assert dt.json("project", "list")  # set all the same: a warning, not a refusal
    assert {p["name"]: p["gpu_quota"] for p in dt.json("project", "list")}["b"] == 1
    back = dt("project", "create", "b", "--gpu-quota", "0").stdout  # back within the machine
    assert "add up" not in back
