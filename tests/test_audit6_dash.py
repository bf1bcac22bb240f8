"""Audit 6, the dashboard and GPU views: `dtrain nodes`, /metrics and the pages with GPUs that NVML
describes (a stand-in pynvml module), and the job page's layout with long messages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import Dtrain, _cleanup

# nvidia-ml-py as a machine with two H100s answers it, the second in MIG mode: NVML gives no
# utilisation for a MIG-enabled GPU (NVMLError_NotSupported; nvidia-smi prints "[N/A]").
FAKE_PYNVML = '''
class NVMLError(Exception):
    pass
class NVMLError_NotSupported(NVMLError):
    pass
class _Mem:
    total, used = 80 * 2**30, 3 * 2**30
class _Util:
    gpu = 42
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return 2
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetMemoryInfo(h): return _Mem()
def nvmlDeviceGetName(h): return "NVIDIA H100 80GB HBM3"
def nvmlDeviceGetUtilizationRates(h):
    if h == 1:
        raise NVMLError_NotSupported("Not Supported")
    return _Util()
'''


def nvml_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a machine whose GPUs NVML reports (no injected inventory)."""
    folder = tmp_path / "fake-nvml"
    folder.mkdir()
    (folder / "pynvml.py").write_text(FAKE_PYNVML)
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path}


@pytest.fixture
def dt_nvml(home, tmp_path, monkeypatch):
    monkeypatch.delenv("DTRAIN_GPUS", raising=False)
    d = Dtrain(home, env=nvml_env(tmp_path))
    yield d
    _cleanup(d)


def test_a_gpu_without_utilisation_is_listed_with_what_nvml_knows(dt_nvml):
    """A MIG-enabled GPU's utilisation query raised NVMLError_NotSupported through `dtrain nodes`,
    `dtrain submit` and the dashboard (a traceback); now that value is unknown, the rest is shown."""
    gpus = dt_nvml.json("nodes")[0]["gpus"]
    assert [g["index"] for g in gpus] == ["0", "1"]
    assert gpus[0]["utilization"] == 42.0 and gpus[1]["utilization"] is None
    assert {g["memory_total"] for g in gpus} == {80 * 2**30} and gpus[1]["name"].startswith("NVIDIA")
    top = dt_nvml("top")
    assert "Traceback" not in top.stderr and "42%" in top.stdout
    dt_nvml("submit", "on-gpu", "-g", "2", "--", "true")
    assert dt_nvml.wait_for("on-gpu", {"Succeeded", "Failed"})["status"] == "Succeeded"
