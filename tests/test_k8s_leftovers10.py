"""The Kubernetes backend's leftovers of a tenth audit. The fake API server deleted a suspended job's pods
at once and wrote no Suspended condition, so what dtrain reads while a job stops was never exercised:
its pods now get their grace period (Terminating, then gone) and the job its Suspended condition, as
the Job controller and the Training Operator write them; a PyTorchJob suspended by someone else
(kubectl, a queue) reads Pending with the controller's reason, not Running."""

from __future__ import annotations

import argparse

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from dtrain.backends.base import JobStatus  # noqa: E402
from dtrain.backends.kubernetes.objects import PYTORCH_JOB  # noqa: E402
from dtrain.cli.listing import cmd_describe  # noqa: E402
from dtrain.client import Client  # noqa: E402

from test_k8s_backend import NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)


def _described(tmp_path, backend, name: str, capsys) -> str:
    client = Client(home=tmp_path, backend="kubernetes", backends={"kubernetes": backend})
    assert cmd_describe(argparse.Namespace(names=[name], json=False, project=None, verb="describe"), client) == 0
    return capsys.readouterr().out


def test_a_pytorchjob_suspended_with_kubectl_reads_pending_with_the_operators_reason(backend, cluster, tmp_path,
                                                                                    capsys):
    backend.submit(spec(launcher="torchrun", processes=2))
    cluster.run_pods(NS, "train")
    cluster.transition(NS, "train", "Running")
    backend.api.patch(PYTORCH_JOB, NS, "train", {"spec": {"runPolicy": {"suspend": True}}})  # kubectl patch

    info = backend.get("train")
    assert info.status is JobStatus.PENDING and "PyTorchJobSuspended" in info.message
    assert {p.status for p in info.processes} == {"Terminating"}  # SIGTERM sent, the grace period running
    out = _described(tmp_path, backend, "train", capsys)
    assert "Status: Pending\nMessage: PyTorchJobSuspended: PyTorchJob train is suspended.\n" in out  # not Running
    assert "Pending  Suspended: PyTorchJobSuspended" in out  # the event of the condition
    cluster.finish_deletions()
    assert cluster.items("", "pods", NS) == [] and backend.get("train").status is JobStatus.PENDING

    backend.api.patch(PYTORCH_JOB, NS, "train", {"spec": {"runPolicy": {"suspend": False}}})  # resumed
    [cond] = [c for c in cluster.get("kubeflow.org", "pytorchjobs", NS, "train")["status"]["conditions"]
              if c["type"] == "Suspended"]
    assert (cond["status"], cond["reason"]) == ("False", "PyTorchJobResumed")

