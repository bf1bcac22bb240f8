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
    assert all(r["step_s"] > 0 and r["step_sd_s"] >= 0 for r in results)
    assert "lockstep_bound" not in one and 0 < two["lockstep_bound"] <= 1
    assert f"| 2 | {two['step_s']:.3f} s |" in (out / "scaling.md").read_text().split("Per step")[1]
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
    # Ctrl-C as a terminal delivers it: SIGINT at its default, even where this test runs as a
    # background job of a script (such a shell starts its jobs with SIGINT ignored, and a child
    # inherits that, so Python would never raise KeyboardInterrupt)
    bench = subprocess.Popen([DTRAIN, "bench", "scaling", "--workload", "cifar10", "--processes", "1",
                              "--data-dir", str(data_dir), "--steps", "1000000", "--out", str(tmp_path / "out")],
                             env=dt.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
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


def test_a_size_the_machine_cannot_run_is_refused_before_any_run(dt: Dtrain, tmp_path):
    """--processes 1,N on a machine that runs fewer: one line before the 1-process run, not after it."""
    from dtrain.backends.local.backend import max_local_processes

    too_many = max_local_processes()[0] + 1
    if too_many > 1024:
        pytest.skip("this machine runs more processes than the benchmark's own bound")
    proc = dt("bench", "scaling", "--workload", "cifar10", "--data-dir", str(tmp_path), "--processes", f"1,{too_many}",
              "--out", str(tmp_path / "out"), check=False)
    assert proc.returncode != 0 and f"asks for {too_many} processes" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and dt.json("list") == []


def test_an_out_that_is_a_file_is_refused_before_any_run(dt: Dtrain, tmp_path):
    (tmp_path / "out").write_text("kept\n")
    proc = dt("bench", "scaling", "--workload", "cifar10", "--data-dir", str(tmp_path), "--out", str(tmp_path / "out"),
              check=False)
    assert proc.returncode != 0 and "--out" in proc.stderr and "is a file, not a folder" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and dt.json("list") == []
    assert (tmp_path / "out").read_text() == "kept\n"


def test_results_replace_a_link_at_their_name_and_never_write_through_it(tmp_path):
    from dtrain.bench import scaling

    outside = tmp_path / "outside.png"
    outside.write_bytes(b"not ours")
    (tmp_path / "scaling.png").symlink_to(outside)
    results = [{"processes": 1, "speedup": 1.0, "efficiency": 1.0}, {"processes": 2, "speedup": 1.8, "efficiency": 0.9}]
    scaling.plot(results, tmp_path / "scaling.png", "title")
    assert outside.read_bytes() == b"not ours"
    assert not (tmp_path / "scaling.png").is_symlink() and (tmp_path / "scaling.png").read_bytes()[:4] == b"\x89PNG"


def test_expected_max_and_the_lockstep_bound_are_exact():
    import itertools
    import statistics

    from dtrain.bench.scaling import expected_max, lockstep_bound

    xs = [0.30, 0.34, 0.31, 0.52, 0.33]
    for n in (1, 2, 3):
        every = [max(draw) for draw in itertools.product(xs, repeat=n)]  # all len(xs)**n draws, equally likely
        assert expected_max(xs, n) == pytest.approx(statistics.fmean(every), rel=1e-12)
    assert lockstep_bound([0.4] * 20, 8) == pytest.approx(1.0)  # no variation: nothing lost waiting
    many = [0.3 + 0.001 * (i % 97) for i in range(600)]
    assert expected_max(many, 1024) == pytest.approx(max(many), rel=1e-3)  # the largest --processes: no overflow
    assert lockstep_bound(xs, 2) == pytest.approx(statistics.fmean(xs) / expected_max(xs, 2))
    assert lockstep_bound(xs, 3) < lockstep_bound(xs, 2) < 1  # more ranks wait for a slower slowest


def test_step_walls_are_the_intervals_throughput_divides(tmp_path):
    from dtrain.bench.scaling import step_walls, throughput, timed_steps

    rows = [{"step": s, "time": 100 + t, "loss": 1.0} for s, t in [(1, 0.0), (2, 0.5), (3, 0.9), (4, 1.5), (5, 1.8)]]
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows[:3] + [{"step": 3, "val_accuracy": 0.5}] + rows[3:]) + "\n")
    steps = timed_steps(path, 1)
    assert [r["step"] for r in steps] == [2, 3, 4, 5]  # from the end of step 2 on; the validation row is no step
    assert step_walls(steps) == pytest.approx([0.4, 0.6, 0.3])
    assert throughput(steps, 8) == pytest.approx(3 * 8 / 1.3)


@pytest.mark.slow
def test_the_all_reduce_bench_also_times_cpu_processes_with_gloo():
    import sys

    from conftest import REPO

    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(REPO / "bench/nccl_allreduce.py"), "--backend", "gloo", "--sizes-mb", "0.001", "1.7",
                           "--iters", "5"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [(r["size_mb"], r["backend"], r["processes"]) for r in rows] == [(0.001, "gloo", 2), (1.7, "gloo", 2)]
    assert all(r["time_ms"] > 0 for r in rows)
    bad = subprocess.run([sys.executable, str(REPO / "bench/nccl_allreduce.py"), "--iters", "0"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--iters 0 is out of range: give 1 to 10000" in bad.stderr
    bad = subprocess.run([sys.executable, str(REPO / "bench/nccl_allreduce.py"), "--sizes-mb", "1", "20000"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--sizes-mb 20000.0 is out of range: give 0.001 to 16384" in bad.stderr


@pytest.mark.slow
def test_the_ddp_overhead_bench_times_every_variant_in_two_real_processes():
    import sys

    from conftest import REPO

    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(REPO / "bench/ddp_overhead.py"), "--recipe", "demo", "--batch", "1", "--rounds", "2",
                           "--block", "1", "--warmup", "0"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert (row["world_size"], row["rounds"], row["block"], row["batch"], row["keep_heap"]) == (2, 2, 1, 1, "on")
    for name in ("alone", "alone_lockstep", "lockstep", "ddp", "train_step"):
        assert row[f"{name}_step_s"] > 0
    for key in ("lockstep_vs_alone", "ddp_vs_lockstep", "train_step_vs_ddp"):
        assert row[key] > 0 and len(row[f"{key}_q"]) == 3
    bad = subprocess.run([sys.executable, str(REPO / "bench/ddp_overhead.py"), "--rounds", "0"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--rounds 0 is out of range: give 1 to 1000" in bad.stderr


@pytest.mark.parametrize("message, said", [
    ("rank 0 exited (exit code 2); see 'dtrain logs j --rank 0'",
     "scaling job j Failed: rank 0 exited (exit code 2); see 'dtrain logs j --rank 0'"),
    ("out of memory", "scaling job j Failed: out of memory; see 'dtrain logs j'"),
])
def test_a_failed_run_names_the_logs_to_read_once(message, said):
    """`-- --bogus` failed a run with "...; see 'dtrain logs J --rank 0'; see 'dtrain logs J'": two pointers
    to the same logs, the second less precise."""
    from types import SimpleNamespace

    from dtrain.bench.scaling import _wait
    from dtrain.errors import DtrainError

    failed = SimpleNamespace(status=SimpleNamespace(value="Failed"), message=message)
    client = SimpleNamespace(wait=lambda name: failed)
    with pytest.raises(DtrainError) as refused:
        _wait(client, "j")
    assert str(refused.value) == said
