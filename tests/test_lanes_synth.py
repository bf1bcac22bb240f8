"""The synthetic TuSimple generator: layout, determinism, labels that match the pictures."""

from __future__ import annotations

import json
import tarfile
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dtrain.errors import SpecError
from dtrain.workloads.lanes import synth
from dtrain.workloads.lanes.data import LaneDataset
from dtrain.workloads.lanes.masks import decode_seg, render_label
from dtrain.workloads.lanes.metric import evaluate
from dtrain.workloads.lanes.tusimple import LaneLabel, read_labels

COUNTS = {"label_data_0313.json": 4, "label_data_0531.json": 2, "label_data_0601.json": 2}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth")
    summary = synth.generate(out, frames_per_file=COUNTS, seed=7, test_frames=3)
    assert summary["frames"] == 11 and summary["files"] == {**COUNTS, "test_label.json": 3}
    return out


def all_labels(root: Path) -> list[LaneLabel]:
    return [lb for name in (*synth.TRAIN_FILES, synth.TEST_FILE) for lb in read_labels(root / name)]


def test_layout_matches_the_real_dataset(dataset):
    for name, n in {**COUNTS, "test_label.json": 3}.items():
        labels = read_labels(dataset / name)
        assert len(labels) == n
        rows = tuple(range(240, 711, 10)) if name == "label_data_0313.json" else tuple(range(160, 711, 10))
        assert all(lb.h_samples == rows for lb in labels)
        for lb in labels:
            assert lb.raw_file.startswith("clips/") and lb.raw_file.endswith("/20.jpg")
            with Image.open(dataset / lb.raw_file) as im:
                assert (im.format, im.size, im.mode) == ("JPEG", (1280, 720), "RGB")
            assert 2 <= len(lb.lanes) <= 5
            assert all(0 <= x < 1280 for lane in lb.lanes for x in lane if x != -2)
            assert all(sum(x >= 0 for x in lane) >= 2 for lane in lb.lanes)
    tasks = read_labels(dataset / "test_tasks_0627.json")
    assert [t.raw_file for t in tasks] == [lb.raw_file for lb in read_labels(dataset / "test_label.json")]
    assert all(t.lanes == () for t in tasks)
    raw = [lb.raw_file for lb in all_labels(dataset)]
    assert len(set(raw)) == len(raw)


def test_same_seed_same_data_other_seed_other_data(dataset, tmp_path):
    small = {"label_data_0313.json": 2}
    synth.generate(tmp_path / "a", frames_per_file=small, seed=7, test_frames=1)
    synth.generate(tmp_path / "b", frames_per_file=small, seed=8, test_frames=1)
    assert read_labels(tmp_path / "a" / "label_data_0313.json") == read_labels(dataset / "label_data_0313.json")[:2]
    first = read_labels(dataset / "label_data_0313.json")[0].raw_file
    assert (tmp_path / "a" / first).read_bytes() == (dataset / first).read_bytes()
    assert (tmp_path / "b" / first).read_bytes() != (dataset / first).read_bytes()
    assert read_labels(tmp_path / "b" / "label_data_0313.json") != read_labels(tmp_path / "a" / "label_data_0313.json")


def test_scene_statistics_resemble_tusimple():
    counts = Counter()
    curved = 0
    for i in range(400):  # scenes only, no rendering: cheap
        scene = synth._sample_scene(np.random.default_rng([3, i]))
        lanes = synth.scene_lanes(scene, synth.ROWS_OTHER)
        counts[len(lanes)] += 1
        curved += scene.camera.curve != 0
    assert set(counts) <= {2, 3, 4, 5} and counts[3] > counts[2] and counts[5] > 0
    assert 0.4 < curved / 400 < 0.9


def test_labels_sit_on_the_painted_markings(tmp_path):
    """Along each label the picture is brighter than 40 px beside it: the labels match the paint.

    The 90th percentile is compared because dashes leave most rows on bare asphalt.
    """
    synth.generate(tmp_path, frames_per_file={"label_data_0531.json": 12}, seed=1, test_frames=0)
    on_brighter = total = 0
    for lb in read_labels(tmp_path / "label_data_0531.json"):
        gray = np.asarray(Image.open(tmp_path / lb.raw_file).convert("L"), dtype=np.float32)
        for lane in lb.lanes:
            pts = [(x, y) for x, y in zip(lane, lb.h_samples) if 45 <= x < 1235]
            if len(pts) < 5:
                continue
            xs, ys = np.array(pts).T
            on = np.percentile(gray[ys, xs], 90)
            beside = max(np.percentile(gray[ys, xs - 40], 90), np.percentile(gray[ys, xs + 40], 90))
            on_brighter += on > beside + 10
            total += 1
    assert total >= 30
    assert on_brighter / total >= 0.85


def test_synthetic_labels_round_trip_through_masks(dataset):
    gts = all_labels(dataset)
    preds = []
    for g in gts:
        lanes = decode_seg(render_label(g)[0], g.h_samples)
        preds.append(LaneLabel(raw_file=g.raw_file, h_samples=g.h_samples, lanes=tuple(map(tuple, lanes))))
    assert evaluate(preds, gts)["accuracy"] >= 0.99


