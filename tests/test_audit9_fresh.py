"""A new user's first hour with the lane-detection walk-through (audit 9, `fresh`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import Dtrain
from dtrain.workloads.lanes import synth


@pytest.fixture(scope="module")
def few_frames(tmp_path_factory) -> Path:
    """A TuSimple-format folder with 3 training frames and 2 test frames (a tiny ground truth)."""
    root = tmp_path_factory.mktemp("tusimple")
    synth.generate(root, frames_per_file={"label_data_0313.json": 2, "label_data_0601.json": 1,
                                          "label_data_0531.json": 1}, seed=5, test_frames=2)
    return root


@pytest.mark.slow
def test_train_without_its_data_names_the_folder_and_leaves_no_out_dir(dt: Dtrain, tmp_path):
    """A job submitted without its --pvc trains on --data-dir /mnt/tusimple of the host: the run
    said only `no label file ... run dtrain lanes prepare`, and left an empty train.log and
    metrics.jsonl in --out-dir (on the host's /mnt) behind."""
    data, out = tmp_path / "mnt" / "tusimple", tmp_path / "mnt" / "runs" / "lanes"
    proc = dt("lanes", "train", "--recipe", "tiny", "--data-dir", str(data), "--out-dir", str(out),
              "--max-steps", "2", check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(data) in lines[0] and "does not exist" in lines[0] and "--pvc" in lines[0], lines
    assert not out.exists()


@pytest.mark.slow
def test_train_refused_for_its_data_writes_nothing(dt: Dtrain, few_frames, tmp_path):
    """3 training frames cannot fill a batch of 8: refused in one line, and --out-dir stays as it was."""
    out = tmp_path / "run"
    proc = dt("lanes", "train", "--recipe", "tiny", "--data-dir", str(few_frames), "--out-dir", str(out),
              "--batch-size", "8", "--max-steps", "2", check=False)
    assert proc.returncode == 2 and "cannot fill one batch" in proc.stderr, proc.stderr
    assert not out.exists()


@pytest.mark.slow
def test_predict_refused_for_its_inputs_creates_no_folders(dt: Dtrain, few_frames, tmp_path):
    """A missing --data-dir is one line and makes no folder; a missing --checkpoint no --overlays folder."""
    out, overlays = tmp_path / "eval" / "pred.json", tmp_path / "eval" / "overlays"
    missing = tmp_path / "nowhere" / "tusimple"
    proc = dt("lanes", "predict", "--checkpoint", str(tmp_path / "model.pt"), "--data-dir", str(missing),
              "--out", str(out), "--overlays", str(overlays), check=False)
    assert proc.returncode == 2 and "does not exist" in proc.stderr and str(missing) in proc.stderr, proc.stderr
    assert not (tmp_path / "eval").exists()
    proc = dt("lanes", "predict", "--checkpoint", str(tmp_path / "model.pt"), "--data-dir", str(few_frames),
              "--out", str(out), "--overlays", str(overlays), check=False)
    assert proc.returncode == 2 and "checkpoint" in proc.stderr and "does not exist" in proc.stderr, proc.stderr
    assert not overlays.exists() and not out.exists()
