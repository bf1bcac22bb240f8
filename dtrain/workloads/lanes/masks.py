"""Segmentation targets from TuSimple polylines, and lanes back from predicted probabilities.

Classes: 0 = background, 1..5 = lane slots; a model predicts 6 channels and 5 existence
logits (existence of slot s is ``exist[s - 1]``).

Slot scheme ("ego-anchored, left to right, clamped"):

1. Lanes with fewer than ``min_points`` given points (x other than -2) are absent: no pixels, no slot.
   Training labels hold no other negative x (``parse_label`` reads any x < 0 as -2, as the official
   evaluation does); a flipped label does: the mirror of a point right of the frame lies left of it,
   and is drawn (clipped) like any other.
2. The others are sorted left to right by their x at the bottom of the image (y = 720),
   extrapolated by a least-squares line through their lowest (up to 10) points. A lane
   whose bottom x is left of the camera centre (x < 640) is a left lane.
3. The lanes fill consecutive slots so that the nearest left lane (ego-left) lands in
   slot 2 and the nearest right lane (ego-right) in slot 3: with L left lanes of n,
   the first slot is ``3 - L``, clamped to ``1 .. 6 - n`` so that every lane fits. Of more
   than 5 lanes the 5 nearest the camera are kept (up to 2 left of it), the others absent.

So a usual 2+2 frame uses slots 1 2 | 3 4, a 1+2 frame 2 | 3 4, and a 3+2 frame (which
has no room for an anchored layout) slots 1 2 3 | 4 5. On the real TuSimple test labels
86% of the frames keep the anchored layout. The metric does not care about slot order;
the anchoring keeps a slot's meaning stable (ego-left, ego-right, ...) for the network.

Rendering: a thick polyline per lane (``line_width`` pixels at 1280x720, scaled to the
mask size; a fractional x is scaled as it is and lands in the mask pixel it falls in) through consecutive given
rows only: a gap in the label stays a gap. Rows given in another order than top to bottom are
sorted first, each x kept with its row. Where lanes overlap the later (right-hand) lane wins.

Decoding (``decode_lanes``): for each slot with existence > 0.5 and each h_sample row,
take the arg-max column of the slot's probability in that row if it exceeds
``threshold``, refine it to the probability-weighted centre of the run of columns above
the threshold around it (a flat-topped blob, e.g. a rendered mask, has no single peak),
and scale back to 1280x720; -2 elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw

from dtrain.workloads.lanes.tusimple import IMAGE_HEIGHT, IMAGE_WIDTH, MAX_LANES, NO_POINT, LaneLabel

NUM_SLOTS = MAX_LANES  # lane slots 1..5
NUM_CLASSES = NUM_SLOTS + 1  # plus background 0
TRAIN_SIZE = (512, 288)  # (width, height) at which training masks are rendered
LINE_WIDTH = 16  # lane thickness in pixels at 1280x720 (as SCNN's TuSimple labels)
EGO_X = IMAGE_WIDTH / 2  # the camera sits at the image centre
FIT_POINTS = 10  # lowest points used to extrapolate a lane to the image bottom


def given(xs: np.ndarray) -> np.ndarray:
    """Which entries of a lane are points: every x but -2 (see the module docstring, item 1)."""
    return xs != NO_POINT


def by_row(lanes: Sequence[Sequence[float]], h_samples: Sequence[float]) -> tuple[np.ndarray, list[np.ndarray]]:
    """(rows float64 (R,), one x array (R,) per lane), sorted top to bottom with each x kept with its row: the
    official evaluation reads rows in any order, and drawing or fitting needs them in order (a stable sort)."""
    ys = np.asarray(h_samples, dtype=np.float64)
    order = np.argsort(ys, kind="stable")
    return ys[order], [np.asarray(lane, dtype=np.float64)[order] for lane in lanes]


def bottom_x(xs: np.ndarray, ys: np.ndarray) -> float:
    """x at y = 720 of the line fitted through the lowest (up to 10) given points (rows sorted, see by_row)."""
    valid = given(xs)
    x, y = xs[valid][-FIT_POINTS:].astype(np.float64), ys[valid][-FIT_POINTS:].astype(np.float64)
    y_mean, x_mean = y.mean(), x.mean()
    spread = ((y - y_mean) ** 2).sum()
    if spread == 0:  # one point, or all on one (repeated) row: no slope to extrapolate with
        return float(x_mean)
    # closed-form least squares: np.polyfit costs ~50x more per call
    k = ((y - y_mean) * (x - x_mean)).sum() / spread
    return float(x_mean + k * (IMAGE_HEIGHT - y_mean))


def assign_slots(
    lanes: Sequence[Sequence[float]], h_samples: Sequence[float], *, min_points: int = 2
) -> list[int | None]:
    """Slot (1..5) of each lane, None for an absent lane (see the module docstring)."""
    ys, xs = by_row(lanes, h_samples)
    present = [i for i, x in enumerate(xs) if int(given(x).sum()) >= max(min_points, 1)]
    bottoms = {i: bottom_x(xs[i], ys) for i in present}
    order = sorted(present, key=lambda i: bottoms[i])
    # more lanes than slots (the official evaluation scores such frames): the 5 nearest the camera, from up to
    # 2 left of it, as SCNN-style conversions (RESA's generate_seg_tusimple.py) keep the lanes nearest the ego
    skip = min(max(sum(1 for i in order if bottoms[i] < EGO_X) - 2, 0), max(len(order) - NUM_SLOTS, 0))
    order = order[skip : skip + NUM_SLOTS]
    n_left = sum(1 for i in order if bottoms[i] < EGO_X)
    first = min(max(3 - n_left, 1), NUM_SLOTS + 1 - len(order))
    slots: list[int | None] = [None] * len(lanes)
    for rank, i in enumerate(order):
        slots[i] = first + rank
    return slots


def _runs(xs: np.ndarray) -> list[np.ndarray]:
    """Index runs of consecutive given rows."""
    idx = np.flatnonzero(given(xs))
    if len(idx) == 0:
        return []
    breaks = np.flatnonzero(np.diff(idx) > 1) + 1
    return np.split(idx, breaks)


def render_mask(
    lanes: Sequence[Sequence[float]],
    h_samples: Sequence[float],
    *,
    size: tuple[int, int] = TRAIN_SIZE,
    line_width: float = LINE_WIDTH,
    min_points: int = 2,
) -> tuple[np.ndarray, np.ndarray]:
    """Render lanes to (seg uint8 (H, W) in 0..5, exist float32 (5,)); size is (width, height).

    Mirror-exact: the lanes of a mirrored frame (``data.flip_label``) cover exactly the mirrored pixels. PIL's
    wide lines round their sides and ends one way, so a slanted lane and its mirror differed along their edges
    (90-95% of the pixels agreed); each lane is therefore drawn in whichever of its two orientations has the
    larger x values (compared row by row, top down; mirrored coordinates go on a second image that is flipped
    back), so a lane and its mirror are drawn from the same coordinates. Larger rather than smaller: the real
    test labels' round trip (render at 512x288, decode) keeps its accuracy, 0.99541 against 0.99542 drawn as
    given, where smaller gave 0.99469."""
    width, height = size
    sx, sy = width / IMAGE_WIDTH, height / IMAGE_HEIGHT
    w = max(1, round(line_width * sx))
    imgs = [Image.new("L", (width, height), 0) for _ in range(2)]  # lanes as given, lanes mirrored
    draws = [ImageDraw.Draw(img) for img in imgs]
    exist = np.zeros(NUM_SLOTS, dtype=np.float32)
    slots = assign_slots(lanes, h_samples, min_points=min_points)
    ys, sorted_xs = by_row(lanes, h_samples)
    # draw left to right so that overlaps resolve the same way every time (the higher slot wins: np.maximum below)
    for i in sorted((i for i, s in enumerate(slots) if s is not None), key=lambda i: slots[i]):
        slot = slots[i]
        xs = sorted_xs[i]
        exist[slot - 1] = 1.0
        runs = _runs(xs)
        mirrored = np.where(given(xs), IMAGE_WIDTH - 1 - xs, NO_POINT)
        key, key_m = xs.tolist(), mirrored.tolist()
        # a lane equal to its mirror is drawn both ways, so that it is symmetric too
        for side, cs in ((0, xs), (1, mirrored)):
            if (key >= key_m) if side == 0 else (key_m >= key):
                _draw_runs(draws[side], cs, ys, runs, sx, sy, w, slot)
    seg = np.array(imgs[0], dtype=np.uint8)
    np.maximum(seg, np.array(imgs[1], dtype=np.uint8)[:, ::-1], out=seg)
    return seg, exist


def _draw_runs(draw: ImageDraw.ImageDraw, xs: np.ndarray, ys: np.ndarray, runs: list[np.ndarray], sx: float,
               sy: float, w: int, fill: int) -> None:
    """One lane's runs of consecutive given rows, as polylines (a dot for a run of one row)."""
    for run in runs:
        px = (xs[run] + 0.5) * sx - 0.5
        py = (ys[run] + 0.5) * sy - 0.5
        if len(run) == 1:
            r = w / 2
            draw.ellipse([px[0] - r, py[0] - r, px[0] + r, py[0] + r], fill=fill)
        else:
            # no round caps: a cap would reach the neighbouring row (4 px away at 512x288)
            draw.line(list(zip(px.tolist(), py.tolist())), fill=fill, width=w, joint="curve")


