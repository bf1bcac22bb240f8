"""Several backends from one home: a job verb on a bare name reads a remote job once, state.db's
sent_to is opened once per Client, the server's job list keeps a remote backend's read a while, and
`config forget-backend` over HTTP."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import dtrain
from dtrain import JobStatus
from dtrain.errors import NotFoundError
from dtrain.remotes import SentTo


class Counting:
    """A remote backend that holds the jobs named, counting each read of one (a cluster's GET)."""

    def __init__(self, name: str, jobs: tuple[str, ...] = ("cifar",)):
        self.name = name
        self.jobs = set(jobs)
        self.gets = 0
        self.deleted: list[str] = []

    def get(self, job):
        self.gets += 1
        if job not in self.jobs:
            raise NotFoundError(f"no job named {job!r}")
        return SimpleNamespace(name=job, status=JobStatus.RUNNING)

    def delete(self, job, *, purge=False):
        self.deleted.append(job)
        return job


def test_a_verb_on_a_bare_name_reads_a_sent_to_job_once(home):
    """`_holder` found the job on the remote backend with a read, and `_found` read it again: each verb
    on a bare name of a job sent elsewhere was two GETs of the cluster (or DescribeTrainingJob)."""
    remote = Counting("kubernetes")
    client = dtrain.Client(home=home, backends={"kubernetes": remote})
    SentTo(home).record("kubernetes", "default")
    assert client.get("cifar").name == "cifar" and remote.gets == 1
    assert client.delete("cifar") == "cifar" and remote.gets == 2 and remote.deleted == ["cifar"]


def test_sent_to_is_opened_once_per_client_and_sees_other_processes_records(home):
    client = dtrain.Client(home=home, backends={"kubernetes": Counting("kubernetes")})
    assert client._sent_to.read() == [] and client._sent_to.opened == 0  # no database: none is made
    SentTo(home).record("kubernetes", "default")  # another process's record
    for _ in range(5):
        client.get("cifar")
    assert client._sent_to.opened == 1
    SentTo(home).record("sagemaker", "default")
    assert client._sent_to.read() == [("kubernetes", "default"), ("sagemaker", "default")]
    SentTo(home).forget("sagemaker")
    assert client._sent_to.read() == [("kubernetes", "default")] and client._sent_to.opened == 1
