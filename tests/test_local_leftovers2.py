"""Local backend: logs never written through a link someone left in a job's folder; deleting twice."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from conftest import Dtrain, assert_usage_error, job_store, rank_record, stored_job
from dtrain.backends.local.ranks import parse_ident, supervisor_token
from dtrain.procs import Ident, signal_process
from dtrain.spec import JobSpec

# A job whose first attempt leaves something at a path of its own folder, then fails; a restart
# (--max-restarts) comes back to that folder and finds it there.
PLANT_THEN_FAIL = 'if [ "$DTRAIN_ATTEMPT" = 0 ]; then {plant}; exit 1; fi; echo second attempt'


def _submit_planting(dt: Dtrain, name: str, plant: str, *, restarts: int = 1) -> Path:
    dt("submit", name, "--max-restarts", str(restarts), "--", "sh", "-c", PLANT_THEN_FAIL.format(plant=plant))
    return dt.home / "jobs" / name


def _failed_in_one_line(dt: Dtrain, name: str) -> dict:
    info = dt.wait_for(name, {"Failed", "Succeeded"})
    assert info["status"] == "Failed", info["message"]
    assert "\n" not in info["message"] and "Traceback" not in info["message"], info["message"]
    return info


def test_a_link_left_at_a_rank_log_is_never_written_through(dt: Dtrain, tmp_path):
    victim = tmp_path / "victim"
    job = _submit_planting(dt, "planted", f'ln -sf {victim} "$DTRAIN_HOME/jobs/planted/logs/rank-0.log"', restarts=3)
    info = _failed_in_one_line(dt, "planted")
    assert not victim.exists()  # the second attempt's output went nowhere through the link
    assert info["message"] == (f"rank 0 was not started: {job}/logs/rank-0.log is a symbolic link, and a log is "
                               f"never written through one: remove it and submit the job again")
    assert info["restarts"] == 1  # no restart can help: the job fails at once instead of using all three
    assert "dtrain: rank 0 was not started:" in (job / "launcher.log").read_text()
    assert [p["status"] for p in info["processes"]] == ["Failed"]


def test_a_fifo_left_at_a_rank_log_neither_hangs_nor_is_written(dt: Dtrain):
    job = _submit_planting(dt, "fifo", 'rm "$DTRAIN_HOME/jobs/fifo/logs/rank-0.log"; '
                                       'mkfifo "$DTRAIN_HOME/jobs/fifo/logs/rank-0.log"')
    info = _failed_in_one_line(dt, "fifo")
    assert f"{job}/logs/rank-0.log is not a regular file" in info["message"], info["message"]


def test_a_link_in_place_of_the_logs_folder_is_never_written_through(dt: Dtrain, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    job = _submit_planting(dt, "moved", f'rm -r "$DTRAIN_HOME/jobs/moved/logs"; '
                                        f'ln -s {elsewhere} "$DTRAIN_HOME/jobs/moved/logs"')
    info = _failed_in_one_line(dt, "moved")
    assert list(elsewhere.iterdir()) == []
    assert f"{job}/logs is a symbolic link, and a log is never written through one" in info["message"]


def test_a_link_left_at_the_launcher_log_is_never_written_through(dt: Dtrain, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("the user's file\n")
    job = _submit_planting(dt, "launch", f'ln -sf {victim} "$DTRAIN_HOME/jobs/launch/launcher.log"', restarts=3)
    info = _failed_in_one_line(dt, "launch")
    assert victim.read_text() == "the user's file\n"
    assert info["message"] == (f"the launcher was not started: {job}/launcher.log is a symbolic link, and a log is "
                               f"never written through one: remove it and submit the job again")
    assert info["restarts"] == 1
    text = dt("describe", "job", "launch").stdout
    assert f"Message: {info['message']}\n" in text


@pytest.mark.slow
def test_a_link_in_place_of_the_rank_records_folder_is_removed_not_followed(dt: Dtrain, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    job = _submit_planting(dt, "records", f'rm -r "$DTRAIN_HOME/jobs/records/ranks"; '
                                          f'ln -s {elsewhere} "$DTRAIN_HOME/jobs/records/ranks"')
    info = dt.wait_for("records", {"Failed", "Succeeded"})
    assert info["status"] == "Succeeded", info["message"]
    assert not (job / "ranks").is_symlink()
    assert json.loads((job / "ranks" / "rank-0.json").read_text())["restart"] == 1
    # what the first attempt's own rank wrote as it ended may be there; nothing of the second attempt
    assert all(json.loads(p.read_text())["restart"] == 0 for p in elsewhere.glob("rank-*.json"))
    assert dt("logs", "records").stdout == "second attempt\n"


def test_a_job_whose_folder_was_removed_before_a_restart_says_so(dt: Dtrain):
    """It used to end 'supervisor error: [Errno 2] No such file or directory: .../launcher.log'.
    The folder is removed once the supervisor has recorded the launcher (launcher.json): a supervisor slow
    on a loaded machine wrote that record into the folder while `rm -r` emptied it, so the folder stayed
    (rm's last rmdir found it not empty) and the restart ran in it."""
    _submit_planting(dt, "removed", 'while [ ! -e "$DTRAIN_HOME/jobs/removed/launcher.json" ]; do sleep 0.05; done; '
                                    'rm -r "$DTRAIN_HOME/jobs/removed"')
    info = _failed_in_one_line(dt, "removed")
    assert info["message"] == (f"the launcher was not started: {dt.home}/jobs/removed was removed (by hand?) "
                               f"while the job ran: submit the job again")


def test_a_fifo_left_at_the_launcher_record_does_not_hang_delete(dt: Dtrain):
    """`dtrain delete` read launcher.json with a plain open: a fifo a job put there hung it for good."""
    dt("submit", "stuck", "--", "sh", "-c", 'rm "$DTRAIN_HOME/jobs/stuck/launcher.json"; '
                                            'mkfifo "$DTRAIN_HOME/jobs/stuck/launcher.json"; echo planted; sleep 300')
    rank = Ident.from_record(rank_record(dt.home, "stuck", 0))
    deadline = time.monotonic() + 60  # only ends a hang: the line comes at once
    while dt("logs", "stuck").stdout != "planted\n":
        assert time.monotonic() < deadline and dt.status("stuck") == "Running"
        time.sleep(0.05)
    assert dt("delete", "stuck", timeout=60).stdout == "The job 'stuck' has been deleted (Deleted)\n"
    assert not rank.alive()


def test_deleting_a_deleted_job_says_it_was_already_deleted(dt: Dtrain):
    dt("submit", "once", "--", "true")
    dt("submit", "other", "--", "true")
    dt("wait", "once")
    dt("wait", "other")
    assert dt("delete", "once").stdout == "The job 'once' has been deleted (Deleted)\n"
    events = dt.json("describe", "job", "once")["events"]
    again = dt("delete", "once", check=False)
    assert_usage_error(again, "job 'once' was already deleted", "nothing was deleted", "--purge")
    assert again.stdout == ""
    assert dt.json("describe", "job", "once")["events"] == events  # nothing recorded again
    # with several names, nothing is deleted when one of them already was (as with an unknown one)
    assert_usage_error(dt("delete", "other", "once", check=False), "job 'once' was already deleted")
    assert dt.status("other") == "Succeeded"
    # forgetting a deleted job is still what --purge does
    assert dt("delete", "once", "--purge").stdout == "The job 'once' has been purged\n"
    assert_usage_error(dt("delete", "once", check=False), "no job named 'once'")


def _kill_supervisor(dt: Dtrain, name: str) -> None:
    """SIGKILL the supervisor of job NAME (as a crash or a reboot would) and wait until it is gone."""
    row = stored_job(dt.home, name)
    sup = parse_ident(row["supervisor_pid"], row["supervisor_start"])
    assert signal_process(sup, signal.SIGKILL)
    while sup.alive():
        time.sleep(0.05)


def test_a_queued_job_whose_supervisor_was_killed_keeps_its_place_and_runs(dt_gpus: Dtrain):
    """Nothing of a queued job has run when its supervisor is lost (killed, the machine restarted):
    it used to be Failed, 'no restarts left (--max-restarts 0)', as if it had run and crashed."""
    dt = dt_gpus
    dt("submit", "holder", "-g", "2", "--", "sleep", "300")
    dt.wait_for("holder", {"Running"})
    dt("submit", "queued", "-g", "1", "--", "echo", "ran")
    dt.wait_for("queued", {"Pending"})
    _kill_supervisor(dt, "queued")
    info = dt.json("describe", "job", "queued")
    assert info["status"] == "Pending" and info["restarts"] == 0, info["message"]
    assert info["events"][-1]["message"].endswith("nothing had started: a new supervisor keeps its place in the queue")
    dt("delete", "holder")
    assert dt("wait", "queued", "--timeout", "120").returncode == 0
    assert dt("logs", "queued").stdout == "ran\n"


def test_a_queued_job_over_a_lowered_quota_says_it_never_starts_until_raised(dt_gpus: Dtrain):
    """It used to read 'waiting: project quota 1 GPU, 0 in use', as if freed GPUs would start it."""
    dt = dt_gpus
    dt("project", "create", "team", "--gpu-quota", "2")
    dt("project", "create", "hold", "--gpu-quota", "2")  # within its quota: big never preempts holder
    dt("submit", "holder", "-p", "hold", "-g", "2", "--", "sleep", "300")
    dt.wait_for("holder", {"Running"})
    dt("submit", "big", "-p", "team", "-g", "2", "--", "echo", "ran")
    dt.wait_for("big", {"Pending"})
    dt("project", "create", "team", "--gpu-quota", "1")
    dt("delete", "holder", "-p", "hold")  # every GPU free now: only the quota holds it
    needle = ("it needs more than project team's quota of 1 GPU, and starts only once that is raised "
              "('dtrain project create team --gpu-quota 2')")
    deadline = time.monotonic() + 60  # the supervisor reads the quota again every 0.25 s; this only ends a hang
    info = dt.json("describe", "job", "big")
    while needle not in info["message"] and time.monotonic() < deadline:
        time.sleep(0.2)
        info = dt.json("describe", "job", "big")
    assert info["status"] == "Pending" and needle in info["message"], info["message"]
    dt("project", "create", "team", "--gpu-quota", "2")
    assert dt("wait", "big", "--timeout", "120").returncode == 0


def test_a_supervisor_is_registered_only_by_its_own_pid_and_start_time(home, monkeypatch):
    """A lost supervisor's record names a dead process; a new supervisor given that reused pid took
    the record for its own registration and ran the job, though its starter lost the relaunch race."""
    from dtrain.backends.local import supervisor

    monkeypatch.setattr(supervisor, "REGISTER_S", 0.5)  # how long an unregistered supervisor waits
    with job_store(home) as store:
        store.insert_job(JobSpec(name="reused", command=("true",)), cwd="/", node="this-host")
        me = Ident.of(os.getpid())
        stale = me._replace(start=str(int(me.start) - 1))  # this pid, as a process that had it before us
        store.update("reused", supervisor_pid=me.pid, supervisor_start=supervisor_token(stale))
        assert supervisor.Supervisor(home, "reused")._registered() is False
        store.update("reused", supervisor_start=supervisor_token(me))
        assert supervisor.Supervisor(home, "reused")._registered() is True


@pytest.mark.slow
def test_a_file_in_place_of_the_logs_folder_fails_the_job_in_one_line(dt: Dtrain):
    """rankrun's mkdir of the folder used to end in a traceback, and the job in 'the launcher exited with code 1'."""
    job = _submit_planting(dt, "filed", 'rm -r "$DTRAIN_HOME/jobs/filed/logs"; echo x > "$DTRAIN_HOME/jobs/filed/logs"')
    info = _failed_in_one_line(dt, "filed")
    assert info["message"] == f"rank 0 was not started: {job}/logs is not a folder: remove it and submit the job again"
    assert "Traceback" not in (job / "launcher.log").read_text()


def test_a_queued_job_larger_than_the_machine_it_came_back_to_says_it_never_starts(dt_gpus: Dtrain):
    """A queued job relaunched on a machine with fewer GPUs than it needs (one was taken out before a
    restart) read 'waiting: needs 2 GPUs, 1 free', as if a job would free the other."""
    dt_gpus("submit", "holder", "-g", "2", "--", "sleep", "300")
    dt_gpus.wait_for("holder", {"Running"})
    dt_gpus("submit", "big", "-g", "2", "--", "true")
    dt_gpus.wait_for("big", {"Pending"})
    _kill_supervisor(dt_gpus, "big")
    dt_gpus("delete", "holder")
    smaller = Dtrain(dt_gpus.home, env={"DTRAIN_GPUS": "1"})
    smaller("list")  # finds the lost supervisor and starts a new one, which sees one GPU
    needle = ("waiting: needs 2 GPUs but this machine now has 1 (its supervisor has DTRAIN_GPUS=1; it was submitted "
              "with DTRAIN_GPUS=2): it never starts so; 'dtrain suspend big', then 'DTRAIN_GPUS=2 dtrain resume big' "
              "queues it with the GPUs it was submitted with, or delete it and submit it with fewer")
    deadline = time.monotonic() + 60  # the new supervisor asks the scheduler at once; this only ends a hang
    info = smaller.json("describe", "job", "big")
    while info["message"] != needle and time.monotonic() < deadline:
        time.sleep(0.2)
        info = smaller.json("describe", "job", "big")
    assert info["status"] == "Pending" and info["message"] == needle, info["message"]


@pytest.mark.slow
def test_a_projects_gpu_quota_can_be_removed_and_a_waiting_job_then_starts(dt_gpus: Dtrain):
    """A quota, once set, could not be removed; and the SDK's create_project(name) with no quota
    removed it on this backend while the Kubernetes one kept it."""
    from dtrain.client import Client

    dt = dt_gpus
    dt("project", "create", "team", "--gpu-quota", "1")
    dt("submit", "holder", "-p", "team", "-g", "1", "--", "sleep", "300")
    dt.wait_for("holder", {"Running"})
    dt("submit", "waits", "-p", "team", "-g", "1", "--", "echo", "ran")  # a GPU is free; the quota holds it
    dt.wait_for("waits", {"Pending"})
    client = Client(home=dt.home)
    client.create_project("team")  # neither given: the quota stays
    assert {p.name: p.gpu_quota for p in client.list_projects()}["team"] == 1
    both = dt("project", "create", "team", "--gpu-quota", "1", "--no-gpu-quota", check=False)
    assert both.returncode == 2 and both.stderr.count("\n") == 1 and "not allowed with" in both.stderr, both.stderr
    out = dt("project", "create", "team", "--no-gpu-quota").stdout
    assert out == "project 'team' already exists; it has no GPU quota now\n"
    assert {p["name"]: p["gpu_quota"] for p in dt.json("project", "list")}["team"] is None
    assert dt("wait", "waits", "--timeout", "120").returncode == 0  # while the holder still runs
    assert dt.status("holder") == "Running"
    dt("delete", "holder")
    assert dt("project", "create", "fresh", "--no-gpu-quota").stdout == "project 'fresh' created\n"


def test_nodes_and_projects_do_not_count_the_gpus_of_a_job_whose_supervisor_was_lost(dt_gpus: Dtrain):
    """`dtrain nodes` and `project list` read the allocations as they were: after a supervisor was
    killed they showed its GPUs held by a job that the next `list` called Failed (lost)."""
    dt = dt_gpus
    dt("submit", "lost", "-g", "2", "--", "sleep", "300")
    dt.wait_for("lost", {"Running"})
    _kill_supervisor(dt, "lost")
    node = dt.json("nodes")[0]
    assert node["gpus_allocated"] == 0 and [g["job"] for g in node["gpus"]] == [None, None], node
    assert {p["name"]: p["gpus_allocated"] for p in dt.json("project", "list")}["default"] == 0
    assert dt.status("lost") == "Failed"
