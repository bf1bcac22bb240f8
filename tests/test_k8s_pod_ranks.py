"""A rank's pod and a pod's ranks come from one rule (status.pod_ranks): the pod that `describe`
names for a rank is the one `logs --rank` reads and `exec --rank` enters, and `--pod NAME` is
answered with the ranks of that very pod, for every kind of job: a PyTorchJob (master-0 runs rank
0), an elastic one (workers only: worker-I runs rank I), an MPIJob (the launcher runs none), packed
pods (gpus_per_node: several ranks a pod), a TrainJob (Trainer v2) and a local job."""

from __future__ import annotations

import pytest
from conftest import Dtrain, assert_usage_error, team_b_on_kubernetes

from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig
from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer
from dtrain.backends.kubernetes.logs import log_sources
from dtrain.backends.local.backend import LocalBackend
from dtrain.cli.watch import pod_ranks
from dtrain.spec import JobSpec

NS = "dtrain-lanes"


@pytest.fixture
def kube():
    """make(**config) -> (backend, exec'd pods): a KubernetesBackend on the fake API server whose
    exec records the pod it enters."""
    server = FakeKubeServer(FakeCluster()).start()
    client = server.api_client()
    entered: list[str] = []

    def make(**config) -> tuple[KubernetesBackend, list[str]]:
        stream = lambda namespace, pod, command: entered.append(pod) or 0  # noqa: E731
        return KubernetesBackend(KubernetesConfig(project="lanes", image="img:1", **config), api_client=client,
                                 exec_stream=stream), entered

    yield make, server.cluster
    client.close()
    server.close()


def _spec(**kw) -> JobSpec:
    return JobSpec(**{"name": "train", "command": ("python", "train.py"), "project": "lanes", "launcher": "torchrun",
                      **kw})


@pytest.mark.parametrize("config, job, pods", [
    ({}, {"processes": 3}, ["train-master-0", "train-worker-0", "train-worker-1"]),
    ({"elastic_min_replicas": 1}, {"processes": 2}, ["train-worker-0", "train-worker-1"]),
    ({}, {"processes": 2, "launcher": "mpi"}, ["train-worker-0", "train-worker-1"]),
    ({"gpus_per_node": 2}, {"processes": 4, "gpu": 1}, ["train-master-0", "train-master-0",
                                                        "train-worker-0", "train-worker-0"]),
    ({"gpus_per_node": 2}, {"processes": 4, "gpu": 1, "launcher": "mpi"}, ["train-worker-0", "train-worker-0",
                                                                          "train-worker-1", "train-worker-1"]),
    ({"trainer": "v2"}, {"processes": 2}, ["train-node-0-0-", "train-node-0-1-"]),
], ids=["torchrun", "elastic", "mpi", "packed", "packed-mpi", "trainer-v2"])
def test_rank_to_pod_to_rank(kube, config, job, pods):
    """Elastic worker-0 was said to run rank 1, a packed pod's ranks past its first were never named."""
    make, cluster = kube
    backend, entered = make(**config)
    backend.submit(_spec(**job))
    cluster.run_pods(NS, "train")
    if config.get("trainer") != "v2":  # a TrainJob runs while a pod runs; the operator's jobs say so
        cluster.transition(NS, "train", "Running")
    info = backend.get("train")
    named = [p.pod for p in info.processes]
    assert [n[:len(w)] for n, w in zip(named, pods)] == pods  # a TrainJob's pods end in a random suffix
    obj = cluster.find_job(NS, "train")
    every = cluster.items("", "pods", NS)
    for rank, pod in enumerate(named):
        assert rank in pod_ranks(pod, info)  # pod -> rank: what `--pod` answers
        assert pod_ranks(pod, info) == [p.rank for p in info.processes if p.pod == pod]
        backend.exec("train", ["true"], rank=rank)  # rank -> pod: the one `exec --rank` enters
        assert entered[-1] == pod
        if job.get("launcher") != "mpi":  # an MPIJob's lines are all the launcher's (mpirun's)
            assert [s.pod for s in log_sources(obj["kind"], obj, every, rank)] == [pod]  # `logs --rank`'s
    assert pod_ranks("train-launcher", info) == [] and pod_ranks("other-worker-0", info) == []


def test_a_local_jobs_rank_r_is_pod_name_r(tmp_path):
    backend = LocalBackend(tmp_path)
    backend.submit(_spec(name="pair", project="default", processes=2, command=("true",)))
    info = backend.get("pair")
    assert [p.pod for p in info.processes] == ["pair-0", "pair-1"]
    assert [pod_ranks(p.pod, info) for p in info.processes] == [[0], [1]]
    assert pod_ranks("pair-worker-0", info) == [] and pod_ranks("pair-2", info) == []


@pytest.mark.slow
def test_pod_of_packed_ranks_names_its_first_rank_and_the_range(home, tmp_path):
    """`--pod train-worker-0` of a job of 4-rank pods said 'runs rank 1' (it runs ranks 4-7)."""
    server = team_b_on_kubernetes(home, tmp_path, gpus_per_node=4)
    try:
        dt = Dtrain(home)
        dt("submit-dist", "train", "-p", "team-b", "--processes", "8", "--gpu", "1", "--", "true")
        server.cluster.run_pods("dtrain-team-b", "train")
        assert_usage_error(dt("logs", "train", "-p", "team-b", "--pod", "train-worker-0", check=False),
                           "pod 'train-worker-0' runs ranks 4-7", "dtrain logs train --rank 4 -p team-b for the first",
                           "--rank 5 to 7 for the others")
        assert_usage_error(dt("logs", "train", "-p", "team-b", "--pod", "train-worker-1", check=False),
                           "'train-worker-1' is no pod of job 'train'", "its pods: train-master-0, train-worker-0",
                           "dtrain logs train --rank R -p team-b")
    finally:
        server.close()


@pytest.mark.slow
def test_pod_of_an_elastic_job_is_the_rank_it_runs(home, tmp_path):
    """An elastic PyTorchJob has no master: worker-I runs rank I (it was said to run I + 1)."""
    server = team_b_on_kubernetes(home, tmp_path, elastic_min_replicas=1)
    try:
        dt = Dtrain(home)
        dt("submit-dist", "train", "-p", "team-b", "--processes", "2", "--", "true")
        server.cluster.run_pods("dtrain-team-b", "train")
        assert_usage_error(dt("exec", "train", "-p", "team-b", "--pod", "train-worker-1", "--", "ls", check=False),
                           "pod 'train-worker-1' runs rank 1: dtrain exec train --rank 1 -p team-b -- COMMAND")
    finally:
        server.close()
