"""Synthetic TuSimple-format data: road scenes rendered with PIL, labelled like the real set.

Layout written under ``out_dir`` (as the real downloads unpack)::

    clips/0313-1/<id>/20.jpg ...          1280x720 JPEG, the labelled 20th frame of a clip
    label_data_0313.json                  48 rows, y = 240..710
    label_data_0531.json, label_data_0601.json   56 rows, y = 160..710
    test_label.json                       test ground truth, 56 rows
    test_tasks_0627.json                  test frames without lanes (what the real test_set.zip holds)

Only frame 20 of each clip is written (frames 1..19 are unlabelled; nothing here uses them).

A scene is a pinhole camera (focal length, height, horizon row, yaw) over a road whose lane
boundaries follow ``X(Z) = X0 + yaw * Z + c * Z^2`` (lateral offset in metres at distance Z,
``c`` the curvature), so all lanes meet at the vanishing point and bend together. Each frame
has 2 to 5 labelled lane boundaries (ego-left, ego-right and neighbours, drawn solid or
dashed, white or yellow), an unpainted shoulder, sky and distant haze, 0 to 3 vehicles
(boxes that may straddle a marking and hide it), 0 to 3 cast shadows across the road and a
random global lighting change. Labels follow each lane through dash gaps, shadows and
occluding vehicles, as the TuSimple annotators did; a lane gets -2 above its visible range
and where it leaves the image.

Everything is drawn with PIL primitives plus a few whole-image numpy operations
(about 20 ms a frame); a frame depends only on (seed, label file, index), so runs are
reproducible.

CLI: ``dtrain lanes synth --out DIR --train N --test M --seed S``.
"""

from __future__ import annotations

import json
import os
import sys
import tarfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageChops, ImageDraw

from dtrain.errors import SpecError
from dtrain.names import noun
from dtrain.replace import replacing
from dtrain.workloads.inputs import MAX_SEED, Parser, in_range, out_folder
from dtrain.workloads.lanes.prepare import MANIFEST
from dtrain.workloads.lanes.tusimple import (IMAGE_HEIGHT, IMAGE_WIDTH, NO_POINT, SPLIT_FILES, TASKS_FILE, LaneLabel,
                                             write_labels, writable)

TRAIN_FILES = ("label_data_0313.json", "label_data_0531.json", "label_data_0601.json")
TEST_FILE = "test_label.json"
ROWS_0313 = tuple(range(240, 711, 10))  # 48 rows, as label_data_0313.json
ROWS_OTHER = tuple(range(160, 711, 10))  # 56 rows, as the other files
MAX_FRAMES = 100_000  # frames of one file or split (about 15 GB; the real set has 3,626 + 2,782)
TRAIN_SHARE = {"label_data_0313.json": 2858, "label_data_0531.json": 358, "label_data_0601.json": 410}  # real counts
# clip folders and id styles of each file (test frames use the real test folders)
_FOLDERS = {
    "label_data_0313.json": ("0313-1", "0313-2"),
    "label_data_0531.json": ("0531",),
    "label_data_0601.json": ("0601",),
    TEST_FILE: ("0530", "0531", "0601"),
}
_FILE_IDS = {name: i for i, name in enumerate((*TRAIN_FILES, TEST_FILE))}
LANE_COUNTS = ((2, 0.05), (3, 0.55), (4, 0.2), (5, 0.2))  # labelled boundaries per frame, like TuSimple


@dataclass(frozen=True, kw_only=True)
class Camera:
    focal: float  # focal length in pixels
    height: float  # camera height above the road in metres
    horizon: float  # image row of the vanishing point
    cx: float  # image column of the vanishing point without yaw
    yaw: float  # heading relative to the road in radians (shifts the vanishing point)
    curve: float  # road curvature c in X(Z) = X0 + yaw*Z + c*Z^2, 1/m


def _x_at(cam: Camera, x0: float, z: np.ndarray) -> np.ndarray:
    """Image column of lateral offset x0 (metres) at distances z."""
    lateral = x0 + cam.yaw * z + cam.curve * z * z
    return cam.cx + cam.focal * lateral / z


