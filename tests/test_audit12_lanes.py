"""Audit 12 of the lane workload: what the official TuSimple evaluation (LaneEval, evaluate/lane.py) accepts,
training reads too; a flip mirrors every point; the readers warn once per job; predictions read back in the
official tool's terms."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from dtrain.workloads.lanes import predict
from dtrain.workloads.lanes.data import LaneDataset, flip_label
from dtrain.workloads.lanes.masks import TRAIN_SIZE, assign_slots, render_mask
from dtrain.workloads.lanes.metric import evaluate_files
from dtrain.workloads.lanes.model import SCNN, SCNNConfig
from dtrain.workloads.lanes.tusimple import (IMAGE_WIDTH, NO_POINT, LaneLabel, one_line_per_frame, read_labels,
                                             write_labels)

REPO = Path(__file__).resolve().parents[1]
ROWS = (240, 250, 260, 270, 280, 290)
SORTED = {"raw_file": "clips/a/1/20.jpg", "h_samples": list(ROWS),
          "lanes": [[-2, 300.5, 290.25, 280, 270.75, 260], [700, 720.5, 740, 760, -2, 800]]}
ORDER = [3, 0, 5, 1, 4, 2]  # the same rows, each x kept with its row, in another order
UNSORTED = {**SORTED, "h_samples": [ROWS[i] for i in ORDER], "lanes": [[lane[i] for i in ORDER]
                                                                       for lane in SORTED["lanes"]]}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _write(path: Path, objs) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return path


def _dataset(root: Path, lines) -> Path:
    """A training folder: the label lines and a grey 1280x720 JPEG for each frame."""
    root.mkdir(exist_ok=True)
    _write(root / "label_data_0313.json", lines)
    for line in lines:
        (root / line["raw_file"]).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (1280, 720), (90, 90, 90)).save(root / line["raw_file"])
    return root


# ------------------------------------------------------------------ 1. fractional x and unsorted rows in training

def test_training_reads_fractional_x_and_unsorted_rows_as_the_official_evaluation_does(tmp_path):
    """LaneEval reads any number as an x and rows in any order; training refused both ('must be an integer',
    'h_samples must be strictly increasing'), so a label file the official tool scores could not be trained on."""
    root = _dataset(tmp_path / "data", [UNSORTED])
    label = read_labels(root / "label_data_0313.json")[0]
    assert label.h_samples == tuple(UNSORTED["h_samples"])  # the file's order: predictions pair rows by index
    assert label.lanes == tuple(tuple(lane) for lane in UNSORTED["lanes"])  # fractions kept, 280.0 -> 280
    img, seg, exist = LaneDataset(root, "train")[0]
    want_seg, want_exist = render_mask(SORTED["lanes"], SORTED["h_samples"], size=TRAIN_SIZE)
    assert np.array_equal(seg.numpy(), want_seg) and np.array_equal(exist.numpy(), want_exist)
    assert exist.sum() == 2 and (seg.numpy() > 0).sum() > 0


def test_the_mask_of_unsorted_rows_is_the_mask_of_the_rows_sorted_with_their_x():
    """Drawn in the file's order, a polyline through unsorted rows zigzags up and down the frame."""
    assert np.array_equal(render_mask(UNSORTED["lanes"], UNSORTED["h_samples"])[0],
                          render_mask(SORTED["lanes"], SORTED["h_samples"])[0])
    assert assign_slots(UNSORTED["lanes"], UNSORTED["h_samples"]) == assign_slots(SORTED["lanes"], SORTED["h_samples"])


def test_a_fractional_x_is_drawn_at_the_mask_pixel_it_falls_in():
    """Scaled to the 512x288 mask, x = 900.25 falls nearer 900's pixels, 900.75 nearer 901's."""
    def columns(x: float) -> list[int]:
        seg, _ = render_mask([[x] * len(ROWS), [100] * len(ROWS)], ROWS, size=TRAIN_SIZE)
        return np.flatnonzero(seg[106] == 3).tolist()  # the right-hand lane, in a row between two samples

    assert columns(900) != columns(901)
    assert columns(900.25) == columns(900) and columns(900.75) == columns(901)


def test_a_repeated_row_is_read_and_a_lane_on_one_row_gets_a_slot():
    """LaneEval reads repeated rows too; a lane whose points all lie on one row has no slope to extrapolate."""
    rows = [250, 250, 260]
    assert assign_slots([[300, 310, NO_POINT], [900, 905, NO_POINT]], rows) == [2, 3]


# ------------------------------------------------------------------ 2. a flip mirrors points outside the frame

def _random_label(rng: random.Random) -> LaneLabel:
    def x() -> float:
        kind = rng.choice(("in", "fraction", "right", "missing"))
        if kind == "in":
            return rng.randint(0, IMAGE_WIDTH - 1)
        if kind == "fraction":
            return rng.randint(0, 2 * IMAGE_WIDTH) + 0.5
        if kind == "right":  # W+1 mirrors onto -2, "no point": flip_label's docstring
            return rng.choice((IMAGE_WIDTH, rng.randint(IMAGE_WIDTH + 2, 5000)))
        return NO_POINT

    lanes = tuple(tuple(x() for _ in ROWS) for _ in range(rng.randint(0, 5)))
    return LaneLabel(raw_file="clips/a/1/20.jpg", h_samples=ROWS, lanes=lanes)


