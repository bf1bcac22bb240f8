"""`describe job` names each process's pod where the backend runs pods (Kubernetes), as --json and
the HTTP API do; the local table keeps its columns."""

from __future__ import annotations

import dataclasses

from dtrain.backends.local.backend import LocalBackend
from dtrain.cli.listing import process_table
from dtrain.spec import JobSpec


def test_a_pod_column_where_the_backend_names_pods(tmp_path):
    backend = LocalBackend(tmp_path)
    backend.submit(JobSpec(name="pair", command=("true",), project="default", processes=2, launcher="torchrun"))
    info = backend.get("pair")
    local = process_table(info).splitlines()
    assert local[0].split() == ["RANK", "STATUS", "EXIT", "CODE", "DEVICES", "NODE"]  # as it was
    pods = ["train-master-0", "train-worker-0"]
    remote = dataclasses.replace(info, backend="kubernetes", processes=[
        dataclasses.replace(p, pod=pod) for p, pod in zip(info.processes, pods)])
    table = process_table(remote).splitlines()
    assert table[0].split()[:2] == ["RANK", "POD"]
    assert [row.split()[:2] for row in table[1:]] == [["0", "train-master-0"], ["1", "train-worker-0"]]
