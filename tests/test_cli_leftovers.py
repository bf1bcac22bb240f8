"""The local CLI as a new Run:AI user meets it: describe, list, project list, config, logs --since."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from conftest import DTRAIN, Dtrain, assert_usage_error, job_store
from dtrain.backends.local.logfiles import BLOCK, LogFiles
from dtrain.backends.local.rankrun import format_line
from dtrain.cli.main import main
from dtrain.spec import JobSpec


def _queue_unseen(home: Path, name: str) -> None:
    """A job as `submit` stores it, before its supervisor first asks the scheduler (none is started)."""
    with job_store(home) as store:
        store.insert_job(JobSpec(name=name, command=("true",)), cwd="/", node="this-host")
    (home / "jobs" / name / "logs").mkdir(parents=True)


def test_a_job_just_submitted_says_it_is_queued_and_names_no_node(dt: Dtrain):
    _queue_unseen(dt.home, "fresh")
    text = dt("describe", "job", "fresh").stdout
    assert "Message: queued: waiting for the scheduler to place it" in text
    assert "Node: -" in text and "this-host" not in text  # placed nowhere yet, as Run:AI shows a pending job
    row = dt("list").stdout.splitlines()[1].split()
    assert row[:2] == ["fresh", "Pending"] and row[3] == "-"
    info = dt.json("describe", "job", "fresh")
    assert info["node"] is None and [p["node"] for p in info["processes"]] == [None]
    assert [(e["status"], e["message"]) for e in info["events"]] == [("Pending", "queued")]


def test_a_running_job_whose_rank_has_ended_counts_it_until_its_end_is_recorded(dt: Dtrain):
    """Between a rank's exit and its supervisor recording the job's end, `dtrain list` showed the job
    Running with PROCESSES '0 (0)': the ended rank was neither running nor pending."""
    from dtrain.backends.local.ranks import supervisor_token
    from dtrain.procs import Ident

    supervisor = subprocess.Popen(["sleep", "300"])  # alive: no command takes the job for lost
    try:
        with job_store(dt.home) as store:
            store.insert_job(JobSpec(name="ending", command=("true",), processes=2, launcher="torchrun"), cwd="/",
                             node="this-host")
            assert store.set_status("ending", "Running", "started", started=time.time())
            ident = Ident.of(supervisor.pid)
            store.update("ending", supervisor_pid=ident.pid, supervisor_start=supervisor_token(ident))
        ranks = dt.home / "jobs" / "ending" / "ranks"
        ranks.mkdir(parents=True)
        (dt.home / "jobs" / "ending" / "logs").mkdir()
        (ranks / "rank-0.json").write_text(json.dumps({"rank": 0, "status": "Succeeded", "exit_code": 0}))
        (ranks / "rank-1.json").write_text(json.dumps({"rank": 1, "status": "Failed", "exit_code": 3}))
        row = next(j for j in dt.json("list") if j["name"] == "ending")
        assert row["status"] == "Running" and (row["processes_running"], row["processes_pending"]) == (2, 0), row
        line = dt("list").stdout.splitlines()[1]
        assert line.split()[:2] == ["ending", "Running"] and line.endswith("2 (0)"), line
        # describe still says what each rank did
        assert [p["status"] for p in dt.json("describe", "job", "ending")["processes"]] == ["Succeeded", "Failed"]
    finally:
        supervisor.kill()
        supervisor.wait()


def test_a_job_that_ran_names_its_node(dt: Dtrain):
    dt("submit", "ran", "--", "true")
    dt("wait", "ran")
    assert dt.json("describe", "job", "ran")["node"]


def test_project_list_counts_no_deleted_job(dt: Dtrain):
    dt("submit", "gone", "--", "true")
    dt("submit", "kept", "--", "true")
    dt("wait", "gone")
    dt("wait", "kept")
    dt("delete", "gone")
    assert [(p["name"], p["jobs"]) for p in dt.json("project", "list")] == [("default", 1)]
    assert dt("project", "list").stdout.splitlines()[1].split()[-1] == "1"


def test_config_without_a_value_prints_the_current_one(dt: Dtrain):
    assert dt("config", "project").stdout == "default\n"
    assert dt("config", "backend").stdout == "local\n"
    dt("project", "create", "team")
    dt("config", "project", "team")
    dt("config", "backend", "kubernetes", "-p", "team")
    assert dt("config", "project").stdout == "team\n"
    assert dt("config", "backend", "-p", "team").stdout == "kubernetes\n"
    assert dt("config", "backend").stdout == "local\n"


@pytest.mark.parametrize("argv, needle", [
    (["config", "project", "team", "-p", "other"], "-p/--project is for 'dtrain config backend'"),
    (["config", "backend", "local", "--role", "arn:aws:iam::1:role/r"], "--role is for 'dtrain config sagemaker'"),
    (["config", "project", "--bucket", "b", "--region", "r"], "--bucket, --region are for 'dtrain config sagemaker'"),
])
def test_config_flags_of_another_setting_are_refused_not_dropped(dt: Dtrain, argv, needle):
    dt("project", "create", "team")
    before = (dt.home / "config.yaml").read_bytes() if (dt.home / "config.yaml").exists() else None
    assert_usage_error(dt(*argv, check=False), needle, "nothing was changed")
    after = (dt.home / "config.yaml").read_bytes() if (dt.home / "config.yaml").exists() else None
    assert after == before


def _read_bytes() -> int:
    """Bytes this process has read through read(2) so far (the page cache included)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def _long_log(folder: Path, old: float, new: float, recent: list[str]) -> Path:
    """A rank log of 64 MiB of lines stamped `old`, then `recent` stamped `new`, as rankrun writes."""
    folder.mkdir(parents=True)
    line = format_line("epoch 1 step 10 loss 0.25 " + "x" * 90, old).encode()
    path = folder / "rank-0.log"
    with open(path, "wb") as f:
        f.write(line * (64 * 2**20 // len(line)))
        f.write(format_line("half a clock step back", new - 60).encode())
        f.write("".join(format_line(text, new) for text in recent).encode())
    return path


def test_logs_since_seeks_to_the_recent_lines(tmp_path):
    """`logs --since 10m` of a day-long log read the whole file; it now bisects on the lines' times."""
    now = time.time()
    recent = [f"recent {i}" for i in range(5)]
    _long_log(tmp_path / "logs", now - 86400, now, recent)
    before = _read_bytes()
    got = [line.text for line in LogFiles(tmp_path / "logs", rank=None, since=now - 600).read()]
    assert got == ["half a clock step back", *recent]
    assert _read_bytes() - before < 8 * BLOCK  # a few blocks, not 64 MiB
    assert [ln.text for ln in LogFiles(tmp_path / "logs", rank=0, since=now - 30).read(last=2)] == recent[-2:]
    assert list(LogFiles(tmp_path / "logs", rank=None, since=now + 1).read()) == []


def test_logs_since_keeps_every_line_newer_than_since_whatever_the_file_holds(tmp_path):
    """Lines out of order within the clock slack, and lines without a time, lose nothing --since keeps."""
    now = time.time()
    folder = tmp_path / "logs"
    folder.mkdir()
    filler = format_line("old " + "y" * 200, now - 7200)
    lines = [filler] * 20000 + ["no time at all\n"] + [filler] * 20000 + [
        format_line("new a", now - 100), format_line("back a little", now - 200), format_line("new b", now - 50)]
    (folder / "rank-0.log").write_text("".join(lines))
    got = [ln.text for ln in LogFiles(folder, rank=None, since=now - 150).read()]
    assert got == ["new a", "new b"]


def test_volume_and_snapshot_describe_read_like_job_describe(dt: Dtrain):
    dt("volume", "create", "data", "--size", "1Mi")
    (Path(dt.json("volume", "describe", "data")["extra"]["path"]) / "f").write_text("hello")
    dt("snapshot", "create", "data", "--name", "s1")
    vol = dt("volume", "describe", "data").stdout.splitlines()
    assert vol[:4] == ["Name: data", "Status: Bound", "Backend: local", "Storage class: local"]
    assert "Size: 1Mi" in vol and "From snapshot: -" in vol and "Details:" in vol
    assert any(line.startswith("Used: ") and line.endswith(("B", "Ki")) for line in vol)
    assert "  snapshots: cas" in vol or "  snapshots: reflink" in vol or "  snapshots: subvolume" in vol
    snap = dt("snapshot", "describe", "s1").stdout.splitlines()
    assert snap[:4] == ["Name: s1", "Status: Ready", "Backend: local", "Volume: data"]
    assert "Volume size: 1Mi" in snap and "Details:" in snap
    job = dt("describe", "job", _ran(dt)).stdout.splitlines()
    assert job[0].startswith("Name: ") and "Spec:" in job  # the same layout: labels, then sections


def _ran(dt: Dtrain) -> str:
    dt("submit", "one", "--", "true")
    dt("wait", "one")
    return "one"


def test_a_snapshot_taken_by_a_job_shows_its_spec_and_command(dt: Dtrain):
    dt("volume", "create", "out", "--size", "1Mi")
    dt("submit", "writer", "--pvc", "out:/mnt", "--snapshot-on-success", "out", "--", "sh", "-c", "echo x > /mnt/f")
    assert dt("wait", "writer").returncode == 0
    name = dt.json("describe", "job", "writer")["snapshot"]
    text = dt("snapshot", "describe", name).stdout
    assert "Job: writer" in text and "Job spec:" in text
    assert "  command: sh -c 'echo x > /mnt/f'" in text.splitlines()
    assert json.loads(dt("snapshot", "describe", name, "--json").stdout)["job_spec"]["command"] == [
        "sh", "-c", "echo x > /mnt/f"]


def test_logs_skip_what_is_no_rank_log_in_the_logs_folder(dt: Dtrain, tmp_path):
    """A copy (rank-0-old.log) was read as rank '0-old' (a traceback); a fifo was opened and waited on
    for a writer (a hang); a link was followed to whatever it names."""
    import os

    dt("submit", "told", "--", "echo", "hello")
    dt("wait", "told")
    logs = dt.home / "jobs" / "told" / "logs"
    (logs / "rank-0-old.log").write_text("2026-01-01T00:00:00.000000Z stale copy\n")
    os.mkfifo(logs / "rank-7.log")
    secret = tmp_path / "elsewhere.txt"
    secret.write_text("2026-01-01T00:00:00.000000Z not a log of this job\n")
    (logs / "rank-3.log").symlink_to(secret)
    proc = dt("logs", "told", timeout=30)
    assert proc.stdout == "hello\n" and proc.stderr == ""


def test_logs_since_a_time_without_a_zone_is_utc_as_dtrain_prints_times(dt: Dtrain):
    """`--timestamps` prints UTC; the same time given back without its Z was read in the machine's
    zone: 5 hours behind UTC, every line written at that moment was left out."""
    dt("submit", "tz", "--", "echo", "hello")
    dt("wait", "tz")
    stamp = dt("logs", "tz", "--timestamps").stdout.split()[0]  # 2026-12-04T00:41:52Z
    assert stamp.endswith("Z")
    behind = Dtrain(dt.home, env={"TZ": "XST5"})  # POSIX: a zone 5 hours behind UTC, no summer time
    assert behind("logs", "tz", "--since", stamp[:-1]).stdout == "hello\n"
    assert behind("logs", "tz", "--since", stamp).stdout == "hello\n"


def test_list_with_an_empty_project_is_refused_not_the_default_project(dt: Dtrain):
    """`dtrain list -p "$PROJECT"` with the variable unset listed the default project's jobs."""
    dt("submit", "mine", "--", "true")
    proc = dt("list", "-p", "", check=False)
    assert_usage_error(proc, "invalid project name ''")
    assert "mine" not in proc.stdout


def test_list_and_describe_skip_what_is_no_rank_record(dt: Dtrain):
    """Every `dtrain list` reads the rank records: a copy (rank-0-old.json) stopped it with a
    traceback, a fifo hung it, and a record naming another rank was taken for that rank."""
    import os

    dt("submit", "recs", "--", "true")
    dt("wait", "recs")
    ranks = dt.home / "jobs" / "recs" / "ranks"
    (ranks / "rank-0-old.json").write_text('{"rank": 0, "status": "Running"}')
    (ranks / "rank-1.json").write_text('{"rank": 0, "status": "Failed", "exit_code": 9}')
    (ranks / "rank-2.json").write_text('[1, 2]')
    os.mkfifo(ranks / "rank-3.json")
    assert "recs  Succeeded" in dt("list", timeout=30).stdout
    info = dt.json("describe", "job", "recs")
    assert [(p["status"], p["exit_code"]) for p in info["processes"]] == [("Succeeded", 0)]


@pytest.mark.slow
def test_the_processes_of_a_deleted_job_read_stopped_not_failed(dt: Dtrain):
    """`dtrain delete` stops a running job's ranks with SIGTERM (exit 143): describe called them Failed."""
    from conftest import rank_record

    dt("submit-dist", "stopme", "--processes", "2", "--", "sleep", "120")
    rank_record(dt.home, "stopme", 0)
    rank_record(dt.home, "stopme", 1)
    dt("delete", "stopme")
    info = dt.json("describe", "job", "stopme")
    assert [p["status"] for p in info["processes"]] == ["Stopped", "Stopped"], info["processes"]
    assert "Failed" not in dt("describe", "job", "stopme").stdout.split("Events:")[0]


def test_logs_since_time_as_runai_writes_it_and_an_empty_since_is_refused(dt: Dtrain):
    dt("submit", "st", "--", "echo", "hello")
    dt("wait", "st")
    assert dt("logs", "st", "--since-time", "2020-01-26T15:00:00Z").stdout == "hello\n"
    assert dt("logs", "st", "--since-time", "2999-01-01T00:00:00Z").stdout == ""
    assert_usage_error(dt("logs", "st", "--since-time", "10m", check=False), "invalid --since-time '10m'")
    assert_usage_error(dt("logs", "st", "--since", "1m", "--since-time", "2020-01-26T15:00:00Z", check=False),
                       "not allowed with argument --since")
    assert_usage_error(dt("logs", "st", "--since", "", check=False), "invalid --since ''")  # "$SINCE" unset: not all
    long = dt("logs", "st", "--since", "x" * 5000, check=False)
    assert_usage_error(long, "invalid --since")
    assert len(long.stderr) < 500


def test_job_verbs_take_runai_project_flag_and_check_it(dt: Dtrain):
    """`runai describe job X -p team`, `runai logs X -p team`, `runai delete job X -p team`: a
    Run:AI user's hands type -p; it was an unrecognized argument on every job verb."""
    dt("project", "create", "team")
    dt("submit", "mine", "-p", "team", "--", "echo", "hi")
    assert dt("wait", "mine", "-p", "team").returncode == 0
    assert dt("describe", "job", "mine", "-p", "team").stdout.startswith("Name: mine\n")
    assert dt("logs", "mine", "--project", "team").stdout == "hi\n"
    for argv in (["describe", "job", "mine"], ["logs", "mine"], ["wait", "mine"], ["delete", "job", "mine"]):
        assert_usage_error(dt(*argv, "-p", "default", check=False),
                           "no job named 'mine' in project 'default': it is in project 'team'")
    assert dt.status("mine") == "Succeeded"  # the refused delete deleted nothing
    dt("delete", "job", "mine", "-p", "team")
    assert dt.status("mine") == "Deleted"


@pytest.mark.parametrize("plant", ["fifo", "link", "garbage", "list"])
def test_a_notebook_access_file_that_is_not_ours_is_one_line_not_a_hang(tmp_path, plant):
    """`dtrain notebook open` read jobs/NAME/notebook.json with a blocking open (a fifo hung it)
    and json.load (a link gave ELOOP, bad content a KeyError: tracebacks)."""
    import os
    import threading

    from dtrain.backends.local.notebook import read_access
    from dtrain.errors import ConflictError

    path = tmp_path / "notebook.json"
    if plant == "fifo":
        os.mkfifo(path)
    elif plant == "link":
        (tmp_path / "elsewhere").write_text('{"port": 1, "token": "t"}')
        path.symlink_to(tmp_path / "elsewhere")
    else:
        path.write_text("{not json" if plant == "garbage" else "[1, 2]")
    raised: list[BaseException] = []
    reader = threading.Thread(target=lambda: _catch(raised, read_access, tmp_path, "nb"), daemon=True)
    reader.start()
    reader.join(20)
    if reader.is_alive():  # the old code waits for a writer of the fifo: give it one so the thread ends
        with open(path, "w"):
            pass
        reader.join(20)
        raise AssertionError("reading the access file waited on a fifo")
    assert len(raised) == 1 and isinstance(raised[0], ConflictError), raised
    assert "\n" not in str(raised[0]) and "dtrain notebook start nb" in str(raised[0])


def _catch(out: list, fn, *args) -> None:
    try:
        fn(*args)
    except BaseException as err:  # noqa: BLE001 - the test looks at what was raised
        out.append(err)


def test_project_set_as_runai_writes_it(dt: Dtrain):
    assert_usage_error(dt("project", "set", "team", check=False), "dtrain project create team")
    assert dt("config", "project").stdout == "default\n"
    dt("project", "create", "team")
    assert dt("project", "set", "team").stdout == "Project 'team' has been set as the default project\n"
    assert dt("config", "project").stdout == "team\n"
    assert "team (default)" in dt("project", "list").stdout


def test_a_cpu_job_is_not_held_by_a_gpu_quota_lowered_below_use(dt_gpus: Dtrain):
    """A quota lowered under what the project's running jobs hold kept its CPU-only jobs (0 GPUs)
    Pending ("project quota 0 GPUs, 1 in use") though they take none of it."""
    dt = dt_gpus
    dt("project", "create", "team", "--gpu-quota", "1")
    dt("submit", "holder", "-p", "team", "--gpu", "1", "--", "sleep", "120")
    dt.wait_for("holder", {"Running"})
    dt("project", "create", "team", "--gpu-quota", "0")
    dt("submit", "cpu", "-p", "team", "--", "true")
    proc = dt("wait", "cpu", "--timeout", "90", check=False)
    assert proc.returncode == 0, (proc.stdout, dt.json("describe", "job", "cpu")["message"])
    dt("delete", "holder")


def test_logs_of_a_pending_job_say_why_there_are_none(dt: Dtrain):
    """Nothing at all (exit 0, no word) read as a job that printed nothing; kubectl says it is waiting."""
    dt("submit", "quiet", "--", "true")  # first: a job queued behind the unseen one would wait for it
    dt("wait", "quiet")
    assert dt("logs", "quiet").stderr == ""  # a job that ran and printed nothing: nothing to explain
    _queue_unseen(dt.home, "early")
    proc = dt("logs", "early")
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "dtrain: job 'early' is Pending (queued: waiting for the scheduler to place it): no process has started, "
        "so there are no logs yet; 'dtrain logs early -f' waits for them"]


def test_config_sagemaker_without_flags_shows_and_writes_nothing(dt: Dtrain):
    """It 'saved' the defaults into config.yaml, as if the user had chosen them."""
    proc = dt("config", "sagemaker")
    assert proc.stdout.startswith("SageMaker is not configured: dtrain config sagemaker --role ARN")
    assert not (dt.home / "config.yaml").exists()
    dt("config", "sagemaker", "--region", "eu-west-1")
    saved = (dt.home / "config.yaml").read_bytes()
    assert "region=eu-west-1" in dt("config", "sagemaker").stdout
    assert (dt.home / "config.yaml").read_bytes() == saved


def test_describe_keeps_each_env_value_on_its_own_line_and_exact(dt: Dtrain):
    # An -e value with a newline printed raw put its second line where the next key belongs; an
    # empty value read like an unset one. Each variable is shown as the -e flag that gives it again,
    # its value shell-quoted where it needs it ($'...' for a newline), so it pastes back exactly.
    dt("submit", "envs", "-e", "A=line1\nline2", "-e", "E=", "-e", "S= x", "-e", "B=plain", "--", "true")
    lines = dt("describe", "job", "envs").stdout.splitlines()
    after = lines[lines.index("  env:") + 1:]
    env = after[:next(i for i, line in enumerate(after) if not line.startswith("    "))]  # to the next field
    assert env == ["    -e A=$'line1\\nline2'", "    -e E=''", "    -e S=' x'", "    -e B=plain"]
    assert dt.json("describe", "job", "envs")["spec"]["env"]["A"] == "line1\nline2"


def test_config_sagemaker_unset_removes_a_saved_vpc_and_image(dt: Dtrain):
    """A saved VPC or image could only be taken back by editing config.yaml: --subnets "" was refused."""
    import yaml

    dt("config", "sagemaker", "--role", "arn:aws:iam::123456789012:role/R", "--bucket", "my-bucket",
       "--subnets", "subnet-0abc1234", "--security-groups", "sg-0abc1234",
       "--image", "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1")
    saved = (dt.home / "config.yaml").read_bytes()
    half = dt("config", "sagemaker", "--unset", "subnets", check=False)
    assert half.returncode == 2 and "--unset subnets security-groups removes a saved VPC" in half.stderr
    both = dt("config", "sagemaker", "--unset", "role", "--role", "arn:aws:iam::123456789012:role/S", check=False)
    assert both.returncode == 2 and "role is both set and unset" in both.stderr
    assert (dt.home / "config.yaml").read_bytes() == saved  # a refusal writes nothing
    assert dt("config", "sagemaker", "--unset", "subnets", "security-groups", "image").returncode == 0
    settings = yaml.safe_load((dt.home / "config.yaml").read_text())["sagemaker"]
    assert {"subnets", "security_groups", "image"}.isdisjoint(settings)
    assert settings["role"] == "arn:aws:iam::123456789012:role/R" and settings["bucket"] == "my-bucket"
    assert_usage_error(dt("config", "sagemaker", "--unset", "nosuch", check=False), "--unset")
    assert_usage_error(dt("config", "project", "--unset", "image", check=False),
                       "--unset is for 'dtrain config sagemaker'")


def test_logs_follow_of_a_pending_job_says_it_waits(dt: Dtrain):
    """`logs -f` on a queued job printed nothing until it started: a bare wait, read as a hang."""
    _queue_unseen(dt.home, "early")
    proc = subprocess.Popen([DTRAIN, "logs", "early", "-f"], env=dt.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline()  # said before following starts
        dt("delete", "early")  # following ends with the job
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert first == ("dtrain: job 'early' is Pending (queued: waiting for the scheduler to place it): its lines "
                     "follow once it starts (Ctrl-C stops following, not the job)\n")
    assert proc.returncode == 0 and out == "" and err == ""


def test_logs_follow_of_a_job_that_starts_at_once_says_nothing_of_pending(dt: Dtrain, monkeypatch, capsys):
    """A job just submitted is Pending until its processes start, a moment later: `logs -f` said "is
    Pending" for it each time (CI's Ctrl-C test caught the line). The job reads Pending once, then has
    ended (its lines were written): no note, and the follow ends."""
    from dtrain.client import Client

    _queue_unseen(dt.home, "soon")
    real_get, reads = Client.get, []

    def get(self, name, **kw):
        info = real_get(self, name, **kw)
        reads.append(info.status.value)
        if len(reads) == 1:  # the job starts and ends just after logs -f's first read
            with job_store(dt.home) as store:
                assert store.set_status("soon", "Succeeded", "done")
        return info

    monkeypatch.setenv("DTRAIN_HOME", str(dt.home))
    monkeypatch.setattr(Client, "get", get)
    capsys.readouterr()
    assert main(["logs", "soon", "-f"]) == 0
    out, err = capsys.readouterr()
    assert reads[:2] == ["Pending", "Succeeded"] and "Pending" not in err, (reads, err)


def test_logs_follow_ending_at_a_suspension_says_so(dt: Dtrain):
    """`logs -f` ended at `dtrain suspend` with a bare prompt, as if the job had ended."""
    dt("submit", "done", "--", "true")
    dt("wait", "done")
    assert dt("logs", "done", "-f").stderr == ""  # a job that ended: nothing to explain
    dt("submit", "pause", "--", "sh", "-c", "echo up; sleep 120")
    dt.wait_running("pause")
    dt("suspend", "pause")
    proc = dt("logs", "pause", "-f")
    assert proc.stderr.strip().splitlines() == [
        "dtrain: job 'pause' is Suspended: its processes are stopped, so following ends here; "
        "'dtrain resume pause' starts it again, then 'dtrain logs pause -f' follows it"]
    dt("delete", "pause")


@pytest.mark.parametrize("argv, words", [
    (["volume"], "ACTION (one of create, update, list, describe, delete, classes)"),
    (["snapshot"], "ACTION (one of create, wait, list, describe, restore, delete, verify, diff)"),
    (["config"], "what (one of project, backend, sagemaker, kubernetes, storage-class, node-labels, forget-backend)"),
    (["completion"], "shell (one of bash, zsh)")])
def test_a_missing_action_names_the_words_it_takes(tmp_path, monkeypatch, capsys, argv, words):
    """`dtrain volume` alone said 'the following arguments are required: ACTION': a placeholder a new
    user cannot guess the words for, where a misspelt one is answered with the word meant."""
    monkeypatch.setenv("DTRAIN_HOME", str(tmp_path / "home"))
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    prog = " ".join(["dtrain", *argv])
    assert exit_.value.code == 2
    assert err == f"{prog}: error: the following arguments are required: {words} (see '{prog} --help')\n"


@pytest.mark.parametrize("argv", [["volume", "update", "work", "--size", "200Gi"],
                                  ["volume", "update", "work", "--size=200Gi", "--class", "fast"]])
def test_volume_update_size_says_a_size_is_set_when_made(tmp_path, monkeypatch, capsys, argv):
    """A Kubernetes user expanding a claim read 'unrecognized arguments: --size; ... required: --class',
    as if nothing had been typed."""
    monkeypatch.setenv("DTRAIN_HOME", str(tmp_path / "home"))
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith("dtrain volume update: error: --size cannot change: a volume's size is set when it is "
                          "made (locally it is recorded, not enforced"), err
    assert "--class CLASS" in err and not (tmp_path / "home").exists()
