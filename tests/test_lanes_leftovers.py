"""Lanes workload as a demanding user drives it: resuming in another setting, loader workers that
die, predict's freed memory, label files as the official reader takes them."""

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dtrain.errors import ConflictError, DataError, SpecError
from dtrain.training import STOPPED_EXIT_CODE, latest_checkpoint, setup_distributed
from dtrain.training.heap import glibc
from dtrain.workloads.lanes import __main__ as lanes_cli
from dtrain.workloads.lanes import prepare, synth, train
from dtrain.workloads.lanes.data import LaneDataset
from dtrain.workloads.lanes.metric import evaluate, read_predictions, read_truth
from dtrain.workloads.lanes.tusimple import read_labels

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def small_data(tmp_path_factory) -> Path:
    """12 training frames, 2 val, 4 test: enough for batches of 2 on 1 or 2 processes."""
    root = tmp_path_factory.mktemp("tusimple")
    synth.generate(root, frames_per_file={"label_data_0313.json": 8, "label_data_0601.json": 4,
                                          "label_data_0531.json": 2}, seed=3, test_frames=4)
    return root


def run(argv: list[str], world_size: int = 1) -> dict:
    """train.train in this process; world_size > 1 plays rank 0 of that many (restore runs before any collective)."""
    info = setup_distributed(env={})
    if world_size > 1:
        info = dataclasses.replace(info, world_size=world_size)
    return train.train(train.parse_config(argv, {}), info)


def common(data: Path, out: Path) -> list[str]:
    return ["--recipe", "tiny", "--data-dir", str(data), "--out-dir", str(out), "--max-steps", "4"]


# ------------------------------------------------------------------ resume in another setting


@pytest.mark.parametrize("change, world_size, named", [
    (["--batch-size", "3"], 1, "batch 2 per process (this run: 3)"),
    (["--batch-size", "2", "--seed", "5"], 1, "seed 0 (this run: 5)"),
    (["--batch-size", "2"], 2, "1 process (this run: 2)"),
])
def test_resume_where_a_step_maps_to_other_frames_is_refused_in_one_line(small_data, tmp_path, change, world_size,
                                                                         named, capsys):
    """A step's frames come from (seed, frames, processes, batch): resuming step 2 with another of
    them silently trained on frames the run had already seen and skipped others."""
    out = tmp_path / "run"
    first = run([*common(small_data, out), "--batch-size", "2", "--stop-after", "2"])
    assert first["step"] == 2 and (out / "ckpt-2.pt").is_file()
    capsys.readouterr()
    with pytest.raises(SpecError) as err:
        run([*common(small_data, out), *change], world_size=world_size)
    message = str(err.value)
    assert "\n" not in message and named in message and "--no-resume" in message
    assert "dtrain: resumed from step" not in capsys.readouterr().out  # the platform records no resume
    assert sorted(p.name for p in out.glob("ckpt-*.pt")) == ["ckpt-2.pt"]  # kept for a resume in its setting
    again = run([*common(small_data, out), "--batch-size", "2"])  # the same setting still resumes
    assert again["finished"] and again["step"] == 4


def test_resume_from_a_checkpoint_past_this_runs_max_steps_is_refused_in_one_line(small_data, tmp_path, capsys):
    """ckpt-4 resumed with --max-steps 2 logged '2 steps', then 'finished at step 4', and run.json
    recorded max_steps 2 for a model trained 4 steps."""
    out = tmp_path / "run"
    assert run([*common(small_data, out), "--batch-size", "2"])["step"] == 4
    capsys.readouterr()
    with pytest.raises(SpecError) as err:
        run([*common(small_data, out), "--batch-size", "2", "--max-steps", "2"])
    message = str(err.value)
    assert "\n" not in message and "is at step 4, past this run's 2 steps: give --max-steps 4 or more" in message
    assert "dtrain: resumed from step" not in capsys.readouterr().out
    assert run([*common(small_data, out), "--batch-size", "2", "--max-steps", "6"])["step"] == 6


