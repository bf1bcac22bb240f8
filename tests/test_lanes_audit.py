"""Defects found by auditing the lane workload as a new user and an adversarial one.

Each test names what a user does and what must come back: one line that names the problem and
the fix (a DtrainError, exit 2 through the command), nothing stored lost, nothing written
through a symbolic link the code did not make.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

from conftest import DTRAIN
from dtrain.errors import DataError, SpecError
from dtrain.training import setup_distributed
from dtrain.workloads.lanes import __main__ as lanes_cli
from dtrain.workloads.lanes import metric, predict, prepare, synth, train
from dtrain.workloads.lanes.data import load_image
from dtrain.workloads.lanes.metric import evaluate_files
from dtrain.workloads.lanes.model import SCNN, SCNNConfig
from dtrain.workloads.lanes.tusimple import read_labels

REPO = Path(__file__).resolve().parents[1]
COUNTS = {"label_data_0313.json": 6, "label_data_0531.json": 2, "label_data_0601.json": 2}
GT_LINE = {"lanes": [[-2, 300, 310, 320], [-2, 600, 590, 580]], "h_samples": [240, 250, 260, 270],
           "raw_file": "clips/a/1/20.jpg"}
PRED_LINE = {"raw_file": "clips/a/1/20.jpg", "lanes": [[-2, 301.5, 311.2, 318.9]], "run_time": 12.5}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A small synthetic TuSimple folder (8 training, 2 val, 3 test frames), not to be changed."""
    root = tmp_path_factory.mktemp("tusimple")
    synth.generate(root, frames_per_file=COUNTS, seed=5, test_frames=3)
    return root


@pytest.fixture
def own_data(data, tmp_path) -> Path:
    """A copy of `data` a test may change."""
    return Path(shutil.copytree(data, tmp_path / "data"))


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run_training(argv: list[str]) -> dict:
    return train.train(train.parse_config(argv, {}), setup_distributed(env={}))


def one_line_error(capsys, argv: list[str]) -> str:
    """`python -m dtrain.workloads.lanes ARGV` in this process: exit 2 and one stderr line."""
    assert lanes_cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def _write_lines(path: Path, objs) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return path


# ------------------------------------------------------------------ label and prediction files


