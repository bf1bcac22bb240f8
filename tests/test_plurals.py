"""A count in a message takes the noun's number: 'needs 1 GPU', not 'needs 1 GPUs' (names.counted)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import dtrain
from dtrain.errors import QuotaError
from dtrain.names import counted


def test_counted_says_one_and_many():
    assert [counted(n, "GPU") for n in (0, 1, 2)] == ["0 GPUs", "1 GPU", "2 GPUs"]
    assert counted(1, "process", "processes") == "1 process" and counted(4, "process", "processes") == "4 processes"
    assert counted(1000, "process", "processes", typed="1E3") == "1E3 processes"


def test_a_one_gpu_job_on_a_machine_without_gpus_says_1_gpu_and_1_process(home, monkeypatch):
    monkeypatch.setenv("DTRAIN_GPUS", "0")
    spec = dtrain.JobSpec(name="one", command=["python", "-c", "pass"], gpu=1, backend="local")
    with pytest.raises(QuotaError) as err:
        dtrain.Client(home=home).submit(spec)
    assert "job 'one' needs 1 GPU (1 process x 1) but this machine has no GPU" in str(err.value)

# The scheduler's reasons ('needs 1 GPU, 0 free', 'project quota 1 GPU, 1 in use') are pinned where those
# tests wait for them: test_audit6_nbapi.py, test_cli_items.py, test_local_leftovers2.py.


def test_the_docs_quote_a_count_of_one_as_dtrain_prints_it():
    """README.md quoted `waiting: project quota 1 GPUs, 1 in use`; describe says '1 GPU' (counted)."""
    root = Path(__file__).resolve().parent.parent
    found = []
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        text = re.sub(r"\s+", " ", doc.read_text())  # a quote may wrap across lines
        found += [f"{doc.name}: {m.group(0)}" for m in re.finditer(
            r"(?<![\d.,])1 (GPUs|processes|CPUs|snapshots|volumes|jobs|ranks|restarts|changes)\b", text)]
    assert found == []