def test_cuda_graphs_asked_for_on_a_cpu_is_said_in_the_log_not_refused(small_data, tmp_path):
    """The same command runs on a workstation and on a GPU node: on a CPU --cuda-graphs changes
    nothing, and the log says so instead of keeping quiet."""
    asked, plain = tmp_path / "asked", tmp_path / "plain"
    assert run([*common(small_data, asked), "--batch-size", "2", "--max-steps", "1", "--cuda-graphs"])["finished"]
    assert run([*common(small_data, plain), "--batch-size", "2", "--max-steps", "1"])["finished"]
    note = [line for line in (asked / "train.log").read_text().splitlines() if "--cuda-graphs" in line]
    assert len(note) == 1 and "no effect here (device cpu)" in note[0]
    assert "--cuda-graphs" not in (plain / "train.log").read_text()


def test_checkpoint_records_what_places_a_step_in_the_data(small_data, tmp_path):
    out = tmp_path / "run"
    run([*common(small_data, out), "--batch-size", "2", "--stop-after", "1"])
    extra = torch.load(out / "ckpt-1.pt", weights_only=True)["extra"]
    assert {k: extra[k] for k in ("world_size", "batch_size", "seed", "train_frames")} == {
        "world_size": 1, "batch_size": 2, "seed": 0, "train_frames": 12}


# ------------------------------------------------------------------ loader workers


def test_a_loader_worker_that_dies_is_one_line_naming_the_fix(small_data, tmp_path, monkeypatch, capsys):
    """A worker killed for memory (here SIGKILL, as the OOM killer sends) ended training with two
    chained tracebacks ending in 'DataLoader worker (pid(s) N) exited unexpectedly', raised by
    torch's SIGCHLD handler wherever the training was (here while it trains on earlier batches)."""
    load, calls = LaneDataset.__getitem__, []

    def killed_in_a_worker(self, i):
        calls.append(i)  # this worker's own copy of the list
        if torch.utils.data.get_worker_info() is not None and len(calls) == 5:  # after 2 batches prefetched
            os.kill(os.getpid(), signal.SIGKILL)
        return load(self, i)

    monkeypatch.setattr(LaneDataset, "__getitem__", killed_in_a_worker)
    argv = ["train", *common(small_data, tmp_path / "run"), "--batch-size", "2", "--num-workers", "1"]
    assert lanes_cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith("error: a data loader worker died (") and "killed by signal" in err
    assert "NUM_WORKERS" in err


# ------------------------------------------------------------------ predict keeps freed memory

AFTER_PREDICT = """
import ctypes, resource, sys
from dtrain.workloads.lanes.__main__ import main
code = main(["predict", *sys.argv[1:]])
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, (ctypes.c_void_p,)
def faults():  # minor page faults of a 64 MiB block (above glibc's largest own mmap threshold) written and freed
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(64 << 20)
    ctypes.memset(block, 1, 64 << 20)
    libc.free(block)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults()
print("faults", faults(), "code", code)
"""


