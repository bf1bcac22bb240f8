"""Preemption (scheduler.py, supervisor.py) tried the way a Run:AI user meets it: a workload that
exits 0 after writing its checkpoint on SIGTERM, a job preempted in its restart backoff."""

from __future__ import annotations

import time

from dtrain.backends.local import scheduler
from dtrain.backends.local.store import JobStore
from dtrain.backends.local.supervisor import Supervisor
from dtrain.spec import JobSpec
from conftest import Dtrain


def _until(what, check, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.2)
    return got


def test_a_job_preempted_in_its_restart_backoff_lets_its_gpus_go_at_once(tmp_path):
    """Its launch failed and it waits (up to 60 s) before the next: preempted meanwhile, it stops
    waiting then, instead of holding the GPUs the in-quota job needs for the rest of the backoff."""
    store = JobStore(tmp_path / "state.db")
    try:
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
    finally:
        store.close()


# Counts to 40 in tenths of a second from count.txt; on SIGTERM it writes where it was and exits 0,
# as many training scripts' graceful stops do (Lightning, a Trainer's signal handler).
GRACEFUL = """import pathlib, signal, sys, time
ck = pathlib.Path("count.txt")
start = int(ck.read_text()) if ck.exists() else 0
print("start at", start, flush=True)
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
for i in range(start, 40):
    if stop:
        ck.write_text(str(i)); print("checkpoint at", i, flush=True); sys.exit(0)
    time.sleep(0.1)
ck.write_text("40"); print("done", flush=True)
"""


def test_a_preempted_job_that_exits_0_on_sigterm_is_queued_again_not_succeeded(dt_gpus: Dtrain, tmp_path):
    dt = dt_gpus  # 2 GPUs
    (tmp_path / "count.py").write_text(GRACEFUL)
    dt("project", "create", "team", "--gpu-quota", "1")
    dt("submit", "long", "--gpu", "2", "--working-dir", str(tmp_path), "--", "python", "count.py")
    _until("long started", lambda: "start at 0" in dt("logs", "long").stdout)
    dt("submit", "urgent", "-p", "team", "--gpu", "1", "--", "true")
    _until("long stopped", lambda: "checkpoint at" in dt("logs", "long").stdout)
    assert dt.wait_for("urgent", {"Succeeded", "Failed"})["status"] == "Succeeded"
    done = dt.wait_for("long", {"Succeeded", "Failed"}, timeout=120)
    assert done["status"] == "Succeeded" and done["restarts"] == 0, done
    assert (tmp_path / "count.txt").read_text() == "40"  # it trained to the end, not only to the preemption
    assert dt("logs", "long").stdout.splitlines()[-1] == "done"
