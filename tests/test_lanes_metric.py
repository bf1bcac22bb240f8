"""The TuSimple metric on hand-worked frames."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dtrain.errors import DataError, SpecError
from dtrain.workloads.lanes import metric
from dtrain.workloads.lanes.metric import bench_frame, evaluate, evaluate_files
from dtrain.workloads.lanes.tusimple import LaneLabel, write_labels

ROWS = tuple(range(160, 711, 10))  # 56 rows
N = len(ROWS)


def vertical(x: int) -> tuple[int, ...]:
    return (x,) * N


def slanted(x0: int) -> tuple[int, ...]:
    """x = x0 + (y - 160): slope dx/dy = 1, angle 45 degrees, threshold 20 / cos(45) = 28.28."""
    return tuple(x0 + y - 160 for y in ROWS)


def shift(lane, dx):
    return tuple(x + dx if x >= 0 else x for x in lane)


def frame(name, lanes, run_time=None):
    return LaneLabel(raw_file=name, h_samples=ROWS, lanes=tuple(lanes), run_time=run_time)


def test_identical_lanes_score_perfectly():
    gt = [vertical(300), vertical(600), vertical(900)]
    assert bench_frame(gt, gt, ROWS) == (1.0, 0.0, 0.0)


@pytest.mark.parametrize(("dx", "hit"), [(19, True), (20, False), (-19, True), (-20, False)])
def test_vertical_lane_threshold_is_20_pixels(dx, hit):
    acc, fp, fn = bench_frame([shift(vertical(500), dx)], [vertical(500)], ROWS)
    assert acc == (1.0 if hit else 0.0)
    assert (fp, fn) == ((0.0, 0.0) if hit else (1.0, 1.0))


@pytest.mark.parametrize(("dx", "hit"), [(28, True), (29, False)])
def test_slanted_lane_threshold_widens_with_angle(dx, hit):
    assert 28 < 20 / math.cos(math.atan(1.0)) < 29
    acc, _, _ = bench_frame([shift(slanted(100), dx)], [slanted(100)], ROWS)
    assert acc == (1.0 if hit else 0.0)


def test_threshold_uses_slope_of_x_on_y_over_valid_points_only():
    gt = list(slanted(100))
    gt[:10] = [-2] * 10  # missing rows do not enter the fit: still 45 degrees
    assert metric.lane_angle(np.array(gt), np.array(ROWS)) == pytest.approx(math.pi / 4)
    pred = [x + 28 if x >= 0 else -2 for x in gt]
    assert bench_frame([pred], [gt], ROWS)[0] == 1.0


def test_missing_rows_count_over_all_h_samples():
    gt = vertical(500)
    pred = tuple(-2 if i < 8 else 500 for i in range(N))  # 8 of 56 rows missing
    acc, fp, fn = bench_frame([pred], [gt], ROWS)
    assert acc == pytest.approx((N - 8) / N)  # 0.857 >= 0.85: still matched
    assert (fp, fn) == (0.0, 0.0)
    pred = tuple(-2 if i < 9 else 500 for i in range(N))  # 9 missing: 0.839 < 0.85
    acc, fp, fn = bench_frame([pred], [gt], ROWS)
    assert acc == pytest.approx((N - 9) / N)
    assert (fp, fn) == (1.0, 1.0)


def test_rows_empty_in_both_count_as_hits():
    gt = tuple(-2 if i < 20 else 500 for i in range(N))
    pred = tuple(-5 if i < 20 else 505 for i in range(N))  # any negative means no point
    assert bench_frame([pred], [gt], ROWS) == (1.0, 0.0, 0.0)


def test_extra_predicted_lanes_are_false_positives():
    gt = [vertical(300), vertical(600)]
    pred = gt + [vertical(900)]
    assert bench_frame(pred, gt, ROWS) == (1.0, pytest.approx(1 / 3), 0.0)


def test_missed_lane_is_false_negative_and_lowers_accuracy():
    gt = [vertical(300), vertical(600), vertical(900)]
    acc, fp, fn = bench_frame(gt[:2], gt, ROWS)
    assert acc == pytest.approx(2 / 3)
    assert (fp, fn) == (0.0, pytest.approx(1 / 3))


def test_no_predictions():
    gt = [vertical(300), vertical(600)]
    assert bench_frame([], gt, ROWS) == (0.0, 0.0, 1.0)


def test_five_lane_frame_drops_lowest_accuracy_and_one_miss():
    gt = [vertical(x) for x in (100, 350, 600, 850, 1100)]
    pred = gt[:4] + [tuple(-2 if i < 28 else 1100 for i in range(N))]  # last lane half right: 0.5
    acc, fp, fn = bench_frame(pred, gt, ROWS)
    assert acc == pytest.approx(4 / 4)  # sum 4.5 minus lowest 0.5, over min(4, 5)
    assert fp == pytest.approx(1 / 5)  # 4 matched of 5 predicted
    assert fn == 0.0  # one miss, forgiven
    acc, fp, fn = bench_frame(gt[:3], gt, ROWS)  # two misses: one forgiven
    assert acc == pytest.approx(3 / 4)
    assert fn == pytest.approx(1 / 4)


def test_slow_frame_scores_zero():
    gt = [vertical(300), vertical(600)]
    assert bench_frame(gt, gt, ROWS, run_time=200) == (1.0, 0.0, 0.0)
    assert bench_frame(gt, gt, ROWS, run_time=200.5) == (0.0, 0.0, 1.0)


def test_too_many_predicted_lanes_scores_zero():
    gt = [vertical(300), vertical(600)]
    four = gt + [vertical(900), vertical(1000)]
    assert bench_frame(four, gt, ROWS)[0] == 1.0  # n_gt + 2 allowed
    assert bench_frame(four + [vertical(1100)], gt, ROWS) == (0.0, 0.0, 1.0)


def test_lane_length_mismatch_is_an_error():
    with pytest.raises(DataError, match="55 points but the frame has 56"):
        bench_frame([vertical(300)[:-1]], [vertical(300)], ROWS)


def test_evaluate_averages_frames_and_matches_by_raw_file():
    gts = [frame("a.jpg", [vertical(300), vertical(600)]), frame("b.jpg", [vertical(300), vertical(600)])]
    preds = [frame("b.jpg", [vertical(300)]), frame("a.jpg", [vertical(300), vertical(600)])]  # other order
    result = evaluate(preds, gts)
    assert result == {"accuracy": pytest.approx(0.75), "fp": 0.0, "fn": pytest.approx(0.25), "frames": 2}


def test_evaluate_rejects_missing_duplicate_and_unknown_frames():
    gts = [frame("a.jpg", [vertical(300)]), frame("b.jpg", [vertical(300)])]
    with pytest.raises(DataError, match="no prediction for ground-truth frame b.jpg"):
        evaluate([frame("a.jpg", [vertical(300)])], gts)
    with pytest.raises(DataError, match="appears twice"):
        evaluate([frame("a.jpg", []), frame("a.jpg", []), frame("b.jpg", [])], gts)
    with pytest.raises(DataError, match="c.jpg has no ground-truth"):
        evaluate([frame("a.jpg", []), frame("b.jpg", []), frame("c.jpg", [])], gts)


def test_evaluate_files_refuses_a_ground_truth_frame_given_twice(tmp_path):
    """One prediction must not score as two frames: a duplicated GT line is named like a duplicated prediction."""
    gt, pred = tmp_path / "gt.json", tmp_path / "pred.json"
    write_labels(gt, [frame("a.jpg", [vertical(300)]), frame("b.jpg", []), frame("a.jpg", [vertical(300)])])
    write_labels(pred, [frame("a.jpg", [vertical(300)]), frame("b.jpg", [])])
    with pytest.raises(DataError, match=rf"^{gt}:3: ground-truth frame a.jpg appears twice \(first at {gt}:1\): "
                                        "give one line per frame$"):
        evaluate_files(pred, gt)
    with pytest.raises(DataError, match="^ground-truth frame a.jpg appears twice: give one line per frame$"):
        evaluate([frame("a.jpg", [])], [frame("a.jpg", []), frame("a.jpg", [])])


def test_evaluate_files_names_a_folder_or_device_given_as_a_file(tmp_path):
    write_labels(tmp_path / "gt.json", [frame("a.jpg", [])])
    with pytest.raises(SpecError, match=f"^prediction file {tmp_path} is a folder, not a file: give a TuSimple"):
        evaluate_files(tmp_path, tmp_path / "gt.json")
    write_labels(tmp_path / "pred.json", [frame("a.jpg", [])])
    with pytest.raises(SpecError, match="^label file /dev/null is not a regular file: give a TuSimple"):
        evaluate_files(tmp_path / "pred.json", "/dev/null")


def test_evaluate_names_the_frame_of_a_bad_lane():
    gts = [frame("a.jpg", [vertical(300)])]
    bad = LaneLabel(raw_file="a.jpg", h_samples=ROWS, lanes=((1, 2, 3),))
    with pytest.raises(DataError, match=r"a.jpg: predicted lane 0 has 3 points"):
        evaluate([bad], gts)


def test_evaluate_files_and_cli(tmp_path, capsys):
    gt = [frame("a.jpg", [vertical(300), vertical(600)])]
    pred = [frame("a.jpg", [vertical(305), vertical(600), vertical(900), vertical(950)], run_time=12.0)]
    write_labels(tmp_path / "gt.json", gt)
    write_labels(tmp_path / "pred.json", pred)
    expected = {"accuracy": 1.0, "fp": 0.5, "fn": 0.0, "frames": 1}
    assert evaluate_files(tmp_path / "pred.json", tmp_path / "gt.json") == expected
    assert metric.main(["--pred", str(tmp_path / "pred.json"), "--gt", str(tmp_path / "gt.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == expected
    metric.main(["--pred", str(tmp_path / "pred.json"), "--gt", str(tmp_path / "gt.json")])
    table = capsys.readouterr().out
    assert "accuracy" in table and "0.5000" in table and "frames" in table


def test_prediction_files_may_hold_more_than_five_lanes(tmp_path):
    gt = [frame("a.jpg", [vertical(x) for x in (100, 300, 500, 700)])]
    pred = [frame("a.jpg", [vertical(x) for x in (100, 300, 500, 700, 900, 1100)], run_time=5.0)]
    write_labels(tmp_path / "gt.json", gt)
    write_labels(tmp_path / "pred.json", pred)
    result = evaluate_files(tmp_path / "pred.json", tmp_path / "gt.json")
    assert result["accuracy"] == 1.0 and result["fp"] == pytest.approx(2 / 6)


def test_swapped_pred_and_gt_are_refused_naming_the_command_the_right_way(tmp_path):
    """`--pred test_label.json --gt pred.json` was scored without a word; the official script refuses it (the
    ground truth's lines give no run_time), and so does dtrain, saying which file looks like which."""
    gt, pred = tmp_path / "gt.json", tmp_path / "pred.json"
    write_labels(gt, [frame("a.jpg", [vertical(300), vertical(600)]), frame("b.jpg", [vertical(500)])])
    write_labels(pred, [frame("a.jpg", [vertical(305)], run_time=12.0), frame("b.jpg", [vertical(500)], run_time=9.0)])
    with pytest.raises(DataError, match=rf"^{gt}:1: missing key 'run_time', without which the official script "
                                        rf"refuses a submission: .*; --gt {pred} looks like predictions \({pred}:1 "
                                        rf"gives a run_time, which ground truth never does\) and --pred {gt} like "
                                        rf"ground truth: run 'python -m dtrain.workloads.lanes evaluate --pred {pred} "
                                        rf"--gt {gt}' if they were swapped$"):
        evaluate_files(gt, pred)
    warned: list[str] = []  # the right way round, or two plain label files: no warning
    evaluate_files(pred, gt, warn=warned.append)
    assert warned == []


def test_a_submission_given_as_gt_is_named_in_its_error_or_warning(tmp_path):
    """Official submissions (no h_samples, float x) cannot be read as ground truth: the error says the
    files look swapped; float x in --gt alone is a warning to give the ground truth."""
    gt, sub = tmp_path / "gt.json", tmp_path / "sub.json"
    write_labels(gt, [frame("a.jpg", [vertical(300)]), frame("b.jpg", [vertical(500)])])
    sub.write_text("".join(json.dumps({"raw_file": f, "lanes": [[300.5] * N], "run_time": 1}) + "\n"
                           for f in ("a.jpg", "b.jpg")))
    with pytest.raises(DataError, match=rf"^{sub}:1: missing key 'h_samples': a ground-truth line holds raw_file, "
                                        rf"h_samples and lanes; --pred {gt} looks like ground truth \(h_samples on "
                                        rf"every line, whole-pixel x, no run_time\): run 'python -m "
                                        rf"dtrain.workloads.lanes evaluate --pred {sub} --gt {gt}' if they were "
                                        "swapped$"):
        evaluate_files(gt, sub)
    floats = tmp_path / "floats.json"
    floats.write_text("".join(json.dumps({"raw_file": f, "h_samples": list(ROWS), "lanes": [[300.5] * N]}) + "\n"
                              for f in ("a.jpg", "b.jpg")))
    warned: list[str] = []
    evaluate_files(sub, floats, warn=warned.append)  # --pred is no ground truth: no swap to suggest
    assert warned == [f"--gt {floats} looks like predictions ({floats}:1 gives an x that is not a whole pixel, "
                      "which ground truth never does): give the ground truth as --gt, e.g. test_label.json "
                      "(scored as given)"]
    write_labels(sub, [frame("a.jpg", [vertical(300)], run_time=5.0)])  # b.jpg is in --pred only: the error says it
    with pytest.raises(DataError, match=rf"^{gt}:2: prediction for b.jpg has no ground-truth frame: check the "
                                        rf"raw_file paths; --gt {sub} looks like "
                                        rf"predictions \({sub}:1 gives a run_time, .* if they were swapped$"):
        evaluate_files(gt, sub)


def test_an_empty_gt_file_is_named_not_the_first_prediction(tmp_path):
    """An empty --gt file once read as 'pred.json:1: prediction for a.jpg has no ground-truth frame'."""
    pred, gt = tmp_path / "pred.json", tmp_path / "gt.json"
    write_labels(pred, [frame("a.jpg", [vertical(300)], run_time=5.0)])
    for text in ("", "\n\r\n\n"):
        gt.write_text(text)
        with pytest.raises(DataError, match=f"^--gt {gt} holds no frames: give the ground truth, e.g. test_label.json$"):
            evaluate_files(pred, gt)


def test_the_same_file_as_pred_and_gt_is_refused_or_scored_with_a_warning(tmp_path):
    """`--pred test_label.json --gt test_label.json` scored 1.0 without a word; the official script refuses it (no
    run_time), and so does dtrain, naming the mix-up; a file that holds run_times is scored, with a warning."""
    gt = tmp_path / "gt.json"
    write_labels(gt, [frame("a.jpg", [vertical(300)]), frame("b.jpg", [vertical(500)])])
    with pytest.raises(DataError, match=rf"^{gt}:1: missing key 'run_time', .*; --pred and --gt are the same file, "
                                        rf"{gt}: give the predictions as --pred$"):
        evaluate_files(gt, gt)
    write_labels(gt, [frame("a.jpg", [vertical(300)], run_time=1.0), frame("b.jpg", [vertical(500)], run_time=1.0)])
    warned: list[str] = []
    assert evaluate_files(gt, gt, warn=warned.append)["accuracy"] == 1.0
    assert warned[-1] == (f"--pred and --gt are the same file, {gt}: the ground truth was scored against itself; "
                          "give the predictions as --pred")
    gt.write_text(json.dumps({"raw_file": "a.jpg", "lanes": [[300] * N]}) + "\n")  # no h_samples: the error alone
    with pytest.raises(DataError, match=f"^{gt}:1: missing key 'h_samples': a ground-truth line holds raw_file, "
                                        "h_samples and lanes$"):
        evaluate_files(gt, gt)