@pytest.mark.slow
@pytest.mark.skipif(glibc() is None, reason="keep_heap sets glibc's malloc only")
def test_predict_keeps_freed_memory_mapped_unless_told_not_to(small_data, tmp_path):
    """Each predict batch frees and allocates the same activations; without the training's
    keep_heap every batch faulted them in again, inside the run_time the metric scores."""
    run([*common(small_data, tmp_path / "run"), "--max-steps", "1", "--batch-size", "2"])
    argv = ["--checkpoint", str(tmp_path / "run" / "model.pt"), "--data-dir", str(small_data), "--limit", "2",
            "--batch-size", "2", "--device", "cpu"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    for flag, state in (([], "on"), (["--no-keep-heap"], "off")):
        proc = subprocess.run([sys.executable, "-c", AFTER_PREDICT, *argv, "--out", str(tmp_path / "p.json"), *flag],
                              env=env, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0 and "code 0" in proc.stdout, proc.stderr
        assert f"freed memory kept: {state})" in proc.stderr
        faults = int(proc.stdout.split("faults ")[1].split()[0])
        assert (faults < 1000) if state == "on" else (faults > 10_000), (state, faults)


# ------------------------------------------------------------------ label files as the official reader splits them

REAL_LABELS = Path("/work/shared/data/tusimple/test_label.json")


@pytest.mark.skipif(not REAL_LABELS.is_file(), reason="the real TuSimple test labels are not on this machine")
@pytest.mark.parametrize("line_end", [b"\r", b"\r\n", b"\n"])
def test_label_lines_end_where_the_official_reader_ends_them(tmp_path, line_end):
    """LaneEval reads `open(f).readlines()` in text mode: LF, CRLF and a lone CR (old Mac editors)
    all end a line. A lone-CR file was one 'line' here: 'bad JSON (Extra data at column 1420)'."""
    lines = REAL_LABELS.read_bytes().splitlines()[:30]
    plain = tmp_path / "plain.json"
    plain.write_bytes(b"".join(line + b"\n" for line in lines))
    other = tmp_path / "other.json"
    other.write_bytes(b"\xef\xbb\xbf" + b"".join(line + line_end for line in lines) + line_end)  # BOM, blank last
    official = [json.loads(line) for line in open(other, encoding="utf-8-sig").readlines() if line.strip()]
    assert len(official) == len(lines)
    assert read_labels(other) == read_labels(plain) and len(read_labels(other)) == len(lines)
    assert evaluate(read_predictions(other), read_truth(plain))["accuracy"] == 1.0  # evaluate_files wants run_time

    other.write_bytes(line_end.join([*lines[:2], b'{"raw_file": 1}', *lines[3:]]))
    with pytest.raises(DataError, match=r"other\.json:3: "):  # the line the user's editor shows
        read_labels(other)


@pytest.mark.slow
def test_sigterm_to_the_process_group_checkpoints_with_loader_workers(small_data, tmp_path):
    """torchrun (and Ctrl-C at a terminal) signals a rank's whole process group, its loader workers
    too: a worker killed by the SIGTERM made the training raise 'DataLoader worker (pid N) is killed
    by signal: Terminated' mid-step, so the stop left no checkpoint and the run restarted at step 0."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "dtrain.workloads.lanes", "train", *common(small_data, out), "--max-steps", "400",
           "--batch-size", "2", "--num-workers", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # its own group, as torchrun starts each rank
    try:
        metrics = out / "metrics.jsonl"
        while proc.poll() is None and not (metrics.is_file() and '"step": 2,' in metrics.read_text()):
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # any worker left behind
    assert proc.returncode == STOPPED_EXIT_CODE, stderr
    assert "Traceback" not in stderr and "stopped by a signal after step" in stdout
    step = torch.load(latest_checkpoint(out), weights_only=True)["step"]
    assert 2 <= step < 400


# ------------------------------------------------------------------ prepare run twice on one volume


@pytest.fixture
def archives(tmp_path) -> Path:
    src = tmp_path / "synth"
    synth.generate(src, frames_per_file={"label_data_0313.json": 3, "label_data_0601.json": 1,
                                         "label_data_0531.json": 1}, seed=1, test_frames=2)
    synth.make_archive(src, src / "train_set.tar.gz")
    return src


def test_prepare_again_unpacks_a_local_archive_that_changed_and_only_then(archives, tmp_path):
    """Rebuilding `synth --archive` at the same path and preparing the same --out again kept the
    old frames and labels: the rerun saw the same URL and did nothing."""
    out, urls = tmp_path / "data", [str(archives / "train_set.tar.gz")]
    assert prepare.prepare(urls, out)["masks"]["splits"]["train"] == 4
    labels = (out / "label_data_0313.json").stat().st_mtime_ns
    os.utime(archives / "train_set.tar.gz")  # the same bytes, touched: nothing to redo
    prepare.prepare(urls, out)
    assert (out / "label_data_0313.json").stat().st_mtime_ns == labels

    synth.generate(archives, frames_per_file={"label_data_0313.json": 6, "label_data_0601.json": 2,
                                              "label_data_0531.json": 1}, seed=2, test_frames=2)
    synth.make_archive(archives, archives / "train_set.tar.gz")
    assert prepare.prepare(urls, out)["masks"]["splits"]["train"] == 8
    assert read_labels(out / "label_data_0313.json") == read_labels(archives / "label_data_0313.json")


def test_a_second_prepare_on_a_folder_being_prepared_is_one_line_and_writes_nothing(archives, tmp_path):
    out, urls = tmp_path / "data", [str(archives / "train_set.tar.gz")]
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(out / ".prepare.lock")], stdout=subprocess.PIPE,
                              text=True)  # another prepare, in another process, mid-run
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ConflictError) as err:
            prepare.prepare(urls, out)
    finally:
        holder.kill()
        holder.wait()
    assert "\n" not in str(err.value)
    assert "another 'python -m dtrain.workloads.lanes prepare' is writing" in str(err.value)
    assert sorted(p.name for p in out.iterdir()) == [".prepare.lock"]
    assert prepare.prepare(urls, out)["masks"]["splits"]["train"] == 4  # once it is gone


HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(300)
"""