def test_flipping_twice_gives_the_label_back():
    """A point right of the frame (kept since the evaluation keeps them) became 1279 - x < 0, which the masks
    read as no point and a second flip left as it was: flip(flip(label)) lost it."""
    rng = random.Random(12)
    for _ in range(500):
        label = _random_label(rng)
        assert flip_label(flip_label(label)) == label
    one = LaneLabel(raw_file="a.jpg", h_samples=(250, 260), lanes=((1300, NO_POINT), (0, 1279.5)))
    assert flip_label(one).lanes == ((-21, NO_POINT), (1279, -0.5))  # x' = 1279 - x, as for in-frame points


def test_the_flipped_mask_is_the_mirror_of_the_mask_also_where_a_lane_leaves_the_frame():
    """A lane running out of the right edge: its flipped mask ran only up to the last in-frame row."""
    rows = (600, 610, 620, 630, 640, 650, 660)
    lane = (1180, 1210, 1240, 1270, 1300, 1330, 1360)
    label = LaneLabel(raw_file="a.jpg", h_samples=rows, lanes=(lane, (300, 290, 280, 270, 260, 250, 240)))
    seg, exist = render_mask(label.lanes, rows, size=(1280, 720))
    seg_f, exist_f = render_mask(flip_label(label).lanes, rows, size=(1280, 720))
    assert exist.sum() == exist_f.sum() == 2
    edge_rows = np.flatnonzero(seg[:, -1] > 0)
    assert len(edge_rows) > 10  # the lane crosses the right edge for several rows
    assert np.array_equal(np.flatnonzero(seg_f[:, 0] > 0), edge_rows)
    # the rest mirrors exactly (render_mask draws a lane and its mirror from the same coordinates)
    assert np.array_equal(seg_f[:, ::-1] > 0, seg > 0)


# ------------------------------------------------------------------ 3. the readers' warnings, once per job

def _noisy_labels(tmp_path: Path) -> Path:
    """A file with a point outside the frame and a frame labelled twice: two warnings."""
    line = {**SORTED, "lanes": [[1300] * len(ROWS)]}
    return _write(tmp_path / "label_data_0313.json", [line, line])


@pytest.mark.parametrize(("env", "printed"), [
    ({}, 2),  # no launcher: one process
    ({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "3"}, 2),
    ({"RANK": "2", "LOCAL_RANK": "2", "WORLD_SIZE": "3"}, 0),
    ({"RANK": "3", "LOCAL_RANK": "0", "WORLD_SIZE": "6"}, 0),  # the second node's first process
    ({"LOCAL_RANK": "1"}, 0),
])
def test_reader_warnings_print_on_rank_0_only(tmp_path, monkeypatch, capsys, env, printed):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    one_line_per_frame(read_labels(_noisy_labels(tmp_path)))
    assert len(capsys.readouterr().err.splitlines()) == printed


@pytest.mark.slow
def test_under_torchrun_three_ranks_print_each_warning_once(tmp_path):
    """torchrun's own environment, no platform, no process group: 3 ranks printed 3 copies of each."""
    labels = _noisy_labels(tmp_path)
    script = tmp_path / "read.py"
    script.write_text("import sys\nfrom dtrain.workloads.lanes.tusimple import one_line_per_frame, read_labels\n"
                      "one_line_per_frame(read_labels(sys.argv[1]))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DTRAIN_", "SM_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
                           str(script), str(labels)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours = [line for line in proc.stderr.splitlines() if "warning: " in line and str(labels) in line]
    assert len(ours) == 2 and "outside the frame" in ours[0] and "labelled again" in ours[1], proc.stderr[-3000:]


# ------------------------------------------------------------------ 4. predictions in the official tool's terms

def test_predictions_read_back_as_the_official_tool_reads_a_submission(tmp_path, capsys):
    """Each line: raw_file, lanes (lists of ints, -2 for no point, one per GT row in the GT file's order),
    run_time (a number of ms), as bench_one_submit reads them; and the file scores against the GT file."""
    gt_lines = [UNSORTED, {**SORTED, "raw_file": "clips/a/2/20.jpg"}]
    root = _dataset(tmp_path / "data", gt_lines)
    (root / "test_label.json").write_text((root / "label_data_0313.json").read_text())
    torch.manual_seed(0)
    cfg = SCNNConfig(width=0.125, input_size=(64, 48))
    torch.save({"model": SCNN(cfg).state_dict(), "model_config": {**cfg.__dict__}}, tmp_path / "model.pt")
    out = tmp_path / "pred.json"
    assert predict.main(["--checkpoint", str(tmp_path / "model.pt"), "--data-dir", str(root), "--out", str(out),
                         "--threshold", "0.0", "--device", "cpu", "--json"]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [p["raw_file"] for p in lines] == [g["raw_file"] for g in gt_lines]
    for p, g in zip(lines, gt_lines):
        assert {"raw_file", "lanes", "run_time"} <= set(p)
        assert type(p["run_time"]) in (int, float) and 0 <= p["run_time"] < float("inf")
        assert p["h_samples"] == g["h_samples"]  # as given: the official tool pairs x with the GT rows by index
        assert p["lanes"] and all(len(lane) == len(g["h_samples"]) for lane in p["lanes"])
        assert all(type(x) is int and (x >= 0 or x == NO_POINT) for lane in p["lanes"] for x in lane)
    result = evaluate_files(out, root / "test_label.json")
    assert result["frames"] == 2 and json.loads(capsys.readouterr().out)["frames"] == 2
    # what write_labels writes reads back as the labels it was given, run_time included
    again = write_labels(tmp_path / "again.json", read_labels(out, max_lanes=None))
    assert again == 2 and (tmp_path / "again.json").read_text() == out.read_text()
