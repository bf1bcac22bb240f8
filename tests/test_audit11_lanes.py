"""Lane labels and submissions the official TuSimple evaluation (evaluate/lane.py) accepts without a word:
repeated frames and points outside the 1280x720 frame are accepted here too, scored as it scores them,
and named in one warning line per file; run_time's 200 ms rule as the docs state it."""

from __future__ import annotations

import json

import pytest

from dtrain.errors import DataError
from dtrain.workloads.lanes.metric import bench_frame, evaluate_files
from dtrain.workloads.lanes.tusimple import one_line_per_frame, read_labels
from test_lanes_evaluate_official import official_figures

ROWS = [240, 250, 260, 270]
A = {"raw_file": "a.jpg", "h_samples": ROWS, "lanes": [[300, 310, 320, 330]]}
A_LATER = {"raw_file": "a.jpg", "h_samples": ROWS, "lanes": [[600, 610, 620, 630]]}
B = {"raw_file": "b.jpg", "h_samples": ROWS, "lanes": [[300, 310, 320, 330], [700, 710, 720, 730]]}
PA = {"raw_file": "a.jpg", "lanes": [[300.5, 310, 320, 330]], "run_time": 5}
PB = {"raw_file": "b.jpg", "lanes": [[300, 310, 320, 330]], "run_time": 5}


