"""The job verbs as a Run:AI user types them: every verb that names a job takes -p, flags that
contradict each other are refused, and every value is bounded and named back as typed."""

from __future__ import annotations

import pytest
from conftest import Dtrain, assert_usage_error


@pytest.mark.slow
def test_exec_and_artifacts_take_the_jobs_project_as_runai_exec_does(dt: Dtrain, tmp_path):
    dt("project", "create", "team")
    dt("submit", "done", "-p", "team", "--", "true")
    dt("wait", "done")
    # another project's job is not found, as with logs / describe / delete -p
    assert_usage_error(dt("exec", "done", "-p", "default", "--", "true", check=False), "in project 'default'",
                       "-p team")
    assert_usage_error(dt("artifacts", "done", "-p", "default", "--to", str(tmp_path / "out"), check=False),
                       "in project 'default'", "-p team")
    assert not (tmp_path / "out").exists()
    assert_usage_error(dt("exec", "done", "--project", "team", "--", "true", check=False), "Running")
    dt("submit", "held", "-p", "team", "--", "sleep", "120")
    try:
        dt.wait_running("held")
        got = dt("exec", "held", "-p", "team", "--", "sh", "-c", 'echo "$DTRAIN_PROJECT"')
        assert got.stdout == "team\n", got.stderr
    finally:
        dt("delete", "held")


def test_list_refuses_all_projects_with_one_project(dt: Dtrain):
    # -A used to win silently: `-A -p nope` listed every project's jobs, naming no mistake
    for verb in (("list",), ("notebook", "list")):
        assert_usage_error(dt(*verb, "-A", "-p", "nope", check=False), "-A/--all-projects", "-p/--project")
        assert_usage_error(dt(*verb, "-p", "default", "--all-projects", check=False), "not allowed with")
    assert dt.json("list", "-A") == [] and dt.json("list", "-p", "default") == []


def test_an_empty_job_file_path_is_named(dt: Dtrain):
    # `-f ""` was taken as no file at all: "a job needs a name", with the empty path never named
    for verb in ("submit", "submit-dist", "submit-mpi"):
        assert_usage_error(dt(verb, "-f", "", check=False), "job file ''", "check the path")
        assert_usage_error(dt(verb, "named", "-f", "", "--", "true", check=False), "job file ''")
    assert dt.json("list", "-A") == []


def test_logs_since_is_bounded_and_named_as_typed(dt: Dtrain):
    dt("submit", "said", "--", "echo", "hello")
    dt("wait", "said")
    assert dt("logs", "said", "--since", "36500d").stdout == "hello\n"
    for typed in ("36501d", "99999999999h", "9" * 400 + "s"):  # the last was infinite: "invalid since -inf"
        bad = dt("logs", "said", "--since", typed, check=False)
        assert_usage_error(bad, f"invalid --since '{typed[:20]}", "at most 36500d")
        assert "-inf" not in bad.stderr and "unix time" not in bad.stderr


def test_large_shm_is_never_smaller_than_the_hosts_dev_shm(dt: Dtrain):
    from dtrain.backends.local.launch import shm_size

    gib = 2**30
    assert shm_size(total_memory=24 * gib, host_shm=4 * gib) == 12 * gib  # half of memory, as before
    assert shm_size(total_memory=24 * gib, host_shm=24 * gib) == 24 * gib  # was 12Gi: less than without the flag
    assert shm_size(total_memory=24 * gib, host_shm=0) == 12 * gib
    probe = "import os; s = os.statvfs('/dev/shm'); print(s.f_blocks * s.f_frsize)"
    dt("submit", "plain", "--", "python", "-c", probe)
    dt("submit", "large", "--large-shm", "--", "python", "-c", probe)
    dt("wait", "plain")
    dt("wait", "large")
    assert int(dt("logs", "large").stdout) >= int(dt("logs", "plain").stdout)


def test_gpu_on_a_machine_without_gpus_says_how_to_run_on_cpu(tmp_path):
    # the reference's `submit-mpi --gpu 1` on a CPU workstation was told to "lower --processes or --gpu"
    dt = Dtrain(tmp_path / "home", env={"DTRAIN_GPUS": "0"})
    assert_usage_error(dt("submit-mpi", "ref", "--processes", "2", "--gpu", "1", "--", "true", check=False),
                       "has no GPU", "drop --gpu", "DTRAIN_GPUS")
    assert dt.json("list", "-A") == []
    with_two = Dtrain(tmp_path / "home", env={"DTRAIN_GPUS": "2"})
    assert_usage_error(with_two("submit-mpi", "ref", "--processes", "3", "--gpu", "1", "--", "true", check=False),
                       "needs 3 GPUs", "has 2")


