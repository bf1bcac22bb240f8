"""Run:AI preemption in the local scheduler: an in-quota job that waits only for free GPUs preempts
running jobs of projects without a quota (or over theirs), youngest first, only as many as it
needs, never notebooks; the preempted job goes back to Pending, saying by whom, and starts again
from its checkpoint once GPUs are free, spending no restart."""

from __future__ import annotations

import json
import time

import pytest

from dtrain.backends.local import scheduler
from dtrain.backends.local.store import JobStore
from dtrain.spec import JobSpec
from conftest import Dtrain, counter_script, gated
from server_util import wait_until


def run(store: JobStore, gpus: list[str], name: str, *, project: str = "default", gpu: int = 1,
        notebook: bool = False) -> JobSpec:
    spec = JobSpec(name=name, command=("true",), gpu=gpu, project=project, notebook=notebook)
    store.insert_job(spec, cwd="/", node="here")
    if scheduler.try_allocate(store, spec, gpus) is None:
        raise AssertionError(store.job(name)["message"])
    return spec


def queue(store: JobStore, name: str, *, project: str, gpu: int = 1) -> JobSpec:
    spec = JobSpec(name=name, command=("true",), gpu=gpu, project=project)
    store.insert_job(spec, cwd="/", node="here")
    return spec


def test_the_youngest_over_quota_jobs_are_preempted_only_as_many_as_needed(store):
    gpus = ["0", "1", "2"]
    store.upsert_project("a", 2)
    for name in ("d1", "d2", "d3"):
        run(store, gpus, name)
    a1 = queue(store, "a1", project="a", gpu=2)
    assert scheduler.try_allocate(store, a1, gpus) is None  # they still hold the GPUs while they stop
    assert [store.status(n) for n in ("d1", "d2", "d3")] == ["Running", "Pending", "Pending"]
    for victim in ("d2", "d3"):
        row = store.job(victim)
        assert row["message"].startswith("preempted by job a1 of project 'a'"), row["message"]
        assert "no restart is spent" in row["message"] and row["restarts"] == 0
        assert store.events(victim)[-1]["status"] == "Pending"
    said = [e["message"] for e in store.events("a1") if e["message"].startswith("preempted job")]
    assert len(said) == 2 and "d3 of project 'default' (1 GPU, no GPU quota)" in said[0], said
    message = store.job("a1")["message"]
    assert "2 being freed by stopping jobs d2 of project 'default', d3 of project 'default'" in message, message
    # polled again while they stop: nobody else is preempted for the same GPUs
    assert scheduler.try_allocate(store, a1, gpus) is None
    assert store.status("d1") == "Running"
    assert store.release_preempted("d3")  # its supervisor, once its processes are gone
    d3 = JobSpec.from_stored(json.loads(store.job("d3")["spec"]))
    assert scheduler.try_allocate(store, d3, gpus) is None  # the freed GPU is a1's
    assert store.job("d3")["message"] == "preempted by job a1 of project 'a'; waiting: 2nd in project 'default''s queue"
    assert scheduler.try_allocate(store, a1, gpus) is None and store.status("d1") == "Running"
    assert store.release_preempted("d2")
    assert sorted(scheduler.try_allocate(store, a1, gpus)) == ["1", "2"]
    assert store.set_status("a1", "Succeeded", "done")
    assert scheduler.try_allocate(store, d3, gpus) is None  # d2 is older: FIFO among the over-quota jobs
    d2 = JobSpec.from_stored(json.loads(store.job("d2")["spec"]))
    assert scheduler.try_allocate(store, d2, gpus) is not None
    assert scheduler.try_allocate(store, d3, gpus) is not None
    assert store.job("d3")["message"].startswith("started on GPU")


@pytest.mark.parametrize("held_by", ["notebook", "in-quota", "not-enough"])
def test_nothing_is_preempted_that_may_not_be_or_would_not_be_enough(store, held_by):
    gpus = ["0", "1"]
    store.upsert_project("a", 2)
    store.upsert_project("b", 1)
    if held_by == "notebook":  # interactive: never preempted
        run(store, gpus, "x", notebook=True)
    elif held_by == "in-quota":
        run(store, gpus, "x", project="b")
    else:  # a notebook holds one GPU, so preempting the other job would free one of the two a1 needs
        run(store, gpus, "nb", notebook=True)
    run(store, gpus, "y")
    a1 = queue(store, "a1", project="a", gpu=2)
    assert scheduler.try_allocate(store, a1, gpus) is None
    assert store.status("y") == "Running" and all(
        r["status"] == "Running" for r in store.jobs() if r["name"] != "a1")
    assert store.job("a1")["message"] == "waiting: needs 2 GPUs, 0 free"


def test_a_project_over_its_lowered_quota_loses_its_youngest_jobs_down_to_it(store):
    gpus = ["0", "1", "2"]
    store.upsert_project("b", 3)
    for name in ("b1", "b2", "b3"):
        run(store, gpus, name, project="b")
    store.upsert_project("b", 1)  # lowered while they run: 2 GPUs over it
    store.upsert_project("a", 3)
    a1 = queue(store, "a1", project="a", gpu=3)
    assert scheduler.try_allocate(store, a1, gpus) is None  # b1 is within b's quota: 2 at most, not enough
    assert [store.status(n) for n in ("b1", "b2", "b3")] == ["Running"] * 3
    a1b = queue(store, "a2", project="a", gpu=2)
    store.set_status("a1", "Deleted", "x")
    assert scheduler.try_allocate(store, a1b, gpus) is None
    assert [store.status(n) for n in ("b1", "b2", "b3")] == ["Running", "Pending", "Pending"]
    assert "over its GPU quota of 1" in store.events("a2")[-1]["message"]


