"""Issue 12, item 15: `dtrain exec JOB [--rank R] -- CMD`, Run:AI's exec, on both backends."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import DTRAIN, Dtrain
from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig
from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer
from dtrain.errors import ConflictError, SpecError
from dtrain.spec import JobSpec


def _dt(home, *args, timeout=60):
    return subprocess.run([DTRAIN, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "DTRAIN_HOME": str(home)})


def test_item15_exec_local_sees_the_jobs_volumes_environment_and_folder(tmp_path):
    home = tmp_path / "home"
    assert _dt(home, "volume", "create", "vol", "--size", "1Mi").returncode == 0
    folder = json.loads(_dt(home, "volume", "describe", "vol", "--json").stdout)["extra"]["path"]
    (tmp_path / "work").mkdir()
    mnt = tmp_path / "mnt"  # a path only the job's mount namespace binds the volume at
    assert _dt(home, "submit", "held", "--pvc", f"vol:{mnt}", "-e", "GREETING=hello from the job",
               "--working-dir", str(tmp_path / "work"), "--", "sleep", "120").returncode == 0
    try:
        Dtrain(home).wait_running("held")
        with open(os.path.join(folder, "marker"), "w") as f:
            f.write("inside\n")
        assert not (mnt / "marker").exists()
        got = _dt(home, "exec", "held", "--", "cat", f"{mnt}/marker")
        assert got.returncode == 0 and got.stdout == "inside\n", got.stderr
        env = _dt(home, "exec", "held", "--", "sh", "-c", 'echo "$GREETING|$RANK|$DTRAIN_JOB_NAME|$(pwd)"')
        assert env.stdout.strip() == f"hello from the job|0|held|{tmp_path / 'work'}"
        assert _dt(home, "exec", "held", "--", "sh", "-c", "exit 7").returncode == 7
        for missing, looked in (("nosuchcmd", "its PATH"), (f"{mnt}/nope.sh", "the folders it sees")):
            gone = _dt(home, "exec", "held", "--", missing)  # it said "nsenter: failed to execute nosuchcmd: ..."
            assert gone.returncode == 127 and gone.stderr.splitlines() == [
                f"dtrain: error: command '{missing}' not found in rank 0 of job 'held' (looked in {looked}); "
                "check the spelling after '--'"]
        bad = _dt(home, "exec", "held", "--rank", "1", "--", "true")
        assert bad.returncode == 2 and "1 process, rank 0" in bad.stderr
        assert _dt(home, "exec", "held").returncode == 2  # no command
    finally:
        _dt(home, "delete", "held")
    done = _dt(home, "exec", "held", "--", "true")
    assert done.returncode == 2 and "Running" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_item15_exec_local_two_ranks_reaches_the_asked_rank(tmp_path):
    home = tmp_path / "home"
    assert _dt(home, "submit-dist", "pair", "--processes", "2", "--", "sleep", "120").returncode == 0
    try:
        Dtrain(home).wait_running("pair")
        out = _dt(home, "exec", "pair", "--rank", "1", "--", "sh", "-c", "echo $RANK $WORLD_SIZE")
        assert out.stdout.strip() == "1 2", out.stderr
        # a command a signal ended exits 128 + N, as a shell and kubectl exec report it (not 256 - N)
        assert _dt(home, "exec", "pair", "--", "sh", "-c", "kill -9 $$").returncode == 137
        assert _dt(home, "exec", "pair", "--rank", "1", "--", "sh", "-c", "kill -15 $$").returncode == 143
        for word in ("all", "x", "²"):
            bad = _dt(home, "exec", "pair", "--rank", word, "--", "true")
            assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
            assert "use a process rank such as 0 (at most 4095); exec runs in one process" in bad.stderr, bad.stderr
            assert "or 'all'" not in bad.stderr
        # Run:AI's `runai bash JOB`: a shell beside the asked rank, reading this terminal
        shell = subprocess.run([DTRAIN, "bash", "pair", "--rank", "1"], input='echo "$RANK $0"; exit 3\n',
                               capture_output=True, text=True, timeout=60, env={**os.environ, "DTRAIN_HOME": str(home)})
        assert (shell.returncode, shell.stdout) == (3, "1 bash\n"), shell.stderr
        bad = _dt(home, "bash", "pair", "--", "ls")
        assert bad.returncode == 2 and "takes no command after '--': run a command with 'dtrain exec" in bad.stderr
    finally:
        _dt(home, "delete", "pair")
    gone = _dt(home, "bash", "pair")
    assert gone.returncode == 2 and "Running" in gone.stderr and len(gone.stderr.splitlines()) == 1, gone.stderr


@pytest.fixture
def k8s():
    cluster = FakeCluster()
    server = FakeKubeServer(cluster).start()
    client = server.api_client()
    calls = []

    def stream(namespace, pod, command):  # the official stream API needs a websocket the fake lacks
        calls.append((namespace, pod, command))
        return 3

    backend = KubernetesBackend(KubernetesConfig(project="lanes", image="img:1"), api_client=client,
                                exec_stream=stream)
    yield cluster, backend, calls
    client.close()
    server.close()


def test_item15_exec_kubernetes_picks_the_ranks_replica_pod(k8s):
    cluster, backend, calls = k8s
    backend.submit(JobSpec(name="train", command=("python", "t.py"), project="lanes", processes=2,
                           launcher="torchrun"))
    with pytest.raises(ConflictError, match="exec needs a Running job"):
        backend.exec("train", ["ls"], running_timeout=0.5)  # not kubectl's 1m default
    pods = [p["metadata"]["name"] for p in cluster.run_pods("dtrain-lanes", "train")]
    cluster.transition("dtrain-lanes", "train", "Running")
    assert backend.exec("train", ["ls", "/mnt"], rank=1) == 3
    assert backend.exec("train", ["env"]) == 3
    assert [c[0] for c in calls] == ["dtrain-lanes", "dtrain-lanes"]
    assert calls[0][1] != calls[1][1] and {calls[0][1], calls[1][1]} <= set(pods)
    assert "worker" in calls[0][1] and "master" in calls[1][1]
    assert calls[0][2] == ["ls", "/mnt"]
    with pytest.raises(SpecError, match="ranks 0 to 1"):
        backend.exec("train", ["ls"], rank=2)
