"""Leftovers of the audit-9 review (local backend and CLI)."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

import dtrain
from conftest import DTRAIN, SLOW_STOP, Dtrain
from server_util import wait_until

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")
from dtrain.backends.kubernetes.objects import GPU_RESOURCE  # noqa: E402
from dtrain.backends.kubernetes.render_storage import QUOTA_NAME  # noqa: E402

JOB_KINDS = [("batch", "jobs"), ("kubeflow.org", "pytorchjobs"), ("kubeflow.org", "mpijobs"),
             ("trainer.kubeflow.org", "trainjobs"), ("kubeflow.org", "notebooks")]


@pytest.fixture
def jobless_account(home, tmp_path):
    """config.yaml sends every project to the shipped fake API server, whose account may create
    namespaces and quotas but may list no kind of job."""
    from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer

    server = FakeKubeServer(FakeCluster()).start()
    server.write_kubeconfig(tmp_path / "kubeconfig")
    (home / "config.yaml").write_text(yaml.safe_dump({
        "project": "default", "backend": "kubernetes",
        "kubernetes": {"kubeconfig": str(tmp_path / "kubeconfig"), "image": "img:1"}}))
    server.cluster.forbidden.update(JOB_KINDS)
    yield server.cluster
    server.close()


@pytest.mark.slow
def test_project_create_needs_no_right_to_list_the_projects_jobs(jobless_account, home):
    dt = Dtrain(home)
    made = dt("project", "create", "p2", "--gpu-quota", "2")
    assert "created with a GPU quota of 2" in made.stdout
    other = dt("project", "create", "p3")  # p2's namespace exists now: not read for its jobs either
    assert "'p3' created" in other.stdout
    again = dt("project", "create", "p2", "--gpu-quota", "3")
    assert "already exists" in again.stdout and "3" in again.stdout
    quota = jobless_account.get("", "resourcequotas", "dtrain-p2", QUOTA_NAME)
    assert quota["spec"]["hard"][f"requests.{GPU_RESOURCE}"] in ("3", 3)
    client = dtrain.Client(home=home)
    assert client.has_project("p2") and client.has_project("p3") and not client.has_project("p4")


def test_exec_of_a_rank_not_yet_launched_says_so_not_that_it_is_not_running(dt, home):
    """A 2-process job reads Running as soon as rank 0 runs; exec of rank 1 before rank 1's record
    is written says it has not started and to try again, as kubectl says a container is waiting to
    start (not that it is not running, which reads as ended)."""
    dt("submit-dist", "pair", "--processes", "2", "--", "sleep", "120")
    dt.wait_running("pair")
    record = home / "jobs" / "pair" / "ranks" / "rank-1.json"
    aside = record.with_name("aside-1")
    record.rename(aside)  # as it is between the job's Running and rank 1's launch
    try:
        early = dt("exec", "pair", "--rank", "1", "--pod-running-timeout", "1", "--", "true", check=False)  # not 1m
    finally:
        aside.rename(record)
    assert early.returncode != 0 and len(early.stderr.strip().splitlines()) == 1, early.stderr
    assert "rank 1 of job 'pair' has not started yet" in early.stderr and "try again" in early.stderr
    assert dt("exec", "pair", "--rank", "1", "--", "sh", "-c", "echo $RANK").stdout.strip() == "1"


@pytest.mark.slow
def test_resume_held_by_processes_still_stopping_says_so_at_once(dt, tmp_path):
    """`dtrain resume` waits for a suspended job's processes still writing their checkpoint; it
    says so on stderr when it starts waiting, not after the wait (up to the grace period)."""
    (tmp_path / "slow.py").write_text(SLOW_STOP)
    dt("submit", "job", "--working-dir", str(tmp_path), "--", "python", "slow.py")
    wait_until(lambda: "up" in dt("logs", "job").stdout, what="job started")
    suspend = subprocess.Popen([DTRAIN, "suspend", "job"], env=dt.env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    wait_until(lambda: "writing a checkpoint" in dt("logs", "job").stdout, what="job stopping")
    resume = subprocess.Popen([DTRAIN, "resume", "job"], env=dt.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        first = resume.stderr.readline()  # before the processes are let go: said while it waits
        assert re.fullmatch(r"waiting for the processes of job 'job' to stop \(up to \d+ s\)\n", first), first
        assert resume.poll() is None
    finally:
        (tmp_path / "gate").write_text("x")
    out, err = resume.communicate(timeout=60)
    assert resume.returncode == 0 and out == "The job 'job' has been resumed (Pending)\n" and not err, (out, err)
    assert suspend.wait(timeout=60) == 0
    wait_until(lambda: dt.status("job") == "Running", what="job running again")
    dt("suspend", "job")
    wait_until(lambda: all(p["status"] != "Terminating" for p in dt.json("describe", "job", "job")["processes"]),
               what="job stopped")
    (tmp_path / "gate").write_text("x")
    calm = dt("resume", "job")  # nothing left to wait for: no line
    assert calm.stderr == "", calm.stderr