def test_make_archive_like_the_real_downloads(dataset, tmp_path):
    train = synth.make_archive(dataset, tmp_path / "train_set.tar.gz")
    with tarfile.open(train) as tf:
        names = set(tf.getnames())
    train_frames = {lb.raw_file for name in synth.TRAIN_FILES for lb in read_labels(dataset / name)}
    assert names == train_frames | set(synth.TRAIN_FILES)
    test = synth.make_archive(dataset, tmp_path / "test_set.zip")
    with zipfile.ZipFile(test) as zf:
        names = set(zf.namelist())
    test_frames = {lb.raw_file for lb in read_labels(dataset / "test_label.json")}
    assert names == test_frames | {"test_tasks_0627.json"}  # test_label.json is a separate download
    with pytest.raises(SpecError, match="cannot tell the split"):
        synth.make_archive(dataset, tmp_path / "data.tar.gz")
    with pytest.raises(SpecError, match="unknown archive type"):
        synth.make_archive(dataset, tmp_path / "train_set.rar")


def test_split_train_keeps_the_real_proportions():
    counts = synth.split_train(1000)
    assert sum(counts.values()) == 1000
    assert counts["label_data_0313.json"] > counts["label_data_0601.json"] > counts["label_data_0531.json"] > 0
    assert sum(synth.split_train(7).values()) == 7
    assert synth.split_train(0) == dict.fromkeys(synth.TRAIN_FILES, 0)
    for total in range(1, 30):  # every small count puts a frame in the train split (0313 + 0601)
        counts = synth.split_train(total)
        assert sum(counts.values()) == total and counts["label_data_0313.json"] + counts["label_data_0601.json"] > 0
    assert synth.split_train(1) == {"label_data_0313.json": 1, "label_data_0531.json": 0, "label_data_0601.json": 0}


def test_train_1_writes_a_training_frame(tmp_path):
    assert synth.main(["--out", str(tmp_path), "--train", "1", "--test", "0"]) == 0
    assert len(LaneDataset(tmp_path, "train").labels) == 1


def test_cli_writes_dataset_and_summary(tmp_path, capsys):
    assert synth.main(["--out", str(tmp_path), "--train", "5", "--test", "2", "--seed", "3"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["frames"] == 7 and summary["seed"] == 3
    assert sum(len(read_labels(tmp_path / n)) for n in synth.TRAIN_FILES) == 5
    with pytest.raises(SpecError, match="--train -1 is out of range: give 0 to 100000, e.g. --train 0"):
        synth.main(["--out", str(tmp_path), "--train", "-1"])
    with pytest.raises(SpecError, match="unknown label file"):
        synth.generate(tmp_path, frames_per_file={"label_data_9999.json": 1}, seed=0, test_frames=0)


@pytest.mark.parametrize("argv, message", [
    (["--train", "99999999999999", "--test", "2"], "--train 99999999999999 is out of range: give 0 to 100000, e.g. --train 100000"),
    (["--train", "2", "--test", "100001"], "--test 100001 is out of range: give 0 to 100000, e.g. --test 100000"),
    (["--seed", "-1"], "--seed -1 is out of range: give 0 to 4294967295, e.g. --seed 0"),
])
def test_cli_bounds_every_number_before_writing(tmp_path, argv, message):
    with pytest.raises(SpecError, match=f"^{message}$"):
        synth.main(["--out", str(tmp_path / "s"), *argv])
    assert not (tmp_path / "s").exists()
    with pytest.raises(SpecError, match="test_frames 100001 is out of range"):
        synth.generate(tmp_path / "s", frames_per_file=1, seed=0, test_frames=100_001)


def test_a_bad_number_is_named_before_a_missing_out(tmp_path, capsys, monkeypatch):
    """`synth --train -1` once said only that --out was required: the number is checked first, as train
    checks its numbers before its folders; a misspelt flag is named with the one meant."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError, match="^--train -1 is out of range: give 0 to 100000, e.g. --train 0$"):
        synth.main(["--train", "-1"])
    for argv, message in ((["--train", "2"], "the following arguments are required: --out"),
                          (["--n-train", "-1"], "unrecognized arguments: --n-train -1 (did you mean --train?)"),
                          (["--out", "o", "--tset=2"], "unrecognized arguments: --tset=2 (did you mean --test?)")):
        with pytest.raises(SystemExit) as exit_:
            synth.main(argv)
        assert exit_.value.code == 2
        assert capsys.readouterr().err == f"dtrain lanes synth: error: {message} (see 'dtrain lanes synth --help')\n"
    assert list(tmp_path.iterdir()) == []


def test_an_out_that_cannot_be_a_folder_gives_one_line(tmp_path):
    (tmp_path / "afile").write_text("x")
    cases = [(tmp_path / "afile", " is a file, not a folder: give a folder \\(it is created if missing\\)"),
             (tmp_path / "afile" / "sub", ": a part of the path is a file, not a folder: give a folder path"),
             (Path("/proc/x"), " cannot be created \\(No such file or directory\\): give a folder you can write to")]
    for out, message in cases:
        with pytest.raises(SpecError, match=f"^--out {out}{message}$"):
            synth.main(["--out", str(out), "--train", "2", "--test", "2"])


@pytest.mark.parametrize("held", ["prepare.json", "label_data_0313.json", "test_label.json", "test_tasks_0627.json"])
def test_an_out_holding_a_dataset_is_refused_and_kept(tmp_path, held):
    (tmp_path / held).write_text("keep\n")
    with pytest.raises(SpecError, match=f"^--out {tmp_path} already holds a TuSimple dataset \\({held}\\): synth "
                                        "would overwrite its labels and frames; give a new --out folder$"):
        synth.main(["--out", str(tmp_path), "--train", "2", "--test", "1"])
    assert [p.name for p in tmp_path.iterdir()] == [held] and (tmp_path / held).read_text() == "keep\n"
