"""Every-project listings on a Kubernetes backend for an account that may not list across the
cluster (audit 9): config.yaml maps two projects to the shipped fake API server; the account may
read namespaces one at a time only. Before, `dtrain list -A` (and page, summary, project list)
read the backend's own project's namespace alone, so the other project's jobs went missing
without a word."""

from __future__ import annotations

import pytest
import yaml

import dtrain
from conftest import Dtrain
from dtrain.spec import JobSpec

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

PROJECTS = ("team-a", "team-b", "team-c")


@pytest.fixture
def cluster(home, tmp_path):
    """config.yaml sends team-a, team-b and team-c to an in-memory API server, each with a job."""
    from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer

    server = FakeKubeServer(FakeCluster()).start()
    server.write_kubeconfig(tmp_path / "kubeconfig")
    (home / "config.yaml").write_text(yaml.safe_dump({
        "project": "default", "backend": "local", "project_backends": {p: "kubernetes" for p in PROJECTS},
        "kubernetes": {"kubeconfig": str(tmp_path / "kubeconfig"), "image": "img:1"}}))
    client = dtrain.Client(home=home)
    for project in PROJECTS:
        client.submit(JobSpec(name=f"job-{project}", project=project, command=["python", "t.py"]))
    yield server.cluster
    server.close()


def namespace_scoped(cluster, *refused: str) -> None:
    """The account may list nothing across the cluster (namespaces included), and nothing at all in
    the namespaces of `refused` projects."""
    cluster.namespaced_only = True
    cluster.forbidden.add(("", "namespaces"))
    for project in refused:
        cluster.fail("GET", f"/namespaces/dtrain-{project}/", 403, "refused")


def test_every_project_listing_reads_each_mapped_namespace(cluster, home):
    every = dtrain.Client(home=home).list()
    namespace_scoped(cluster)
    client = dtrain.Client(home=home)
    listed = client.list()
    assert {j.spec.project for j in every} == set(PROJECTS)
    assert [j.name for j in listed] == [j.name for j in every] and not listed.notices
    page = client.page()
    assert page.total == len(PROJECTS) and not page.notices
    assert {c.project for c in client.summary().counts} == set(PROJECTS)
    projects = client.list_projects()
    assert {p.name: p.jobs for p in projects if p.backend == "kubernetes"} == {p: 1 for p in PROJECTS}


def test_a_namespace_refused_too_is_a_notice_naming_it_and_the_fix(cluster, home):
    namespace_scoped(cluster, "team-b")
    client = dtrain.Client(home=home)
    listed = client.list()
    assert {j.spec.project for j in listed} == {"team-a", "team-c"}
    [notice] = listed.notices
    assert notice.code == "jobs-unlisted" and "project team-b (namespace dtrain-team-b)" in notice.message
    assert "kubectl auth can-i list" in notice.message and "ClusterRole" in notice.message
    assert [n.code for n in client.page().notices] == ["jobs-unlisted"]
    assert not client.list(project="team-a").notices  # a project's list reads its namespace alone
    projects = client.list_projects()
    assert {p.name for p in projects if p.backend == "kubernetes"} == {"team-a", "team-c"}
    assert [n.code for n in projects.notices] == ["projects-unlisted"]
    assert "project team-b (namespace dtrain-team-b)" in projects.notices[0].message


def test_every_namespace_refused_is_the_error_not_an_empty_list(cluster, home):
    namespace_scoped(cluster, *PROJECTS)
    client = dtrain.Client(home=home)
    listed = client.list()  # the local backend answers; the cluster is one notice
    assert [j.name for j in listed] == [] and [n.code for n in listed.notices] == ["jobs-unlisted"]
    assert "cannot list" in listed.notices[0].message


@pytest.mark.slow
def test_cli_list_all_shows_every_mapped_project_and_warns_of_a_refused_one(cluster, home):
    namespace_scoped(cluster, "team-c")
    proc = Dtrain(home)("list", "-A")
    assert "job-team-a" in proc.stdout and "job-team-b" in proc.stdout and "job-team-c" not in proc.stdout
    [warning] = [line for line in proc.stderr.splitlines() if line.startswith("dtrain: warning:")]
    assert "project team-c (namespace dtrain-team-c) not listed" in warning


@pytest.mark.slow
def test_expired_credentials_are_one_line_without_an_install_hint(cluster, home):
    """A 401 (an expired token) on submit-dist said `...log in again; if pytorchjobs.kubeflow.org is
    not installed: install the Kubeflow Training Operator`, advice that a 401 cannot call for (the
    cluster refused the credentials before looking at the kind); `list -A` tried each namespace."""
    cluster.fail("*", "/", 401, "Unauthorized")
    dt = Dtrain(home)
    for argv in (["submit-dist", "new", "-p", "team-a", "--processes", "2", "--", "python", "t.py"],
                 ["notebook", "nb", "-p", "team-a", "--image", "x"]):
        proc = dt(*argv, check=False)
        assert proc.returncode == 2 and proc.stdout == ""
        [line] = proc.stderr.splitlines()
        assert "did not accept the credentials" in line and "log in again" in line and "install" not in line
    before = len(cluster.requests)
    listed = dtrain.Client(home=home).list()
    assert [n.code for n in listed.notices] == ["jobs-unlisted"] and "log in again" in listed.notices[0].message
    assert not any("/namespaces/" in url for _, url in cluster.requests[before:])  # no namespace-by-namespace retry
