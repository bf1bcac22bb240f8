"""`dtrain bench scaling --ceiling`: N independent 1-process jobs run at once, pinned apart, and
their summed throughput is reported next to the N-process DDP run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from conftest import DTRAIN, Dtrain, rank_record
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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_benchmark_deletes_the_job_it_was_timing(dt: Dtrain, data_dir, tmp_path, sig):  # noqa: F811
    """Ctrl-C (or SIGTERM) on `dtrain bench scaling` leaves no training behind on the cores."""
    bench = subprocess.Popen([DTRAIN, "bench", "scaling", "--workload", "cifar10", "--processes", "1",
                              "--data-dir", str(data_dir), "--steps", "1000000", "--out", str(tmp_path / "out")],
                             env=dt.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (jobs := [j for j in json.loads(dt("list", "--json").stdout) if j["status"] == "Running"]):
            assert time.monotonic() < deadline and bench.poll() is None, bench.communicate()
            time.sleep(0.2)
        (job,) = jobs
        pid = rank_record(dt.home, job["name"], 0)["pid"]
        bench.send_signal(sig)
        out, err = bench.communicate(timeout=120)
    finally:
        if bench.poll() is None:
            bench.kill()
    assert bench.returncode != 0 and f"deleted {job['name']}: the benchmark stopped" in err, err
    assert dt.status(job["name"]) == "Deleted"
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{pid}")  # the training process is gone, not only its record


@pytest.mark.parametrize("flag, value", [("--repeats", "101"), ("--steps", "100000000"), ("--batch", "0"),
                                         ("--processes", "2000"), ("--cpu-per-process", "0")])
def test_numbers_out_of_range_are_refused_in_one_line(dt: Dtrain, tmp_path, flag, value):
    proc = dt("bench", "scaling", "--workload", "cifar10", "--data-dir", str(tmp_path), flag, value, check=False)
    assert proc.returncode != 0 and f"{flag} {value} is out of range" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
