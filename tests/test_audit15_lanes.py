"""A Run:AI + NetApp lane-detection user's day two (audit 15): scripting the flow with `--json` (dry runs
included), a tier change while a job trains on the volume, and `dtrain lanes evaluate` on submission and
ground-truth files the official TuSimple script (evaluate/lane.py) would not take as they are."""

from __future__ import annotations

import json
import time

import pytest
from conftest import Cli

from dtrain.cli import format as fmt

LINE = {"raw_file": "clips/a/1/20.jpg", "lanes": [[-2, 300, 310, 320]], "h_samples": [240, 250, 260, 270]}
PRED = {"raw_file": "clips/a/1/20.jpg", "lanes": [[-2, 301.5, 311.2, 318.9]], "run_time": 12.5}


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys) -> Cli:
    monkeypatch.setenv("DTRAIN_HOME", str(tmp_path / "home"))
    return Cli(capsys)


def _write(path, *objs) -> str:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return str(path)


def test_evaluate_names_a_missing_ground_truth_in_one_line(cli, tmp_path):
    """`--gt $RESTORED/tusimple/test_label.json` with a mistyped volume path: a FileNotFoundError traceback
    (os.path.samefile, before the file was checked), where a missing --pred was one line."""
    pred = _write(tmp_path / "pred.json", PRED)
    line = cli.refused("lanes", "evaluate", "--pred", pred, "--gt", str(tmp_path / "nope.json"))
    assert line.startswith("dtrain: error: label file ") and "nope.json does not exist" in line
    line = cli.refused("lanes", "evaluate", "--pred", pred, "--gt", str(tmp_path))
    assert "is a folder" in line


