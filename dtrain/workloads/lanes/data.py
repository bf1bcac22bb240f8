"""TuSimple frames, masks and existence labels as a torch Dataset.

Splits (``tusimple.SPLIT_FILES``): 'train' = label_data_0313 + label_data_0601, 'val' =
label_data_0531, 'test' = test_label.json; items follow the order of the label files.

Speed: 1280x720 JPEGs are decoded with PIL's ``draft`` (the decoder's DCT scaling yields a
1/2, 1/4 or 1/8 image directly, here 640x360 for 512x288), resized with one bilinear pass,
and normalised in torch with a single multiply-add per element; masks come from the PNGs
``dtrain lanes prepare`` precomputed at the requested size, or are rendered on the fly.

Augmentation (``augment=True``, for training): horizontal flip with probability 0.5 (the
mask is re-rendered from the mirrored labels, since the slot layout is not mirror
symmetric) and a random brightness/contrast/colour gain folded into the normalisation.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from dtrain.errors import DataError, NotFoundError, SpecError
from dtrain.workloads.inputs import command
from dtrain.workloads.lanes.masks import NUM_SLOTS, TRAIN_SIZE, assign_slots, render_mask
from dtrain.workloads.lanes.tusimple import (
    IMAGE_HEIGHT, IMAGE_WIDTH, NO_POINT, SEG_DIR, SPLIT_FILES, LaneLabel, mask_relpath, one_line_per_frame,
    read_labels,
)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def rgb_frame(im: Image.Image, path: str | os.PathLike) -> Image.Image:
    """The frame as 8-bit RGB. PIL's convert("RGB") clips a 16-bit or 32-bit grey image ("I;16",
    "I") at 255, so a 16-bit PNG came out all white and was predicted and trained on without a word:
    such frames are scaled from their 16-bit range instead; a float image has no range to scale
    from and is refused (DataError)."""
    if im.mode == "RGB":
        return im
    if im.mode.startswith("I;16") or im.mode == "I":
        grey = np.clip(np.asarray(im, dtype=np.int64), 0, 65535) >> 8  # 0..65535 -> 0..255
        return Image.fromarray(grey.astype(np.uint8), "L").convert("RGB")
    if im.mode == "F":
        raise DataError(f"image {path} holds floating-point pixels (mode F), which have no 8-bit range to "
                        "scale from: give 8- or 16-bit frames, e.g. the dataset's JPEGs")
    return im.convert("RGB")


def load_image(path: str | os.PathLike, size: tuple[int, int]) -> torch.Tensor:
    """JPEG -> (3, H, W) uint8 tensor at size (width, height), decoded at reduced size when possible.

    The frame must be a whole TuSimple frame (1280x720): labels give x in its pixels, so a frame of
    another size would be trained on (or scored) against lanes that are not where its paint is.
    """
    try:
        with Image.open(path) as im:
            if im.size != (IMAGE_WIDTH, IMAGE_HEIGHT):
                raise DataError(f"image {path} is {im.size[0]}x{im.size[1]}, but TuSimple frames are "
                                f"{IMAGE_WIDTH}x{IMAGE_HEIGHT} (the labels' pixels): replace it with the dataset's "
                                f"frame (re-run '{command('lanes', 'prepare')} --force')")
            im.draft("RGB", size)  # JPEG only: the decoder scales by 1/2, 1/4 or 1/8 to >= size
            arr = np.array(rgb_frame(im, path))  # (H, W, 3), a writable copy torch can own
    except FileNotFoundError:
        raise NotFoundError(f"image {path} does not exist: re-run '{command('lanes', 'prepare')}'") from None
    except OSError as e:
        raise DataError(f"cannot decode image {path} ({e}): replace it with the dataset's frame "
                        f"(re-run '{command('lanes', 'prepare')} --force')") from None
    img = torch.from_numpy(arr).permute(2, 0, 1)  # (3, H, W) view in channels-last memory
    if img.shape[1:] != (size[1], size[0]):
        # torch's uint8 channels-last antialiased bilinear is ~4x faster than PIL's resize
        img = F.interpolate(img[None], size=(size[1], size[0]), mode="bilinear", antialias=True)[0]
    return img.contiguous()


def normalize(img: torch.Tensor, gain: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> torch.Tensor:
    """uint8 (3, H, W) -> float32 ImageNet-normalised, optionally after x*gain + bias (in 0..1 units)."""
    mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
    gain = torch.ones(3, 1, 1) if gain is None else gain.view(3, 1, 1)
    bias = torch.zeros(3, 1, 1) if bias is None else bias.view(3, 1, 1)
    scale = gain / (255.0 * std)  # one multiply-add: ((x/255)*gain + bias - mean) / std
    shift = (bias - mean) / std
    return img.contiguous().float().mul_(scale).add_(shift)


def flip_label(label: LaneLabel) -> LaneLabel:
    """The label of the horizontally mirrored frame: pixel column x goes to W-1-x, points outside the frame
    too (a point right of it lands left of it, at a negative x the masks draw clipped), so flipping twice gives
    the label back. Only -2 means "no point" (training labels hold no other negative x). The one x whose
    mirror cannot be told from "no point" is W+1 (1281, mirrored to -2): the flipped mask then stops at its
    neighbouring row instead of running on to the edge (test_label.json gives no x past 1279)."""
    lanes = tuple(tuple(x if x == NO_POINT else IMAGE_WIDTH - 1 - x for x in lane) for lane in label.lanes)
    return LaneLabel(raw_file=label.raw_file, h_samples=label.h_samples, lanes=lanes, run_time=label.run_time)


def split_lines(root: str | os.PathLike, split: str) -> list[LaneLabel]:
    """Every line of a split's label files, in file order (NotFoundError when the folder or files are missing)."""
    if split not in SPLIT_FILES:
        raise SpecError(f"unknown split {split!r}: use one of {sorted(SPLIT_FILES)}")
    root = Path(root)
    if not root.is_dir():
        raise NotFoundError(
            f"data folder {root} does not exist: give the folder '{command('lanes', 'prepare')} --out' wrote "
            "(in a job, where its volume is mounted: --pvc VOLUME:/mnt for /mnt/tusimple)"
        )
    files = [root / name for name in SPLIT_FILES[split] if (root / name).is_file()]
    if not files:
        names = ", ".join(SPLIT_FILES[split])
        raise NotFoundError(f"no label file for split {split!r} in {root} (want {names}): "
                            f"run '{command('lanes', 'prepare')}'")
    return [label for f in files for label in read_labels(f)]


