"""End-to-end tests of the local backend through the real `dtrain` command and real launchers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import DTRAIN, Dtrain, assert_usage_error, gated, rank_record

ALLREDUCE = str(Path(__file__).parent / "jobs" / "allreduce.py")
PY = sys.executable


def dump_state(home: Path) -> list:
    """Everything stored, to prove bad input changes nothing."""
    db = home / "state.db"
    if not db.exists():
        return []
    conn = sqlite3.connect(db)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        rows = [(t, conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall()) for t in tables]
        return [(t, r) for t, r in rows if r]  # opening a store may create empty tables; rows are the state
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.parametrize("verb,extra", [("submit-dist", ["--launcher", "torchrun"]), ("submit-mpi", [])])
def test_two_process_allreduce_runs_detached_and_reports_truth(dt: Dtrain, tmp_path, verb, extra):
    if verb == "submit-mpi" and not shutil.which("mpirun"):
        pytest.skip("OpenMPI is not installed (make setup installs it)")
    # the job waits for a file, so it is provably still running after `submit` returned
    hold, gate = gated(tmp_path)
    script = f"{hold}\nimport runpy\nrunpy.run_path({ALLREDUCE!r})"
    (tmp_path / "job.py").write_text(script)
    out = dt(verb, "ar", "--processes", "2", *extra, "--", "python", str(tmp_path / "job.py"))
    assert "submitted" in out.stdout
    info = dt.wait_running("ar")  # list says Starting while the job's processes are being launched
    assert info["spec"]["launcher"] == ("mpi" if verb == "submit-mpi" else "torchrun")
    listing = dt("list").stdout
    row = next(line for line in listing.splitlines() if line.startswith("ar "))
    assert "Running" in row and ("MPI" if verb == "submit-mpi" else "PyTorch") in row
    gate.write_text("go")
    assert dt("wait", "ar", "--timeout", "120").returncode == 0
    info = dt.json("describe", "job", "ar")
    assert info["status"] == "Succeeded"
    assert [p["exit_code"] for p in info["processes"]] == [0, 0]
    assert [e["status"] for e in info["events"]] == ["Pending", "Running", "Succeeded"]
    for rank in (0, 1):
        lines = dt("logs", "ar", "--rank", str(rank)).stdout.splitlines()
        assert lines == [f"rank {rank}/2 local_rank {rank} cuda_visible '' allreduce 3 expected 3"]
    both = dt("logs", "ar").stdout
    assert "[rank 0] rank 0/2" in both and "[rank 1] rank 1/2" in both
    assert len(dt("logs", "ar", "-t", "1").stdout.splitlines()) == 1
    stamped = dt("logs", "ar", "--rank", "0", "--timestamps").stdout
    assert stamped.startswith(time.strftime("%Y-", time.gmtime()))
    assert dt("logs", "ar", "--since", "1h").stdout == both
    assert "Succeeded" in dt("describe", "job", "ar").stdout


@pytest.mark.slow
def test_logs_follow_streams_until_the_job_ends(dt: Dtrain):
    code = "import time\nfor i in range(5):\n    print('tick', i, flush=True); time.sleep(0.3)"
    dt("submit", "ticker", "--", "python", "-c", code)
    out = dt("logs", "ticker", "-f", timeout=60).stdout.splitlines()
    assert out == [f"tick {i}" for i in range(5)]
    assert dt.status("ticker") == "Succeeded"


@pytest.mark.slow
def test_gang_scheduling_never_shares_a_device(dt_gpus: Dtrain, tmp_path):
    dt = dt_gpus
    hold, gate = gated(tmp_path, "release")
    wait = f"import os\nprint(os.environ['CUDA_VISIBLE_DEVICES'], flush=True)\n{hold}"
    dt("submit-dist", "first", "--processes", "2", "--gpu", "1", "--", "python", "-c", wait)
    dt.wait_for("first", {"Running"})
    dt("submit", "second", "--gpu", "1", "--", "python", "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])")
    seen = set()
    for _ in range(15):  # the second job stays Pending while the first holds both GPUs
        jobs = {j["name"]: j for j in dt.json("list")}
        assert jobs["second"]["status"] == "Pending"
        assert jobs["first"]["gpus_allocated"] == 2 and jobs["second"]["gpus_allocated"] == 0
        seen.add(jobs["second"]["processes_pending"])
        time.sleep(0.1)
    assert seen == {1}
    first = dt.json("describe", "job", "first")
    devices = [tuple(p["devices"]) for p in first["processes"]]
    assert sorted(devices) == [("0",), ("1",)]  # each process its own device
    deadline = time.monotonic() + 30
    while len(dt("logs", "first").stdout.splitlines()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sorted(dt("logs", "first").stdout.splitlines()) == ["[rank 0] 0", "[rank 1] 1"]
    gate.write_text("x")
    dt.wait_for("first", {"Succeeded"})
    info = dt.wait_for("second", {"Succeeded"})
    assert dt("logs", "second").stdout.strip() in ("0", "1")
    assert info["started"] >= dt.json("describe", "job", "first")["finished"]


@pytest.mark.slow
def test_fifo_within_project_and_quota(dt_gpus: Dtrain, tmp_path):
    dt = dt_gpus
    dt("project", "create", "team", "--gpu-quota", "1")
    hold, gate = gated(tmp_path)
    dt("submit", "a", "-p", "team", "--gpu", "1", "--", "python", "-c", hold)
    dt.wait_for("a", {"Running"})
    dt("submit", "b", "-p", "team", "--gpu", "1", "--", "true")   # over quota: waits
    dt("submit", "c", "-p", "team", "--", "true")                 # CPU job: queues behind no GPU job
    dt("submit", "d", "--gpu", "1", "--", "true")                 # other project: a GPU is free
    dt("submit", "f", "-p", "team", "--gpu", "1", "--", "true")   # GPU job: behind b (2nd in the queue)
    dt.wait_for("d", {"Succeeded"})
    c = dt.wait_for("c", {"Succeeded"})
    time.sleep(1.0)
    assert dt.status("b") == "Pending" and dt.status("f") == "Pending"
    assert "2nd in project 'team''s queue" in dt.json("describe", "job", "f")["message"]
    assert {j["name"] for j in dt.json("list", "-p", "team")} == {"a", "b", "c", "f"}
    assert {j["name"] for j in dt.json("list")} == {"d"}  # the default project's jobs, as runai list
    assert {j["name"] for j in dt.json("list", "-A")} == {"a", "b", "c", "d", "f"}
    projects = {p["name"]: p for p in dt.json("project", "list")}
    assert projects["team"]["gpu_quota"] == 1 and projects["team"]["gpus_allocated"] == 1
    gate.write_text("x")
    b = dt.wait_for("b", {"Succeeded"})
    f = dt.wait_for("f", {"Succeeded"})
    assert c["started"] < b["started"] <= f["started"]
    over = dt("submit", "e", "-p", "team", "--gpu", "2", "--", "true", check=False)
    assert over.returncode != 0 and "quota of 1" in over.stderr


def test_killed_process_fails_the_job(dt: Dtrain):
    dt("submit", "victim", "--", "python", "-c", "import time; print('up', flush=True); time.sleep(60)")
    dt.wait_for("victim", {"Running"})
    pid = rank_record(dt.home, "victim", 0)["pid"]
    os.kill(pid, signal.SIGKILL)
    info = dt.wait_for("victim", {"Failed"})
    assert info["processes"][0]["exit_code"] == 137
    assert "rank 0 was killed by SIGKILL (exit code 137)" in info["message"] and info["extra"]["exit_code"] == 137


@pytest.mark.slow
def test_killed_process_is_restarted_with_max_restarts(dt: Dtrain, tmp_path):
    marker = tmp_path / "attempts"
    # the line first, then the mark: a mark read back means the line was written (open() makes the file
    # before its 'x' is written, so the test waits for the 'x', not for the file)
    code = (f"import os,time\nprint('attempt', os.environ['DTRAIN_ATTEMPT'], flush=True)\n"
            f"with open({str(marker)!r},'a') as f: f.write('x')\n"
            f"if len(open({str(marker)!r}).read()) < 2: time.sleep(60)")
    dt("submit", "phoenix", "--max-restarts", "1", "--", "python", "-c", code)
    dt.wait_for("phoenix", {"Running"})
    deadline = time.monotonic() + 30
    while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(rank_record(dt.home, "phoenix", 0)["pid"], signal.SIGKILL)
    info = dt.wait_for("phoenix", {"Succeeded", "Failed"})
    assert info["status"] == "Succeeded" and info["restarts"] == 1
    # as kubectl: the current attempt's lines, and with --previous the attempt before's
    assert dt("logs", "phoenix").stdout.splitlines() == ["attempt 1"]
    assert dt("logs", "phoenix", "--previous").stdout.splitlines() == ["attempt 0"]
    # the events number the attempt that failed as its DTRAIN_ATTEMPT did (it said "attempt 1 failed")
    said = [e["message"] for e in info["events"]]
    assert any(m.startswith("attempt 0 failed: rank 0 was killed by SIGKILL") and m.endswith("(restart 1 of 1)")
               for m in said), said
    assert not any(m.startswith("attempt 1 failed") for m in said), said


@pytest.mark.slow
def test_torchrun_restarts_the_worker_group(dt: Dtrain, tmp_path):
    marker = tmp_path / "once"
    code = (f"import os,sys\nif not os.path.exists({str(marker)!r}) and os.environ['RANK']=='1':\n"
            f"    open({str(marker)!r},'w').write('x'); sys.exit(5)\nprint('ok', os.environ['RANK'])")
    dt("submit-dist", "elastic", "--processes", "2", "--max-restarts", "1", "--", "python", "-c", code)
    info = dt.wait_for("elastic", {"Succeeded", "Failed"}, timeout=180)
    assert info["status"] == "Succeeded" and info["restarts"] == 1


def test_lost_supervisor_is_never_shown_running(dt: Dtrain):
    dt("submit", "orphan", "--", "python", "-c", "import time; time.sleep(60)")
    dt.wait_for("orphan", {"Running"})
    conn = sqlite3.connect(dt.home / "state.db")
    pid = conn.execute("SELECT supervisor_pid FROM jobs WHERE name='orphan'").fetchone()[0]
    conn.close()
    rank_pid = rank_record(dt.home, "orphan", 0)["pid"]
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    info = dt.json("describe", "job", "orphan")
    assert info["status"] == "Failed" and "lost" in info["message"]
    _assert_dead(rank_pid)


@pytest.mark.slow
def test_delete_stops_every_process(dt: Dtrain):
    dt("submit-dist", "long", "--processes", "2", "--", "python", "-c", "import time; print('up', flush=True); time.sleep(120)")
    dt.wait_for("long", {"Running"})
    deadline = time.monotonic() + 60
    while len(list((dt.home / "jobs" / "long" / "ranks").glob("*.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = [rank_record(dt.home, "long", r)["pid"] for r in (0, 1)]
    out = dt("delete", "long")
    assert "deleted" in out.stdout
    for pid in pids:
        _assert_dead(pid)
    assert dt.status("long") == "Deleted"
    assert dt.json("list", "--show-deleted")[0]["gpus_allocated"] == 0
    dt("submit", "long", "--", "true")  # a deleted name can be used again
    assert dt.wait_for("long", {"Succeeded"})


@pytest.mark.slow
def test_same_spec_from_flags_yaml_and_sdk(dt: Dtrain, tmp_path):
    import dtrain

    flags = ["--processes", "2", "--launcher", "torchrun", "--cpu", "1", "--memory", "1Gi", "-e", "BATCH_SIZE=33",
             "-e", "USE_VAL=false", "--pvc", "local:1Gi:/data", "--large-shm", "--working-dir", str(tmp_path),
             "--max-restarts", "2", "--project", "lanes"]
    yaml_text = f"""