def render_label(label: LaneLabel, *, size: tuple[int, int] = TRAIN_SIZE, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    """``render_mask`` of one LaneLabel."""
    return render_mask(label.lanes, label.h_samples, size=size, **kwargs)


def _row_centres(p: np.ndarray, threshold: float, half: int = 32) -> np.ndarray:
    """Per row of p (R, W): weighted centre column of the above-threshold run around the arg-max, -1 if none.

    Only a window of +-half columns around the arg-max is searched, which keeps this cheap.
    """
    rows, width = p.shape
    peak = p.argmax(axis=1)
    r = np.arange(rows)
    hit = p[r, peak] > threshold
    offsets = np.arange(-half, half + 1)
    cols = peak[:, None] + offsets[None]  # (R, 2*half+1)
    inside = (cols >= 0) & (cols < width)
    win = np.where(inside, p[r[:, None], np.clip(cols, 0, width - 1)], 0.0)
    above = win > threshold
    pos = np.broadcast_to(np.arange(len(offsets)), above.shape)
    # the run is bounded by the nearest below-threshold column on each side of the centre
    left = np.maximum.accumulate(np.where(above, -1, pos), axis=1)[:, half] + 1
    right = np.minimum.accumulate(np.where(above, len(offsets), pos)[:, ::-1], axis=1)[:, ::-1][:, half]
    in_run = (pos >= left[:, None]) & (pos < right[:, None])
    w = np.where(in_run, win, 0.0)
    mass = w.sum(axis=1)
    centre = peak + np.divide((w * offsets[None]).sum(axis=1), mass, out=np.zeros(rows), where=mass > 0)
    return np.where(hit, centre, -1.0)


def _sample_rows(h_samples: Sequence[int], height: int) -> np.ndarray:
    """Mask row of each h_sample (pixel centres mapped from 720 rows to ``height``)."""
    ys = np.asarray(h_samples, dtype=np.float64)
    return np.clip(np.rint((ys + 0.5) * height / IMAGE_HEIGHT - 0.5).astype(int), 0, height - 1)


def _lanes_from_rows(
    rows_prob: np.ndarray, exist: np.ndarray, width: int, threshold: float, exist_threshold: float, min_points: int
) -> list[list[int]]:
    """rows_prob (5, R, W): each slot's probabilities at the h_sample rows -> lanes in slot order."""
    n_slots, n_rows, _ = rows_prob.shape
    cols = _row_centres(rows_prob.reshape(n_slots * n_rows, width), threshold).reshape(n_slots, n_rows)
    xs = np.where(cols >= 0, np.rint((cols + 0.5) * IMAGE_WIDTH / width - 0.5), NO_POINT).astype(int)
    return [
        xs[s].tolist()
        for s in range(n_slots)
        if exist[s] > exist_threshold and int((xs[s] >= 0).sum()) >= min_points
    ]


def decode_lanes(
    prob: np.ndarray,
    exist: np.ndarray,
    h_samples: Sequence[int],
    *,
    threshold: float = 0.3,
    exist_threshold: float = 0.5,
    min_points: int = 2,
) -> list[list[int]]:
    """Lanes (one x per h_sample, -2 = none, at 1280x720) from probabilities of one frame.

    prob: (6, H, W) or (5, H, W) per-class probabilities (softmax output; with 6 channels
    channel 0 is background), numpy or CPU tensor. exist: (5,) existence probabilities.
    Lanes with fewer than ``min_points`` points are dropped; lanes come out in slot order.
    """
    prob = np.asarray(prob)
    exist = np.asarray(exist, dtype=np.float32).reshape(-1)
    if prob.ndim != 3 or prob.shape[0] not in (NUM_SLOTS, NUM_CLASSES) or exist.shape != (NUM_SLOTS,):
        raise ValueError(f"prob must be (6 or 5, H, W) and exist (5,), got {prob.shape} and {exist.shape}")
    _, height, width = prob.shape
    rows = _sample_rows(h_samples, height)
    rows_prob = prob[-NUM_SLOTS:, rows].astype(np.float32)  # only the sampled rows: cheap
    return _lanes_from_rows(rows_prob, exist, width, threshold, exist_threshold, min_points)


def decode_seg(seg: np.ndarray, h_samples: Sequence[int], *, min_points: int = 2) -> list[list[int]]:
    """Lanes from a class map (e.g. a rendered mask); a slot exists when it has pixels."""
    height, width = seg.shape
    exist = (np.bincount(seg.reshape(-1), minlength=NUM_CLASSES)[1 : NUM_SLOTS + 1] > 0).astype(np.float32)
    rows_seg = seg[_sample_rows(h_samples, height)]
    rows_prob = (np.arange(1, NUM_CLASSES)[:, None, None] == rows_seg[None]).astype(np.float32)
    return _lanes_from_rows(rows_prob, exist, width, 0.5, 0.5, min_points)
