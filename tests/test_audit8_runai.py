"""The Run:AI + NetApp lane-detection walk-through, as its reader types it: lineage and results
that must read right, not only exit 0."""

from __future__ import annotations

import pytest
from conftest import Dtrain


@pytest.mark.slow
def test_a_volume_a_job_made_names_that_job_as_a_pvc_does(dt: Dtrain):
    """`--pvc local:100Gi:/mnt` makes pvc-<job>-0 for the job (Run:AI's data job); `volume describe`
    and `--json` name that job (`Job:`), as the Kubernetes backend reads it from the PVC's
    dtrain.io/job label. Before, the local backend said `Job: -` for it."""
    dt("submit", "download-data", "--pvc", "local:1Gi:/mnt", "--", "true")
    dt("wait", "download-data")
    info = dt.json("volume", "describe", "pvc-download-data-0")
    assert info["job"] == "download-data"
    assert "Job: download-data" in dt("volume", "describe", "pvc-download-data-0").stdout
    listed = {v["name"]: v for v in dt.json("volume", "list")}
    assert listed["pvc-download-data-0"]["job"] == "download-data"
    # a volume made by hand, and one restored from the job's volume, were made for no job
    dt("volume", "create", "by-hand")
    assert dt.json("volume", "describe", "by-hand")["job"] is None
    dt("snapshot", "create", "pvc-download-data-0", "--name", "s1", "--job", "download-data")
    dt("snapshot", "restore", "s1", "--to", "restored")
    restored = dt.json("volume", "describe", "restored")
    assert restored["job"] is None and restored["origin_snapshot"] == "s1"


def test_a_scaling_table_on_injected_gpus_says_the_runs_trained_on_the_cpu(tmp_path):
    """`dtrain bench scaling --gpu 1` with DTRAIN_GPUS (the 1 vs 3 GPU comparison on a machine without
    GPUs) schedules GPUs, but the training runs on the CPU: the table said "1 GPU per process", so CPU
    figures read as GPU scaling. It now says what the runs trained on (their run.json's device)."""
    import argparse
    import json

    from dtrain.bench import scaling

    (tmp_path / "run.json").write_text(json.dumps({"device": "cpu", "step": 6}))
    assert scaling.trained_on(tmp_path) == "cpu"
    assert scaling.trained_on(tmp_path / "none") is None
    args = argparse.Namespace(workload="lanes", batch=2, steps=6, warmup=2, repeats=1, gpu=1, cpu_per_process=1)
    rows = [{"processes": p, "images_per_s": 5.0 * p, "speedup": float(p), "efficiency": 1.0, "epoch_minutes": 1.0,
             "step_s": 0.3, "step_sd_s": 0.01} for p in (1, 3)]
    on_cpu = scaling.markdown([{**r, "devices": ["cpu"]} for r in rows], args)
    assert "1 GPU per process (scheduled, but the runs trained on the CPU" in on_cpu
    on_gpu = scaling.markdown([{**r, "devices": ["cuda"]} for r in rows], args)
    assert "1 GPU per process, median" in on_gpu and "trained on the CPU" not in on_gpu
    cpu_only = scaling.markdown(rows, argparse.Namespace(**{**vars(args), "gpu": 0}))
    assert "1 CPU core per process, median" in cpu_only