def _stream(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def test_dry_runs_print_json_when_asked(cli, tmp_path):
    """`--dry-run --json` printed the YAML, which a script's json.loads (or jq) cannot read."""
    cli.ok("volume", "create", "data", "--size", "1Gi")
    cli.ok("snapshot", "create", "data", "--name", "s1")
    fast = tmp_path / "fast-disk"
    fast.mkdir()
    cli.ok("config", "storage-class", "fast", str(fast))
    [job] = _stream(cli.ok("submit", "j", "--pvc", "data:/mnt", "--dry-run", "--json", "--", "true"))
    assert job["name"] == "j" and job["volumes"] == ["data:/mnt"]
    [vol] = _stream(cli.ok("volume", "create", "v2", "--size", "2Gi", "--dry-run", "--json"))
    assert vol["name"] == "v2" and vol["size"] == "2Gi"
    [move] = _stream(cli.ok("volume", "update", "data", "--class", "fast", "--dry-run", "--json"))
    assert move["to_class"] == "fast"
    [snap] = _stream(cli.ok("snapshot", "create", "data", "--name", "s2", "--dry-run", "--json"))
    assert snap["name"] == "s2"
    [restore] = _stream(cli.ok("snapshot", "restore", "s1", "--to", "r1", "--dry-run", "--json"))
    assert restore["into"] == "r1"
    assert cli.ok("volume", "create", "v2", "--dry-run").startswith("backend: local\n")  # YAML without --json
    assert "v2" not in cli.ok("volume", "list")  # nothing made


def test_several_dry_run_documents_are_a_json_object_a_line():
    """Kubernetes renders a job as several manifests: with --json each is a line, in the YAML's order."""
    docs = [{"kind": "PersistentVolumeClaim", "metadata": {"name": "a"}}, {"kind": "PyTorchJob"}]
    assert _stream(fmt.dry_run_text(docs, True)) == docs
    assert fmt.dry_run_text(docs).count("---") == 1


def _state(cli, job: str) -> str:
    return json.loads(cli.ok("describe", "job", job, "--json"))["status"]


@pytest.mark.slow
def test_a_tier_change_during_training_names_suspend_and_that_way_keeps_the_job(cli, tmp_path):
    """The refusal named only `dtrain delete J` (the run lost) and waiting; a Suspended job holds no mount and
    resumes on the moved folder, as the in-place restore's refusal already said."""
    fast = tmp_path / "fast-disk"
    fast.mkdir()
    cli.ok("config", "storage-class", "fast", str(fast))
    cli.ok("volume", "create", "data", "--size", "1Gi")
    cli.ok("submit", "train", "--pvc", "data:/mnt", "--", "sh", "-c",
           "until [ -e /mnt/go ]; do sleep 0.05; done; cat /mnt/go")
    deadline = time.monotonic() + 60
    while _state(cli, "train") != "Running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    line = cli.refused("volume", "update", "data", "--class", "fast")
    assert "'dtrain suspend train'" in line and "'dtrain delete train'" in line
    cli.ok("suspend", "train")
    moved = json.loads(cli.ok("volume", "update", "data", "--class", "fast", "--json"))
    assert moved["storage_class"] == "fast"
    (fast / "data" / "data" / "go").write_text("moved\n")
    cli.ok("resume", "train")
    cli.ok("wait", "train", "--timeout", "60")
    assert _state(cli, "train") == "Succeeded"
    assert "moved" in cli.ok("logs", "train")


@pytest.mark.parametrize("text, first, count", [
    (json.dumps(PRED) + "\n\n", 2, 1),  # a trailing empty line: the official readlines() gives it, json.loads fails
    ("\n" + json.dumps(PRED) + "\n  \n", 1, 2),  # one before, one of spaces after
], ids=["trailing", "before-and-spaces"])
def test_blank_lines_the_official_script_refuses_are_scored_with_a_warning(cli, tmp_path, text, first, count):
    """Skipped without a word: the score printed, and the same file sent as a submission refused."""
    pred = tmp_path / "pred.json"
    pred.write_text(text)
    gt = _write(tmp_path / "gt.json", LINE)
    rc, out, err = cli("lanes", "evaluate", "--pred", str(pred), "--gt", gt, "--json")
    assert rc == 0 and json.loads(out)["frames"] == 1
    [line] = err.splitlines()
    assert f"{pred}:{first} is blank ({count} blank line" in line and "official script refuses" in line
    rc, out, err = cli("lanes", "evaluate", "--pred", _write(tmp_path / "clean.json", PRED), "--gt", gt)
    assert rc == 0 and err == ""


def test_a_blank_line_in_the_ground_truth_is_named_too(cli, tmp_path):
    gt = tmp_path / "gt.json"
    gt.write_text(json.dumps(LINE) + "\n\n")
    rc, out, err = cli("lanes", "evaluate", "--pred", _write(tmp_path / "pred.json", PRED), "--gt", str(gt))
    assert rc == 0 and f"{gt}:2 is blank" in err


HOLD = """
import fcntl, sys
f = open(sys.argv[1], "a")
fcntl.lockf(f.fileno(), fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


@pytest.mark.slow
def test_a_second_training_on_one_out_dir_is_refused_and_writes_nothing(tmp_path):
    """Two members' jobs on one volume, one --out-dir: both ran, each line of metrics.jsonl twice (one per
    run, interleaved), train.log holding both, and the last to end's model.pt and checkpoints kept."""
    import subprocess
    import sys

    from dtrain.workloads.lanes import synth

    data, out = tmp_path / "tusimple", tmp_path / "run"
    synth.generate(data, frames_per_file={"label_data_0313.json": 4, "label_data_0531.json": 1,
                                          "label_data_0601.json": 1}, seed=5, test_frames=1)
    out.mkdir()
    (out / "train.log").write_text("the first run's line\n")
    first = subprocess.Popen([sys.executable, "-c", HOLD, str(out / "train.log")], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # the first run, as its lock shows it
    try:
        assert first.stdout.readline() == "held\n"
        argv = [sys.executable, "-m", "dtrain.workloads.lanes", "train", "--recipe", "tiny", "--data-dir", str(data),
                "--out-dir", str(out), "--batch-size", "2", "--max-steps", "1"]
        second = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        assert second.returncode != 0 and "Traceback" not in second.stderr, second.stderr
        assert f"another training is writing {out}" in second.stderr and "--out-dir" in second.stderr
        assert sorted(p.name for p in out.iterdir()) == ["train.log"]
        assert (out / "train.log").read_text() == "the first run's line\n"
    finally:
        first.communicate("")
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300)  # the first run ended: it trains
    assert again.returncode == 0, again.stderr[-2000:]
    assert (out / "model.pt").exists()


