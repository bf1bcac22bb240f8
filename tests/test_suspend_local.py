"""`dtrain suspend` / `dtrain resume` on the local backend (Run:AI's verbs): a suspended job's
processes get SIGTERM and checkpoint, its GPUs go to the next job, it reads Suspended until
resumed, and a resumed job waits for its GPUs again and goes on from its checkpoint."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from conftest import DTRAIN, Dtrain, assert_usage_error, counter_script, job_store

COUNTER = counter_script(100)


def _started(dt: Dtrain, name: str, n: int = 1) -> None:
    """Wait until the job has printed its n-th 'start at' line (its process runs)."""
    import time
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        lines = dt("logs", name).stdout
        if lines.count("start at") >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"job {name} never started run {n}: {dt('describe', name).stdout}")


@pytest.mark.slow
def test_suspend_frees_the_gpu_and_resume_goes_on_from_the_checkpoint(dt_gpus: Dtrain, tmp_path):
    dt = dt_gpus
    (tmp_path / "count.py").write_text(COUNTER)
    dt("project", "create", "team", "--gpu-quota", "1")
    dt("submit", "a", "-p", "team", "--gpu", "1", "--working-dir", str(tmp_path), "--", "python", "count.py")
    dt.wait_for("a", {"Running"})
    _started(dt, "a")
    dt("submit", "b", "-p", "team", "--gpu", "1", "--", "sleep", "8")
    assert dt.status("b") == "Pending"  # the quota holds it back

    out = dt("suspend", "a", "-p", "team").stdout
    assert out == "The job 'a' has been suspended (Suspended)\n"
    info = dt.json("describe", "job", "a", "-p", "team")
    assert info["status"] == "Suspended" and info["gpus_allocated"] == 0 and info["finished"] is None
    assert info["message"] == "suspended by the user; 'dtrain resume a -p team' starts it again from its last checkpoint"
    assert [p["status"] for p in info["processes"]] == ["Stopped"]
    stopped_at = int((tmp_path / "count.txt").read_text())
    assert "checkpoint at" in dt("logs", "a").stdout
    dt.wait_for("b", {"Running"})  # a's GPU went to b

    assert dt("resume", "a").stdout == "The job 'a' has been resumed (Pending)\n"
    info = dt.json("describe", "job", "a")  # queued behind b: nothing of the stopped run shows as its ranks
    assert info["status"] == "Pending", info
    assert [(p["status"], p["exit_code"]) for p in info["processes"]] == [("Pending", None)], info
    assert info["processes_pending"] == 1 and info["gpus_allocated"] == 0
    assert dt.wait_for("b", {"Succeeded", "Failed"})["status"] == "Succeeded"
    assert dt.wait_for("a", {"Succeeded", "Failed"}, timeout=120)["status"] == "Succeeded"
    # The resumed run is a new launch, as a resumed PyTorchJob's pods are new: `logs` shows its lines,
    # `logs --previous` those of the run the suspension stopped.
    lines = dt("logs", "a").stdout.splitlines()
    assert lines[0] == f"start at {stopped_at}" and lines[-1] == "done" and "start at 0" not in lines, lines
    before = dt("logs", "a", "--previous").stdout.splitlines()
    assert before[0] == "start at 0" and any(line.startswith("checkpoint at") for line in before), before
    info = dt.json("describe", "job", "a")
    events = [(e["status"], e["message"].split(";")[0]) for e in info["events"]]
    assert ("Suspended", "suspended by the user") in events and ("Pending", "resumed by the user") in events
    assert info["restarts"] == 0  # a suspension spends no restart
    first_start = [e["time"] for e in info["events"] if e["status"] == "Running"][0]
    assert abs(info["started"] - first_start) < 1  # the first start is kept through the resume


def test_refusals_are_one_line_and_change_nothing(dt: Dtrain, tmp_path):
    dt("submit", "done", "--", "true")
    assert dt.wait_for("done", {"Succeeded", "Failed"})["status"] == "Succeeded"
    assert_usage_error(dt("suspend", "done", check=False),
                       "job 'done' is Succeeded: 'dtrain suspend' takes a Pending or Running job; nothing was suspended")
    assert_usage_error(dt("resume", "done", check=False),
                       "job 'done' is Succeeded: 'dtrain resume' takes a Suspended job; nothing was resumed")
    dt("submit", "run", "--", "sleep", "60")
    # every name is checked before anything is done: 'run' keeps running
    assert_usage_error(dt("suspend", "run", "nope", check=False), "no job named 'nope'", "nothing was suspended")
    assert_usage_error(dt("suspend", "run", "done", check=False), "job 'done' is Succeeded")
    assert dt.status("run") in ("Pending", "Running")
    assert_usage_error(dt("suspend", "volume", "x", check=False), "'dtrain suspend' is for jobs")
    assert dt("suspend", "job", "run").returncode == 0  # Run:AI's noun is taken
    assert_usage_error(dt("suspend", "run", check=False), "job 'run' is Suspended")
    assert_usage_error(dt("submit", "run", "--", "true", check=False),
                       "a job named 'run' already exists (Suspended)", "(or go on with it: 'dtrain resume run')")
    dt("delete", "run")  # a suspended job is deleted as any other
    assert dt.status("run") == "Deleted"
    assert_usage_error(dt("resume", "run", check=False), "job 'run' is Deleted")


def test_a_suspended_jobs_volume_is_kept_for_its_resume(dt: Dtrain, tmp_path):
    dt("volume", "create", "data", "--size", "1Gi")
    dt("submit", "v", "--pvc", "data:/mnt/data", "--", "sleep", "60")
    dt.wait_for("v", {"Running"})
    dt("suspend", "v")
    # a suspended job never finishes on its own: the refusal names its delete (or resume), not a wait
    assert_usage_error(dt("volume", "delete", "data", check=False),
                       "volume 'data' is in use by job v: v is Suspended, which never finishes on its own: "
                       "delete it ('dtrain delete v') or resume and wait ('dtrain resume v'), or delete with --force")
    dt("volume", "delete", "data", "--force")
    # its resume names the missing volume at once, instead of a job that fails at its start
    assert_usage_error(dt("resume", "v", check=False), "'data'")
    assert dt.status("v") == "Suspended"


@pytest.mark.slow
def test_resume_waits_for_a_supervisor_still_stopping(dt: Dtrain, tmp_path):
    """A resume while the last supervisor still runs (an idle notebook suspends itself, then stops
    Jupyter) waits for it to exit rather than start a second one beside it. White box: the record
    names a process that exits 3 s later."""
    import subprocess
    import threading
    import time

    from dtrain.backends.local.ranks import supervisor_token
    from dtrain.procs import Ident

    dt("submit", "s", "--", "sleep", "60")
    dt.wait_for("s", {"Running"})
    dt("suspend", "s")
    stopping = subprocess.Popen(["sleep", "3"])
    threading.Thread(target=stopping.wait, daemon=True).start()  # reaped at its exit: no zombie stays "alive"
    ident = Ident.of(stopping.pid)
    with sqlite3.connect(dt.home / "state.db") as db:
        db.execute("UPDATE jobs SET supervisor_pid=?, supervisor_start=? WHERE name='s'",
                   (ident.pid, supervisor_token(ident)))
    began = time.monotonic()
    assert dt("resume", "s").stdout == "The job 's' has been resumed (Pending)\n"
    assert stopping.poll() is not None and time.monotonic() - began >= 2  # it waited for that process
    dt.wait_for("s", {"Running"})
    dt("delete", "s")


def test_two_resumes_at_once_queue_it_once(home):
    """The store moves Suspended -> Pending only from Suspended: the second of two resumes is refused
    (Pending -> Pending would be a relaunch, starting a second supervisor)."""
    from dtrain.errors import ConflictError
    from dtrain.spec import JobSpec

    with job_store(home) as store:
        store.insert_job(JobSpec(name="j", command=("true",)), cwd=str(home), node="n")
        assert store.set_status("j", "Suspended", "suspended by the user")
        store.resume("j", "resumed")
        with pytest.raises(ConflictError, match="job 'j' is Pending: only a Suspended job can be resumed"):
            store.resume("j", "resumed")
        assert [e["status"] for e in store.events("j")] == ["Pending", "Suspended", "Pending"]
        assert store.set_status("j", "Suspended", "x")  # Pending -> Suspended is allowed
        assert not store.set_status("j", "Running", "x")  # Suspended -> Running is not: a late supervisor loses
        assert not store.set_status("j", "Failed", "x")


def test_the_http_api_suspends_and_resumes(home, tmp_path):
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from server_util import ServerProcess

    server = ServerProcess(home, cwd=tmp_path)
    try:
        http = server.http
        assert http.post("/api/v1/jobs", json={"name": "h", "command": ["sleep", "60"]}).status_code == 201
        r = http.post("/api/v1/jobs/h/suspend")
        assert r.status_code == 200 and r.json()["status"] == "Suspended", r.text
        r = http.post("/api/v1/jobs/h/suspend")
        assert r.status_code == 409 and "only a Pending or Running job can be suspended" in r.text, r.text
        assert [j["name"] for j in http.get("/api/v1/jobs", params={"status": "Suspended"}).json()] == ["h"]
        r = http.post("/api/v1/jobs/h/resume")
        assert r.status_code == 200 and r.json()["status"] == "Pending", r.text
        assert http.post("/api/v1/jobs/nope/resume").status_code == 404
        assert http.delete("/api/v1/jobs/h").json()["status"] == "Deleted"
    finally:
        server.stop()


@pytest.mark.slow
def test_a_pipeline_step_follows_its_job_across_a_suspension(home, tmp_path, monkeypatch):
    """A KFP step that submitted a job echoes its log; a suspension ends that log's stream: the
    step says so, waits for the resume, and echoes the resumed run's lines, none twice."""
    import threading
    import time

    import dtrain
    from dtrain.pipelines import steps

    monkeypatch.setattr(steps, "RESUME_POLL_S", 0.2)
    (tmp_path / "count.py").write_text(COUNTER)
    client = dtrain.Client(home=home)
    echoed: list[str] = []
    result: dict = {}
    step = threading.Thread(target=lambda: result.update(info=steps.run_job(
        {"name": "p", "command": ["python", "count.py"], "working_dir": str(tmp_path)}, backend="local",
        client=dtrain.Client(home=home), echo=echoed.append)))
    step.start()
    try:
        deadline = time.monotonic() + 60
        while "[p rank 0] start at 0" not in echoed and time.monotonic() < deadline:
            time.sleep(0.1)
        client.suspend("p")
        while not any("this step waits for 'dtrain resume p'" in e for e in echoed) and time.monotonic() < deadline:
            time.sleep(0.1)
        client.resume("p")
        step.join(timeout=120)
    finally:
        if step.is_alive():
            client.delete("p")
    assert result["info"].status.value == "Succeeded"
    lines = [e for e in echoed if e.startswith("[p rank 0] ")]
    assert len(lines) == len(set(lines)), echoed  # nothing echoed twice
    checkpoint = next(e for e in lines if "checkpoint at" in e).rsplit(" ", 1)[1]
    assert lines[0] == "[p rank 0] start at 0" and f"[p rank 0] start at {checkpoint}" in lines, echoed
    assert lines[-1] == "[p rank 0] done", echoed
    notes = [e for e in echoed if e.startswith("[p] ")]
    assert notes[0].startswith("[p] suspended (suspended by the user"), echoed
    assert notes[1] in ("[p] resumed (Pending)", "[p] resumed (Running)"), echoed