def test_a_fraction_of_a_gpu_is_named_as_such(dt: Dtrain):
    # Run:AI's `--gpu 0.5` (a shared GPU): argparse said only "invalid int value: '0.5'"
    for words in (("submit", "half", "--gpu", "0.5", "--", "true"), ("submit-mpi", "half", "--gpu", "0.5", "--", "true"),
                  ("notebook", "half", "--gpu", "0.5")):
        assert_usage_error(dt(*words, check=False), "--gpu 0.5 is a fraction of a GPU", "--gpu 1", "leave --gpu out")
    assert_usage_error(dt("submit", "half", "--gpu", "one", "--", "true", check=False), "invalid --gpu 'one'",
                       "use a whole number from 0 to")
    assert_usage_error(dt("submit", "half", "--gpu", "nan", "--", "true", check=False), "invalid --gpu nan")
    assert dt.json("list", "-A") == []
    dt("submit", "whole", "--gpu", "0.0", "--", "true")  # 0.0 is whole
    assert dt.json("describe", "job", "whole")["spec"]["gpu"] == 0


@pytest.mark.slow
def test_a_rank_of_thousands_of_digits_is_one_line(dt: Dtrain):
    dt("submit-dist", "two", "--processes", "2", "--", "true")
    dt("wait", "two")
    huge = "9" * 5000  # int() refuses past 4300 digits: a ValueError traceback
    assert_usage_error(dt("logs", "two", "--rank", huge, check=False), "invalid --rank '999", "or 'all'")
    assert_usage_error(dt("exec", "two", "--rank", huge, "--", "true", check=False), "invalid --rank '999",
                       "at most 4095", "exec runs in one process")  # refused before the job is read, as by logs
    assert_usage_error(dt("exec", "two", "--rank", "2", "--", "true", check=False), "invalid --rank 2",
                       "ranks 0 to 1")
    assert_usage_error(dt("logs", "two", "--rank", "9" * 18, check=False), "ranks 0 to 1")


def test_an_unknown_job_name_is_repeated_cut_short(dt: Dtrain):
    # every verb repeated the whole name: 100 kB of 'aaa...' on one line; a name past the 53
    # characters of a job name's rule is named as such (as the HTTP API's path pattern has it)
    name = "a" * 100_000
    for argv in (("describe", name), ("logs", name), ("wait", name), ("suspend", name), ("resume", name),
                 ("exec", name, "--", "true"), ("artifacts", name, "--to", "out")):
        bad = dt(*argv, check=False)
        assert_usage_error(bad, "invalid job name 'aaa", "1-53 lower-case letters")
        assert len(bad.stderr) < 400, (argv[0], len(bad.stderr))


def test_enable_snapshot_it_cannot_act_on_is_refused_at_submit(dt: Dtrain):
    # both were taken, and the job then succeeded without the snapshot it asked for, saying nothing
    assert_usage_error(dt("submit", "seed", "-e", "ENABLE_SNAPSHOT=true", "--", "true", check=False),
                       "names no volume", "-e PVC_NAME=VOLUME")
    assert_usage_error(dt("submit", "seed", "-e", "ENABLE_SNAPSHOT=treu", "-e", "PVC_NAME=data", "--", "true",
                          check=False), "invalid -e ENABLE_SNAPSHOT='treu'", "true or false")
    assert dt.json("list", "-A") == []
    for off in ("false", "0", ""):  # asking for none is fine, with or without a volume
        dt("submit", f"off{len(off)}", "-e", f"ENABLE_SNAPSHOT={off}", "--", "true")
    dt("volume", "create", "data")
    dt("submit", "seed", "-e", "ENABLE_SNAPSHOT=True", "-e", "PVC_NAME=data", "--", "true")
    assert dt("wait", "seed").returncode == 0 and dt.json("describe", "job", "seed")["snapshot"]


def test_help_states_the_defaults_and_the_project_flag(dt: Dtrain):
    submit = " ".join(dt("submit", "--help").stdout.split())
    for said in ("whole GPUs per process (default 0", "restarts of the job after a failure (default 0)",
                 "the folder submit is run in", "by default the machine's CPUs shared out"):
        assert said in submit, said
    assert "until the job ends or is suspended" in " ".join(dt("logs", "--help").stdout.split())
    for verb in ("describe", "delete", "suspend", "resume", "exec", "artifacts"):
        assert "-p PROJECT" in dt(verb, "--help").stdout.splitlines()[0], verb  # the usage line shows it


