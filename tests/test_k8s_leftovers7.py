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

from dtrain.cli.listing import cmd_describe  # noqa: E402
from dtrain.client import Client  # noqa: E402
from dtrain.spec import notebook_spec  # noqa: E402

from test_k8s_backend import IMAGE, NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)

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