@pytest.mark.slow
def test_logs_follow_keeps_the_lines_a_suspended_job_writes_while_it_stops(dt: Dtrain, tmp_path):
    """`logs -f` ends once the job is Suspended and its processes have exited, not when the status
    is recorded: the status comes first, and the workload's checkpoint lines come after it."""
    import subprocess

    (tmp_path / "slow_stop.py").write_text(
        "import signal, sys, time\n"
        "def stop(*_):\n"
        "    time.sleep(1.5); print('checkpoint saved', flush=True); sys.exit(143)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\n")
    dt("submit", "s", "--working-dir", str(tmp_path), "--", "python", "slow_stop.py")
    dt.wait_for("s", {"Running"})
    _started_line(dt, "s", "started")
    follower = subprocess.Popen([DTRAIN, "logs", "s", "-f"], env=dt.env, stdout=subprocess.PIPE, text=True)
    try:
        dt("suspend", "s")
        out, _ = follower.communicate(timeout=60)
    finally:
        follower.kill()
    assert follower.returncode == 0
    assert out.splitlines() == ["started", "checkpoint saved"], out


def _started_line(dt: Dtrain, name: str, line: str) -> None:
    import time
    deadline = time.monotonic() + 60
    while line not in dt("logs", name).stdout:
        assert time.monotonic() < deadline, dt("describe", name).stdout
        time.sleep(0.2)