def test_a_job_held_back_by_its_own_quota_or_queue_preempts_nobody(store):
    gpus = ["0"]
    store.upsert_project("a", 1)
    run(store, gpus, "d")
    a0 = queue(store, "a0", project="a")
    a1 = queue(store, "a1", project="a")
    assert scheduler.try_allocate(store, a1, gpus) is None  # 2nd in its queue: a0 goes first
    assert store.status("d") == "Running"
    assert scheduler.try_allocate(store, a0, gpus) is None  # a0 preempts d
    assert store.status("d") == "Pending"


def test_a_preempted_job_that_had_already_ended_is_done(store):
    """Its processes all exited 0 before the preemption could stop them: Succeeded, not run again."""
    gpus = ["0"]
    store.upsert_project("a", 1)
    run(store, gpus, "d")
    assert scheduler.try_allocate(store, queue(store, "a1", project="a"), gpus) is None
    assert store.status("d") == "Pending"
    assert store.set_status("d", "Succeeded", "all processes exited 0") and store.job_devices("d") == []


COUNTER = counter_script(60)



@pytest.mark.slow
def test_an_in_quota_job_preempts_an_over_quota_one_which_resumes_after_it(dt_gpus: Dtrain, tmp_path):
    dt = dt_gpus  # 2 GPUs
    (tmp_path / "count.py").write_text(COUNTER)
    dt("project", "create", "team", "--gpu-quota", "1")
    dt("submit", "long", "--gpu", "2", "--max-restarts", "0", "--working-dir", str(tmp_path), "--",
       "python", "count.py")
    wait_until(lambda: "start at 0" in dt("logs", "long").stdout, what="long started")
    hold, gate = gated(tmp_path)
    dt("submit", "urgent", "-p", "team", "--gpu", "1", "--", "python", "-c", hold)
    info = dt.wait_for("urgent", {"Running"}, timeout=60)
    assert info["gpus_allocated"] == 1
    long = dt.json("describe", "job", "long")
    assert long["status"] == "Pending" and long["gpus_allocated"] == 0, long
    assert long["message"].startswith("preempted by job urgent of project 'team'; waiting: "), long["message"]
    assert any(e["status"] == "Pending" and e["message"].startswith("preempted by job urgent of project 'team'")
               for e in long["events"]), long["events"]
    assert "preempted by job urgent of project 'team'" in dt("describe", "job", "long").stdout
    stopped_at = int((tmp_path / "count.txt").read_text())
    assert "checkpoint at" in dt("logs", "long").stdout
    assert dt.json("list", "jobs")  # a read with the job stopping and queued: no error
    gate.write_text("x")
    assert dt.wait_for("urgent", {"Succeeded", "Failed"})["status"] == "Succeeded"
    done = dt.wait_for("long", {"Succeeded", "Failed"}, timeout=120)
    assert done["status"] == "Succeeded" and done["restarts"] == 0, done
    lines = dt("logs", "long").stdout.splitlines()
    assert lines[0] == f"start at {stopped_at}" and lines[-1] == "done", lines  # went on from its checkpoint
    assert any(line.startswith("checkpoint at") for line in dt("logs", "long", "--previous").stdout.splitlines())


@pytest.mark.slow
def test_a_preempted_job_whose_supervisor_is_lost_while_it_stops_is_stopped_and_queued_again(dt_gpus: Dtrain,
                                                                                            tmp_path):
    """Its ranks ignore SIGTERM, so it is still stopping (holding its GPUs) when its supervisor is
    killed: the next command stops what is left, lets the GPUs go and queues it again, saying so."""
    import contextlib
    import os
    import signal
    import sqlite3

    from dtrain.backends.local.ranks import parse_ident

    dt = dt_gpus
    dt("project", "create", "team", "--gpu-quota", "1")
    dt("submit", "stubborn", "--gpu", "2", "--", "python", "-c",
       "import signal,time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(600)")
    wait_until(lambda: "up" in dt("logs", "stubborn").stdout, what="stubborn started")
    dt("submit", "urgent", "-p", "team", "--gpu", "1", "--", "sleep", "600")
    wait_until(lambda: dt.json("describe", "job", "stubborn")["status"] == "Pending", what="stubborn preempted")
    with contextlib.closing(sqlite3.connect(dt.home / "state.db")) as conn:
        pid, token = conn.execute("SELECT supervisor_pid, supervisor_start FROM jobs WHERE name='stubborn'").fetchone()
        held = conn.execute("SELECT COUNT(*) FROM allocations WHERE job='stubborn'").fetchone()[0]
    assert held == 2  # its ranks ignore SIGTERM: still stopping, 30 s from the SIGKILL
    supervisor = parse_ident(pid, token)
    assert supervisor is not None and supervisor.alive()
    os.kill(supervisor.pid, signal.SIGKILL)
    wait_until(lambda: not supervisor.alive(), timeout=10, what="supervisor gone")
    assert dt.wait_for("urgent", {"Running"}, timeout=60)["gpus_allocated"] == 1  # well before the grace period
    stubborn = dt.json("describe", "job", "stubborn")
    assert stubborn["status"] == "Pending" and stubborn["restarts"] == 0, stubborn
    assert any(e["message"].endswith("it was preempted and stopping: a new supervisor stops what is left and keeps "
                                     "its place in the queue") for e in stubborn["events"]), stubborn["events"]
    assert not any("nothing had started" in e["message"] for e in stubborn["events"]), stubborn["events"]
    dt("delete", "urgent", "stubborn")
