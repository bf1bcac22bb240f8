"""Audit 6, lane detection: frames of other pixel formats, the CLI's odd inputs."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from dtrain.errors import DataError
from dtrain.workloads.lanes.data import load_image


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