# On SIGTERM it says so (a file), then waits for the test's word (another file) before it exits:
# a checkpoint written from the GPU, as long as the test wants it to take.
SLOW_STOP = """import os, pathlib, signal, time
here = pathlib.Path(os.environ["HERE"])
def stop(*_):
    (here / "stopping").write_text(os.environ["CUDA_VISIBLE_DEVICES"])
    while not (here / "go").exists():
        time.sleep(0.05)
    raise SystemExit(143)
signal.signal(signal.SIGTERM, stop)
print("start at 0", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("verb", ["suspend", "delete"])
def test_a_stopping_jobs_gpus_go_to_no_other_job_until_its_processes_are_gone(dt_gpus: Dtrain, tmp_path, verb):
    """The devices were released when Suspended or Deleted was recorded, before the processes had
    even been signalled: the next job started on the GPU the stopping one still wrote its
    checkpoint from (on a real GPU, its memory still held). Kubernetes counts a terminating pod's
    GPUs until it has exited."""
    import subprocess
    import time

    from dtrain.backends.local import scheduler
    from dtrain.spec import JobSpec

    dt = dt_gpus
    (tmp_path / "slow.py").write_text(SLOW_STOP)
    dt("submit", "holder", "-g", "2", "-e", f"HERE={tmp_path}", "--working-dir", str(tmp_path), "--",
       "python", "slow.py")
    dt.wait_for("holder", {"Running"})
    _started(dt, "holder")
    dt("submit", "next", "-g", "1", "--", "sh", "-c", "echo got GPU $CUDA_VISIBLE_DEVICES")
    stop = subprocess.Popen([DTRAIN, verb, "holder"], env=dt.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "stopping").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "stopping").read_text() == "0,1"  # its process runs on both GPUs still
        with job_store(dt.home) as store:
            spec = JobSpec.from_stored(json.loads(store.job("next")["spec"]))
            assert store.status("next") == "Pending"
            assert scheduler.try_allocate(store, spec, ["0", "1"]) is None  # as its supervisor finds it
            assert store.allocations() == {"0": "holder", "1": "holder"}
        nodes = dt.json("nodes")
        assert nodes[0]["gpus_allocated"] == 2 and {g["job"] for g in nodes[0]["gpus"]} == {"holder"}
    finally:
        (tmp_path / "go").write_text("")
        out, err = stop.communicate(timeout=120)
    assert stop.returncode == 0, err
    assert dt.json("describe", "job", "holder")["gpus_allocated"] == 0  # released once it had stopped
    assert dt.wait_for("next", {"Succeeded", "Failed"})["status"] == "Succeeded"
    assert dt("logs", "next").stdout in ("got GPU 0\n", "got GPU 1\n")


def test_devices_a_cut_short_stop_left_held_are_released_once_its_supervisor_is_gone(home):
    """A `dtrain suspend` killed (Ctrl-C) while its job stopped, the supervisor killed too: the
    next reconcile (any `list`, a waiting supervisor) lets the devices go; `resume` does as well."""
    from dtrain.backends.local.backend import LocalBackend
    from dtrain.backends.local import scheduler
    from dtrain.backends.local.ranks import supervisor_token
    from dtrain.procs import Ident
    from dtrain.spec import JobSpec

    backend = LocalBackend(home)
    store = backend.store
    me = Ident.of(os.getpid())
    gone = supervisor_token(me._replace(start=str(int(me.start) - 1)))  # this pid, as a process before us
    for name in ("stopping", "cut-short", "resumed"):
        spec = JobSpec(name=name, command=("true",), gpu=1)
        store.insert_job(spec, cwd=str(home), node="n")
        assert scheduler.try_allocate(store, spec, ["0", "1", "2"]) is not None
        assert store.set_status(name, "Suspended", "suspended by the user", hold=True)
        store.update(name, supervisor_pid=me.pid, supervisor_start=supervisor_token(me) if name == "stopping"
                     else gone)
    assert store.allocations() == {"0": "stopping", "1": "cut-short", "2": "resumed"}
    store.resume("resumed", "resumed by the user")  # its last supervisor has exited: what it held goes
    assert store.allocations() == {"0": "stopping", "1": "cut-short"}
    backend.reconcile_others(None)
    assert store.allocations() == {"0": "stopping"}  # its supervisor still runs: its processes may too
    store.release("stopping")
    assert store.allocations() == {}