def _z_at(cam: Camera, y: np.ndarray) -> np.ndarray:
    """Distance of the road point seen at image rows y (below the horizon)."""
    return cam.focal * cam.height / np.maximum(np.asarray(y, dtype=np.float64) - cam.horizon, 1e-3)


def _y_at(cam: Camera, z: np.ndarray) -> np.ndarray:
    return cam.horizon + cam.focal * cam.height / z


@dataclass(frozen=True, kw_only=True)
class Scene:
    camera: Camera
    boundaries: tuple[float, ...]  # lateral offsets X0 (m) of the labelled lane boundaries, left to right
    z_max: float  # farthest labelled/painted distance in metres
    styles: tuple[tuple[bool, tuple[int, int, int], float, float], ...]  # (dashed, colour, width m, dash phase m)
    lane_width: float  # metres between boundaries


def _sample_scene(rng: np.random.Generator) -> Scene:
    cam = Camera(
        focal=rng.uniform(900, 1100),
        height=rng.uniform(1.35, 1.7),
        horizon=rng.uniform(215, 285),
        cx=IMAGE_WIDTH / 2 + rng.normal(0, 25),
        yaw=rng.normal(0, 0.025),
        curve=rng.choice([0.0, 1.0], p=[0.35, 0.65]) * rng.uniform(-1.2e-3, 1.2e-3),
    )
    counts, probs = zip(*LANE_COUNTS)
    n = int(rng.choice(counts, p=probs))
    n_left = int(rng.integers(max(1, n - 3), min(3, n - 1) + 1))
    width = rng.uniform(3.3, 3.9)
    ego = rng.uniform(-0.7, 0.7)  # lateral position of the camera within its lane
    left = [-width / 2 - ego - j * width for j in range(n_left)][::-1]
    right = [width / 2 - ego + j * width for j in range(n - n_left)]
    styles = []
    for k in range(n):
        outer = k == 0 or k == n - 1
        dashed = bool(rng.random() < (0.25 if outer else 0.85))
        yellow = k == 0 and rng.random() < 0.3
        paint = np.array([225, 190, 60]) if yellow else rng.integers(200, 250, 3)
        fade = rng.uniform(0.2, 0.55) if rng.random() < 0.25 else 0.0  # worn paint, closer to asphalt grey
        colour = tuple(int(v) for v in paint * (1 - fade) + 95 * fade)
        styles.append((dashed, colour, rng.uniform(0.12, 0.2), rng.uniform(0, 12)))
    return Scene(
        camera=cam, boundaries=tuple(left + right), z_max=rng.uniform(45, 95), styles=tuple(styles), lane_width=width
    )


