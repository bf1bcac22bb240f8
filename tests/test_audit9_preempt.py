"""Preemption and suspension as a Run:AI / kubectl user reads them: a stopping job's ranks read
Terminating (not Pending) until their processes have exited; the events of a run never come after
the event that ended it; the most recently started preemptible job is preempted first."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from dtrain.backends.local import scheduler
from dtrain.backends.local.store import JobStore
from dtrain.spec import JobSpec
from conftest import DTRAIN, SLOW_STOP, Dtrain
from server_util import wait_until


def _preempt_long(dt: Dtrain, tmp_path, script: str, *, started: str) -> None:
    """Job long (no project quota, 2 GPUs) runs `script`; once its log says `started`, job urgent of
    project team (quota 1) is submitted, which preempts it."""
    (tmp_path / "work.py").write_text(script)
    dt("project", "create", "team", "--gpu-quota", "1")
    dt("submit", "long", "--gpu", "2", "--working-dir", str(tmp_path), "--", "python", "work.py")
    wait_until(lambda: started in dt("logs", "long").stdout, what="long started")
    dt("submit", "urgent", "-p", "team", "--gpu", "1", "--", "sleep", "60")


def _ranks(dt: Dtrain, name: str) -> list[str]:
    return [p["status"] for p in dt.json("describe", "job", name)["processes"]]


@pytest.mark.slow
def test_a_preempted_jobs_ranks_read_terminating_while_they_stop_then_pending(dt_gpus: Dtrain, tmp_path):
    dt = dt_gpus
    _preempt_long(dt, tmp_path, SLOW_STOP, started="up")
    wait_until(lambda: "writing a checkpoint" in dt("logs", "long").stdout, what="long stopping")
    info = dt.json("describe", "job", "long")
    assert info["status"] == "Pending", info  # the job's status is the scheduler's
    assert [p["status"] for p in info["processes"]] == ["Terminating"], info["processes"]
    assert info["processes_pending"] == 0 and info["gpus_allocated"] == 2, info
    assert "Terminating" in dt("describe", "job", "long").stdout
    row = next(j for j in dt.json("list") if j["name"] == "long")
    assert row["processes_pending"] == 0 and row["processes_running"] == 0, row
    (tmp_path / "gate").write_text("x")  # the checkpoint is written: the processes exit
    wait_until(lambda: _ranks(dt, "long") == ["Pending"], what="long's ranks gone")
    assert dt.wait_for("urgent", {"Running"}, timeout=30)
    info = dt.json("describe", "job", "long")
    assert info["status"] == "Pending" and info["processes_pending"] == 1, info


def test_a_suspended_jobs_rank_reads_terminating_until_it_has_exited(dt: Dtrain, tmp_path):
    (tmp_path / "slow.py").write_text(SLOW_STOP)
    dt("submit", "job", "--working-dir", str(tmp_path), "--", "python", "slow.py")
    wait_until(lambda: "up" in dt("logs", "job").stdout, what="job started")
    suspend = subprocess.Popen([DTRAIN, "suspend", "job"], env=dt.env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # it returns once the job has stopped
    try:
        wait_until(lambda: "writing a checkpoint" in dt("logs", "job").stdout, what="job stopping")
        info = dt.json("describe", "job", "job")
        assert info["status"] == "Suspended" and [p["status"] for p in info["processes"]] == ["Terminating"], info
        (tmp_path / "gate").write_text("x")
        assert suspend.wait(timeout=60) == 0, suspend.communicate()
    finally:
        if suspend.poll() is None:
            suspend.kill()
    assert _ranks(dt, "job") == ["Stopped"]


def _queue(store: JobStore, name: str, project: str, gpu: int = 1) -> JobSpec:
    spec = JobSpec(name=name, command=("true",), gpu=gpu, project=project)
    store.insert_job(spec, cwd="/", node="here")
    return spec


def test_the_most_recently_started_job_is_preempted_first_not_the_last_submitted(store):
    """Run:AI preempts by priority, then the latest start (the least work lost): a job submitted
    earlier but started later goes first."""
    gpus = ["0", "1"]
    store.upsert_project("lab", None)
    store.upsert_project("team", 1)
    older = _queue(store, "older", "lab")  # submitted first...
    newer = _queue(store, "newer", "default")
    assert scheduler.try_allocate(store, newer, gpus) is not None
    time.sleep(0.01)
    assert scheduler.try_allocate(store, older, gpus) is not None  # ...started last
    assert scheduler.try_allocate(store, _queue(store, "urgent", "team"), gpus) is None
    assert (store.status("older"), store.status("newer")) == ("Pending", "Running")
    assert "preempted job older of project 'lab'" in store.events("urgent")[-1]["message"]


def test_a_job_started_again_after_a_preemption_counts_from_that_start(store):
    gpus = ["0", "1"]
    store.upsert_project("lab", None)
    store.upsert_project("team", 1)
    again, other = _queue(store, "again", "lab"), _queue(store, "other", "default")  # `other` submitted last
    assert scheduler.try_allocate(store, again, gpus) is not None
    assert scheduler.try_allocate(store, other, gpus) is not None
    assert store.set_status("again", "Pending", "preempted by job x of project 'team'")  # as a preemption does
    assert store.release_preempted("again")
    time.sleep(0.01)
    assert scheduler.try_allocate(store, again, gpus) is not None  # started again: the latest start
    assert scheduler.try_allocate(store, _queue(store, "urgent", "team"), gpus) is None
    assert (store.status("again"), store.status("other")) == ("Pending", "Running")


# Loads slowly: the preemption's SIGTERM comes before it says where it resumed from.
LATE_RESUME = """import signal, sys, time
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
print("loading", flush=True)
while not stop:
    time.sleep(0.05)
