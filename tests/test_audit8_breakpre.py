"""Preemption (scheduler.py, supervisor.py) tried the way a Run:AI user meets it: a workload that
exits 0 after writing its checkpoint on SIGTERM, a job preempted in its restart backoff."""

from __future__ import annotations

import time

from conftest import Dtrain


def _until(what, check, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.2)
    return got


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
