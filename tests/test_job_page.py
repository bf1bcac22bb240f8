"""`Client.page`: a page of the job list, newest first, with the count before paging. The local
backend pages in SQL and builds only the page's records; every other backend filters its list.
Both must give the same pages, which is what these tests hold them to."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from conftest import job_store
from dtrain import Client, JobSpec, JobStatus
from dtrain.backends.base import Backend, JobSummary
from dtrain.backends.records import check_statuses
from dtrain.backends.local.ranks import supervisor_token
from dtrain.backends.local.store import UNFINISHED, JobStore
from dtrain.errors import SpecError
from dtrain.procs import Ident


def _stored(home, jobs: list[tuple[str, str, str, float]]) -> None:
    """Jobs as (name, project, status, created), written into the job table as a submit records
    them; no process runs (a Running one gets a supervisor that is alive: this test)."""
    me = Ident.of(os.getpid())
    with job_store(home) as store:
        for name, project, status, created in jobs:
            store.insert_job(JobSpec(name=name, command=("true",), project=project), cwd="/", node="here")
            path = {"Pending": [], "Running": ["Running"], "Succeeded": ["Running", "Succeeded"],
                    "Failed": ["Failed"], "Deleted": ["Deleted"], "Suspended": ["Suspended"]}[status]
            for step in path:
                assert store.set_status(name, step, "test")
            store.update(name, created=created, supervisor_pid=me.pid, supervisor_start=supervisor_token(me))


@pytest.fixture
def client(home):
    jobs = []
    for i in range(30):  # three projects, every status, and runs of jobs created in the same second
        status = ("Succeeded", "Failed", "Running", "Deleted", "Pending", "Suspended")[i % 6]
        jobs.append((f"j{i:02d}", ("default", "team-a", "team-b")[i % 3], status, 1_700_000_000.0 + i // 4))
    c = Client(home=home)
    for p in ("team-a", "team-b"):
        c.create_project(p)
    _stored(home, jobs)
    return c


def test_the_local_sql_pages_are_those_of_the_filtered_list(client):
    backend = client.backend()
    seen = set()
    for project in (None, "default", "team-a", "nobody"):
        for status in (None, *JobStatus, "InProgress"):
            for limit, offset in ((None, 0), (1, 0), (4, 0), (4, 4), (7, 3), (None, 5), (1000, 29), (3, 40)):
                sql = backend.page(project=project, status=status, limit=limit, offset=offset)
                plain = Backend._page(backend, project=project, statuses=check_statuses(status), limit=limit,
                                      offset=offset)
                assert ([j.name for j in sql.jobs], sql.total) == ([j.name for j in plain.jobs], plain.total), \
                    (project, status, limit, offset)
                assert sql.jobs == plain.jobs  # the same records, field for field
                seen.update(j.name for j in sql.jobs)
    assert len(seen) == 30
    every = client.page()
    assert every.total == 25 and all(j.status != JobStatus.DELETED for j in every.jobs)  # Deleted only when asked
    assert [j.name for j in every.jobs][:3] == ["j29", "j28", "j26"]  # newest first (j27: Deleted)
    assert [j.name for j in client.page(status="Deleted").jobs] == ["j27", "j21", "j15", "j09", "j03"]


def test_only_the_pages_jobs_are_read_in_full(client, monkeypatch):
    backend = client.backend()
    built = []
    info = type(backend)._info
    monkeypatch.setattr(type(backend), "_info", lambda self, row: built.append(row["name"]) or info(self, row))
    page = client.page(limit=3, offset=2)
    assert [j.name for j in page.jobs] == built == ["j26", "j25", "j24"] and page.total == 25


def test_a_job_whose_supervisor_died_is_counted_as_what_it_is_now(client, home):
    """A Running job whose supervisor is gone reads Failed (no restart left) before it is counted, as
    `list` and `describe` have it, even when it is not on the page asked for."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = Ident.of(os.getpid())._replace(pid=dead.pid)
    with job_store(home) as store:
        store.update("j02", supervisor_pid=gone.pid, supervisor_start=supervisor_token(gone))
    running = client.page(status="Running", limit=1)
    assert running.total == 4 and [j.name for j in running.jobs] == ["j26"]
    assert client.get("j02").status == JobStatus.FAILED and "supervisor" in client.get("j02").message


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"limit": 0}, "invalid limit 0: use a number of jobs from 1 to 1000"),
    ({"limit": 1001}, "invalid limit 1001"),
    ({"limit": True}, "invalid limit True"),
    ({"limit": 2.0}, "invalid limit 2.0"),
    ({"offset": -1}, "invalid offset -1: use a number of jobs from 0 to 10000000"),
    ({"offset": 10_000_001}, "invalid offset 10000001"),
    ({"offset": None}, "invalid offset None"),
    ({"status": "Sleeping"}, "invalid status 'Sleeping': use one of Pending, Running, Succeeded, Failed, Deleted, "
                             "Suspended"),
])
def test_bad_pages_are_refused_in_one_line(client, kwargs, says):
    with pytest.raises(SpecError) as err:
        client.page(**kwargs)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_expired_deleted_jobs_are_forgotten_before_a_page_is_counted(client, home):
    (home / "config.yaml").write_text("project: default\nbackend: local\ndeleted_job_ttl: 1h\n")
    assert Client(home=home).page(status="Deleted").total == 5  # deleted just now (finished is now): kept
    with job_store(home) as store:
        store.update("j03", finished=time.time() - 7200)
    page = Client(home=home).page(status="Deleted", limit=2)
    assert page.total == 4 and [j.name for j in page.jobs] == ["j27", "j21"]
    assert "j03" not in [j.name for j in Client(home=home).list()]