def test_a_label_file_that_is_not_utf8_is_one_line_naming_file_and_line(tmp_path):
    gt = tmp_path / "gt.json"
    gt.write_bytes(json.dumps(GT_LINE).encode() + b"\n\xff\xfe garbage\n")
    pred = _write_lines(tmp_path / "pred.json", [PRED_LINE])
    with pytest.raises(DataError, match=rf"^{gt}:2: not UTF-8 text"):
        read_labels(gt)
    proc = subprocess.run([DTRAIN, "lanes", "evaluate", "--pred", str(pred), "--gt", str(gt)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and f"{gt}:2: not UTF-8" in proc.stderr
    bad_pred = tmp_path / "bad_pred.json"
    bad_pred.write_bytes(b'{"raw_file": "clips/a/1/20.jpg\xff", "lanes": []}\n')
    with pytest.raises(DataError, match=rf"^{bad_pred}:1: not UTF-8 text"):
        evaluate_files(bad_pred, _write_lines(tmp_path / "gt_ok.json", [GT_LINE]))


def test_a_byte_order_mark_before_the_first_line_is_read(tmp_path):
    gt = tmp_path / "gt.json"
    gt.write_bytes(b"\xef\xbb\xbf" + (json.dumps(GT_LINE) + "\n").encode())
    pred = tmp_path / "pred.json"
    pred.write_bytes(b"\xef\xbb\xbf" + (json.dumps({**PRED_LINE, "lanes": GT_LINE["lanes"]}) + "\n").encode())
    assert evaluate_files(pred, gt)["accuracy"] == 1.0


def test_a_frame_without_h_samples_is_refused_by_name_not_divided_by_zero(tmp_path):
    gt = _write_lines(tmp_path / "gt.json", [{"lanes": [[]], "h_samples": [], "raw_file": "a.jpg"}])
    pred = _write_lines(tmp_path / "pred.json", [{"raw_file": "a.jpg", "lanes": [[]], "run_time": 1}])
    with pytest.raises(DataError, match=rf"^{pred}:1: a.jpg: the ground-truth frame has no h_samples, so a lane's "
                                        "accuracy is 0 rows of 0 .*: give the rows"):
        evaluate_files(pred, gt)
    with pytest.raises(DataError, match="no h_samples"):
        metric.bench_frame([[]], [[]], [])
    assert metric.bench_frame([], [[]], []) == (0.0, 0.0, 1.0)  # nothing compared: a missed lane, as officially
    assert metric.bench_frame([], [], []) == (0.0, 0.0, 0.0)
    with pytest.raises(DataError, match=rf"^{tmp_path / 'train.json'}:1: h_samples is empty"):  # training's reader
        read_labels(_write_lines(tmp_path / "train.json", [{"lanes": [], "h_samples": [], "raw_file": "a.jpg"}]))


# ------------------------------------------------------------------ frames


def test_a_frame_of_another_size_than_1280x720_is_refused(tmp_path):
    Image.new("RGB", (640, 360), (90, 90, 90)).save(tmp_path / "half.jpg")
    Image.new("RGB", (1280, 720), (90, 90, 90)).save(tmp_path / "whole.jpg")
    with pytest.raises(DataError, match=r"half.jpg is 640x360, but TuSimple frames are 1280x720.*: replace it"):
        load_image(tmp_path / "half.jpg", (256, 144))
    assert load_image(tmp_path / "whole.jpg", (256, 144)).shape == (3, 144, 256)


def test_an_error_in_a_loader_worker_comes_back_as_its_one_line(own_data, tmp_path):
    for label in read_labels(own_data / "label_data_0313.json") + read_labels(own_data / "label_data_0601.json"):
        frame = own_data / label.raw_file
        frame.write_bytes(frame.read_bytes()[:2000])  # cut short, as an interrupted copy leaves it
    with pytest.raises(DataError) as caught:
        run_training(["--data-dir", str(own_data), "--out-dir", str(tmp_path / "run"), "--batch-size", "2",
                      "--max-steps", "1", "--use-workers", "--num-workers", "1"])
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message, message
    assert message.startswith("cannot decode image ")
    assert message.endswith("(re-run 'python -m dtrain.workloads.lanes prepare --force')")  # training's module door


# ------------------------------------------------------------------ predict


@pytest.mark.parametrize("module, argv, message, missing", [
    (predict, ["--batch-size", "0"], "--batch-size 0 is out of range: give 1 to 65536, e.g. --batch-size 1", "--checkpoint, --out"),
    (prepare, ["--size", "0x0"], "--size width 0 is out of range: give 16 to 4096, e.g. 16", "--url, --out"),
])
def test_a_bad_number_is_named_before_a_missing_path(tmp_path, monkeypatch, capsys, module, argv, message, missing):
    """predict and prepare named their required --checkpoint/--url/--out before a bad number (argparse checks
    required options first): numbers come first, as in train and synth, then the missing flags, all at once."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError, match=f"^{message}$"):
        module.main(argv)
    with pytest.raises(SystemExit) as exit_:
        module.main([])
    prog = f"dtrain lanes {module.__name__.rsplit('.', 1)[1]}"
    assert exit_.value.code == 2 and capsys.readouterr().err == (
        f"{prog}: error: the following arguments are required: {missing} (see '{prog} --help')\n")
    assert list(tmp_path.iterdir()) == []


def test_predict_checks_out_before_any_work_and_never_replaces_the_ground_truth(data, tmp_path, capsys):
    gt = data / "test_label.json"
    before = gt.read_bytes()
    missing = str(tmp_path / "no-such-model.pt")  # a check after loading the model would name this instead
    common = ["predict", "--checkpoint", missing, "--data-dir", str(data)]
    assert "is a folder: give a file path" in one_line_error(capsys, [*common, "--out", str(tmp_path)])
    assert "lies inside --data-dir" in one_line_error(capsys, [*common, "--out", str(gt)])
    assert gt.read_bytes() == before
    (tmp_path / "afile").write_text("x")
    line = one_line_error(capsys, [*common, "--out", str(tmp_path / "afile/p.json")])
    assert f"its folder {tmp_path / 'afile'} is a file, not a folder" in line


def test_a_folder_that_takes_no_file_is_named_before_any_work(data, tmp_path, capsys):
    """/proc exists and os.access says root may write there, but it takes no file: predict's --out there
    was a traceback after every frame was predicted (--overlays too), training's --out-dir one at
    train.log. Now one line naming the flag and the folder, before the model is loaded or trained."""
    missing = str(tmp_path / "no-such-model.pt")  # checked after --out: a later check would name this
    line = one_line_error(capsys, ["predict", "--checkpoint", missing, "--data-dir", str(data), "--out", "/proc/p.json"])
    assert "/proc" in line and "no-such-model" not in line and "Traceback" not in line
    model = _save_model(tmp_path / "model.pt", SCNNConfig(width=0.125, input_size=(64, 48)))
    line = one_line_error(capsys, ["predict", "--checkpoint", str(model), "--data-dir", str(data),
                                   "--out", str(tmp_path / "p.json"), "--overlays", "/proc"])
    assert "/proc" in line and not (tmp_path / "p.json").exists()
    line = one_line_error(capsys, ["train", "--data-dir", str(data), "--out-dir", "/proc", "--batch-size", "2",
                                   "--max-steps", "1"])
    assert "/proc" in line and "Traceback" not in line


def test_predict_never_writes_onto_its_checkpoint_nor_into_the_dataset(own_data, tmp_path, capsys):
    (tmp_path / "run").mkdir()
    model = _save_model(tmp_path / "run" / "model.pt", SCNNConfig(width=0.125, input_size=(64, 48)))
    (tmp_path / "link.pt").symlink_to(model)
    (own_data / "prepare.json").write_text("{}\n")
    (own_data / "list").mkdir()
    (own_data / "list" / "test_gt.txt").write_text("keep\n")
    kept = {p: p.read_bytes() for p in [model, *own_data.rglob("*")] if p.is_file()}
    common = ["predict", "--checkpoint", str(model), "--data-dir", str(own_data)]
    for out in (model, tmp_path / "link.pt"):
        assert "is the --checkpoint it predicts with" in one_line_error(capsys, [*common, "--out", str(out)])
    for name in ("test_tasks_0627.json", "prepare.json", "list/test_gt.txt", "seg_label/new.json", "new.json"):
        line = one_line_error(capsys, [*common, "--out", str(own_data / name)])
        assert f"--out {own_data / name} lies inside --data-dir {own_data}" in line and "e.g. pred.json" in line
    assert {p: p.read_bytes() for p in kept} == kept
    assert not (own_data / "new.json").exists() and not (own_data / "seg_label" / "new.json").exists()


def _save_model(path: Path, cfg: SCNNConfig) -> Path:
    torch.manual_seed(0)
    model = SCNN(cfg)
    torch.save({"model": model.state_dict(), "model_config": {**cfg.__dict__}}, path)
    return path


def test_predict_names_a_file_that_is_no_scnn_checkpoint_in_one_line(data, tmp_path, capsys):
    out = ["--data-dir", str(data), "--out", str(tmp_path / "p.json")]
    text = tmp_path / "notes.pt"
    text.write_text("not a checkpoint\n")
    assert "cannot be loaded as a checkpoint" in one_line_error(capsys, ["predict", "--checkpoint", str(text), *out])
    foreign = tmp_path / "foreign.pt"
    torch.save({"model": {"w": torch.zeros(1)}, "model_config": {"width": 0.125}}, foreign)
    line = one_line_error(capsys, ["predict", "--checkpoint", str(foreign), *out])
    assert "does not hold an SCNN this code builds (its model_config has no 'input_size')" in line
    other = _save_model(tmp_path / "other.pt", SCNNConfig(width=0.125, input_size=(64, 48)))
    state = torch.load(other, weights_only=True)
    state["model_config"]["width"] = 0.25  # the weights of one width, the config of another
    torch.save(state, other)
    line = one_line_error(capsys, ["predict", "--checkpoint", str(other), *out])
    assert "does not hold an SCNN this code builds (size mismatch for" in line
    assert not (tmp_path / "p.json").exists()


def test_predict_on_a_split_without_frames_is_an_error(own_data, tmp_path, capsys):
    (own_data / "test_label.json").write_text("")
    model = _save_model(tmp_path / "model.pt", SCNNConfig(width=0.125, input_size=(64, 48)))
    line = one_line_error(capsys, ["predict", "--checkpoint", str(model), "--data-dir", str(own_data),
                                   "--out", str(tmp_path / "p.json")])
    assert "split 'test' of" in line and "holds no frames" in line
    assert not (tmp_path / "p.json").exists()


def test_overlays_replace_a_link_never_write_through_it(data, tmp_path):
    model = _save_model(tmp_path / "model.pt", SCNNConfig(width=0.125, input_size=(64, 48)))
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    overlays = tmp_path / "overlays"
    overlays.mkdir()
    first = read_labels(data / "test_label.json")[0]
    link = overlays / predict.overlay_name(first.raw_file)
    link.symlink_to(outside)
    assert predict.main(["--checkpoint", str(model), "--data-dir", str(data), "--out", str(tmp_path / "p.json"),
                         "--overlays", str(overlays), "--max-overlays", "1", "--limit", "1"]) == 0
    assert outside.read_text() == "keep me\n"
    assert not link.is_symlink() and Image.open(link).size == predict.OVERLAY_SIZE


def test_predict_says_how_many_frames_the_200_ms_rule_scored_as_misses(data, tmp_path, capsys, monkeypatch):
    """Under load a frame takes over 200 ms, and the official rule scores it a miss: the accuracy
    printed then reads as a worse model unless that is said."""
    import dataclasses

    model = _save_model(tmp_path / "model.pt", SCNNConfig(width=0.125, input_size=(64, 48)))
    real = predict.predict_labels

    def slow_second(*args, **kw):
        preds = real(*args, **kw)
        return [dataclasses.replace(p, run_time=250.0) if i == 1 else p for i, p in enumerate(preds)]

    monkeypatch.setattr(predict, "predict_labels", slow_second)
    assert predict.main(["--checkpoint", str(model), "--data-dir", str(data), "--out", str(tmp_path / "p.json"),
                         "--limit", "3"]) == 0
    err = capsys.readouterr().err
    assert ("dtrain lanes predict: warning: 1 of 3 frames took over 200 ms and are scored as misses (the "
            "official rule)") in err, err


# ------------------------------------------------------------------ train


def test_resuming_another_recipes_checkpoint_is_refused_and_keeps_it(data, tmp_path):
    out = tmp_path / "run"
    run_training(["--recipe", "tiny", "--data-dir", str(data), "--out-dir", str(out), "--batch-size", "2",
                  "--max-steps", "4", "--stop-after", "1"])
    ckpt = out / "ckpt-1.pt"
    before = ckpt.read_bytes()
    common = ["--data-dir", str(data), "--out-dir", str(out), "--batch-size", "2", "--max-steps", "4"]
    # the same model shapes (demo = tiny's width and input size): it would load and train on silently
    with pytest.raises(SpecError, match=r"ckpt-1.pt was written by recipe tiny, this run trains recipe demo: .*"
                                        r"--no-resume"):
        run_training(["--recipe", "demo", *common])
    # other shapes: torch's multi-line load error becomes one line naming the checkpoint's recipe
    with pytest.raises(SpecError) as caught:
        run_training(["--recipe", "paper", *common, "--no-use-workers"])
    message = str(caught.value)
    assert "\n" not in message
    assert "ckpt-1.pt (written by recipe tiny) does not fit recipe paper's model (size mismatch for" in message
    assert sorted(p.name for p in out.glob("ckpt-*.pt")) == ["ckpt-1.pt"] and ckpt.read_bytes() == before
    assert run_training(["--recipe", "tiny", *common, "--stop-after", "2"])["step"] == 2  # its own recipe resumes


@pytest.mark.parametrize("name", ["train.log", "metrics.jsonl"])
def test_training_never_appends_through_a_link_in_out_dir(data, tmp_path, name):
    out = tmp_path / "run"
    out.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    (out / name).symlink_to(outside)
    with pytest.raises(SpecError, match=rf"{name} is a symbolic link: .*remove the link"):
        run_training(["--data-dir", str(data), "--out-dir", str(out), "--batch-size", "2", "--max-steps", "1"])
    assert outside.read_text() == "keep me\n"
    assert not list(out.glob("ckpt-*.pt"))


def test_the_training_log_refuses_a_link_left_at_its_name(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    (tmp_path / "train.log").symlink_to(outside)
    with pytest.raises(SpecError, match="train.log is a symbolic link"):
        train.Log(tmp_path / "train.log", enabled=True)
    assert outside.read_text() == "keep me\n"


def test_validation_without_val_frames_fails_before_training(own_data, tmp_path):
    (own_data / "label_data_0531.json").write_text("")
    out = tmp_path / "run"
    with pytest.raises(SpecError, match="validation is on but the val split of .* holds no frames.*--use-val off"):
        run_training(["--data-dir", str(own_data), "--out-dir", str(out), "--batch-size", "2", "--max-steps", "1",
                      "--use-val"])
    assert not out.exists()


# ------------------------------------------------------------------ synth


def test_synth_replaces_links_under_out_never_writes_through_them(tmp_path):
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (outside / "keep.txt").write_text("keep me\n")
    (out / "clips").symlink_to(outside, target_is_directory=True)
    (out / "train_set.tar.gz").symlink_to(outside / "keep.txt")
    assert synth.main(["--out", str(out), "--train", "3", "--test", "1", "--seed", "1", "--archive"]) == 0
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
    assert (outside / "keep.txt").read_text() == "keep me\n"
    assert not [p for p in out.rglob("*") if p.is_symlink()]
    labels = read_labels(out / "label_data_0313.json")
    assert all((out / lb.raw_file).is_file() for lb in labels)


# ------------------------------------------------------------------ the command


def test_a_full_disk_is_one_line_not_a_traceback(monkeypatch, capsys):
    def full(argv):
        raise OSError(errno.ENOSPC, "No space left on device", "/data/pred.json")

    monkeypatch.setattr(metric, "main", full)
    line = one_line_error(capsys, ["evaluate", "--pred", "p", "--gt", "g"])
    assert line.startswith("error: No space left on device writing /data/pred.json")


# ------------------------------------------------------------------ prepare


def test_prepare_of_label_files_without_frames_is_an_error(tmp_path, capsys):
    labels = tmp_path / "test_label.json"
    labels.write_text("\n\n")
    line = one_line_error(capsys, ["prepare", "--url", str(labels), "--out", str(tmp_path / "out")])
    assert "hold no frames: check --url" in line and "test_label.json" in line


# ------------------------------------------------------------------ plain torchrun


@pytest.mark.slow  # two torch processes starting on a shared 2-core machine: about 20 s
def test_training_runs_under_plain_torchrun_and_only_rank_0_writes(data, tmp_path):
    """No platform: torchrun's own environment, two processes; one log line and one checkpoint per step."""
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DTRAIN_", "SM_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "dtrain.workloads.lanes", "train", "--recipe", "tiny", "--data-dir", str(data),
                           "--out-dir", str(out), "--batch-size", "2", "--max-steps", "2", "--checkpoint-every", "1"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in out.glob("ckpt-*.pt")) == ["ckpt-1.pt", "ckpt-2.pt"]
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    log = (out / "train.log").read_text()
    assert log.count(" recipe tiny: 2 processes") == 1 and log.count("finished at step 2") == 1
    run = json.loads((out / "run.json").read_text())
    assert run["world_size"] == 2 and run["finished"]
    assert not list(out.glob(".*.tmp"))