class LaneDataset(torch.utils.data.Dataset):
    """(img float32 (3, H, W), seg int64 (H, W) in 0..5, exist float32 (5,)) per labelled frame."""

    def __init__(
        self, root: str | os.PathLike, split: str, *, size: tuple[int, int] = TRAIN_SIZE, augment: bool = False
    ):
        if len(size) != 2 or not all(isinstance(v, int) and v > 0 for v in size):
            raise SpecError(f"size must be (width, height) in positive pixels, got {size!r}")
        self.root = Path(root)
        self.split = split
        self.size = (int(size[0]), int(size[1]))
        self.augment = augment
        # a frame has one (precomputed) mask: a frame labelled twice trains on its last line, with a warning
        self.labels: list[LaneLabel] = one_line_per_frame(split_lines(root, split))
        self.raw_files: list[str] = [label.raw_file for label in self.labels]
        self.precomputed = (self.root / SEG_DIR / f"{self.size[0]}x{self.size[1]}").is_dir()

    def __len__(self) -> int:
        return len(self.labels)

    def _mask(self, label: LaneLabel, flipped: bool) -> tuple[np.ndarray, np.ndarray]:
        if flipped or not self.precomputed:
            return render_mask(label.lanes, label.h_samples, size=self.size)
        exist = np.zeros(NUM_SLOTS, dtype=np.float32)
        for slot in assign_slots(label.lanes, label.h_samples):
            if slot is not None:
                exist[slot - 1] = 1.0
        try:
            with Image.open(self.root / mask_relpath(label.raw_file, self.size)) as im:
                seg = np.array(im)
        except FileNotFoundError:  # a mask that was never precomputed: draw it now
            return render_mask(label.lanes, label.h_samples, size=self.size)
        except OSError as e:
            raise DataError(f"cannot read the mask of {label.raw_file} ({e}): re-run prepare --force") from None
        if seg.shape != (self.size[1], self.size[0]):
            raise DataError(
                f"mask of {label.raw_file} is {seg.shape[::-1]}, expected {self.size}: re-run prepare --force"
            )
        return seg, exist

    def __getitem__(self, item: int | tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Frame `item`, or (frame, seed): the augmentation is then drawn from that seed alone
        (ResumableSampler(item_seeds=True)), else from torch's global generator."""
        i, seed = item if isinstance(item, tuple) else (item, None)
        label = self.labels[i]
        img = load_image(self.root / label.raw_file, self.size)
        gain = bias = None
        flipped = False
        if self.augment:
            g = None if seed is None else torch.Generator().manual_seed(seed)
            flipped = bool(torch.rand((), generator=g) < 0.5)
            if flipped:
                img = img.flip(-1)
                label = flip_label(label)
            contrast = torch.empty(()).uniform_(0.7, 1.3, generator=g)
            gain = contrast * torch.empty(3).uniform_(0.9, 1.1, generator=g)  # contrast with a slight colour cast
            bias = torch.empty(()).uniform_(-0.15, 0.15, generator=g).expand(3)  # brightness
        seg, exist = self._mask(label, flipped)
        return normalize(img, gain, bias), torch.from_numpy(seg.astype(np.int64)), torch.from_numpy(exist)