def test_runs_with_their_own_out_dirs_and_one_checkpoint_dir_are_refused(tmp_path):
    """Lanes locked its --out-dir alone (train.log): two runs given other --out-dirs and one --checkpoint-dir both
    ran, replacing each other's checkpoints and resuming from them. A checkpoint folder apart from the out-dir has
    a lock of its own, let go with the run's log."""
    import subprocess
    import sys

    import torch

    from dtrain.errors import ConflictError
    from dtrain.training import DistInfo
    from dtrain.workloads.lanes.train import one_training_writes

    one = DistInfo(rank=0, local_rank=0, world_size=1, local_world_size=1, device=torch.device("cpu"), backend=None,
                   runtime="single")
    ckpt, out = tmp_path / "ckpt", tmp_path / "run-b"
    ckpt.mkdir()
    out.mkdir()
    first = subprocess.Popen([sys.executable, "-c", HOLD, str(ckpt / ".training.lock")], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # the first run, given --out-dir run-a
    try:
        assert first.stdout.readline() == "held\n"
        with pytest.raises(ConflictError) as e:
            one_training_writes(out, ckpt, one)
    finally:
        first.communicate("")
    assert str(e.value) == (f"another training is writing {ckpt} (it holds .training.lock): wait for it to end, or "
                            "give this run another --checkpoint-dir")
    try_lock = [sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1], 'a'); "
                "fcntl.lockf(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)", str(ckpt / ".training.lock")]
    log = one_training_writes(out, ckpt, one)  # the first run ended: this one holds the folder
    assert subprocess.run(try_lock, capture_output=True).returncode != 0
    log.close()
    assert subprocess.run(try_lock, capture_output=True).returncode == 0
    assert sorted(p.name for p in out.iterdir()) == ["metrics.jsonl", "train.log"]  # no lock file beside its own


def _two_ranks(tmp_path):
    """(out-dir, argv, env) of a two-rank plain-torchrun lanes training of one step on a tiny synthetic set."""
    import os
    import socket
    import sys

    from dtrain.workloads.lanes import synth

    data, out = tmp_path / "tusimple", tmp_path / "run"
    synth.generate(data, frames_per_file={"label_data_0313.json": 4, "label_data_0531.json": 1,
                                          "label_data_0601.json": 1}, seed=5, test_frames=1)
    out.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DTRAIN_", "SM_"))}
    env.update(OMP_NUM_THREADS="1")
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(port),
            "-m", "dtrain.workloads.lanes", "train", "--recipe", "tiny", "--data-dir", str(data),
            "--out-dir", str(out), "--batch-size", "2", "--max-steps", "1"]
    return out, argv, env


