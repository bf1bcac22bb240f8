"""The benchmark scripts behind docs/benchmarks.md run, and refuse numbers out of range in one
line. bench/gpu.sh runs only where a GPU is lent, for a few minutes: its smoke mode runs every
step here, in miniature on the CPU, so a broken step shows before a GPU's time is spent."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest
import torch

from conftest import REPO



def env(**more: str) -> dict[str, str]:
    """The environment at the call (conftest points $TMPDIR into pytest's folder after import)."""
    return {**os.environ, "OMP_NUM_THREADS": "1", **more}


def _bench(script: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "bench" / script), *args], capture_output=True, text=True,
                          timeout=timeout, env=env(), cwd=REPO)


@pytest.mark.parametrize("script, args, message", [
    ("lanes_infer.py", ["--frames", "0"], "--frames 0 is out of range: give 1 to 10000"),
    ("lanes_graphs_loss.py", ["--steps", "4"], "--steps 4 is out of range: give 5 to 5000"),
    ("lanes_graphs_loss.py", ["--train", "5001"], "--train 5001 is out of range: give 20 to 5000"),
    ("sparse.py", ["--workdir", "/nonexistent-dtrain-bench", "--gib", "0"], "--gib 0 is out of range: give 1 to 1024"),
    ("lanes_loader.py", ["--rounds", "101"], "--rounds 101 is out of range: give 1 to 100"),
    ("scnn_message_passing.py", ["--size", "512"], "--size '512' is not WIDTHxHEIGHT"),
    ("scnn_message_passing.py", ["--width", "9"], "--width 9.0 --size 512x288: width 9.0: use a channel multiplier"),
    ("scnn_message_passing.py", ["--batch", "-1"], "--batch -1 is out of range: give 1 to 256"),
    ("submit_overhead.py", ["--runs", "0"], "--runs 0 is out of range: give 1 to 1000"),
    ("cifar10_throughput.py", ["--procs", "1,x"], "--procs '1,x' is not a list of process counts"),
    ("cifar10_throughput.py", ["--steps", "10", "--warmup", "9"], "--warmup 9 is out of range: give 0 to 8"),
    ("cifar10_throughput.py", ["--n-train", "4"], "--n-train 4 is out of range: give 128 to 1000000"),
    ("server.py", ["--followers", "0"], "--followers 0 is out of range: give 1 to 100000"),
    ("heap.py", ["--rounds", "0"], "--rounds 0 is out of range: give 1 to 100"),
    ("page_ab.py", ["--old", ".", "--new", ".", "--jobs", "0"], "--jobs 0 is out of range: give 1 to 100000"),
    ("platform_ab.py", ["--data-dir", ".", "--steps", "6"], "--steps 6 is out of range: give 7 to 100000"),
    ("platform_ab.py", ["--data-dir", "/nonexistent"], "--data-dir /nonexistent is not a folder"),
    ("flags_ab.py", ["--data-dir", ".", "--a=--bf16", "--b=--bf16"], "--a and --b give the same flags"),
    ("flags_ab.py", ["--data-dir", ".", "--a='--bf16"], "--a \"'--bf16\" cannot be split into arguments"),
    ("flags_ab.py", ["--data-dir", ".", "--b=x", "--rounds", "0"], "--rounds 0 is out of range: give 1 to 100"),
    ("flags_ab.py", ["--data-dir", "/nonexistent", "--b=x"], "--data-dir /nonexistent is not a folder"),
    ("heap.py", ["--core", "4096"], "--core 4096 is not a CPU this process may use"),
    ("heap.py", ["--size", "128x72"], "--size 128x72: input_size (128, 72): width and height must be positive multiples of 16"),
    # a path that holds no dtrain: PYTHONPATH would fall through to the installed dtrain, timing it against itself
    ("logs_tail.py", ["--old", "/nonexistent-dtrain-old", "--new", "."],
     "argument --old: /nonexistent-dtrain-old is not a dtrain checkout (it holds no dtrain/__init__.py)"),
    ("snapshots_ab.py", ["--old", ".", "--new", "/tmp", "--workdir", "/nonexistent-dtrain-bench"],
     "argument --new: /tmp is not a dtrain checkout (it holds no dtrain/__init__.py)"),
    ("sparse.py", ["--tree", "/nonexistent-dtrain-old", "--workdir", "/nonexistent-dtrain-bench"],
     "argument --tree: /nonexistent-dtrain-old is not a dtrain checkout (it holds no dtrain/__init__.py)"),
    ("cli_ab.py", ["--old", ".", "--new", ".", "--home", "/nonexistent-dtrain-home", "--", "list"],
     "--home /nonexistent-dtrain-home holds no dtrain state (state.db)"),
    ("lanes_infer.py", ["--device", "foo"], "--device 'foo' is not a device: give cpu, cuda or cuda:N"),
    ("lanes_train.py", ["--device", "meta"], "--device 'meta' is not a device: give cpu, cuda or cuda:N"),
    pytest.param("lanes_graphs_loss.py", [], "--device cuda: this torch (", id="graphs-loss-without-cuda",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")),
    # a --json file that cannot be written: refused at the start, not after the run (its figures lost)
    ("snapshots.py", ["--json", "/nonexistent-dtrain-bench/x.json"],
     "--json /nonexistent-dtrain-bench/x.json: there is no folder /nonexistent-dtrain-bench: make it first"),
    ("startup.py", ["--json", "/nonexistent-dtrain-bench/x.json"], "there is no folder /nonexistent-dtrain-bench"),
    ("cifar10_throughput.py", ["--json", "/"], "--json / is a folder: give a file name"),
    ("snapshots.py", ["--tools", "dtrain,resitc"], "--tools names no tool 'resitc': choose from dtrain, nosync, "),
    pytest.param("snapshots.py", ["--tools", "dtrain,restic"], "--tools restic needs restic, which is not installed: "
                 "run 'make bench-setup'", id="snapshots-without-restic",
                 marks=pytest.mark.skipif(shutil.which("restic") is not None, reason="restic is installed")),
])
def test_bench_scripts_refuse_numbers_out_of_range_in_one_line(script, args, message):
    proc = _bench(script, *args, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr.splitlines()[-1], proc.stderr[-800:]


def test_gpu_script_without_a_cuda_torch_says_how_to_go_on(tmp_path):
    proc = subprocess.run(["bash", str(REPO / "bench/gpu.sh"), str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=120, env=env(PYTHON=sys.executable), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout.splitlines()[-1] == f"no CUDA torch in {sys.executable}: set PYTHON (or SMOKE=1 to check " \
                                           "the script on a CPU)"


@pytest.mark.slow
def test_gpu_script_runs_every_step_in_miniature_on_the_cpu(tmp_path):
    out = tmp_path / "gpu-out"
    proc = subprocess.run(["bash", str(REPO / "bench/gpu.sh"), str(out)], capture_output=True, text=True,
                          timeout=600, env=env(PYTHON=sys.executable, SMOKE="1"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    log = (out / "gpu.log").read_text()
    trains = ["train-paper", "train-paper-no-graphs", "train-paper-compile", "train-demo", "train-demo-no-graphs",
              "train-demo-fp32"]
    steps = [*trains, "nccl", "loader", "infer", "graphs-loss"]
    listed = next(line for line in (REPO / "bench/gpu.sh").read_text().splitlines() if line.startswith("ALL_STEPS="))
    assert listed.split("=", 1)[1].strip('"').split() == steps  # what STEPS= may name is every step
    for step in steps:
        assert f"== {step}: exit 0" in log, log[-3000:]
    rows = {r["step"]: r for r in map(json.loads, (out / "gpu.jsonl").read_text().splitlines())}
    assert list(rows) == [*steps, "loader-vs-gpu"]
    for step in trains:  # the gpu.sh flags, then the toy size
        assert (rows[step]["device"], rows[step]["size"], rows[step]["batch"]) == ("cpu", "64x32", 2)
        assert rows[step]["eager_step_s"] > 0 and rows[step]["fast_step_s"] > 0
        assert rows[step]["knobs"]["cuda_graphs"] is False  # graphs are for CUDA only
    assert rows["train-demo-fp32"]["knobs"]["bf16"] is False
    assert (rows["nccl"]["backend"], rows["nccl"]["processes"]) == ("gloo", 2)
    assert rows["loader"]["frames"] == 4 and rows["loader"]["lanedataset"] > 0
    assert rows["infer"]["recipe"] == "tiny" and rows["infer"]["fast_fps"] > 0
    # on a CPU --cuda-graphs changes nothing: the two trainings are the same run
    loss = rows["graphs-loss"]
    assert (loss["device"], loss["steps"], loss["loss_rel_diff"], loss["bn_stats_apart"]) == ("cpu", 6, 0.0, 0.0)
    assert loss["agree"] is True and loss["loss_last20_graphs"] == loss["loss_last20_eager"] > 0
    gpu = rows["train-paper"]["batch"] / rows["train-paper"]["fast_step_s"]
    assert rows["loader-vs-gpu"]["gpu_images_per_s"] == pytest.approx(gpu, abs=0.1)


@pytest.mark.slow
def test_gpu_script_runs_only_the_steps_named(tmp_path):
    out = tmp_path / "gpu-out"
    proc = subprocess.run(["bash", str(REPO / "bench/gpu.sh"), str(out)], capture_output=True, text=True,
                          timeout=300, env=env(PYTHON=sys.executable, SMOKE="1", STEPS="infer nccl"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert [json.loads(line)["step"] for line in (out / "gpu.jsonl").read_text().splitlines()] == ["nccl", "infer"]
    typo = subprocess.run(["bash", str(REPO / "bench/gpu.sh"), str(tmp_path / "typo")], capture_output=True, text=True,
                          timeout=60, env=env(PYTHON=sys.executable, SMOKE="1", STEPS="infer trian-demo"), cwd=tmp_path)
    assert typo.returncode == 2 and typo.stderr.splitlines()[-1].startswith(
        "STEPS names no step 'trian-demo': choose from train-paper "), typo.stderr
    assert not (tmp_path / "typo").exists()  # refused before anything ran
    # a relative OUT_DIR is the caller's, not the repository's (the script runs from the repository root)
    rel = subprocess.run(["bash", str(REPO / "bench/gpu.sh"), "rel-out"], capture_output=True, text=True, timeout=300,
                         env=env(PYTHON=sys.executable, SMOKE="1", STEPS="nccl"), cwd=tmp_path)
    assert rel.returncode == 0, rel.stdout[-3000:]
    assert (tmp_path / "rel-out" / "gpu.jsonl").read_text().count('"step": "nccl"') == 1
    assert not (REPO / "rel-out").exists()


def test_the_message_passing_bench_times_both_forms():
    proc = _bench("scnn_message_passing.py", "--width", "0.125", "--batch", "1", "--size", "64x32", "--repeats", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    naive, fast = map(json.loads, proc.stdout.splitlines())
    assert (naive["impl"], fast["impl"], naive["size"]) == ("naive", "fast", "64x32")
    assert 0 < naive["mp_s"] < naive["step_s"] and 0 < fast["mp_s"] < fast["step_s"]
    assert fast["mp_speedup"] == pytest.approx(naive["mp_s"] / fast["mp_s"], rel=0.05)


@pytest.mark.slow
def test_the_heap_bench_runs_both_sides_in_processes_of_their_own():
    # A batch of 128 frames, whose largest activations (32 MiB and more) are at or above the most
    # glibc's dynamic mmap threshold ever rises to (32 MiB): with its defaults they are mapped and
    # unmapped, faulting in again, every step (50,000-90,000 faults a step here; kept: 0-2,000).
    # At batch 8 glibc may settle on its own after a few steps (97 to 3,200 faults a step,
    # depending on the order of the frees), which made this check fail now and then.
    proc = _bench("heap.py", "--recipe", "demo", "--size", "128x64", "--batch", "128", "--rounds", "1", "--steps", "2",
                  "--warmup", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    *rows, summary = map(json.loads, proc.stdout.splitlines())
    assert [r["side"] for r in rows] == ["default", "kept"]
    assert all(r["step_s"] > 0 and r["threads"] == 1 for r in rows)
    # glibc's defaults fault a step's blocks in again every step; kept, the warm-up steps map them once
    assert rows[1]["minor_faults_per_step"] < rows[0]["minor_faults_per_step"] / 2, rows
    assert summary["default_over_kept"] == pytest.approx(rows[0]["step_s"] / rows[1]["step_s"], abs=0.002)


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_the_platform_bench_runs_the_same_training_as_a_job_and_by_hand(tmp_path):
    from dtrain.workloads.lanes import synth

    data, scratch = tmp_path / "lanes", tmp_path / "t"
    synth.generate(data, frames_per_file={"label_data_0313.json": 40}, seed=3, test_frames=0)
    scratch.mkdir()
    proc = subprocess.run([sys.executable, str(REPO / "bench/platform_ab.py"), "--data-dir", str(data), "--rounds", "2",
                           "--steps", "6", "--warmup", "2", "--batch", "2", "--", "--recipe", "tiny"],
                          capture_output=True, text=True, timeout=600, env=env(TMPDIR=str(scratch)), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    *rounds, summary = map(json.loads, proc.stdout.splitlines())
    assert [r["round"] for r in rounds] == [0, 1]
    assert all(r["dtrain_images_per_s"] > 0 and r["by_hand_images_per_s"] > 0 for r in rounds)
    ratios = sorted(r["dtrain_images_per_s"] / r["by_hand_images_per_s"] for r in rounds)
    assert summary["dtrain_over_by_hand"] == pytest.approx(sum(ratios) / 2, abs=0.002)  # the median of two
    assert summary["processes"] == 2
    assert list(scratch.iterdir()) == []  # the jobs' home, their outputs, torchrun's own folders: all gone


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_the_flags_bench_gives_each_side_its_own_flags_and_names_a_training_that_refused_them(tmp_path):
    from dtrain.workloads.lanes import synth

    data, scratch = tmp_path / "lanes", tmp_path / "t"
    synth.generate(data, frames_per_file={"label_data_0313.json": 16}, seed=3, test_frames=0)
    scratch.mkdir()
    # round 0 runs side a (the recipe's defaults) to the end, then side b, whose flag the training refuses
    proc = subprocess.run([sys.executable, str(REPO / "bench/flags_ab.py"), "--data-dir", str(data), "--b=--no-such-flag",
                           "--rounds", "1", "--steps", "4", "--warmup", "1", "--batch", "2", "--", "--recipe", "tiny"],
                          capture_output=True, text=True, timeout=600, env=env(TMPDIR=str(scratch)), cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr[-3000:]
    assert proc.stderr.splitlines()[-1] == ("flags_ab.py: the training by torchrun exited 1: dtrain lanes train: error: "
                                            "unrecognized arguments: --no-such-flag (see 'dtrain lanes train --help')")
    assert list(scratch.iterdir()) == []  # side a's outputs and torchrun's folders: gone even so


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_the_platform_bench_names_the_error_of_a_job_that_failed(tmp_path):
    # the job's home goes with the bench's scratch folder, so 'see dtrain logs ...' would lead nowhere
    (tmp_path / "empty").mkdir()
    proc = subprocess.run([sys.executable, str(REPO / "bench/platform_ab.py"), "--data-dir", str(tmp_path / "empty"),
                           "--rounds", "1", "--steps", "7"], capture_output=True, text=True, timeout=300, env=env(),
                          cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr[-3000:]
    last = proc.stderr.splitlines()[-1]
    assert last.startswith("platform_ab.py: job platform-ab-0 Failed: rank ") and "dtrain logs" not in last, last
    assert last.endswith("(want label_data_0313.json, label_data_0601.json): run 'python -m dtrain.workloads.lanes "
                         "prepare'"), last


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_the_flags_bench_times_both_sides_taking_turns(tmp_path):
    from dtrain.workloads.lanes import synth

    data = tmp_path / "lanes"
    synth.generate(data, frames_per_file={"label_data_0313.json": 40}, seed=3, test_frames=0)
    proc = subprocess.run([sys.executable, str(REPO / "bench/flags_ab.py"), "--data-dir", str(data), "--a=--bf16",
                           "--b=--no-bf16 --no-keep-heap", "--rounds", "2", "--steps", "6", "--warmup", "2", "--batch", "2",
                           "--", "--recipe", "tiny"], capture_output=True, text=True, timeout=600, env=env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    *rounds, summary = map(json.loads, proc.stdout.splitlines())
    assert [list(r) for r in rounds] == [["round", "a_images_per_s", "b_images_per_s"],
                                         ["round", "b_images_per_s", "a_images_per_s"]]  # they take turns
    assert all(r["a_images_per_s"] > 0 and r["b_images_per_s"] > 0 for r in rounds)
    ratios = sorted(r["a_images_per_s"] / r["b_images_per_s"] for r in rounds)
    assert summary["a_over_b"] == pytest.approx(sum(ratios) / 2, abs=0.002)  # the median of two
    assert summary["a"] == ["--bf16"] and summary["b"] == ["--no-bf16", "--no-keep-heap"]


@pytest.mark.slow
def test_the_submit_overhead_bench_times_both_paths_and_leaves_nothing_in_tmp(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "bench/submit_overhead.py"), "--runs", "1", "--json"],
                          capture_output=True, text=True, timeout=300, env=env(TMPDIR=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert set(result["median_s"]) == {"torchrun_by_hand_2p", "dtrain_submit_dist_2p", "python_by_hand_1p",
                                       "dtrain_submit_1p"}
    assert all(0 < v < 120 for v in result["median_s"].values())
    assert list(tmp_path.iterdir()) == []  # the jobs' home, the stamps, torchrun's own folder: all gone


@pytest.mark.slow
def test_the_cifar10_throughput_bench_reads_the_ranks_metrics(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out, scratch = tmp_path / "c10.json", tmp_path / "t"
    scratch.mkdir()
    proc = subprocess.run([sys.executable, str(REPO / "bench/cifar10_throughput.py"), "--steps", "5", "--warmup", "1",
                           "--batch-size", "8", "--n-train", "64", "--procs", "1,2", "--port", str(port),
                           "--json", str(out)], capture_output=True, text=True, timeout=300,
                          env=env(TMPDIR=str(scratch)), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    one, two = json.loads(out.read_text())
    assert (one["nproc"], one["global_batch"], two["nproc"], two["global_batch"]) == (1, 8, 2, 16)
    assert one["allreduce_ms"] == 0 and two["allreduce_ms"] > 0 and one["images_per_s"] > 0
    assert list(scratch.iterdir()) == []  # the data, the metrics, torchrun's own folder: all gone


@pytest.mark.slow
def test_the_server_bench_lists_jobs_alone_and_while_logs_stream():
    proc = _bench("server.py", "--jobs", "20", "--followers", "2", "--running", "1", "--requests", "5")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert (result["jobs_stored"], result["requests"], result["followers"]) == (20, 5, 2)
    assert result["lines_received_by_followers"] > 0
    assert 0 < result["list_median_s"] <= result["list_p99_s"]


@pytest.mark.slow
def test_the_page_bench_times_each_request_on_both_checkouts_taking_turns():
    proc = _bench("page_ab.py", "--old", str(REPO), "--new", str(REPO), "--jobs", "30", "--repeats", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert [line for line in lines if line.startswith("GET ")] == [
        "GET /api/v1/jobs?limit=25&offset=0 (30 jobs stored):",
        "GET /api/v1/jobs?limit=25&offset=0&status=Succeeded (30 jobs stored):",
        "GET /api/v1/jobs/stored-00000 (30 jobs stored):",
        "GET /metrics (30 jobs stored):",
        "GET /api/v1/lineage (30 jobs stored):"], lines
    assert sum(line.startswith("old / new (median wall): ") for line in lines) == 5, lines


@pytest.mark.slow
def test_the_snapshot_bench_makes_its_workdir_and_runs_the_tools_asked_for(tmp_path):
    work = tmp_path / "not" / "there"  # as the docs give it: a folder on the file system to test
    proc = _bench("snapshots.py", "--files", "20", "--size-mb", "2", "--checkpoints", "0", "--repeats", "1",
                  "--tools", "dtrain,nosync", "--workdir", str(work))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "median of 1 round:" in proc.stdout and "nosync:" in proc.stdout
    assert list(work.iterdir()) == []  # the round's folder removed


def test_the_sparse_bench_snapshots_and_restores_a_file_of_holes(tmp_path):
    proc = _bench("sparse.py", "--workdir", str(tmp_path / "w"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(proc.stdout)
    assert row["gib"] == 1 and row["snapshot_s"] > 0 and row["restore_s"] >= 0
    assert row["restored_mib_on_disk"] < 64  # restored with its holes, not 1 GiB of zeros
    assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_the_sagemaker_calls_bench_counts_each_checkouts_calls():
    proc = subprocess.run([sys.executable, str(REPO / "bench/sagemaker_calls.py"), "--old", str(REPO), "--new",
                           str(REPO), "--jobs", "3", "--repeats", "1"], capture_output=True, text=True, timeout=300,
                          env=env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    # the same checkout twice: a cold list describes and reads the spec of every job, a warm one only lists
    assert "cold new: 3 jobs listed" in lines[1] and lines[1].endswith(
        "calls: DescribeTrainingJob 3, GetObject 3, ListTrainingJobs 1"), lines
    assert "warm new: 3 jobs listed" in lines[4] and lines[4].endswith("calls: ListTrainingJobs 1"), lines
    assert lines[2].startswith("cold old / new (median): ") and lines[5].startswith("warm old / new (median): ")


@pytest.mark.slow
def test_the_logs_tail_bench_reads_one_job_with_both_checkouts():
    proc = subprocess.run([sys.executable, str(REPO / "bench/logs_tail.py"), "--old", str(REPO), "--new", str(REPO),
                           "--lines", "500", "--repeats", "1"], capture_output=True, text=True, timeout=300, env=env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("job: 500 lines,") and len(lines) == 7, lines
    assert lines[1].startswith("tail -t 3 old: median ") and lines[3].startswith("tail -t 3 old / new (median): ")
    assert lines[4].startswith("whole log old: median ") and lines[6].startswith("whole log old / new (median): ")
