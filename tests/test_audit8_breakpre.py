"""Preemption (scheduler.py, supervisor.py) tried the way a Run:AI user meets it: a workload that
exits 0 after writing its checkpoint on SIGTERM, a job preempted in its restart backoff."""

from __future__ import annotations

import time

import pytest

from dtrain.backends.local import scheduler
from dtrain.backends.local.supervisor import Supervisor
from dtrain.spec import JobSpec
from conftest import Dtrain, counter_script, job_store
from server_util import wait_until



def test_a_job_preempted_in_its_restart_backoff_lets_its_gpus_go_at_once(tmp_path):
    """Its launch failed and it waits (up to 60 s) before the next: preempted meanwhile, it stops
    waiting then, instead of holding the GPUs the in-quota job needs for the rest of the backoff."""
    with job_store(tmp_path) as store:
        spec = JobSpec(name="d", command=("false",), gpu=1, max_restarts=8)
        store.insert_job(spec, cwd="/", node="here")
        assert scheduler.try_allocate(store, spec, ["0"]) == ["0"]
        (tmp_path / "jobs" / "d").mkdir(parents=True)
        sup = Supervisor(tmp_path, "d")
        try:
            store.upsert_project("a", 1)
            urgent = JobSpec(name="u", command=("true",), gpu=1, project="a")
            store.insert_job(urgent, cwd="/", node="here")
            assert scheduler.try_allocate(store, urgent, ["0"]) is None
            assert store.status("d") == "Pending"  # preempted while it waits to restart
            began = time.monotonic()
            sup._sleep(5)
            assert time.monotonic() - began < 1.5
            assert sup.preempted
        finally:
            sup.store.close()


GRACEFUL = counter_script(40, exit_on_term=0)


@pytest.mark.slow
def test_a_preempted_job_that_exits_0_on_sigterm_is_queued_again_not_succeeded(dt_gpus: Dtrain, tmp_path):
    dt = dt_gpus  # 2 GPUs
    (tmp_path / "count.py").write_text(GRACEFUL)
    dt("project", "create", "team", "--gpu-quota", "1")
    dt("submit", "long", "--gpu", "2", "--working-dir", str(tmp_path), "--", "python", "count.py")
    wait_until(lambda: "start at 0" in dt("logs", "long").stdout, what="long started")
    dt("submit", "urgent", "-p", "team", "--gpu", "1", "--", "true")
    wait_until(lambda: "checkpoint at" in dt("logs", "long").stdout, what="long stopped")
    assert dt.wait_for("urgent", {"Succeeded", "Failed"})["status"] == "Succeeded"
    done = dt.wait_for("long", {"Succeeded", "Failed"}, timeout=120)
    assert done["status"] == "Succeeded" and done["restarts"] == 0, done
    assert (tmp_path / "count.txt").read_text() == "40"  # it trained to the end, not only to the preemption
    assert dt("logs", "long").stdout.splitlines()[-1] == "done"


def test_two_in_quota_jobs_arriving_together_each_preempt_their_own(tmp_path):
    """a1 and b1 (projects with a quota of 1) both wait for a GPU held by over-quota jobs: the GPU
    a1's victim frees is a1's, so b1 preempts another job at once, rather than waiting for a1's
    victim to stop, losing it to a1 and only then preempting (two grace periods); and no job is
    preempted twice, nor one more than the two they need."""
    with job_store(tmp_path) as store:
        gpus = ["0", "1", "2"]
        for name in ("d1", "d2", "d3"):
            spec = JobSpec(name=name, command=("true",), gpu=1)
            store.insert_job(spec, cwd="/", node="here")
            assert scheduler.try_allocate(store, spec, gpus) is not None
        waiting = []
        for project in ("a", "b"):
            store.upsert_project(project, 1)
            spec = JobSpec(name=f"{project}1", command=("true",), gpu=1, project=project)
            store.insert_job(spec, cwd="/", node="here")
            waiting.append(spec)
        a1, b1 = waiting
        assert scheduler.try_allocate(store, a1, gpus) is None
        assert scheduler.try_allocate(store, b1, gpus) is None
        assert [store.status(n) for n in ("d1", "d2", "d3")] == ["Running", "Pending", "Pending"]
        assert store.job("d2")["message"].startswith("preempted by job b1 of project 'b'")
        assert "being freed by stopping job d2 of project 'default'" in store.job("b1")["message"]
        assert "d3" not in store.job("b1")["message"]  # d3's GPU is a1's
        for _ in range(2):  # polled again while they stop: nothing more is preempted
            assert scheduler.try_allocate(store, a1, gpus) is None
            assert scheduler.try_allocate(store, b1, gpus) is None
        assert store.status("d1") == "Running"
        assert store.release_preempted("d3") and store.release_preempted("d2")
        assert scheduler.try_allocate(store, b1, gpus) is not None
        assert scheduler.try_allocate(store, a1, gpus) is not None
        assert store.status("d1") == "Running"