# ------------------------------------------------------------------------- summary (Prometheus' /metrics)


def test_the_local_sql_summary_is_that_of_the_list(client):
    backend = client.backend()
    for project in (None, "default", "team-a", "nobody"):
        sql = backend.summary(project=project)
        counts, unfinished = Backend._summary(backend, project=project)
        assert sql.counts == tuple(sorted(counts, key=lambda c: (c.project, c.status.value))), project
        assert sql.unfinished == tuple(unfinished), project  # the same records, field for field
    summary = client.summary()
    assert {(c.project, c.status): c.jobs for c in summary.counts} == {
        ("default", JobStatus.SUCCEEDED): 5, ("default", JobStatus.DELETED): 5,  # Deleted too
        ("team-a", JobStatus.FAILED): 5, ("team-a", JobStatus.PENDING): 5,
        ("team-b", JobStatus.RUNNING): 5, ("team-b", JobStatus.SUSPENDED): 5}
    assert [j.name for j in summary.unfinished] == [f"j{i:02d}" for i in range(30) if i % 6 in (2, 4, 5)]
    assert [(c.project, c.status.value, c.jobs) for c in client.summary(project="team-b").counts] == [
        ("team-b", "Running", 5), ("team-b", "Suspended", 5)]  # by project, then status
    assert client.summary(project="nobody") == JobSummary(counts=(), unfinished=())


def test_a_summary_builds_only_the_unfinished_jobs_and_counts_a_lost_one_as_failed(client, home, monkeypatch):
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = Ident.of(os.getpid())._replace(pid=dead.pid)
    with job_store(home) as store:
        store.update("j02", supervisor_pid=gone.pid, supervisor_start=supervisor_token(gone))  # team-b, Running
    backend = client.backend()
    built = []
    info = type(backend)._info
    monkeypatch.setattr(type(backend), "_info", lambda self, row: built.append(row["name"]) or info(self, row))
    summary = client.summary()
    counts = {(c.project, c.status): c.jobs for c in summary.counts}
    assert counts[("team-b", JobStatus.RUNNING)] == 4 and counts[("team-b", JobStatus.FAILED)] == 1
    assert sorted(built) == sorted(j.name for j in summary.unfinished) and len(built) == 14  # 15 less the lost one
    assert "j02" not in built


def test_expired_deleted_jobs_are_forgotten_before_they_are_counted(client, home):
    (home / "config.yaml").write_text("project: default\nbackend: local\ndeleted_job_ttl: 1h\n")
    with job_store(home) as store:
        store.update("j03", finished=time.time() - 7200)  # default's
    counts = {(c.project, c.status): c.jobs for c in Client(home=home).summary().counts}
    assert counts[("default", JobStatus.DELETED)] == 4 and counts[("default", JobStatus.SUCCEEDED)] == 5


def test_projects_and_the_checks_that_run_often_read_no_finished_job(client, monkeypatch):
    """`project list`, the check a waiting supervisor runs every few seconds for lost jobs ahead of it
    and a volume's users read every job ever stored (the specs of a long history) to find the few
    that may run: they read those, and the counts."""
    backend = client.backend()
    monkeypatch.setattr(JobStore, "jobs", lambda self: pytest.fail("read every stored job"))
    assert [(p.name, p.jobs, p.gpus_allocated) for p in client.list_projects()] == [
        ("default", 5, 0), ("team-a", 10, 0), ("team-b", 10, 0)]  # default: 5 Succeeded (its 5 Deleted are not)
    backend.reconcile_others("j02")
    assert backend.volume_users("data") == [] and backend.volume_users("data", suspended=False) == []


def test_the_reads_that_run_often_do_not_walk_the_history(home):
    """The jobs that may run (read at every check a queued supervisor makes) and the jobs in one
    status are found through an index: the SQLite instructions they take do not grow with the
    finished jobs stored, but for a deeper tree (without the indexes: ten times the history, ten
    times the work)."""
    store = JobStore(home / "state.db")

    def work(read) -> int:  # SQLite virtual-machine instructions, each counted: deterministic (counted in
        ticks = []          # tens, a read of 45 gave 3 or 6 ticks by where the counter stood before it)
        store.conn.set_progress_handler(lambda: ticks.append(1) and 0, 1)
        try:
            read()
        finally:
            store.conn.set_progress_handler(None, 1)
        return len(ticks)

    reads = {"may run": lambda: store.jobs_in(UNFINISHED),
             "Deleted": lambda: store.page(project=None, statuses=["Deleted"], limit=None, offset=0),
             "newest Running": lambda: store.page(project=None, statuses=["Running"], limit=25, offset=0)}
    stored = 0
    try:
        for name in ("queued", "running"):
            store.insert_job(JobSpec(name=name, command=("true",)), cwd="/", node="here")
        store.set_status("running", "Running")
        costs = []
        for history in (200, 2000):
            while stored < history:
                name = f"done{stored:05d}"
                store.insert_job(JobSpec(name=name, command=("true",)), cwd="/", node="here")
                assert store.set_status(name, "Running") and store.set_status(name, "Succeeded")
                stored += 1
            assert [r["name"] for r in store.jobs_in(UNFINISHED)] == ["queued", "running"]
            costs.append({what: work(read) for what, read in reads.items()})
        small, big = costs
        assert all(big[what] < 2 * small[what] for what in reads), costs  # a deeper B-tree: a few more
    finally:
        store.close()
