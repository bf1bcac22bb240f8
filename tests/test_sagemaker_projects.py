"""SageMaker projects and regions: a project is a job's dtrain:project tag, and a listing reads one region.

- `describe job NAME` without -p finds a job of another project, as the local backend does (job names are
  unique across projects there, as SageMaker's are in a region; -p's help says so); with another -p it is
  not found and the line names the job's -p.
- `list` in a region without dtrain jobs said "No jobs yet in project 'default'" alone: a warning now names
  the region read and a region where dtrain saw jobs.
- `project create X` said "does not support projects; use --backend local", as if `submit -p X` did not
  work on SageMaker: it says a project is a tag that submit -p sets with nothing created.
"""

from __future__ import annotations

import dataclasses

import pytest

from test_audit15_sm import cli  # noqa: F401  (dtrain's CLI in this process, AWS at moto's server)
from test_sagemaker_backend import CFG, clients, code, moto_url  # noqa: F401

from dtrain.backends.base import Listed
from dtrain.backends.sagemaker.backend import SageMakerBackend
from dtrain.errors import NotSupportedError


@pytest.mark.slow  # a CLI submit and three describes against moto
def test_describe_without_p_finds_another_projects_job_as_the_local_backend_does(cli, clients):  # noqa: F811
    assert cli("config", "backend", "sagemaker")[0] == 0
    rc, out, _ = cli("submit", "tagged", "-p", "team-a", "--", "python", "train.py")
    assert rc == 0 and "'dtrain describe job tagged -p team-a'" in out  # the hint names the job's -p
    rc, out, err = cli("describe", "job", "tagged")  # any project's, as locally: names are unique in a region
    assert (rc, err) == (0, "") and "\nProject: team-a\n" in out
    assert cli("describe", "job", "tagged", "-p", "team-a")[0] == 0
    assert cli("describe", "job", "tagged", "-p", "default") == (
        2, "", "dtrain: error: no job named 'tagged' in project 'default': it is in project 'team-a' "
               "(give -p team-a, or no -p)\n")


@pytest.mark.slow  # a CLI submit and four lists against moto
def test_list_in_a_region_without_jobs_names_it_and_the_region_they_were_seen_in(cli, clients):  # noqa: F811
    assert cli("config", "backend", "sagemaker")[0] == 0
    assert cli("submit", "eastern", "--", "python", "train.py")[0] == 0
    assert cli("list")[2] == ""  # jobs in the region read: no warning
    assert cli("config", "sagemaker", "--region", "us-west-2")[0] == 0
    line = ("dtrain: warning: SageMaker holds no job submitted from here in region us-west-2, the region read (set "
            "by 'dtrain config sagemaker --region'); jobs were seen in us-east-1: "
            "'dtrain config sagemaker --region us-east-1'\n")
    assert cli("list") == (0, "No jobs yet in project 'default': submit one with 'dtrain submit NAME -- COMMAND'\n",
                           line)
    assert cli("list", "-A")[2] == line
    assert cli("config", "sagemaker", "--region", "us-east-1")[0] == 0
    rc, out, err = cli("list")
    assert (rc, err) == (0, "") and "eastern" in out


class _EmptyRegion(SageMakerBackend):
    """AWS answering ListTrainingJobs with no job (moto's server keeps this module's jobs in every region)."""

    def _list(self) -> Listed:
        return Listed([])


def test_list_where_dtrain_never_saw_a_job_elsewhere_gives_no_region_notice(home, clients):  # noqa: F811
    """An account new to dtrain (no job seen in any region) lists nothing with no notice: one at each
    `list -A` and each dashboard refresh would be noise; the notice is for jobs that run elsewhere."""
    west = _EmptyRegion(dataclasses.replace(CFG, region="eu-west-1"), clients=clients, home=home)
    listed = west.list(project="default")
    assert list(listed) == [] and list(listed.notices) == []


def test_project_create_on_sagemaker_says_submit_p_needs_nothing_created(home):
    backend = SageMakerBackend(CFG, home=home)
    with pytest.raises(NotSupportedError) as err:
        backend.create_project("team-b")
    assert str(err.value) == ("SageMaker has no projects to create: a job's project is its dtrain:project tag, "
                              "which 'dtrain submit JOB -p team-b -- COMMAND' sets with nothing created first, and "
                              "'dtrain list -p team-b' lists its jobs")
    with pytest.raises(NotSupportedError) as err:
        backend.create_project("team-b", gpu_quota=2)
    assert str(err.value).endswith("lists its jobs; a GPU quota is not dtrain's there: AWS's service quotas cap "
                                   "the instances")
    with pytest.raises(NotSupportedError, match="SageMaker keeps no projects: a job's project is its dtrain:project "
                                                "tag, set by submit -p; 'dtrain list -A' shows each job's project"):
        backend.list_projects()


@pytest.mark.slow  # a CLI submit against moto
def test_project_create_then_submit_p_on_sagemaker(cli, clients):  # noqa: F811
    assert cli("config", "backend", "sagemaker")[0] == 0
    rc, out, err = cli("project", "create", "team-b")
    assert (rc, out) == (2, "") and "'dtrain submit JOB -p team-b -- COMMAND' sets with nothing created" in err
    assert "use --backend local" not in err  # -p works on SageMaker: no other backend is needed
    assert cli("submit", "btagged", "-p", "team-b", "--", "python", "train.py")[0] == 0  # what the line says works
    assert "btagged" in cli("list", "-p", "team-b")[1]