name: from-yaml
processes: 2
launcher: torchrun
cpu: 1
memory: 1Gi
env: {{BATCH_SIZE: "33", USE_VAL: "false"}}
pvc: ["local:1Gi:/data"]
large_shm: true
working_dir: {tmp_path}
max_restarts: 2
project: lanes
command: [python, -c, "print(1)"]
"""
    (tmp_path / "job.yaml").write_text(yaml_text)
    a = dtrain.JobSpec(name="from-sdk", command=("python", "-c", "print(1)"), processes=2, launcher="torchrun",
                       cpu=1, memory="1Gi", env={"BATCH_SIZE": "33", "USE_VAL": "false"},
                       volumes=(dtrain.parse_pvc("local:1Gi:/data"),), large_shm=True, working_dir=str(tmp_path),
                       max_restarts=2, project="lanes")
    dt("project", "create", "lanes")  # -p and project: name a project that exists
    dt("submit-dist", "from-flags", *flags, "--", "python", "-c", "print(1)")
    dt("submit", "-f", str(tmp_path / "job.yaml"))
    dtrain.Client(home=dt.home).submit(a)
    specs = {j["name"]: j["spec"] for j in dt.json("list", "-A")}
    for name in ("from-yaml", "from-sdk"):
        other = dict(specs[name], name="from-flags")
        assert other == specs["from-flags"], name
    for name in specs:
        dt.wait_for(name, {"Succeeded"}, timeout=120)


@pytest.mark.parametrize("args,needle", [
    (["submit", "j", "--pvc", "nocolon", "--", "true"], "invalid --pvc 'nocolon'"),
    (["submit", "j", "--pvc", "missing-vol:/mnt", "--", "true"], "missing-vol"),
    (["submit", "j", "-e", "NOEQUALS", "--", "true"], "invalid -e 'NOEQUALS'"),
    (["submit", "j", "--pvc", "local:1Gi:/mnt:ro", "--", "true"], "a new volume (CLASS:SIZE:MOUNT) starts empty"),
    (["submit", "j", "--pvc", "local:1Gi:/mnt\nx", "--", "true"], "it holds a control character"),
    (["submit", "j", "--", "no-such-command-xyz"], "'no-such-command-xyz' not found"),
    (["submit", "j"], "no command"),
    (["submit", "Bad_Name", "--", "true"], "invalid job name"),
    (["submit-dist", "j", "--processes", "0", "--", "true"], "--processes 0"),
    (["submit", "j", "--gpu", "3", "--", "true"], "needs 3 GPUs"),
    (["submit", "j", "--memory", "lots", "--", "true"], "invalid --memory"),
    (["project", "create", "p", "--gpu-quota", "9"], "larger than this machine"),
    (["logs", "ghost"], "no job named 'ghost'"),
    (["describe", "job", "ghost"], "no job named 'ghost'"),
    (["delete", "ghost"], "no job named 'ghost'"),
    (["logs", "dup", "--since", "yesterday"], "invalid --since"),
    (["submit", "dup", "--", "true"], "already exists"),
])
def test_bad_input_is_one_clear_line_and_changes_nothing(dt: Dtrain, args, needle):
    dt("submit", "dup", "--", "true")
    dt.wait_for("dup", {"Succeeded"})
    before = dump_state(dt.home)
    proc = dt(*args, check=False)
    assert proc.returncode == 2, proc
    assert needle in proc.stderr and proc.stderr.startswith("dtrain: error: ")
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert dump_state(dt.home) == before


def test_a_program_given_by_its_path_must_be_one_the_job_can_run(dt: Dtrain, tmp_path):
    """Refused at submit, in one line that says what to do, rather than a job that fails at start
    with "exited with code 126/127" (or, for a script without its x bit, "not found")."""
    (tmp_path / "plain.sh").write_text("echo hi\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "crlf.sh").write_bytes(b"#!/bin/sh\r\necho hi\r\n")
    (tmp_path / "lost.py").write_text("#!/no/such/python3 -u\nprint('hi')\n")
    (tmp_path / "good.sh").write_text("#!/bin/sh\necho hi from the script\n")
    for name in ("crlf.sh", "lost.py", "good.sh"):
        (tmp_path / name).chmod(0o755)
    before = dump_state(dt.home)
    for command, needles in [
        ("./plain.sh", ["is not executable: chmod +x ./plain.sh, or run it through its interpreter"]),
        ("./folder", ["'./folder' is a folder, not a program"]),
        ("./crlf.sh", ["Windows line endings", "dos2unix ./crlf.sh"]),
        ("./lost.py", ["names the interpreter '/no/such/python3' in its #! line"]),
        ("./gone.sh", ["'./gone.sh' not found (looked in the working folder)", "or give its full path"]),
        # a full path: it said 'looked in the working folder' and 'give its full path'
        ("/no/such/train.sh", ["'/no/such/train.sh' not found (looked in this machine's folders); "
                               "check the path after '--'"]),
        (str(tmp_path / "plain.sh"), ["is not executable"]),
    ]:
        assert_usage_error(dt("submit", "j", "--", command, check=False, cwd=tmp_path), *needles)
    assert dump_state(dt.home) == before
    dt("submit", "ok", "--", "./good.sh", cwd=tmp_path)
    assert dt.wait_for("ok", {"Succeeded"})
    assert dt("logs", "ok").stdout == "hi from the script\n"
    os.mkfifo(tmp_path / "pipe")  # never opened to read its #! line: that open waits for a writer
    (tmp_path / "pipe").chmod(0o755)
    dt("submit", "piped", "--", "./pipe", cwd=tmp_path, timeout=30)
    assert dt.wait_for("piped", {"Failed"})


def test_new_process_sees_jobs_of_earlier_processes(dt: Dtrain):
    """Unlike an in-memory job list, state is in SQLite: any later process sees every job."""
    import dtrain

    dt("submit", "seen", "--", "true")
    dt.wait_for("seen", {"Succeeded"})
    assert [j.name for j in dtrain.Client(home=dt.home).list()] == ["seen"]


def _assert_dead(pid: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.1)
    raise AssertionError(f"process {pid} is still running")


@pytest.mark.slow
def test_concurrent_submits_never_share_a_device(dt_gpus: Dtrain, tmp_path):
    """Six 1-GPU jobs submitted at once by separate CLI processes on 2 GPUs: every interval
    during which a job held a device is disjoint from every other job's on that device."""
    import subprocess

    from conftest import DTRAIN

    dt = dt_gpus
    record = ("import os, time, json; t0 = time.time(); time.sleep(0.4); "
              f"open({str(tmp_path)!r} + '/' + os.environ['DTRAIN_JOB_NAME'], 'w').write("
              "json.dumps([os.environ['CUDA_VISIBLE_DEVICES'], t0, time.time()]))")
    procs = [subprocess.Popen([DTRAIN, "submit", f"c{i}", "--gpu", "1", "--", "python", "-c", record], env=dt.env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(6)]
    for p in procs:
        assert p.wait(60) == 0, p.stderr.read()
    for i in range(6):
        assert dt.wait_for(f"c{i}", {"Succeeded", "Failed"})["status"] == "Succeeded"
    spans = [json.loads((tmp_path / f"c{i}").read_text()) for i in range(6)]
    assert {s[0] for s in spans} == {"0", "1"}
    for a in spans:
        for b in spans:
            if a is not b and a[0] == b[0]:
                assert a[2] <= b[1] or b[2] <= a[1], (a, b)


def test_a_link_where_the_jobs_folder_goes_is_refused_and_nothing_is_written_through_it(dt: Dtrain, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (dt.home / "jobs").mkdir(parents=True, exist_ok=True)
    (dt.home / "jobs" / "j1").symlink_to(elsewhere)
    proc = dt("submit", "j1", "--", "echo", "hi", check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"dtrain: error: {dt.home / 'jobs' / 'j1'} is a symbolic link, and a job's folder is never one: remove it "
        "and submit again (nothing was started)"]
    assert list(elsewhere.iterdir()) == [] and "j1" not in dt("list", "-A").stdout
    (dt.home / "jobs" / "j1").unlink()
    dt("submit", "j1", "--", "echo", "hi")
    dt("wait", "j1")
    assert "hi" in dt("logs", "j1").stdout and list(elsewhere.iterdir()) == []


def test_a_job_stored_under_looser_rules_can_still_be_listed_described_and_deleted(dt: Dtrain):
    """The env-name rule and the lowest --cpu and --memory were made stricter on 2026-12-02; a job
    submitted before, with values they now refuse, stays readable."""
    from dtrain.errors import SpecError
    from dtrain.spec import JobSpec

    dt("submit", "old", "--", "echo", "hi")
    dt("wait", "old")
    conn = sqlite3.connect(dt.home / "state.db")
    spec = json.loads(conn.execute("SELECT spec FROM jobs WHERE name = 'old'").fetchone()[0])
    spec.update(env={"A=B": "x"}, cpu=1e-7, memory="1")
    with pytest.raises(SpecError):
        JobSpec.from_dict(spec, door="cli")  # what a submit gets today
    assert JobSpec.from_stored(spec).env == {"A=B": "x"}
    with conn:
        conn.execute("UPDATE jobs SET spec = ? WHERE name = 'old'", (json.dumps(spec),))
    conn.close()
    assert "old" in dt("list").stdout
    assert "A=B" in dt("describe", "job", "old").stdout
    dt("delete", "old")
    assert "old" not in dt("list", "-A").stdout


PROGRESS = ("import sys, time\n"
            "print('start', flush=True)\n"
            "for i in range(3): sys.stdout.write(f'step {i}/3\\r'); sys.stdout.flush(); time.sleep(0.1)\n"
            "print('step 3/3 done', flush=True); print('end', flush=True)\n")


def test_logs_keep_a_carriage_return_line_whole_in_order_and_timed(dt: Dtrain):
    """tqdm-style progress ('\\r' without '\\n') is part of one line, as kubectl logs shows it: the
    reader once split records on '\\r' too, so its pieces came first (no time), --since dropped them
    and -t counted them."""
    def logs(*args: str) -> str:  # as bytes: a text-mode pipe would read each '\r' as a line end
        proc = subprocess.run([DTRAIN, "logs", "cr", *args], env=dt.env, capture_output=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.decode()

    dt("submit", "cr", "--", "python", "-c", PROGRESS)
    assert dt("wait", "cr").returncode == 0
    bar = "step 0/3\rstep 1/3\rstep 2/3\rstep 3/3 done"
    assert logs() == f"start\n{bar}\nend\n"
    assert logs("--since", "5m") == f"start\n{bar}\nend\n"
    assert logs("-t", "2") == f"{bar}\nend\n"
    got = [json.loads(line) for line in logs("--json").splitlines()]
    assert [g["text"] for g in got] == ["start", bar, "end"]
    times = [g["time"] for g in got]
    assert None not in times and times == sorted(times)
    # each record is one line of the file for any line reader (less, grep, universal newlines)
    with open(dt.home / "jobs" / "cr" / "logs" / "rank-0.log", encoding="utf-8") as f:
        assert len(f.read().splitlines()) == 3


@pytest.mark.parametrize("text", ["plain", "", " leading space", "\ttab first", "a\rb", "end\r", "\rstart",
                                  "v\x0bf\x0cfs\x1cgs\x1drs\x1e", "nel\x85ls\u2028ps\u2029", "ünïcode\r✓",
                                  '"quoted"\r\\back', "2026-01-01T00:00:00.000000Z\tlooks like a record"])
def test_a_log_record_reads_back_as_written(text):
    from dtrain.backends.local.rankrun import format_line, parse_line

    record = format_line(text, 1_700_000_000.25)
    assert record.endswith("\n") and len(record.splitlines()) == 1
    assert parse_line(record) == (1_700_000_000.25, text)


@pytest.mark.slow
def test_a_ranks_gpus_are_numbered_as_nvml_numbers_them(dt_gpus: Dtrain):
    """CUDA_VISIBLE_DEVICES holds NVML's ids (PCI bus order); CUDA read them in its own order, fastest
    first (the default, or a CUDA_DEVICE_ORDER from the submitter's shell or -e), so on a machine of
    mixed GPUs a rank ran on another job's GPU."""
    from dtrain.backends.local.rankrun import contract_env

    env = contract_env({"DTRAIN_RANK_DEVICES": "0;1", "RANK": "1", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    assert (env["CUDA_VISIBLE_DEVICES"], env["CUDA_DEVICE_ORDER"]) == ("1", "PCI_BUS_ID")
    dt = Dtrain(dt_gpus.home, env={**dt_gpus.env, "CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    dt("submit-dist", "ordered", "--processes", "2", "--gpu", "1", "-e", "CUDA_DEVICE_ORDER=FASTEST_FIRST", "--",
       "python", "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['CUDA_DEVICE_ORDER'])")
    assert dt.wait_for("ordered", {"Succeeded", "Failed"})["status"] == "Succeeded"
    assert sorted(dt("logs", "ordered").stdout.splitlines()) == ["[rank 0] 0 PCI_BUS_ID", "[rank 1] 1 PCI_BUS_ID"]


@pytest.mark.slow
def test_torchrun_passes_dollar_signs_in_the_command_as_given(dt: Dtrain):
    """torchrun substitutes its arguments as string.Template: `sh -c 'kill $$'` ran `kill $` (the
    shell: 'Illegal number: $') and ${local_rank} became 0 or 1, unlike mpirun or a PyTorchJob pod."""
    script = "import sys; print(sys.argv[1])"
    dt("submit-dist", "dollars", "--processes", "2", "--", "python", "-c", script, "a$$b${local_rank}$c")
    assert dt.wait_for("dollars", {"Succeeded", "Failed"})["status"] == "Succeeded"
    assert dt("logs", "dollars").stdout.splitlines() in (["[rank 0] a$$b${local_rank}$c",
                                                          "[rank 1] a$$b${local_rank}$c"],
                                                         ["[rank 1] a$$b${local_rank}$c",
                                                          "[rank 0] a$$b${local_rank}$c"])