print("dtrain: resumed from step 7 (ckpt-7.pt)", flush=True)
time.sleep(0.5)
sys.exit(143)
"""


@pytest.mark.slow
def test_a_runs_resumed_event_never_comes_after_the_preemption_that_ended_it(dt_gpus: Dtrain, tmp_path):
    dt = dt_gpus
    _preempt_long(dt, tmp_path, LATE_RESUME, started="loading")
    dt.wait_for("urgent", {"Running"}, timeout=60)  # long's processes are gone: its GPUs were let go
    events = [e["message"] for e in dt.json("describe", "job", "long")["events"]]
    resumed = [i for i, m in enumerate(events) if m == "attempt 0: resumed from step 7"]
    preempted = [i for i, m in enumerate(events) if m.startswith("preempted by job urgent")]
    assert resumed and preempted and resumed[0] < preempted[0], events
    times = [e["time"] for e in dt.json("describe", "job", "long")["events"]]
    assert times == sorted(times), times


def test_events_read_in_the_order_they_happened(store):
    spec = _queue(store, "j", "default")
    assert scheduler.try_allocate(store, spec, ["0"]) is not None
    said = time.time()
    time.sleep(0.01)
    store.add_event("j", "Running", "later")
    store.add_run_event("j", "Running", "attempt 0: resumed from step 3", when=said)  # seen after `later`
    assert [e["message"] for e in store.events("j")][-2:] == ["attempt 0: resumed from step 3", "later"]
    time.sleep(0.01)  # the end goes 1 ms before the stop's event: `later` must be further back than that
    assert store.set_status("j", "Suspended", "suspended by the user")
    store.add_run_event("j", "Running", "attempt 0: resumed from step 4", when=time.time() + 1)
    assert [e["message"] for e in store.events("j")][-2:] == ["attempt 0: resumed from step 4",
                                                              "suspended by the user"]


def test_a_kubernetes_pod_being_deleted_reads_terminating_as_kubectl_shows_it():
    from dtrain.backends.kubernetes import status

    spec = JobSpec(name="j", command=("true",))
    obj = {"kind": status.BATCH_JOB.kind, "metadata": {"name": "j", "annotations": {
        status.ANN_SPEC: json.dumps(spec.to_dict())}}}
    pod = {"metadata": {"name": "j-0"}, "status": {"phase": "Running"}}
    assert [p.status for p in status.processes(obj["kind"], obj, spec, [pod])] == ["Running"]
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"  # suspended: its pod is being deleted
    assert [p.status for p in status.processes(obj["kind"], obj, spec, [pod])] == ["Terminating"]