def _write(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _figures(pred, gt, warned):
    ours = evaluate_files(pred, gt, warn=warned.append)
    theirs = official_figures(pred, gt)
    return [ours[k] for k in ("accuracy", "fp", "fn")], [theirs[k] for k in ("accuracy", "fp", "fn")]


def test_a_ground_truth_frame_given_twice_is_scored_against_its_last_line(tmp_path):
    """The official script keeps {raw_file: line} (the last line wins) and divides by the distinct frames."""
    gt = _write(tmp_path / "gt.json", [A, B, A_LATER])
    pred = _write(tmp_path / "pred.json", [PA, PB, PA])  # as many lines as the ground truth: it scores them
    warned = []
    ours, theirs = _figures(pred, gt, warned)
    assert ours == theirs and ours[0] == pytest.approx(0.25)  # both a.jpg lines miss A_LATER
    assert warned[0].startswith(f"1 ground-truth line (first: {gt}:3, a.jpg first at {gt}:1) repeats a frame: "
                                "as in the official script, every prediction of it is scored against its last line")
    assert warned[1].startswith(f"1 prediction line (first: {pred}:3, a.jpg first at {pred}:1) repeats a frame")
    assert len(warned) == 2


def test_a_prediction_given_twice_in_place_of_another_is_scored_as_the_official_script_does(tmp_path):
    gt = _write(tmp_path / "gt.json", [A, B])
    pred = _write(tmp_path / "pred.json", [PA, PA])
    warned = []
    ours, theirs = _figures(pred, gt, warned)
    assert ours == theirs == [1.0, 0.0, 0.0]  # a.jpg counts twice, b.jpg adds nothing
    assert warned == [
        f"1 prediction line (first: {pred}:2, a.jpg first at {pred}:1) repeats a frame: as in the official script, "
        "every line is scored and summed, and the sums are divided by the 2 distinct ground-truth frames",
        f"1 ground-truth frame (first: {gt}:2) has no prediction (other frames are predicted more than once): as "
        "in the official script, each adds 0 to the sums but counts among the 2 frames they are divided by",
    ]


def test_line_counts_that_differ_are_still_refused_as_the_official_script_refuses_them(tmp_path):
    gt = _write(tmp_path / "gt.json", [A, B])
    with pytest.raises(DataError, match="prediction for a.jpg appears twice"):
        evaluate_files(_write(tmp_path / "pred.json", [PA, PA, PB]), gt)
    with pytest.raises(DataError, match="no prediction for ground-truth frame b.jpg"):
        evaluate_files(_write(tmp_path / "pred.json", [PA]), gt)


def test_ground_truth_outside_the_frame_is_scored_as_given_with_one_warning(tmp_path):
    far = {**B, "lanes": [[300, 310, 320, 1500], [700, 710, 720, 730]]}
    low = {**A, "h_samples": [240, 250, 260, 800]}
    gt = _write(tmp_path / "gt.json", [low, far])
    pred = _write(tmp_path / "pred.json", [PA, PB])
    warned = []
    ours, theirs = _figures(pred, gt, warned)
    assert ours == theirs
    assert warned == [f"{gt}:1: row 800 is outside the 1280x720 frame (2 lines of this file with points outside "
                      "the frame): scored as given, as the official script scores them"]
    prediction_far = _write(tmp_path / "pred.json", [PA, {**PB, "lanes": [[1300, 310, 320, 330]]}])
    warned.clear()
    evaluate_files(prediction_far, _write(tmp_path / "gt.json", [A, B]), warn=warned.append)
    assert warned == []  # a prediction past the edge is a model's business, not a label's mistake


def test_training_labels_outside_the_frame_are_kept_with_one_warning(tmp_path):
    path = _write(tmp_path / "label_data_0313.json", [A, {**B, "lanes": [[300, 310, 320, 1280], [0, 0, 0, 0]]},
                                                      {**A, "raw_file": "c.jpg", "h_samples": [-10, 250, 260, 270]}])
    warned = []
    labels = read_labels(path, warn=warned.append)
    assert [label.lanes for label in labels][1] == ((300, 310, 320, 1280), (0, 0, 0, 0))
    assert warned == [f"{path}:2: x 1280 is outside the 1280x720 frame (2 lines of this file with points outside "
                      "the frame): kept as given; masks draw only the part inside the frame, and the metric compares "
                      "them as given, as the official script does"]


def test_a_training_frame_labelled_twice_keeps_its_last_line_with_one_warning(tmp_path):
    """A frame has one precomputed mask: its two labels cannot both train, so the last line does, as the
    official evaluation keeps a ground-truth frame's last line."""
    path = _write(tmp_path / "label_data_0313.json", [A, B, A_LATER, B])
    warned = []
    labels = one_line_per_frame(read_labels(path), warn=warned.append)
    assert [(label.raw_file, label.lanes[0][0]) for label in labels] == [("a.jpg", 600), ("b.jpg", 300)]
    assert warned == [f"{path}:3: frame a.jpg is labelled again (first at {path}:1) (2 repeated lines in this "
                      "file): training uses each frame's last line only, as the official evaluation keeps a "
                      "ground-truth frame's last line"]


def test_run_time_over_200_ms_scores_accuracy_0_fp_0_fn_1_and_200_itself_passes():
    """docs/lanes.md: a frame whose run_time is over 200 ms scores (accuracy 0, FP 0, FN 1), however right its
    lanes and however many extra lanes it gives; exactly 200 ms is scored normally."""
    gt = [[300, 310, 320, 330]]
    extra = gt + [[900, 910, 920, 930]]
    assert bench_frame(extra, gt, ROWS, 200.0) == (1.0, 0.5, 0.0)
    assert bench_frame(extra, gt, ROWS, 200.01) == (0.0, 0.0, 1.0)
    assert bench_frame(gt, gt, ROWS, None) == (1.0, 0.0, 0.0)  # no run_time: 0 ms


# ------------------------------------------------------------------ what else the official script accepts

def test_training_labels_take_whole_floats_extra_keys_empty_and_all_minus_2_lanes(tmp_path):
    """numpy-written labels give 300.0 and 240.0, which the official evaluation reads as numbers: training
    (and predict, which reads test_label.json with it) refused them as 'must be an integer'."""
    lines = [{**A, "h_samples": [240.0, 250, 260, 270.0], "lanes": [[300.0, 310, 320, 330]], "note": "extra"},
             {**B, "lanes": []}, {**B, "raw_file": "c.jpg", "lanes": [[-2, -2, -2, -2], [1.0, 2, 3, 4]]}]
    path = _write(tmp_path / "label_data_0313.json", lines)
    labels = read_labels(path)
    assert labels[0].h_samples == (240, 250, 260, 270) and labels[0].lanes == ((300, 310, 320, 330),)
    assert all(type(v) is int for v in labels[0].h_samples + labels[0].lanes[0])
    assert labels[1].lanes == () and labels[2].lanes[0] == (-2, -2, -2, -2)
    pred = _write(tmp_path / "pred.json", [PA, PB, {**PB, "raw_file": "c.jpg"}])
    warned = []
    ours, theirs = _figures(pred, path, warned)
    assert ours == theirs and warned[0].startswith("1 ground-truth frame (")  # b.jpg: no lanes
    fractional = _write(tmp_path / "fractional.json", [{**A, "lanes": [[300.5, 310, 320, 330]]}])
    assert read_labels(fractional)[0].lanes == ((300.5, 310, 320, 330),)  # kept: tests/test_audit12_lanes.py


def test_a_raw_file_holding_nul_is_one_line_not_a_traceback_when_the_frame_is_opened(tmp_path):
    path = _write(tmp_path / "test_label.json", [{**A, "raw_file": "clips/a\u0000/20.jpg"}])
    with pytest.raises(DataError, match=r"test_label\.json:1: raw_file 'clips/a\\x00/20.jpg' holds a NUL character"):
        read_labels(path)


def test_true_false_and_huge_integer_run_times_are_scored_as_the_official_script_scores_them(tmp_path):
    """The official script computes with true/false as 1/0 (numpy) and only compares run_time with 200, so an
    integer beyond float range is a slow frame; both were refused here."""
    gt = _write(tmp_path / "gt.json", [{**A, "lanes": [[True, 1, 2, 3]]}, B])
    pred = _write(tmp_path / "pred.json", [{**PA, "lanes": [[True, False, 2, 3]], "run_time": True},
                                            {**PB, "run_time": 10**400}])
    warned = []
    ours, theirs = _figures(pred, gt, warned)
    assert ours == theirs == [0.5, 0.0, 0.5]
    assert warned[0].startswith(f"1 prediction (first: {pred}:2) took over 200 ms")
    assert warned[1].startswith(f"1 prediction (first: {pred}:1) gives true/false for a number")
    assert warned[2].startswith(f"1 ground-truth line (first: {gt}:1) gives true/false for a number (an x or row): "
                                "scored as 1/0")


def test_prepare_and_the_dataset_train_a_frame_labelled_twice_once_on_its_last_line(tmp_path, capsys):
    """Masks are stored by raw_file: the second label's mask replaced the first's, yet both lines stayed in
    the lists and the dataset, so the first trained on the second's mask with its own existence flags."""
    import numpy as np
    from PIL import Image

    from dtrain.workloads.lanes import synth
    from dtrain.workloads.lanes.data import LaneDataset
    from dtrain.workloads.lanes.masks import render_label
    from dtrain.workloads.lanes.predict import split_labels
    from dtrain.workloads.lanes.prepare import build_masks
    from dtrain.workloads.lanes.tusimple import mask_relpath

    synth.generate(tmp_path, frames_per_file={"label_data_0313.json": 2, "label_data_0531.json": 1,
                                              "label_data_0601.json": 1}, seed=3, test_frames=1)
    path = tmp_path / "label_data_0313.json"
    first, second = path.read_text().splitlines()
    again = {**json.loads(second), "raw_file": json.loads(first)["raw_file"]}  # frame 1 with frame 2's lanes
    path.write_text(f"{first}\n{second}\n{json.dumps(again)}\n")
    capsys.readouterr()
    size = (256, 144)
    assert build_masks(tmp_path, size)["train"] == 3
    assert f"{path}:3: frame {again['raw_file']} is labelled again (first at {path}:1)" in capsys.readouterr().err
    listed = (tmp_path / "list" / "train_gt.txt").read_text().splitlines()
    assert len(listed) == 3 and len({line.split()[0] for line in listed}) == 3
    last = read_labels(path)[2]
    with Image.open(tmp_path / mask_relpath(last.raw_file, size)) as im:
        assert np.array_equal(np.array(im), render_label(last, size=size)[0])
    dataset = LaneDataset(tmp_path, "train", size=size)
    assert len(dataset) == 3 and dataset.labels[0] == last and dataset.labels[0].where == f"{path}:3"
    assert len(split_labels(tmp_path, "train")) == 4  # predict predicts every line, as a submission mirrors them
