"""Data-loader throughput for TuSimple frames: naive decode vs LaneDataset, side by side.

    nice -n 10 .venv/bin/python bench/lanes_loader.py [--frames 200] [--rounds 3]

Writes synthetic 1280x720 JPEG frames (dtrain.workloads.lanes.synth), prepares them
(masks at 512x288), then times one process on one thread producing (img, seg, exist)
items: the naive pipeline (full-size JPEG decode, bilinear resize, numpy float
normalisation, full-size 1280x720 mask PNG + nearest resize, as SCNN-style loaders do)
against LaneDataset (draft JPEG decode, precomputed masks, torch normalisation). The two
alternate over several rounds and the best round of each is reported, so both see the
same machine load.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ab  # noqa: E402  (the bounds check; bench/ is this script's folder, first on sys.path)
from dtrain.workloads.lanes import prepare, synth  # noqa: E402
from dtrain.workloads.lanes.data import IMAGENET_MEAN, IMAGENET_STD, LaneDataset  # noqa: E402
from dtrain.workloads.lanes.masks import render_label  # noqa: E402

SIZE = (512, 288)


class NaiveDataset(torch.utils.data.Dataset):
    """What a first loader usually does: decode everything full size, convert in numpy."""

    def __init__(self, root: Path, labels, exist):
        self.root, self.labels, self.exist = root, labels, exist
        self.mean = np.array(IMAGENET_MEAN, dtype=np.float32)
        self.std = np.array(IMAGENET_STD, dtype=np.float32)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        label = self.labels[i]
        img = Image.open(self.root / label.raw_file).convert("RGB").resize(SIZE, Image.BILINEAR)
        x = (np.asarray(img, dtype=np.float32) / 255.0 - self.mean) / self.std
        seg = Image.open(self.root / "full_masks" / f"{i}.png").resize(SIZE, Image.NEAREST)
        return (
            torch.from_numpy(x.transpose(2, 0, 1).copy()),
            torch.from_numpy(np.array(seg, dtype=np.int64)),
            torch.from_numpy(self.exist[i]),
        )


def rate(ds, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        ds[i % len(ds)]
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = ab.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=200, help="synthetic frames (1 to 20000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both loaders (1 to 100)")
    args = parser.parse_args()
    ab.bounded(parser, ("--frames", args.frames, 1, 20_000), ("--rounds", args.rounds, 1, 100))
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        src, root = Path(tmp) / "synth", Path(tmp) / "prepared"
        synth.generate(src, frames_per_file={"label_data_0313.json": args.frames}, seed=0, test_frames=0)
        archive = synth.make_archive(src, Path(tmp) / "train_set.tar")
        prepare.prepare([str(archive)], root, size=SIZE)
        fast = LaneDataset(root, "train", size=SIZE)
        (root / "full_masks").mkdir()
        exist = []
        for i, label in enumerate(fast.labels):
            seg, ex = render_label(label, size=(1280, 720))
            Image.fromarray(seg).save(root / "full_masks" / f"{i}.png")
            exist.append(ex)
        naive = NaiveDataset(root, fast.labels, exist)
        for a, b in zip(naive[0], fast[0]):  # same shapes and dtypes from both
            assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        best = {"naive": 0.0, "lanedataset": 0.0}
        for _ in range(args.rounds):
            best["naive"] = max(best["naive"], rate(naive, len(naive)))
            best["lanedataset"] = max(best["lanedataset"], rate(fast, len(fast)))
    result = {k: round(v, 1) for k, v in best.items()}
    result["ratio"] = round(best["lanedataset"] / best["naive"], 2)
    result["frames"] = args.frames
    print(json.dumps(result))


if __name__ == "__main__":
    main()