@pytest.mark.slow
def test_every_rank_stops_with_its_own_line_when_rank_0_finds_the_out_dir_held(tmp_path):
    """Under torchrun only rank 0 takes the lock: it stopped in one line, and the other ranks waited in their
    next collective until the launcher ended them, saying nothing useful. Every rank now takes part in one
    all-reduce of the refusal and stops with its own line."""
    import subprocess
    import sys

    out, argv, env = _two_ranks(tmp_path)
    first = subprocess.Popen([sys.executable, "-c", HOLD, str(out / "train.log")], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # the first run, as its lock shows it
    try:
        assert first.stdout.readline() == "held\n"
        second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    finally:
        first.communicate("")
    ranks = sorted(line for line in second.stderr.splitlines() if line.startswith("error: "))  # torchrun adds its own
    assert second.returncode != 0 and len(ranks) == 2, second.stderr[-3000:]
    assert ranks[0].startswith(f"error: another training is writing {out} (it holds train.log)")
    assert ranks[1] == (f"error: rank 0 found another training writing {out}, so rank 1 stops too: wait for it to "
                        "end, or give this run another --out-dir")
    assert sorted(p.name for p in out.iterdir()) == ["train.log"] and (out / "train.log").read_text() == ""


@pytest.mark.slow
@pytest.mark.parametrize("found", ["link", "unwritable"])
def test_every_rank_stops_with_the_line_of_what_rank_0_found(tmp_path, found):
    """Rank 0 alone checks that the folders take a file and that no link was planted at a file it appends to: a
    refusal there stopped rank 0, and the other ranks waited in their first collective until the timeout. The
    refusal now goes into the same one all-reduce as the lock's, and every rank stops with one line naming what
    rank 0 found."""
    import subprocess

    out, argv, env = _two_ranks(tmp_path)
    if found == "link":
        (out / "metrics.jsonl").symlink_to(tmp_path / "elsewhere")
        rank0 = f"error: {out / 'metrics.jsonl'} is a symbolic link: training writes its outputs only to files"
        rank1 = (f"error: rank 0 found a symbolic link at {out / 'metrics.jsonl'}, so rank 1 stops too: remove the "
                 "link, or give this run another --out-dir")
    else:  # a folder that takes no file (a read-only volume alike)
        argv += ["--checkpoint-dir", "/proc"]
        rank0 = "error: --checkpoint-dir /proc cannot be written (No such file or directory)"
        rank1 = ("error: rank 0 found that /proc cannot be written (No such file or directory), so rank 1 stops too: "
                 "use a folder you can write to, with free space, or give this run another --checkpoint-dir")
    second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    ranks = sorted(line for line in second.stderr.splitlines() if line.startswith("error: "))  # torchrun adds its own
    assert second.returncode != 0 and len(ranks) == 2, second.stderr[-3000:]
    assert ranks[0].startswith(rank0) and ranks[1] == rank1, ranks
    assert not (tmp_path / "elsewhere").exists() and not (out / "train.log").exists()


def test_a_hint_names_the_command_of_the_door_it_came_through(cli, tmp_path, capsys):
    """`dtrain lanes evaluate` names `dtrain lanes prepare` (a verb the CLI has); the same code under a plain
    torchrun or `python -m dtrain.workloads.lanes` (a container without the CLI) named it too, a command not
    there: it names the module's, as the cifar10 hints do."""
    from dtrain.workloads.inputs import run_by_cli
    from dtrain.workloads.lanes.__main__ import main as module_main

    pred, gt = _write(tmp_path / "pred.json", PRED), str(tmp_path / "nope.json")
    ckpt, out = str(tmp_path / "nope.pt"), str(tmp_path / "out.json")
    line = cli.refused("lanes", "evaluate", "--pred", pred, "--gt", gt)
    assert "(or run 'dtrain lanes prepare')" in line
    line = cli.refused("lanes", "evaluate", "--pred", gt, "--gt", pred)
    assert "('dtrain lanes predict' writes one)" in line
    line = cli.refused("lanes", "predict", "--checkpoint", ckpt, "--data-dir", str(tmp_path), "--out", out)
    assert line.endswith("(want test_label.json): run 'dtrain lanes prepare'")
    capsys.readouterr()
    assert module_main(["evaluate", "--pred", pred, "--gt", gt]) == 2  # after the CLI's door: nothing stays set
    assert "(or run 'python -m dtrain.workloads.lanes prepare')" in capsys.readouterr().err
    assert module_main(["evaluate", "--pred", gt, "--gt", pred]) == 2
    assert "('python -m dtrain.workloads.lanes predict' writes one)" in capsys.readouterr().err
    assert module_main(["predict", "--checkpoint", ckpt, "--data-dir", str(tmp_path), "--out", out]) == 2
    assert capsys.readouterr().err.strip().endswith("(want test_label.json): run 'python -m dtrain.workloads.lanes "
                                                    "prepare'")
    from dtrain.workloads.lanes.predict import checkpoint_fix  # a missing or foreign --checkpoint's fix

    assert "'python -m dtrain.workloads.lanes train' wrote" in checkpoint_fix()
    with run_by_cli():
        assert "'dtrain lanes train' wrote" in checkpoint_fix()
