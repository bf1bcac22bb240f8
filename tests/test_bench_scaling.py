"""`dtrain bench scaling --ceiling`: N independent 1-process jobs run at once, pinned apart, and
their summed throughput is reported next to the N-process DDP run."""

from __future__ import annotations

import json
import os

import pytest

from conftest import Dtrain
from test_cifar10 import data_dir  # noqa: F401


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_ceiling_runs_independent_jobs_at_once_on_their_own_cores(dt: Dtrain, data_dir, tmp_path):  # noqa: F811
    out = tmp_path / "scaling"
    proc = dt("bench", "scaling", "--workload", "cifar10", "--processes", "1,2", "--data-dir", str(data_dir),
              "--batch", "8", "--steps", "12", "--warmup", "2", "--ceiling", "--out", str(out), "--json",
              timeout=600)
    results = json.loads((out / "scaling.json").read_text())
    assert '"ceiling_images_per_s"' in proc.stdout  # --json prints the same figures
    one, two = results
    assert "ceiling_images_per_s" not in one and len(two["ceiling_samples"]) == 1
    assert two["ceiling_images_per_s"] > 0 and two["vs_ceiling"] == pytest.approx(
        two["images_per_s"] / two["ceiling_images_per_s"])
    assert "| 2 |" in (out / "scaling.md").read_text().split("Ceiling:")[1]
    jobs = {j["name"]: j for j in json.loads(dt("list", "--json").stdout)}
    pair = [j for name, j in jobs.items() if "-2x1-" in name]
    assert len(pair) == 2 and all(j["status"] == "Succeeded" for j in pair)
    first, second = sorted(pair, key=lambda j: j["started"])
    assert second["started"] < first["finished"]  # they ran at the same time
    logs = [dt("logs", j["name"]).stdout for j in pair]
    assert all("FINAL" in text or "test_accuracy" in text for text in logs), logs[0][-500:]
