"""LaneDataset on a small prepared synthetic dataset."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from dtrain.errors import DataError, NotFoundError, SpecError
from dtrain.workloads.lanes import prepare, synth
from dtrain.workloads.lanes.data import IMAGENET_MEAN, IMAGENET_STD, LaneDataset, flip_label, load_image
from dtrain.workloads.lanes.masks import render_label
from dtrain.workloads.lanes.tusimple import mask_relpath, read_labels

COUNTS = {"label_data_0313.json": 3, "label_data_0531.json": 2, "label_data_0601.json": 2}


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> tuple[Path, Path]:
    """(prepared folder with masks at 512x288, raw synthetic folder without masks)."""
    raw = tmp_path_factory.mktemp("raw")
    synth.generate(raw, frames_per_file=COUNTS, seed=11, test_frames=2)
    train = synth.make_archive(raw, raw / "train_set.tar")
    test = synth.make_archive(raw, raw / "test_set.tar")
    prepared = tmp_path_factory.mktemp("prepared")
    prepare.prepare([str(train), str(test), str(raw / "test_label.json")], prepared)
    return prepared, raw


def test_items_have_the_contract_shapes_and_types(roots):
    prepared, _ = roots
    ds = LaneDataset(prepared, "train")
    assert ds.precomputed and len(ds) == 5
    expected = read_labels(prepared / "label_data_0313.json") + read_labels(prepared / "label_data_0601.json")
    assert ds.labels == expected and ds.raw_files == [lb.raw_file for lb in expected]
    img, seg, exist = ds[0]
    assert img.shape == (3, 288, 512) and img.dtype == torch.float32 and img.is_contiguous()
    assert seg.shape == (288, 512) and seg.dtype == torch.int64
    assert exist.shape == (5,) and exist.dtype == torch.float32
    assert 0 <= int(seg.min()) and int(seg.max()) <= 5
    present = {int(c) for c in seg.unique()} - {0}
    assert present == {i + 1 for i in range(5) if exist[i] == 1}
    assert len(LaneDataset(prepared, "val")) == 2 and len(LaneDataset(prepared, "test")) == 2


def test_precomputed_and_on_the_fly_masks_agree(roots):
    prepared, raw = roots
    fast, slow = LaneDataset(prepared, "val"), LaneDataset(raw, "val")
    assert fast.precomputed and not slow.precomputed
    for i in range(len(fast)):
        (a_img, a_seg, a_ex), (b_img, b_seg, b_ex) = fast[i], slow[i]
        assert torch.equal(a_img, b_img) and torch.equal(a_seg, b_seg) and torch.equal(a_ex, b_ex)
        seg, exist = render_label(fast.labels[i])
        assert np.array_equal(a_seg.numpy(), seg) and np.array_equal(a_ex.numpy(), exist)


def test_image_matches_a_plain_full_size_decode(roots):
    """Same picture as decode-everything + PIL resize + numpy normalisation, up to resampling."""
    prepared, _ = roots
    ds = LaneDataset(prepared, "train")
    img = ds[1][0]
    ref = Image.open(prepared / ds.raw_files[1]).convert("RGB").resize((512, 288), Image.BILINEAR)
    ref = (np.asarray(ref, dtype=np.float32) / 255 - np.array(IMAGENET_MEAN)) / np.array(IMAGENET_STD)
    ref = torch.from_numpy(ref.transpose(2, 0, 1).astype(np.float32))
    assert (img - ref).abs().mean() < 0.05  # normalised units: about 3 grey levels
    assert torch.allclose(img.mean(dim=(1, 2)), ref.mean(dim=(1, 2)), atol=0.02)  # channels in RGB order


def test_other_sizes_render_masks_on_the_fly(roots):
    prepared, _ = roots
    ds = LaneDataset(prepared, "val", size=(256, 144))
    assert not ds.precomputed
    img, seg, _ = ds[0]
    assert img.shape == (3, 144, 256) and seg.shape == (144, 256)
    assert np.array_equal(seg.numpy(), render_label(ds.labels[0], size=(256, 144))[0])
    assert load_image(prepared / ds.raw_files[0], (1280, 720)).shape == (3, 720, 1280)


def test_augment_flips_image_and_mask_together(roots):
    prepared, _ = roots
    plain, aug = LaneDataset(prepared, "train"), LaneDataset(prepared, "train", augment=True)
    torch.manual_seed(0)
    flipped = kept = 0
    for _ in range(12):
        img, seg, exist = aug[2]
        if torch.equal(seg, plain[2][1]):
            kept += 1
            continue
        seg_f, exist_f = render_label(flip_label(plain.labels[2]))
        assert np.array_equal(seg.numpy(), seg_f) and np.array_equal(exist.numpy(), exist_f)
        # a flip of the plain image up to the brightness/contrast gain: strongly correlated
        ref = plain[2][0].flip(-1)
        corr = torch.corrcoef(torch.stack([img.flatten(), ref.flatten()]))[0, 1]
        assert corr > 0.9
        flipped += 1
    assert flipped and kept


def test_flip_label_mirrors_points_and_keeps_gaps():
    from dtrain.workloads.lanes.tusimple import LaneLabel

    lb = LaneLabel(raw_file="a", h_samples=(1, 2), lanes=((0, -2), (1279, 640)))
    assert flip_label(lb).lanes == ((1279, -2), (0, 639))


def test_data_loader_batches(roots):
    prepared, _ = roots
    loader = torch.utils.data.DataLoader(LaneDataset(prepared, "train"), batch_size=2)
    img, seg, exist = next(iter(loader))
    assert img.shape == (2, 3, 288, 512) and seg.shape == (2, 288, 512) and exist.shape == (2, 5)


def test_user_mistakes(roots, tmp_path):
    prepared, raw = roots
    with pytest.raises(SpecError, match="unknown split 'dev'"):
        LaneDataset(prepared, "dev")
    with pytest.raises(SpecError, match="size must be"):
        LaneDataset(prepared, "train", size=(512, 0))
    with pytest.raises(NotFoundError, match="no label file for split 'train'"):
        LaneDataset(tmp_path, "train")
    broken = tmp_path / "broken"
    shutil.copytree(raw, broken)
    ds = LaneDataset(broken, "val")
    (broken / ds.raw_files[0]).unlink()
    with pytest.raises(NotFoundError, match="does not exist"):
        ds[0]
    (broken / ds.raw_files[1]).write_bytes(b"not a jpeg")
    with pytest.raises(DataError, match="cannot decode image"):
        ds[1]


def test_mask_of_the_wrong_size_is_a_data_error(roots, tmp_path):
    prepared, _ = roots
    copy = tmp_path / "copy"
    shutil.copytree(prepared, copy)
    ds = LaneDataset(copy, "val")
    Image.new("L", (100, 50)).save(copy / mask_relpath(ds.raw_files[0], (512, 288)))
    with pytest.raises(DataError, match="re-run prepare --force"):
        ds[0]