def scene_lanes(scene: Scene, h_samples: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """TuSimple labels of a scene: x per h_sample row, -2 outside the visible range or the image."""
    cam = scene.camera
    ys = np.asarray(h_samples, dtype=np.float64)
    z = _z_at(cam, ys)
    visible = (ys > cam.horizon) & (z <= scene.z_max)
    lanes = []
    for x0 in scene.boundaries:
        x = np.rint(_x_at(cam, x0, z))
        ok = visible & (x >= 0) & (x < IMAGE_WIDTH)
        lane = tuple(int(v) if o else NO_POINT for v, o in zip(x, ok))
        if sum(o for o in ok) >= 2:
            lanes.append(lane)
    return tuple(lanes)


def _strip(cam: Camera, x0: float, half: float, z0: float, z1: float, steps: int = 12) -> list[tuple[float, float]]:
    """Polygon of a road strip centred on x0 (metres), half-width half, between distances z0 < z1."""
    z = np.geomspace(z0, z1, steps)
    y = _y_at(cam, z)
    left, right = _x_at(cam, x0 - half, z), _x_at(cam, x0 + half, z)
    return list(zip(left.tolist(), y.tolist())) + list(zip(right[::-1].tolist(), y[::-1].tolist()))


def _draw_background(draw: ImageDraw.ImageDraw, scene: Scene, rng: np.random.Generator) -> None:
    cam = scene.camera
    if rng.random() < 0.3:  # overcast: grey sky
        sky_top = np.full(3, rng.integers(120, 210))
        sky_low = np.minimum(sky_top + rng.integers(0, 40), 250)
    else:  # blue sky, paler at the horizon
        sky_top, sky_low = rng.integers([60, 110, 170], [150, 190, 250]), rng.integers([160, 175, 190], [235, 240, 252])
    for y0 in range(0, int(cam.horizon) + 1, 8):  # sky gradient in bands
        t = y0 / max(cam.horizon, 1)
        c = tuple(int(a + (b - a) * t) for a, b in zip(sky_top, sky_low))
        draw.rectangle([0, y0, IMAGE_WIDTH, y0 + 8], fill=c)
    ground = tuple(int(v) for v in rng.integers(50, 130, 3) * np.array([0.8, 1.0, 0.7]))
    draw.rectangle([0, int(cam.horizon), IMAGE_WIDTH, IMAGE_HEIGHT], fill=ground)
    # distant hills / tree line on the horizon
    xs = np.linspace(0, IMAGE_WIDTH, 24)
    hy = cam.horizon - rng.uniform(5, 45) * np.abs(np.sin(xs / rng.uniform(80, 300) + rng.uniform(0, 6)))
    hill = tuple(int(v) for v in rng.integers(40, 110, 3))
    outline = list(zip(xs.tolist(), hy.tolist())) + [(IMAGE_WIDTH, cam.horizon + 1), (0, cam.horizon + 1)]
    draw.polygon(outline, fill=hill)
    road_half = (scene.boundaries[-1] - scene.boundaries[0]) / 2 + rng.uniform(0.8, 3.0)
    road_mid = (scene.boundaries[-1] + scene.boundaries[0]) / 2
    z_near = _z_at(cam, np.array([IMAGE_HEIGHT + 40]))[0]
    asphalt = tuple([int(rng.integers(55, 135))] * 3)
    draw.polygon(_strip(cam, road_mid, road_half, z_near, 400, 40), fill=asphalt)
    for _ in range(int(rng.integers(0, 4))):  # repair patches / tyre wear: darker road bands
        x0 = road_mid + rng.uniform(-road_half, road_half)
        z0 = rng.uniform(z_near, 40)
        shade = tuple(max(0, c - int(rng.integers(5, 25))) for c in asphalt)
        draw.polygon(_strip(cam, x0, rng.uniform(0.3, 1.5), z0, z0 + rng.uniform(3, 30)), fill=shade)


def _draw_markings(draw: ImageDraw.ImageDraw, scene: Scene) -> None:
    cam = scene.camera
    z_near = _z_at(cam, np.array([IMAGE_HEIGHT + 40]))[0]
    for x0, (dashed, colour, width, phase) in zip(scene.boundaries, scene.styles):
        if not dashed:
            draw.polygon(_strip(cam, x0, width / 2, z_near, scene.z_max, 40), fill=colour)
            continue
        period, paint = 12.0, 3.0  # TuSimple highways: 3 m dashes every 12 m
        start = z_near - phase
        while start < scene.z_max:
            z0, z1 = max(start, z_near), min(start + paint, scene.z_max)
            if z1 > z0:
                draw.polygon(_strip(cam, x0, width / 2, z0, z1, 6), fill=colour)
            start += period


def _draw_vehicles(draw: ImageDraw.ImageDraw, scene: Scene, rng: np.random.Generator) -> None:
    cam = scene.camera
    n = int(rng.choice([0, 1, 2, 3], p=[0.25, 0.35, 0.25, 0.15]))
    centres = [(a + b) / 2 for a, b in zip(scene.boundaries, scene.boundaries[1:])] or [0.0]
    cars = []
    for _ in range(n):
        x0 = float(rng.choice(centres)) + rng.normal(0, 0.9)  # some straddle a marking
        cars.append((rng.uniform(7, 70), x0))
    for z, x0 in sorted(cars, reverse=True):  # far first: near cars hide far ones
        scale = cam.focal / z
        w, h = rng.uniform(1.7, 2.5) * scale, rng.uniform(1.3, 3.2) * scale
        xc = float(_x_at(cam, x0, np.array([z]))[0])
        yb = float(_y_at(cam, np.array([z]))[0])
        body = tuple(int(v) for v in rng.integers(10, 240, 3))
        draw.rectangle([xc - w / 2, yb - 0.12 * h, xc + w / 2, yb + 0.04 * h], fill=(20, 20, 20))  # shadow
        draw.rectangle([xc - w / 2, yb - h, xc + w / 2, yb - 0.1 * h], fill=body)
        draw.rectangle([xc - 0.4 * w, yb - 0.92 * h, xc + 0.4 * w, yb - 0.6 * h], fill=(30, 35, 45))  # rear window
        for side in (-1, 1):  # tail lights
            lx = xc + side * 0.38 * w
            draw.rectangle([lx - 0.07 * w, yb - 0.5 * h, lx + 0.07 * w, yb - 0.4 * h], fill=(200, 20, 20))


def _shadow_mask(scene: Scene, rng: np.random.Generator) -> Image.Image | None:
    """'L' mask of cast shadows (bridges, trees, trucks) across the road, or None."""
    n = int(rng.choice([0, 1, 2, 3], p=[0.45, 0.3, 0.15, 0.1]))
    if n == 0:
        return None
    mask = Image.new("L", (IMAGE_WIDTH, IMAGE_HEIGHT), 0)
    draw = ImageDraw.Draw(mask)
    cam = scene.camera
    for _ in range(n):
        z0 = rng.uniform(4, 40)
        x0 = rng.uniform(-12, 12)
        strength = int(rng.integers(90, 200))
        if rng.random() < 0.5:  # a band across the whole road (bridge, building)
            draw.polygon(_strip(cam, x0, 40, z0, z0 + rng.uniform(2, 15)), fill=strength)
        else:  # a blob beside the road reaching over some lanes (tree)
            draw.polygon(_strip(cam, x0, rng.uniform(1, 5), z0, z0 + rng.uniform(3, 20)), fill=strength)
    return mask


NOISE_OFFSET = 16  # noise images hold sensor noise + 16, so ImageChops.add(..., offset=-16) adds signed noise


def make_noise(seed: int) -> Image.Image:
    """A grey sensor-noise bank (sigma 4 levels) a little larger than a frame; frames crop it at random."""
    rng = np.random.default_rng([seed, 99])
    noise = np.clip(rng.normal(NOISE_OFFSET, 4, (IMAGE_HEIGHT + 64, IMAGE_WIDTH + 64)), 0, 2 * NOISE_OFFSET)
    return Image.fromarray(noise.astype(np.uint8)).convert("RGB")


def _lighting(img: Image.Image, rng: np.random.Generator, noise: Image.Image) -> Image.Image:
    """Global gain/gamma/tint as one lookup table, then sensor noise (a random crop of the noise bank)."""
    gain, gamma = rng.uniform(0.55, 1.35), rng.uniform(0.75, 1.3)
    tint = 1.0 + rng.normal(0, 0.06, 3)
    base = np.arange(256, dtype=np.float64) / 255.0
    lut = np.concatenate([np.clip(255 * gain * t * base**gamma, 0, 255) for t in tint]).astype(np.uint8)
    img = img.point(lut.tolist())
    dx, dy = int(rng.integers(0, noise.width - IMAGE_WIDTH)), int(rng.integers(0, noise.height - IMAGE_HEIGHT))
    crop = noise.crop((dx, dy, dx + IMAGE_WIDTH, dy + IMAGE_HEIGHT))
    return ImageChops.add(img, crop, scale=1.0, offset=-NOISE_OFFSET)


def render_scene(scene: Scene, rng: np.random.Generator, noise: Image.Image) -> Image.Image:
    """The 1280x720 RGB frame of a scene."""
    img = Image.new("RGB", (IMAGE_WIDTH, IMAGE_HEIGHT))
    draw = ImageDraw.Draw(img)
    _draw_background(draw, scene, rng)
    _draw_markings(draw, scene)
    _draw_vehicles(draw, scene, rng)
    shadow = _shadow_mask(scene, rng)
    if shadow is not None:
        dark = img.point(lambda v: v // 3)
        img = Image.composite(dark, img, shadow)
    top = int(scene.camera.horizon) - 20  # far road fades into the haze around the horizon
    haze = Image.linear_gradient("L").resize((IMAGE_WIDTH, 90)).point(lambda v: (255 - v) * 2 // 3)
    sky = Image.new("RGB", haze.size, img.getpixel((IMAGE_WIDTH // 2, max(top - 10, 0))))
    img.paste(sky, (0, top), haze)
    return _lighting(img, rng, noise)


def _file_counts(frames_per_file: dict | int) -> dict[str, int]:
    if isinstance(frames_per_file, int):
        return {name: frames_per_file for name in TRAIN_FILES}
    unknown = set(frames_per_file) - set(TRAIN_FILES)
    if unknown:
        raise SpecError(f"unknown label {noun(len(unknown), 'file')} {sorted(unknown)}: use {list(TRAIN_FILES)}")
    return {name: int(frames_per_file.get(name, 0)) for name in TRAIN_FILES}


def split_train(total: int) -> dict[str, int]:
    """Split a number of training frames over the three label files in the real proportions; any
    frames at all put one in the train split (0313 + 0601), so `--train 1` has something to train on."""
    real = sum(TRAIN_SHARE.values())
    counts = {name: int(total * n / real) for name, n in TRAIN_SHARE.items()}
    for name in sorted(TRAIN_SHARE, key=TRAIN_SHARE.get):  # hand out the remainder to the small files
        if sum(counts.values()) >= total:
            break
        counts[name] += 1
    if total and not any(counts[name] for name in SPLIT_FILES["train"]):
        # --train 1 gave its frame to the val file (label_data_0531.json): training then had no frame
        counts = {name: int(name == max(TRAIN_SHARE, key=TRAIN_SHARE.get)) for name in TRAIN_SHARE}
    return counts


def _raw_file(name: str, i: int) -> str:
    folders = _FOLDERS[name]
    folder = folders[i % len(folders)]
    if name == "label_data_0313.json":
        return f"clips/{folder}/{(i + 1) * 60}/20.jpg"
    suffix = "_0" if name == TEST_FILE else ""
    return f"clips/{folder}/{1492626000000000000 + _FILE_IDS[name] * 10**12 + i * 1000003}{suffix}/20.jpg"


def _write_file(out: Path, name: str, count: int, seed: int, noise: Image.Image) -> list[LaneLabel]:
    rows = ROWS_0313 if name == "label_data_0313.json" else ROWS_OTHER
    labels = []
    for i in range(count):
        rng = np.random.default_rng([seed, _FILE_IDS[name], i])
        scene = _sample_scene(rng)
        label = LaneLabel(raw_file=_raw_file(name, i), h_samples=rows, lanes=scene_lanes(scene, rows))
        # a link under --out (out/clips -> elsewhere) is replaced, never written through
        with replacing(writable(out, out / label.raw_file, "synth"), "wb") as f:
            render_scene(scene, rng, noise).save(f, format="JPEG", quality=int(rng.integers(80, 95)))
        labels.append(label)
    write_labels(out / name, labels)
    return labels


def generate(out_dir: str | os.PathLike, *, frames_per_file: dict | int, seed: int, test_frames: int) -> dict:
    """Write a synthetic TuSimple dataset (layout in the module docstring); returns a summary."""
    in_range("seed", seed, 0, MAX_SEED)
    in_range("test_frames", test_frames, 0, MAX_FRAMES)
    counts = _file_counts(frames_per_file)
    for name, n in counts.items():
        in_range(f"frames of {name}", n, 0, MAX_FRAMES)
    out = out_folder(out_dir, "output folder")
    start = time.monotonic()
    noise = make_noise(seed)
    lanes_hist: dict[int, int] = {}
    for name, count in {**counts, TEST_FILE: test_frames}.items():
        labels = _write_file(out, name, count, seed, noise)
        for label in labels:
            lanes_hist[len(label.lanes)] = lanes_hist.get(len(label.lanes), 0) + 1
        if name == TEST_FILE:
            tasks = [LaneLabel(raw_file=lb.raw_file, h_samples=lb.h_samples, lanes=()) for lb in labels]
            write_labels(out / TASKS_FILE, tasks)
    return {
        "out_dir": str(out),
        "files": {**counts, TEST_FILE: test_frames},
        "frames": sum(counts.values()) + test_frames,
        "lanes_per_frame": dict(sorted(lanes_hist.items())),
        "seed": seed,
        "seconds": round(time.monotonic() - start, 2),
    }


def make_archive(src_dir: str | os.PathLike, archive_path: str | os.PathLike, *, split: str | None = None) -> Path:
    """Pack a generated dataset like the real downloads (.tar.gz, .tgz, .tar or .zip).

    split 'train' (default for names starting with train_set): clips of the three training
    label files + those files. split 'test' (names starting with test_set): test clips +
    test_tasks_0627.json; test_label.json stays out, as it is a separate download.
    """
    src, archive = Path(src_dir), Path(archive_path)
    if split is None:
        split = next((s for s in ("train", "test") if archive.name.startswith(f"{s}_set")), "")
    if split not in ("train", "test"):
        raise SpecError(f"cannot tell the split of {archive.name}: pass split='train' or 'test'")
    label_files = TRAIN_FILES if split == "train" else (TEST_FILE,)
    members: list[str] = []
    for name in label_files:
        if not (src / name).is_file():
            raise SpecError(f"{src / name} is missing: generate the dataset first")
        with (src / name).open() as f:
            members += [json.loads(line)["raw_file"] for line in f if line.strip()]
    members += list(TRAIN_FILES) if split == "train" else [TASKS_FILE]
    if not archive.name.endswith((".zip", ".tar.gz", ".tgz", ".tar")):
        raise SpecError(f"unknown archive type {archive.name}: use .tar.gz, .tgz, .tar or .zip")
    archive.parent.mkdir(parents=True, exist_ok=True)
    with replacing(archive, "wb") as f:  # written whole; a link at the archive's name is replaced
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as zf:  # JPEGs do not compress
                for m in members:
                    zf.write(src / m, m)
        else:
            # JPEGs barely compress: the fastest gzip level keeps packing quick
            options = {"mode": "w"} if archive.name.endswith(".tar") else {"mode": "w:gz", "compresslevel": 1}
            with tarfile.open(str(archive), fileobj=f, **options) as tf:
                for m in members:
                    tf.add(src / m, m)
    return archive


def refuse_dataset(out: Path) -> None:
    """SpecError when `out` already holds a TuSimple dataset (real, prepared or synthetic): synth
    would replace its labels and frames, and a real download's cannot be made again."""
    if not out.is_dir():
        return
    held = [name for name in (MANIFEST, *TRAIN_FILES, TEST_FILE, TASKS_FILE) if (out / name).exists()]
    if held:
        raise SpecError(f"--out {out} already holds a TuSimple dataset ({held[0]}): synth would overwrite its "
                        f"labels and frames; give a new --out folder")


def main(argv: Sequence[str] | None = None) -> int:
    """``dtrain lanes synth --out DIR --train N --test M --seed S [--archive]``."""
    parser = Parser(prog="dtrain lanes synth", description="Write a synthetic TuSimple dataset.")
    parser.add_argument("--out", help="output folder (required)")  # required after the numbers: parser.require
    parser.add_argument("--train", type=int, default=1000,
                        help=f"training frames, split over the 3 label files (0 to {MAX_FRAMES})")
    parser.add_argument("--test", type=int, default=200, help=f"test frames (test_label.json; 0 to {MAX_FRAMES})")
    parser.add_argument("--seed", type=int, default=0, help="random seed: same seed, same data")
    parser.add_argument("--archive", action="store_true", help="also pack train_set.tar.gz and test_set.tar.gz")
    args = parser.parse_args(argv)
    for flag, value, high in (("--train", args.train, MAX_FRAMES), ("--test", args.test, MAX_FRAMES),
                              ("--seed", args.seed, MAX_SEED)):
        in_range(flag, value, 0, high)
    parser.require(args, "--out")
    refuse_dataset(Path(args.out))
    out_folder(args.out, "--out")
    summary = generate(args.out, frames_per_file=split_train(args.train), seed=args.seed, test_frames=args.test)
    if args.archive:
        make_archive(args.out, Path(args.out) / "train_set.tar.gz")
        make_archive(args.out, Path(args.out) / "test_set.tar.gz")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
