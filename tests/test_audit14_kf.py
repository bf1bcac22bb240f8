"""A fourteenth audit, the Kubeflow + SageMaker user's day two: the compiled pipeline's IR read as KFP's
run form reads it, the pipeline driven with kfp.local directly, the SageMaker contract inside a --local
host, and the CIFAR10 script read under it.
- The IR's parameters had no descriptions (a KFP run form showed 16 bare fields, `backend` among them,
  which is the process-group backend, not dtrain's), nor did `dtrain pipeline list`: the pipelines'
  docstrings now describe each parameter, which KFP's compiler carries into the IR, and the list shows them.
- A --local host's own hostname did not resolve in the /etc/hosts it was given (algo-1..N only), so
  every Gloo rank logged 'Unable to resolve hostname' and fell back to loopback: it resolves now, as a
  container's does in the /etc/hosts its runtime writes.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from conftest import Dtrain

REPO = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- a --local host's hostname


@pytest.mark.slow
def test_a_local_sagemaker_host_resolves_its_own_hostname(home, tmp_path):
    """Gloo (torch.distributed on CPU) looks the hostname up; a host that cannot logs a warning per rank."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "who.py").write_text("import socket\nname = socket.gethostname()\n"
                                 "print('RESOLVED', name, socket.gethostbyname(name))\n")
    d = Dtrain(home)
    d("submit", "who", "--backend", "sagemaker", "--local", "--source-dir", str(code), "--", "python", "who.py")
    assert d("--backend", "sagemaker", "wait", "who", timeout=120).returncode == 0
    log = d("--backend", "sagemaker", "logs", "who").stdout
    line = next(x for x in log.splitlines() if "RESOLVED" in x)
    assert line.split()[-2:] == [socket.gethostname(), "127.0.0.1"], log


def test_the_hosts_file_names_the_machine_once_beside_the_hosts():
    from dtrain.backends.sagemaker import contract

    req = {"ResourceConfig": {"InstanceCount": 2, "InstanceType": "ml.m5.xlarge"}}
    first = contract.etc_hosts(req, "vm").splitlines()[0].split()
    assert first == ["127.0.0.1", "localhost", "algo-1", "algo-2", "vm"]
    assert contract.etc_hosts(req, "algo-1").splitlines()[0].split().count("algo-1") == 1
