"""The Kubernetes backend's leftovers of a seventh audit: `describe job` of a Kubeflow notebook showed
the local backend's `jupyter-lab ... VolumeContentsManager` line as its command, which its pod does
not run; and plain `dtrain list` of a Running job whose pods this account may not read showed
'0 (0)' processes with no hint (only --json and describe said why).

Each test drives the official `kubernetes` client against the shipped fake API server.
"""

from __future__ import annotations

import argparse

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from dtrain.backends.base import JobStatus  # noqa: E402
from dtrain.cli.listing import cmd_describe, cmd_list  # noqa: E402
from dtrain.client import Client  # noqa: E402
from dtrain.spec import notebook_spec  # noqa: E402

from test_k8s_backend import IMAGE, NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)

POD_ROLE = f"kubectl create role dtrain-pod-reader -n {NS} --verb=get,list --resource=pods,pods/log"


def _client(tmp_path, backend) -> Client:
    return Client(home=tmp_path, backend="kubernetes", backends={"kubernetes": backend})


def _spec_line(out: str) -> str:
    return next(line.strip() for line in out.splitlines() if line.strip().startswith("command:"))


def test_describe_of_a_kubernetes_notebook_shows_what_its_pod_runs(backend, cluster, tmp_path, capsys):
    cluster.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "work", "namespace": NS},
                    "spec": {"resources": {"requests": {"storage": "5Gi"}}, "accessModes": ["ReadWriteMany"]}})
    backend.submit(notebook_spec("nb", volumes=["work:/home/jovyan"], project="lanes"))
    cluster.run_pods(NS, "nb")
    client = _client(tmp_path, backend)
    args = argparse.Namespace(names=["job", "nb"], json=False, project=None, verb="describe")
    assert cmd_describe(args, client) == 0
    out = capsys.readouterr().out
    assert "VolumeContentsManager" not in out and "jupyter-lab" not in out
    # the Notebook's container sets no command: its image's entrypoint is what runs, as kubectl describe tells
    assert _spec_line(out) == f"command: (none set: the entrypoint of image {IMAGE} starts Jupyter)"
    # a container whose command was set (a Notebook edited with kubectl): that command and its args
    made = cluster.get("kubeflow.org", "notebooks", NS, "nb")
    made["spec"]["template"]["spec"]["containers"][0].update(command=["start.sh"], args=["jupyter lab", "--x=1"])
    assert cmd_describe(args, client) == 0
    assert _spec_line(capsys.readouterr().out) == "command: start.sh 'jupyter lab' --x=1"
    # a training job's spec command is what its pod runs: shown as before
    backend.submit(spec())
    assert cmd_describe(argparse.Namespace(names=["train"], json=False, project=None, verb="describe"), client) == 0
    assert _spec_line(capsys.readouterr().out) == "command: python train.py"


def _list_args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"what": "jobs", "project": "lanes", "all_projects": False, "show_deleted": False,
                                 "selector": None, "status": None, "json": False, **kw})


def test_list_of_a_job_whose_pods_are_unreadable_shows_unknown_counts_and_says_why(backend, cluster, tmp_path,
                                                                                   capsys):
    backend.submit(spec(launcher="torchrun", processes=2, gpu=1))
    backend.submit(spec(name="solo"))
    cluster.run_pods(NS, "train")
    cluster.transition(NS, "train", "Running", reason="PyTorchJobRunning")
    client = _client(tmp_path, backend)
    cluster.forbidden.add(("", "pods"))
    assert cmd_list(_list_args(), client) == 0
    out, err = capsys.readouterr()
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert set(rows) == {"train", "solo"}, (out, err)
    assert rows["train"][1] == "Running" and rows["train"][-4:] == ["?", "(2)", "?", "(?)"]
    assert rows["solo"][-4:] == ["?", "(0)", "?", "(?)"]
    # the reason, once for the namespace, on stderr as list's other notices
    (said,) = err.splitlines()
    assert said.startswith(f"dtrain: warning: jobs of project lanes (namespace {NS}): pods not shown (processes, "
                           f"GPUs and node "
                           f"unknown)") and POD_ROLE in said
    # --json keeps the numbers as the backend gives them, and says the same notice
    assert cmd_list(_list_args(json=True), client) == 0
    out, err = capsys.readouterr()
    assert "pods not shown" in err and '"processes_running": 0' in out
    # pods readable again: the counts, and no notice
    cluster.forbidden.clear()
    assert backend.get("train").status is JobStatus.RUNNING
    assert cmd_list(_list_args(), client) == 0
    out, err = capsys.readouterr()
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert rows["train"][-4:] == ["2", "(2)", "2", "(0)"] and err == ""
