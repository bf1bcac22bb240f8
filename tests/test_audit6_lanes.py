"""Audit 6, lane detection: frames of other pixel formats, the CLI's odd inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from dtrain.errors import DataError
from dtrain.workloads.lanes import __main__ as lanes_cli
from dtrain.workloads.lanes import synth
from dtrain.workloads.lanes.data import load_image
from dtrain.workloads.lanes.model import SCNN, SCNNConfig
from dtrain.workloads.lanes.tusimple import read_labels

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _grey_frame() -> np.ndarray:
    """A 1280x720 8-bit grey frame with a gradient, so its mean is neither black nor white."""
    return np.tile(np.linspace(0, 255, 1280).astype(np.uint8), (720, 1))


def test_a_16_bit_frame_loads_as_its_picture_not_as_white(tmp_path):
    """PIL's convert("RGB") clips a 16-bit grey image at 255: the frame came out all white."""
    grey = _grey_frame()
    Image.fromarray(grey, "L").save(tmp_path / "8bit.png")
    Image.fromarray(grey.astype(np.uint16) * 257).save(tmp_path / "16bit.png")
    assert Image.open(tmp_path / "16bit.png").mode.startswith("I;16")
    eight = load_image(tmp_path / "8bit.png", (256, 144)).float()
    sixteen = load_image(tmp_path / "16bit.png", (256, 144)).float()
    assert sixteen.shape == (3, 144, 256)
    assert (sixteen - eight).abs().max() <= 1  # the same picture, within one grey level


def test_a_32_bit_integer_frame_is_scaled_from_16_bits(tmp_path):
    grey = _grey_frame()
    Image.fromarray(grey.astype(np.int32) * 257, "I").save(tmp_path / "i.tif")
    Image.fromarray(grey, "L").save(tmp_path / "8bit.png")
    assert Image.open(tmp_path / "i.tif").mode == "I"
    got = load_image(tmp_path / "i.tif", (256, 144)).float()
    assert (got - load_image(tmp_path / "8bit.png", (256, 144)).float()).abs().max() <= 1


def test_a_float_frame_is_one_data_error(tmp_path):
    Image.fromarray(_grey_frame().astype(np.float32), "F").save(tmp_path / "f.tif")
    with pytest.raises(DataError, match="floating-point"):
        load_image(tmp_path / "f.tif", (256, 144))


def test_predict_without_test_label_json_predicts_the_test_tasks_as_a_submission(tmp_path, capsys):
    """The benchmark's test_set.zip holds test_tasks_0627.json; test_label.json is a separate download.
    Without it, `predict --split test` stopped with 'run dtrain lanes prepare' (which had run)."""
    root = tmp_path / "tusimple"
    synth.generate(root, frames_per_file={"label_data_0313.json": 1, "label_data_0531.json": 0,
                                          "label_data_0601.json": 0}, seed=3, test_frames=3)
    (root / "test_label.json").unlink()
    torch.manual_seed(0)
    cfg = SCNNConfig(width=0.125, input_size=(64, 48))
    torch.save({"model": SCNN(cfg).state_dict(), "model_config": {**cfg.__dict__}}, tmp_path / "model.pt")
    out = tmp_path / "pred.json"
    assert lanes_cli.main(["predict", "--checkpoint", str(tmp_path / "model.pt"), "--data-dir", str(root),
                           "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "test_tasks_0627.json" in err and "no metric" in err
    tasks = read_labels(root / "test_tasks_0627.json")
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [p["raw_file"] for p in lines] == [t.raw_file for t in tasks]
    assert all({"raw_file", "lanes", "run_time"} <= set(p) for p in lines)  # what bench_one_submit reads


def test_evaluate_against_ground_truth_without_lanes_warns(tmp_path, capsys):
    """--gt test_tasks_0627.json (no lanes) scored every frame accuracy 0, FN 0 without a word."""
    rows = [240, 250, 260, 270]
    tasks = tmp_path / "test_tasks_0627.json"
    tasks.write_text("".join(json.dumps({"lanes": [], "h_samples": rows, "raw_file": f"clips/a/{i}/20.jpg"}) + "\n"
                             for i in range(3)))
    pred = tmp_path / "pred.json"
    pred.write_text("".join(json.dumps({"raw_file": f"clips/a/{i}/20.jpg", "lanes": [[-2, 300, 310, 320]],
                                        "run_time": 10}) + "\n" for i in range(3)))
    assert lanes_cli.main(["evaluate", "--pred", str(pred), "--gt", str(tasks), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["accuracy"] == 0.0  # scored as the official script scores it
    warning = [line for line in captured.err.splitlines() if "hold no lanes" in line]
    assert len(warning) == 1 and "3 ground-truth frames" in warning[0] and "test_label.json" in warning[0]
    # a ground truth with lanes everywhere stays silent
    gt = tmp_path / "gt.json"
    gt.write_text("".join(json.dumps({"lanes": [[-2, 300, 310, 320]], "h_samples": rows,
                                      "raw_file": f"clips/a/{i}/20.jpg"}) + "\n" for i in range(3)))
    assert lanes_cli.main(["evaluate", "--pred", str(pred), "--gt", str(gt), "--json"]) == 0
    assert "hold no lanes" not in capsys.readouterr().err
