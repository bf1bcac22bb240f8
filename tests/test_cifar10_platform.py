"""Issue 5 through the platform: the same CIFAR10 command via `dtrain submit-dist` (torchrun) and
`dtrain submit-mpi` ends with the same weights as plain torchrun (same seed, same global batch)."""

from __future__ import annotations

import shutil

import pytest
import torch

from conftest import Dtrain
from test_cifar10 import PER_RANK_BATCH, TRAIN_ARGS, _weights, data_dir, reference  # noqa: F401  (fixtures)


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["submit-dist", "submit-mpi"])
def test_platform_launchers_match_plain_torchrun(dt: Dtrain, reference, data_dir, tmp_path, verb):  # noqa: F811
    if verb == "submit-mpi" and not shutil.which("mpirun"):
        pytest.skip("OpenMPI is not installed (make setup installs it)")
    expected, _stdout, _out = reference
    out = tmp_path / "model"
    command = ["python", "-m", "dtrain.workloads.cifar10", "train", "--data-dir", str(data_dir), "--model-dir",
               str(out), "--batch-size", str(PER_RANK_BATCH), *TRAIN_ARGS]
    dt(verb, "cifar", "--processes", "2", "--cpu", "1", "--", *command)
    info = dt.wait_for("cifar", {"Succeeded", "Failed"}, timeout=300)
    assert info["status"] == "Succeeded", dt("logs", "cifar").stdout
    logs = dt("logs", "cifar", "--rank", "0").stdout
    # every launcher presents the PyTorchJob contract (RANK, WORLD_SIZE, ...); the runtime is the one that launched
    assert f"runtime={'mpi' if verb == 'submit-mpi' else 'torchrun'} world_size=2" in logs
    launched = (dt.home / "jobs" / "cifar" / "launcher.log").read_text().split("\n")[0]
    assert ("mpirun" in launched) == (verb == "submit-mpi") and ("torch.distributed.run" in launched) != (verb == "submit-mpi")
    assert "FINAL test_accuracy=" in logs and "world_size=2 global_batch=32" in logs
    got = _weights(out)
    assert got.keys() == expected.keys()
    for key in expected:
        assert torch.equal(got[key], expected[key]), key