def test_describe_json_of_a_job_with_an_emoji_submits_again(dt: Dtrain, tmp_path):
    # json.dumps writes U+1F389 as "\ud83c\udf89"; the YAML reader kept two lone surrogates and refused them
    dt("submit", "party", "-e", "GREETING=héllo 🎉", "--", "echo", "🎉")
    dt("wait", "party")
    record = tmp_path / "party.json"
    record.write_text(dt("describe", "job", "party", "--json").stdout)
    assert "\\ud83c\\udf89" in record.read_text()
    dt("submit", "party-again", "-f", str(record))
    spec = dt.json("describe", "job", "party-again")["spec"]
    assert spec["env"] == {"GREETING": "héllo 🎉"} and spec["command"] == ["echo", "🎉"]
    lone = tmp_path / "lone.yaml"  # half a pair is still refused, in one line
    lone.write_text('name: lone\ncommand: ["echo", "\\ud83c"]\n')
    assert_usage_error(dt("submit", "-f", str(lone), check=False), "not valid UTF-8")


def test_wait_timeout_is_bounded(dt: Dtrain):
    dt("submit", "quick", "--", "true")
    assert dt("wait", "quick", "--timeout", str(366 * 86400)).returncode == 0
    for typed in ("1e300", "1e400", "-1", "nan", "367d"):  # 1e300 waited ~forever; 1e400 was "invalid --timeout inf"
        assert_usage_error(dt("wait", "quick", "--timeout", typed, check=False), f"invalid --timeout '{typed}':",
                           "from 0 to 31622400")


def test_a_wait_that_runs_out_names_where_to_look(dt_gpus: Dtrain):
    """A job still Pending has no logs yet: the timeout's line named 'dtrain logs J', which printed
    nothing; it names 'dtrain describe job J' (why it waits) there, and the logs for a running job."""
    dt = dt_gpus
    dt("submit", "hog", "--gpu", "2", "--", "sleep", "120")
    dt.wait_running("hog")
    dt("submit", "queued", "--gpu", "1", "--", "true")  # waits for hog's GPUs
    assert dt.status("queued") == "Pending"
    waited = dt("wait", "queued", "--timeout", "0", check=False)
    assert waited.returncode == 124 and waited.stderr.split("'")[-2] == "dtrain describe job queued", waited.stderr
    assert "Pending" in dt(*waited.stderr.split("'")[-2].split()[1:]).stdout
    waited = dt("wait", "hog", "--timeout", "0", check=False)
    assert waited.returncode == 124 and waited.stderr.split("'")[-2] == "dtrain logs hog", waited.stderr
    waited = dt("wait", "queued", "hog", "--timeout", "0", check=False)  # several: the one it ran out on
    assert waited.returncode == 124 and "(0 of 2 jobs ended)" in waited.stderr
    assert waited.stderr.split("'")[-2] == "dtrain describe job queued", waited.stderr


def test_the_command_is_looked_up_in_the_jobs_own_path(dt: Dtrain, tmp_path):
    # -e PATH replaces the job's PATH, but submit searched the submitter's: a command the job
    # could not start was taken (it failed with 127), and one only the job's PATH holds was refused
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "mytool").write_text("#!/bin/sh\necho from mytool\n")
    (tools / "mytool").chmod(0o755)
    assert_usage_error(dt("submit", "nopy", "-e", f"PATH={tmp_path / 'empty'}", "--", "python", "-c", "1",
                          check=False), "command 'python' not found", "-e PATH")
    dt("submit", "mine", "-e", f"PATH={tools}:/usr/bin:/bin", "--", "mytool")
    assert dt("wait", "mine").returncode == 0
    assert dt("logs", "mine").stdout == "from mytool\n"


def test_list_says_starting_while_a_placed_jobs_processes_are_being_launched(dt: Dtrain):
    """The scheduler moves a job to Running before its supervisor launches the processes, and each
    records itself once it has started (a relaunch clears the last run's records first): a `list` read
    in between showed 'Running' beside PROCESSES '0 (2)'. It says Starting there; --json keeps Running."""
    dt("submit-dist", "twin", "--processes", "2", "--", "sleep", "120")
    try:
        dt.wait_running("twin")
        row = _list_row(dt, "twin")
        assert (row[1], row[-2:]) == ("Running", ["2", "(0)"]), row
        for record in (dt.home / "jobs" / "twin" / "ranks").glob("rank-*.json"):  # the window before the records
            record.unlink()
        row = _list_row(dt, "twin")
        assert (row[1], row[-2:]) == ("Starting", ["0", "(2)"]), row
        assert dt.json("describe", "job", "twin")["status"] == "Running"
        assert "Status:" in (described := dt("describe", "job", "twin").stdout) and "Starting" in described
    finally:
        dt("delete", "twin")


def _list_row(dt: Dtrain, name: str) -> list[str]:
    return next(line.split() for line in dt("list").stdout.splitlines() if line.startswith(name + " "))
