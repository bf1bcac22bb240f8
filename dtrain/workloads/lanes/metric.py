"""The official TuSimple lane-detection metric (LaneEval), reimplemented without sklearn (its slope
computed the way sklearn computes it, so thresholds match to the last bit).

Per frame, following the benchmark's ``evaluate/lane.py``:

* each ground-truth lane gets a pixel threshold ``20 / cos(atan(k))`` where ``k`` is the
  least-squares slope of x as a function of y over its valid points (``k = 0`` with fewer
  than two points), so slanted lanes get a wider tolerance;
* a predicted lane's accuracy against a GT lane is the share of ALL ``h_samples`` rows where
  ``|x_pred - x_gt| < threshold``, every negative x being mapped to -100 in both first
  (so a row both leave empty counts as a hit);
* each GT lane takes its best predicted lane: below 0.85 it is a miss (FN), else matched;
  ``FP = n_pred - matched`` (as in the official code, this can go negative when one
  predicted lane matches two GT lanes);
* with more than 4 GT lanes the lowest lane accuracy is dropped and FN reduced by one;
* ``accuracy = sum / max(min(4, n_gt), 1)``, ``FP /= n_pred`` (0 without predictions),
  ``FN /= max(min(n_gt, 4), 1)``;
* a frame predicted in more than 200 ms, or with more than ``n_gt + 2`` lanes, scores
  accuracy 0, FP 0, FN 1.

Dataset figures are plain means over the GT frames.

A prediction file is read as the official ``bench_one_submit`` reads a submission: from each
line it takes ``raw_file``, ``lanes`` and ``run_time``; the rows are the ground truth's
``h_samples``, and x coordinates may be integers or floats (many published methods write
floats). Everything the official script scores is scored the same way; what it scores but is
likely a bug gets a warning (an x that is NaN or infinite, true/false for a number, a negative or NaN run_time, a
prediction that gives other ``h_samples`` than the ground truth: the official script reads none).
Repeated frames are scored as it scores them (a GT frame's last line; every prediction line summed;
divided by the distinct GT frames), with a warning, and so is ground truth outside the 1280x720 frame.
What it crashes on, or cannot score, raises ``DataError`` naming the file and line: an unknown frame,
a submission of another line count than the ground truth (as it refuses), a lane whose length differs
from the GT ``h_samples``, an x that is null, a string or an integer beyond float range,
a run_time that is null, a string or a list, a submission line without ``run_time`` (as it refuses one), and
a malformed line; ``evaluate`` given lines in memory (training's validation) counts a missing ``run_time`` as
0 ms. The ground truth is read as the official script reads it too (``parse_truth``), not with training's stricter
``read_labels``.

CLI: ``dtrain lanes evaluate --pred P.json --gt G.json [--json]``.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dtrain.errors import DataError
from dtrain.names import counted
from dtrain.workloads.inputs import Parser, command, input_file
from dtrain.workloads.lanes.tusimple import LaneLabel, json_lines, outside_frame

PIXEL_THRESH = 20.0  # base tolerance in pixels for a near-vertical lane
PT_THRESH = 0.85  # share of rows a predicted lane must hit to match a GT lane
MAX_RUN_TIME_MS = 200.0  # slower frames score 0 accuracy and a full miss


def lane_angle(xs: np.ndarray, ys: np.ndarray) -> float:
    """atan of the least-squares slope dx/dy over the valid (x >= 0) points; 0 with fewer than 2.

    Computed as the official LaneEval's sklearn LinearRegression does it, so the threshold is the
    same to the last bit: both sides centred on their means, the slope from LAPACK's least-squares
    solver (gelsd, with sklearn's rcond), then np.arctan. A closed-form slope with math.atan was an
    ulp off on ~40% of the real test lanes, which flipped a row's hit on real frames."""
    valid = xs >= 0
    if valid.sum() < 2:
        return 0.0
    x, y = xs[valid].astype(np.float64), ys[valid].astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        y_c, x_c = (y - y.mean())[:, None], x - x.mean()
    if not (np.isfinite(y_c).all() and np.isfinite(x_c).all()):  # sklearn's solver refuses these
        raise DataError("a ground-truth lane's x or rows are too large to fit a line through (their mean overflows; "
                        "the official script fails on them too): give coordinates of the frame")
    slope = np.linalg.lstsq(y_c, x_c, rcond=len(y) * np.finfo(np.float64).eps)[0][0]
    return float(np.arctan(slope))


def line_accuracy(pred: np.ndarray, gt: np.ndarray, thresh: float) -> float:
    """Share of rows where |pred - gt| < thresh, negatives mapped to -100 in both."""
    p = np.where(pred >= 0, pred, -100).astype(np.float64)
    g = np.where(gt >= 0, gt, -100).astype(np.float64)
    return float(np.sum(np.abs(p - g) < thresh)) / len(g)


def bench_frame(
    pred: Sequence[Sequence[float]],
    gt: Sequence[Sequence[int]],
    h_samples: Sequence[int],
    run_time: float | None = None,
) -> tuple[float, float, float]:
    """(accuracy, fp, fn) of one frame; a lane of the wrong length or no h_samples raise DataError."""
    for i, lane in enumerate(pred):
        if len(lane) != len(h_samples):
            raise DataError(
                f"predicted lane {i} has {len(lane)} points but the frame has {len(h_samples)} h_samples: "
                "give one x per h_sample row (-2 where there is no point)"
            )
    if (run_time or 0.0) > MAX_RUN_TIME_MS or len(pred) > len(gt) + 2:
        return 0.0, 0.0, 1.0
    if not h_samples and pred and gt:
        raise DataError("the ground-truth frame has no h_samples, so a lane's accuracy is 0 rows of 0 (the official "
                        "script's figures turn NaN): give the rows (y) its lanes' x values are at")
    ys = np.asarray(h_samples)
    preds = [np.asarray(p) for p in pred]
    line_accs: list[float] = []
    fn = matched = 0.0
    for lane in gt:
        g = np.asarray(lane)
        thresh = PIXEL_THRESH / float(np.cos(lane_angle(g, ys)))  # np.cos, as the official code: libm's may differ
        best = max((line_accuracy(p, g, thresh) for p in preds), default=0.0)
        if best < PT_THRESH:
            fn += 1
        else:
            matched += 1
        line_accs.append(best)
    fp = len(pred) - matched
    total = sum(line_accs)
    if len(gt) > 4:
        total -= min(line_accs)
        if fn > 0:
            fn -= 1
    n_gt = max(min(4.0, len(gt)), 1.0)
    return total / n_gt, (fp / len(pred) if pred else 0.0), fn / n_gt


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """One line of a submission: the official evaluator's fields, plus where it was read."""

    raw_file: str  # frame path, as in the ground truth
    lanes: tuple[tuple[float, ...], ...]  # one x per GT h_sample row per lane; negative = no point
    run_time: float | None = None  # ms per frame (None = not given: evaluate_files refuses it, evaluate counts 0)
    bools: bool = False  # the line gave true/false for a number (the official script computes with them as 1/0)
    h_samples: tuple[int, ...] | None = None  # as given (the GT's rows are used); () when not a list of rows
    where: str = ""  # "FILE:LINE" for error messages ("" when built in memory)


def _shown(v: object) -> str:
    """A value as it reads in JSON, cut short; JSON numbers beyond float range read as infinite."""
    if isinstance(v, float) and math.isinf(v):
        return f"{'-' if v < 0 else ''}Infinity (or a number too large, such as 1e400)"
    text = json.dumps(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _computable(value: object) -> bool:
    """A JSON number the official script computes with: NaN, Infinity and 1e400 (a float) too, true/false
    (numpy takes them as 1/0), but not null, a string, nor an integer beyond float range (its arithmetic overflows)."""
    if not isinstance(value, (int, float)):
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _frame_line(obj: object, keys: tuple[str, ...], holds: str) -> dict:
    """A decoded line that is an object with `keys` and a raw_file (ValueError naming what is not)."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    for key in keys:
        if key not in obj:
            raise ValueError(f"missing key {key!r}: {holds}")
    if not isinstance(obj["raw_file"], str) or not obj["raw_file"]:
        raise ValueError(f"raw_file must be a non-empty string, got {obj['raw_file']!r}")
    return obj


def parse_prediction(obj: object, where: str = "") -> Prediction:
    """One decoded submission line -> Prediction (ValueError naming the bad field)."""
    obj = _frame_line(obj, ("raw_file", "lanes"), "a prediction line holds raw_file, lanes and run_time")
    if not isinstance(obj["lanes"], list) or not all(isinstance(lane, list) for lane in obj["lanes"]):
        raise ValueError("lanes must be a list of lists of x coordinates")
    for i, lane in enumerate(obj["lanes"]):
        for j, x in enumerate(lane):
            if not _computable(x):
                raise ValueError(f"lanes[{i}][{j}] is {_shown(x)}: x coordinates are numbers "
                                 "(-2 where there is no point)")
    run_time = obj.get("run_time")
    if isinstance(run_time, int):  # the official script only compares it with 200: any integer does
        run_time = int(run_time) if abs(run_time) < 2**1023 else math.inf if run_time > 0 else -math.inf
    if run_time is not None and not _computable(run_time):
        raise ValueError(f"run_time must be a number of milliseconds, got {_shown(run_time)}")
    h = obj.get("h_samples")
    if h is not None:  # the official script reads none: other rows are warned about, never refused
        rows = isinstance(h, list) and all(_computable(y) and math.isfinite(y) and float(y).is_integer() for y in h)
        h = tuple(int(y) for y in h) if rows else ()
    bools = isinstance(obj.get("run_time"), bool) or any(isinstance(x, bool) for lane in obj["lanes"] for x in lane)
    lanes = tuple(tuple(float(x) if isinstance(x, bool) else x for x in lane) for lane in obj["lanes"])
    return Prediction(raw_file=obj["raw_file"], lanes=lanes,
                      run_time=None if run_time is None else float(run_time), h_samples=h, where=where, bools=bools)


@dataclass(frozen=True, kw_only=True)
class Truth:
    """One ground-truth frame as the official script scores it: x and rows any finite numbers."""

    raw_file: str
    h_samples: tuple[float, ...]  # rows (y), in any order, possibly none
    lanes: tuple[tuple[float, ...], ...]  # one x per row per lane; negative = no point
    where: str = ""  # "FILE:LINE" for error messages
    run_time_given: bool = False  # the line gives a run_time, as a submission does and ground truth never
    bools: bool = False  # the line gave true/false for a number (the official script computes with them as 1/0)


def parse_truth(obj: object, where: str = "") -> Truth:
    """One decoded ground-truth line -> Truth (ValueError naming the bad field). Laxer than training's
    parse_label: the official script scores any x a float holds (1e10, any negative), true/false as 1/0,
    any number of lanes, frames without rows; it cannot fit a lane through NaN or infinite values, nor score a
    lane of another length than the rows, so those are refused."""
    obj = _frame_line(obj, ("raw_file", "h_samples", "lanes"), "a ground-truth line holds raw_file, h_samples "
                                                               "and lanes")

    def numbers(value: object, what: str) -> tuple[float, ...]:
        if not isinstance(value, list):
            raise ValueError(f"{what} must be a list of numbers, got {_shown(value)}")
        for i, v in enumerate(value):
            if not (_computable(v) and math.isfinite(v)):
                raise ValueError(f"{what}[{i}] is {_shown(v)}: give finite numbers (x: -2 where there is no point)")
        return tuple(float(v) if isinstance(v, bool) else v for v in value)

    h_samples = numbers(obj["h_samples"], "h_samples")
    if not isinstance(obj["lanes"], list):
        raise ValueError(f"lanes must be a list of lanes, got {_shown(obj['lanes'])}")
    lanes = tuple(numbers(lane, f"lanes[{i}]") for i, lane in enumerate(obj["lanes"]))
    for i, lane in enumerate(lanes):
        if len(lane) != len(h_samples):
            raise ValueError(f"lanes[{i}] has {len(lane)} points but h_samples has {len(h_samples)}: "
                             "give one x per row (-2 where there is no point)")
    bools = any(isinstance(v, bool) for v in obj["h_samples"]) or any(isinstance(x, bool) for lane in obj["lanes"]
                                                                      for x in lane)
    return Truth(raw_file=obj["raw_file"], h_samples=h_samples, lanes=lanes, where=where,
                 run_time_given="run_time" in obj, bools=bools)


def read_truth(path: str | os.PathLike, blank: list[int] | None = None) -> list[Truth]:
    """A ground-truth file (JSON lines) read as the official script reads it; a bad line names its number,
    blank lines are skipped (their numbers go to `blank`)."""
    return _read_lines(_truth_file(path), parse_truth, blank)


def _truth_file(path: str | os.PathLike):
    return input_file(path, "label file", f"give a TuSimple JSON-lines file (or run '{command('lanes', 'prepare')}')")


def read_predictions(path: str | os.PathLike, blank: list[int] | None = None) -> list[Prediction]:
    """A submission file (JSON lines); blank lines are skipped (their numbers go to `blank`), a bad line
    names its number."""
    return _read_lines(input_file(path, "prediction file", "give a TuSimple JSON-lines file "
                                  f"('{command('lanes', 'predict')}' writes one)"), parse_prediction, blank)


def _read_lines(path, parse: Callable, blank: list[int] | None = None) -> list:
    out = []
    for lineno, obj in json_lines(path, blank):
        try:
            out.append(parse(obj, f"{path}:{lineno}"))
        except ValueError as e:
            raise DataError(f"{path}:{lineno}: {e}") from None
    return out


def evaluate(preds: Sequence[LaneLabel | Prediction], gts: Sequence[LaneLabel | Truth], *,
             warn: Callable[[str], None] | None = None, need_run_time: bool = False) -> dict:
    """Mean TuSimple accuracy, FP and FN over the GT frames: {'accuracy', 'fp', 'fn', 'frames'}.
    `warn` gets one line per kind of value the official script scores but that is likely a bug. A prediction
    without run_time counts as 0 ms, or is refused with `need_run_time` (a submission file: the official script
    refuses it)."""
    gt_by_file: dict[str, LaneLabel | Truth] = {}  # each frame's LAST line, as the official {raw_file: line}
    gt_first: dict[str, LaneLabel | Truth] = {}
    odd: dict[str, list[str]] = {k: [] for k in _ODD}  # where seen
    for g in gts:
        if g.raw_file in gt_by_file:
            first = gt_first[g.raw_file].where
            odd["gt_again"].append(f"{g.where or g.raw_file}, {g.raw_file}{f' first at {first}' if first else ''}")
        gt_first.setdefault(g.raw_file, g)
        gt_by_file[g.raw_file] = g
    by_file: dict[str, LaneLabel | Prediction] = {}
    for p in preds:
        if p.raw_file in by_file:
            first = by_file[p.raw_file].where
            odd["pred_again"].append(f"{p.where or p.raw_file}, {p.raw_file}{f' first at {first}' if first else ''}")
        elif p.raw_file not in gt_by_file:
            raise DataError(f"{_at(p)}prediction for {p.raw_file} has no ground-truth frame: check the raw_file paths")
        by_file.setdefault(p.raw_file, p)
    if len(preds) != len(gts):  # the official script refuses this ('We do not get the predictions of all ...')
        _refuse_counts(preds, gts, by_file, gt_first)
    n = len(gt_by_file)
    if n == 0:
        raise DataError("the ground truth holds no frames: check the GT file")
    untimed = next((p for p in preds if need_run_time and p.run_time is None), None)
    if untimed is not None:  # bench_one_submit: 'raw_file or lanes or run_time not in some predictions.'
        raise DataError(f"{_at(untimed)}missing key 'run_time', without which the official script refuses a "
                        "submission: give each line its run_time in ms, e.g. \"run_time\": 0 "
                        f"('{command('lanes', 'predict')}' writes it)")
    odd["unpredicted"] = [g.where or g.raw_file for g in gt_by_file.values() if g.raw_file not in by_file]
    odd["no_gt"] = [g.where or g.raw_file for g in gt_by_file.values() if not g.lanes]
    odd["gt_bools"] = [g.where or g.raw_file for g in gts if isinstance(g, Truth) and g.bools]
    acc = fp = fn = 0.0
    for p in preds:  # every line scored and summed in the submission's order, as bench_one_submit does
        g = gt_by_file[p.raw_file]
        if isinstance(p, Prediction):
            where = p.where or p.raw_file
            if any(not math.isfinite(x) for lane in p.lanes for x in lane):
                odd["x"].append(where)
            if p.run_time is not None and not p.run_time >= 0:  # negative or NaN
                odd["run_time"].append(where)
            elif p.run_time is not None and p.run_time > MAX_RUN_TIME_MS:
                odd["slow"].append(where)
            if p.h_samples is not None and p.h_samples != tuple(g.h_samples):
                odd["h_samples"].append(where)
            if p.bools:
                odd["bools"].append(where)
        try:
            a, f_p, f_n = bench_frame(p.lanes, g.lanes, g.h_samples, p.run_time)
        except DataError as e:
            raise DataError(f"{_at(p)}{g.raw_file}: {e}") from None
        acc, fp, fn = acc + a, fp + f_p, fn + f_n
    if warn is not None:
        for kind, seen in odd.items():
            if seen:
                said = _ODD[kind].format(n=n)
                if len(seen) == 1:  # '1 prediction gives', '2 predictions give'
                    verb, _, rest = said.partition(" ")
                    said = f"{_ONE.get(verb, verb)} {rest}"
                warn(f"{counted(len(seen), _WHO.get(kind, 'prediction'))} (first: {seen[0]}) {said}")
    return {"accuracy": acc / n, "fp": fp / n, "fn": fn / n, "frames": n}


def _refuse_counts(preds: Sequence[LaneLabel | Prediction], gts: Sequence[LaneLabel | Truth],
                   by_file: dict, gt_first: dict) -> None:
    """The DataError for a submission of another line count than the ground truth, which the official script
    refuses: the first GT frame without prediction, else the first repeated prediction, else repeated GT."""
    missing = next((g for g in gts if g.raw_file not in by_file), None)
    if missing is not None:
        raise DataError(
            f"no prediction for ground-truth frame {missing.raw_file} ({len(by_file)} of {len(gt_first)} frames "
            "predicted): predict every frame of the GT file"
        )
    seen: set[str] = set()
    for p in preds:
        if p.raw_file in seen:
            raise DataError(f"{_at(p)}prediction for {p.raw_file} appears twice: give one line per frame")
        seen.add(p.raw_file)
    seen.clear()
    for g in gts:
        if g.raw_file in seen:
            first = gt_first[g.raw_file].where
            raise DataError(f"{_at(g)}ground-truth frame {g.raw_file} appears twice"
                            f"{f' (first at {first})' if first else ''}: give one line per frame")
        seen.add(g.raw_file)


_WHO = {"gt_again": "ground-truth line", "pred_again": "prediction line",
        "unpredicted": "ground-truth frame", "no_gt": "ground-truth frame", "gt_bools": "ground-truth line"}
_ONE = {"hold": "holds", "give": "gives", "repeat": "repeats", "have": "has"}  # _ODD's first verbs, said of one
_ODD = {  # what the official script does with values it scores without a word
    "x": "hold x values that are NaN or infinite: scored as the official script scores them (NaN and "
         "-Infinity as no point, Infinity as a point that matches nothing)",
    "run_time": "give a run_time that is negative or NaN: scored as the official script scores them "
                "(as frames within 200 ms)",
    "slow": "took over 200 ms (run_time): scored as misses (accuracy 0, FP 0, FN 1: every lane missed, none "
            "counted as false), as the official script scores them, however right their lanes; a loaded machine "
            "slows prediction",
    "h_samples": "give other h_samples than the ground truth: their x values are scored at the ground "
                 "truth's rows, as the official script scores them (it reads no h_samples from a submission)",
    "gt_again": "repeat a frame: as in the official script, every prediction of it is scored against its last "
                "line, and the sums are divided by the {n} distinct frames (so a frame predicted twice counts twice)",
    "pred_again": "repeat a frame: as in the official script, every line is scored and summed, and the sums are "
                  "divided by the {n} distinct ground-truth frames",
    "unpredicted": "have no prediction (other frames are predicted more than once): as in the official script, "
                   "each adds 0 to the sums but counts among the {n} frames they are divided by",
    "bools": "give true/false for a number (an x or run_time): scored as 1/0, as the official script scores them",
    "gt_bools": "give true/false for a number (an x or row): scored as 1/0, as the official script scores them",
    "no_gt": "hold no lanes: each scores accuracy 0 whatever is predicted, as the official script scores "
             "them (test_tasks_0627.json holds none: score against test_label.json)",
}


def _at(p: LaneLabel | Prediction | Truth) -> str:
    return f"{p.where}: " if p.where else ""


def _submission_sign(frames: Sequence[Prediction | Truth]) -> str | None:
    """What in a file reads as a submission rather than TuSimple ground truth (whose lines never give a
    run_time, and whose x are whole pixels), or None."""
    for f in frames:
        if (f.run_time is not None) if isinstance(f, Prediction) else f.run_time_given:
            return f"{f.where} gives a run_time"
    for f in frames:
        if any(not float(x).is_integer() for lane in f.lanes for x in lane if math.isfinite(x)):
            return f"{f.where} gives an x that is not a whole pixel"
    return None


def swapped(pred_path: str | os.PathLike, gt_path: str | os.PathLike, preds: Sequence[Prediction],
            gts: Sequence[Truth] | None) -> str | None:
    """A line saying the files look given the wrong way round, or None: --gt looks like a prediction
    file (see _submission_sign; gts is None when it is not readable as ground truth at all), and the
    swap command is suggested only when --pred looks like ground truth too. The official script scores
    a swapped pair without a word (each side reads as the other's format)."""
    looks_gt = bool(preds) and all(p.h_samples for p in preds) and _submission_sign(preds) is None
    sign = None if gts is None else _submission_sign(gts)
    swap = (f"run '{command('lanes', 'evaluate')} --pred {shlex.quote(str(gt_path))} "
            f"--gt {shlex.quote(str(pred_path))}' if they were swapped")
    if sign is None:
        return (f"--pred {pred_path} looks like ground truth (h_samples on every line, whole-pixel x, no run_time): "
                f"{swap}") if gts is None and looks_gt else None
    if looks_gt:
        return (f"--gt {gt_path} looks like predictions ({sign}, which ground truth never does) and --pred "
                f"{pred_path} like ground truth: {swap}")
    return f"--gt {gt_path} looks like predictions ({sign}, which ground truth never does): give the ground truth " \
           "as --gt, e.g. test_label.json"


def _warn_outside(gts: Sequence[Truth], warn: Callable[[str], None]) -> None:
    """One line for a ground truth whose points lie outside the 1280x720 frame: the official script compares
    them as numbers, so they are scored as given."""
    outside = [f"{g.where}: {what}" for g in gts if (what := outside_frame(g.h_samples, g.lanes))]
    if outside:
        warn(f"{outside[0]} ({counted(len(outside), 'line')} of this file with points outside the frame): scored as given, "
             "as the official script scores them")


def _warn_blank(files: dict, warn: Callable[[str], None]) -> None:
    """One line a file holding blank lines: skipped here, but the official script's json.loads of each of
    its readlines() fails on one and it refuses the whole submission ('Fail to load json file ...')."""
    for path, lines in files.items():
        if lines:
            warn(f"{path}:{lines[0]} is blank ({counted(len(lines), 'blank line')} in this file): skipped here, but "
                 f"the official script refuses a file holding one; remove them before submitting (sed -i "
                 f"'/^[[:space:]]*$/d' {shlex.quote(str(path))})")


def evaluate_files(pred_path: str | os.PathLike, gt_path: str | os.PathLike, *,
                   warn: Callable[[str], None] | None = None) -> dict:
    """``evaluate`` on a submission file and a TuSimple ground-truth file, read as the official script
    reads it (any number of GT lanes a frame, the lowest of more than 4 dropped; see ``parse_truth``).
    Files that look given the wrong way round are scored as given, with a warning (see ``swapped``);
    an error then says so too."""
    blank: dict[str, list[int]] = {"pred": [], "gt": []}
    preds = read_predictions(pred_path, blank["pred"])
    # checked before samefile, which raised FileNotFoundError (a traceback) for a --gt that is not there
    _truth_file(gt_path)
    same = os.path.samefile(pred_path, gt_path)  # both are readable files by now: no swap to suggest
    try:
        gts = read_truth(gt_path, blank["gt"])
    except DataError as e:
        hint = None if same else swapped(pred_path, gt_path, preds, None)
        raise DataError(f"{e}; {hint}" if hint else str(e)) from None
    if not gts:  # else the first prediction is named as unknown, as if the submission were wrong
        raise DataError(f"--gt {gt_path} holds no frames: give the ground truth, e.g. test_label.json")
    hint = None if same else swapped(pred_path, gt_path, preds, gts)
    why = f"--pred and --gt are the same file, {gt_path}: give the predictions as --pred" if same else hint
    try:
        result = evaluate(preds, gts, warn=warn, need_run_time=True)
    except DataError as e:
        raise DataError(f"{e}; {why}" if why else str(e)) from None
    if warn is not None:  # ground truth only: regression models' predictions leave the frame as a matter of course
        _warn_outside(gts, warn)
        _warn_blank({pred_path: blank["pred"], gt_path: blank["gt"]}, warn)
    if hint and warn is not None:
        warn(f"{hint} (scored as given)")
    if same and warn is not None:
        warn(f"--pred and --gt are the same file, {gt_path}: the ground truth was scored against itself; give the "
             "predictions as --pred")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``dtrain lanes evaluate --pred P.json --gt G.json [--json]``."""
    parser = Parser(prog="dtrain lanes evaluate", description="TuSimple lane accuracy, FP and FN.")
    parser.add_argument("--pred", required=True, help="predictions, TuSimple JSON lines (+ optional run_time)")
    parser.add_argument("--gt", required=True, help="ground truth, e.g. test_label.json")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)
    result = evaluate_files(args.pred, args.gt,
                            warn=lambda text: print(f"dtrain lanes evaluate: warning: {text}", file=sys.stderr))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{'metric':<10}{'value':>10}")
        print(f"{'accuracy':<10}{result['accuracy']:>10.4f}")
        print(f"{'fp':<10}{result['fp']:>10.4f}")
        print(f"{'fn':<10}{result['fn']:>10.4f}")
        print(f"{'frames':<10}{result['frames']:>10d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
