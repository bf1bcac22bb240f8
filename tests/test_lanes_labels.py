"""TuSimple label parsing and writing, mask rendering, slot assignment and decoding."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from dtrain.errors import DataError, NotFoundError, SpecError
from dtrain.workloads.lanes.masks import (
    NUM_CLASSES,
    TRAIN_SIZE,
    assign_slots,
    decode_lanes,
    decode_seg,
    render_label,
    render_mask,
)
from dtrain.workloads.lanes.metric import evaluate
from dtrain.workloads.lanes.tusimple import LaneLabel, iter_labels, mask_relpath, read_labels, write_labels

REAL = Path("/work/shared/data/tusimple/test_label.json")
needs_real = pytest.mark.skipif(not REAL.is_file(), reason="real TuSimple test labels not on this machine")
ROWS = tuple(range(160, 711, 10))


def line(**overrides) -> str:
    obj = {"lanes": [[-2] * 54 + [100, 90]], "h_samples": list(ROWS), "raw_file": "clips/0531/1/20.jpg"}
    obj.update(overrides)
    return json.dumps({k: v for k, v in obj.items() if v is not None})


@needs_real
def test_real_test_labels_parse():
    labels = read_labels(REAL)
    assert len(labels) == 2782
    # the README's lane-count histogram of the real test set
    assert Counter(len(lb.lanes) for lb in labels) == {2: 5, 3: 1740, 4: 468, 5: 569}
    assert all(lb.h_samples == ROWS for lb in labels)
    assert all(lb.raw_file.startswith("clips/") and lb.raw_file.endswith("/20.jpg") for lb in labels)
    assert len({lb.raw_file for lb in labels}) == 2782


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "bad JSON"),
        ("[" * 100_000 + "]" * 100_000, "bad JSON \\(nested too deep\\): give a TuSimple JSON-lines file$"),
        (line(lanes=[[-2] * 55 + [0]]).replace("0]]", "9" * 5000 + "]]"),
         "bad JSON \\(a number of more than 4300 digits\\): give a TuSimple JSON-lines file$"),
        (line(lanes=None), "missing key 'lanes'"),
        (line(h_samples=None), "missing key 'h_samples'"),
        (line(raw_file=None), "missing key 'raw_file'"),
        (line(raw_file=""), "raw_file must be a non-empty string"),
        (line(lanes=[[1, 2]]), "lanes\\[0\\] has 2 points but h_samples has 56"),
        # true/false, a negative x other than -2 and more than 5 lanes are read as the official evaluation reads them
        # (tests/test_lanes_laneeval.py)
        (line(lanes=[[-2] * 55 + [None]]), "lanes\\[0\\]\\[55\\] must be a number, got null"),
        (line(lanes=[[-2] * 55 + [10**400]]), "lanes\\[0\\]\\[55\\] is 1.000e\\+400, out of range: give -2147483647 to"),
        # a number as written, short: 1e308 was quoted as the 309 digits of int(1e308)
        (line(lanes=[[-2] * 55 + [1e308]]), "lanes\\[0\\]\\[55\\] is 1e\\+308, out of range: give -2147483647 to 2147483647$"),
        (line(lanes=[[-2] * 55 + [-3e9]]), "lanes\\[0\\]\\[55\\] is -3000000000.0, out of range: give -2147483647 to"),
        # a raw_file that leads out of the dataset: training read /etc/passwd as a frame
        (line(raw_file="/etc/passwd"), "raw_file '/etc/passwd' leads out of the dataset folder: give a path inside it"),
        (line(raw_file="clips/../../x/20.jpg"), "raw_file 'clips/../../x/20.jpg' leads out of the dataset folder"),
        (line(lanes="x"), "lanes must be a list"),
        (line(h_samples=[160, "170"]), "h_samples\\[1\\] must be a number"),
        (line(run_time="fast"), "run_time must be a number"),
        ('{"lanes": [], "h_samples": [160], "raw_file": "a", "run_time": NaN}', "run_time must be a number .*, got NaN"),
        (line(run_time=-1), "run_time must be a number of milliseconds >= 0, got -1"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, text, message):
    path = tmp_path / "labels.json"
    path.write_text(line() + "\n\n" + text + "\n")  # the bad line is line 3 (blank line 2 skipped)
    with pytest.raises(DataError, match=rf"labels.json:3: {message}"):
        read_labels(path)


def test_missing_file_is_not_found(tmp_path):
    with pytest.raises(NotFoundError, match="does not exist"):
        read_labels(tmp_path / "nope.json")


def test_a_folder_or_device_is_no_label_file_and_says_so(tmp_path):
    with pytest.raises(SpecError, match=f"label file {tmp_path} is a folder, not a file: give a TuSimple"):
        read_labels(tmp_path)
    with pytest.raises(SpecError, match="label file /dev/null is not a regular file: give a TuSimple"):
        read_labels("/dev/null")


def test_write_then_read_round_trips_and_keeps_run_time(tmp_path):
    labels = [
        LaneLabel(raw_file="clips/a/1/20.jpg", h_samples=(240, 250), lanes=((1, 2), (-2, 5))),
        LaneLabel(raw_file="clips/a/2/20.jpg", h_samples=(240, 250), lanes=(), run_time=12.5),
    ]
    assert write_labels(tmp_path / "out.json", labels) == 2
    assert read_labels(tmp_path / "out.json") == labels
    first = json.loads((tmp_path / "out.json").read_text().splitlines()[0])
    assert list(first) == ["lanes", "h_samples", "raw_file"]  # the real files' key order
    assert list(iter_labels(tmp_path / "out.json"))[1].run_time == 12.5


def test_max_lanes_none_accepts_prediction_files_with_more_lanes(tmp_path):
    path = tmp_path / "pred.json"
    path.write_text(line(lanes=[[-2] * 56] * 7) + "\n")
    assert len(read_labels(path, max_lanes=None)[0].lanes) == 7


def test_mask_relpath_strips_clips_and_records_size():
    assert mask_relpath("clips/0313-1/60/20.jpg", (512, 288)) == "seg_label/512x288/0313-1/60/20.png"


# ---- masks -----------------------------------------------------------------------------


def straight(x_bottom: float, vx: float = 640, vy: float = 250, rows=ROWS, top: int = 260) -> tuple[int, ...]:
    """A straight lane from the vanishing point (vx, vy) through (x_bottom, 720)."""
    return tuple(int(round(vx + (x_bottom - vx) * (y - vy) / (720 - vy))) if y >= top else -2 for y in rows)


def test_slots_anchor_ego_left_at_2_and_ego_right_at_3():
    lanes = [straight(900), straight(200), straight(1500)]  # 1 left, 2 right, given out of order
    assert assign_slots(lanes, ROWS) == [3, 2, 4]
    lanes = [straight(-600), straight(200), straight(900), straight(1500)]  # 2 + 2
    assert assign_slots(lanes, ROWS) == [1, 2, 3, 4]


def test_slots_shift_when_more_than_two_lanes_are_left():
    lanes = [straight(x) for x in (-1400, -600, 200, 900, 1500)]  # 3 left + 2 right
    assert assign_slots(lanes, ROWS) == [1, 2, 3, 4, 5]
    lanes = [straight(x) for x in (200, 900, 1500, 2200, 2900)]  # 1 left + 4 right: clamped
    assert assign_slots(lanes, ROWS) == [1, 2, 3, 4, 5]
    lanes = [straight(x) for x in (900, 1500)]  # no left lane: ego-right still slot 3
    assert assign_slots(lanes, ROWS) == [3, 4]


def test_lanes_with_too_few_points_are_absent():
    one_point = tuple(-2 if i != 40 else 500 for i in range(len(ROWS)))
    lanes = [straight(200), one_point, straight(900)]
    assert assign_slots(lanes, ROWS) == [2, None, 3]
    seg, exist = render_mask(lanes, ROWS)
    assert exist.tolist() == [0, 1, 1, 0, 0]
    assert set(np.unique(seg).tolist()) == {0, 2, 3}


def test_render_mask_shape_classes_and_thickness():
    lanes = [straight(200), straight(900)]
    seg, exist = render_mask(lanes, ROWS, size=TRAIN_SIZE)
    assert seg.shape == (288, 512) and seg.dtype == np.uint8
    assert exist.dtype == np.float32 and exist.tolist() == [0, 1, 1, 0, 0]
    # a row crosses a stroke of width w and slope k = dx/dy over w * sqrt(1 + k^2) pixels
    for lane_slot, x_bottom in ((2, 200), (3, 900)):
        k = (x_bottom - 640) / (720 - 250)
        for mask, w, row in ((seg, 16 * 0.4, 250), (render_mask(lanes, ROWS, size=(1280, 720))[0], 16, 650)):
            assert abs((mask[row] == lane_slot).sum() - w * np.hypot(1, k)) <= 2.5
    assert (seg[:100] == 0).all()  # nothing above the lanes' first row (y = 260 -> mask row 104)


def test_gaps_in_a_label_stay_gaps():
    lane = list(straight(300))
    lane[30:40] = [-2] * 10  # rows y = 460..550 missing
    seg, _ = render_mask([lane], ROWS, size=(1280, 720))
    assert not (seg[480:530] == 2).any()
    assert (seg[440] == 2).any() and (seg[600] == 2).any()
    # the rows at a run's ends see only part of the square-ended stroke: a few pixels off
    (decoded,) = decode_seg(seg, ROWS)
    assert [x < 0 for x in decoded] == [x < 0 for x in lane]
    assert max(abs(a - b) for a, b in zip(decoded, lane) if b >= 0) <= 6


def test_decode_lanes_from_soft_probabilities():
    height, width = 288, 512
    prob = np.zeros((NUM_CLASSES, height, width), dtype=np.float32)
    cols = np.arange(width)
    truth = {}
    for slot, x_mask in ((2, 150.3), (3, 380.8)):
        prob[slot, 120:] = np.exp(-0.5 * ((cols - x_mask) / 2.0) ** 2)  # a soft peak per row
        truth[slot] = (x_mask + 0.5) * 1280 / width - 0.5
    prob[0] = 1 - prob[1:].sum(axis=0)
    exist = np.array([0.1, 0.9, 0.8, 0.7, 0.2], dtype=np.float32)  # slot 4 "exists" but has no pixels
    lanes = decode_lanes(prob, exist, ROWS, threshold=0.3)
    assert len(lanes) == 2  # slot 4 dropped: no row above the threshold
    for lane, slot in zip(lanes, (2, 3)):
        for y, x in zip(ROWS, lane):
            if y * 288 / 720 < 119:
                assert x == -2
            else:
                assert abs(x - truth[slot]) <= 1.5
    assert decode_lanes(prob, np.zeros(5), ROWS) == []  # nothing exists
    assert len(decode_lanes(prob, exist, ROWS, threshold=0.95)) == 2
    assert decode_lanes(prob, exist, ROWS, threshold=1.0) == []


def test_decode_lanes_accepts_five_channels_and_rejects_bad_shapes():
    prob = np.zeros((5, 72, 128), dtype=np.float32)
    prob[0, :, 10] = 1.0
    lanes = decode_lanes(prob, np.array([1, 0, 0, 0, 0]), ROWS, min_points=1)
    assert lanes and all(x == round(10.5 * 10 - 0.5) for x in lanes[0])
    with pytest.raises(ValueError, match="prob must be"):
        decode_lanes(np.zeros((4, 10, 10)), np.zeros(5), ROWS)


@pytest.mark.slow
@needs_real
def test_real_labels_round_trip_through_training_size_masks():
    """Render every real test label at 512x288 and decode it back: >= 0.99 TuSimple accuracy."""
    gts = read_labels(REAL)
    preds = []
    for gt in gts:
        seg, exist = render_label(gt)
        lanes = decode_seg(seg, gt.h_samples)
        assert len(lanes) == int(exist.sum())
        preds.append(LaneLabel(raw_file=gt.raw_file, h_samples=gt.h_samples, lanes=tuple(map(tuple, lanes))))
    result = evaluate(preds, gts)
    print(f"round trip at {TRAIN_SIZE}: {result}")
    assert result["accuracy"] >= 0.99
    assert result["fn"] <= 0.01 and result["fp"] <= 0.01
