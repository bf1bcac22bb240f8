"""TuSimple lane labels: one JSON object per line.

A line looks like (real files: ``label_data_0313.json``, ``label_data_0531.json``,
``label_data_0601.json`` for training, ``test_label.json`` for the test set)::

    {"lanes": [[-2, 648, 636, ...], ...], "h_samples": [160, 170, ..., 710],
     "raw_file": "clips/0530/1492626760788443246_0/20.jpg"}

``h_samples`` are image rows (y, 1280x720 frames), each lane holds one x per row and
-2 where the lane has no point there. Prediction files use the same format plus an
optional ``run_time`` (milliseconds per frame). Every malformed line raises
``DataError`` naming the file, the 1-based line number and what is wrong.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dtrain.errors import DataError
from dtrain.names import counted
from dtrain.replace import replacing
from dtrain.workloads.inputs import command, input_file

IMAGE_WIDTH = 1280  # TuSimple frames are 1280x720
IMAGE_HEIGHT = 720
MAX_LANES = 5  # the most lanes a TuSimple ground-truth frame holds
NO_POINT = -2  # x of a row where a lane has no point
MAX_COORD = 2**31 - 1  # largest |x| or row a label may give (real ones lie within the 1280x720 frame)


@dataclass(frozen=True, kw_only=True)
class LaneLabel:
    raw_file: str  # frame path relative to the dataset root, e.g. clips/0313-1/60/20.jpg
    h_samples: tuple[int | float, ...]  # image rows (y) at which every lane gives an x, in the file's order
    lanes: tuple[tuple[int | float, ...], ...]  # one x per h_sample row per lane; -2 = no point; fractions kept
    run_time: float | None = None  # ms per frame, predictions only (None = not given)
    where: str = field(default="", compare=False, repr=False)  # "FILE:LINE" it was read from, for messages

    def to_json(self) -> dict:
        """The JSON object of one line, keys in the order of the real files."""
        obj: dict = {
            "lanes": [list(lane) for lane in self.lanes],
            "h_samples": list(self.h_samples),
            "raw_file": self.raw_file,
        }
        if self.run_time is not None:
            obj["run_time"] = self.run_time
        return obj


def _is_int(value: object) -> bool:
    # JSON true/false load as bool, which is an int subclass: not a coordinate
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """A finite JSON number: not true/false, NaN, Infinity, nor an integer beyond float range."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer such as 10**400
        return False


def _short(v: int | float) -> str:
    """A number for a message: a float as JSON writes it (1e+308), an integer of more than 15 digits in
    e-notation from its digits (1.000e+400), so one bad label stays one short line."""
    if isinstance(v, float):
        return repr(v)
    digits = str(abs(v))
    if len(digits) <= 15:
        return str(v)
    return f"{'-' if v < 0 else ''}{digits[0]}.{digits[1:4]}e+{len(digits) - 1}"


def _coords(value: object, what: str) -> tuple[int | float, ...]:
    """Pixel coordinates: integers, floats of whole value (300.0, as numpy-written labels give them) taken as those
    integers, and fractional floats (300.5, as some published converters write them) kept as given: the official
    evaluation reads all three, and a mask draws each x at the mask pixel it falls in. true/false are 1/0, as numpy
    (and so the official evaluation) takes them; the reader warns about them (``oddities``)."""
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a list, got {type(value).__name__}")
    out = []
    for i, v in enumerate(value):
        if isinstance(v, bool):
            v = int(v)
        if not (_is_int(v) or is_number(v)):  # null, a string, NaN, Infinity
            raise ValueError(f"{what}[{i}] must be a number, got {json.dumps(v)}")
        if abs(v) > MAX_COORD:  # quoted as written, short (1e+308 printed 309 digits once taken as an integer)
            raise ValueError(f"{what}[{i}] is {_short(v)}, out of range: give -{MAX_COORD} to {MAX_COORD}")
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        out.append(v)
    return tuple(out)


def parse_label(obj: object, *, where: str = "") -> LaneLabel:
    """Check one decoded JSON object and build its LaneLabel (ValueError if malformed). What the official
    evaluation scores is read as it reads it: true/false as 1/0, any negative x as no point (-2), any number of
    lanes (training draws at most 5, ``masks.assign_slots``); ``oddities`` names what was so read."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    for key in ("raw_file", "h_samples", "lanes"):
        if key not in obj:
            raise ValueError(f"missing key {key!r}")
    raw_file = obj["raw_file"]
    if not isinstance(raw_file, str) or not raw_file:
        raise ValueError(f"raw_file must be a non-empty string, got {raw_file!r}")
    if "\0" in raw_file:  # no file has such a name: opening the frame would fail with a traceback
        raise ValueError(f"raw_file {raw_file!r} holds a NUL character: give the frame's path, "
                         "e.g. clips/0313-1/60/20.jpg")
    if os.path.isabs(raw_file) or ".." in Path(raw_file).parts:  # the loader would read a file outside the dataset
        raise ValueError(f"raw_file {raw_file!r} leads out of the dataset folder: give a path inside it, "
                         "e.g. clips/0313-1/60/20.jpg")
    # rows in any order (or repeated) are kept as given: predictions follow the file's order, as the official
    # evaluation pairs them by index; masks draw through the rows sorted (masks.by_row)
    h_samples = _coords(obj["h_samples"], "h_samples")
    if not h_samples:
        raise ValueError("h_samples is empty: give the image rows (y) the lanes' x values are at")
    if not isinstance(obj["lanes"], list):
        raise ValueError(f"lanes must be a list, got {type(obj['lanes']).__name__}")
    # any negative x is "no point", as the official evaluation reads it (x < 0 -> -100): kept as -2, the one value
    # masks and flips read as no point (a flipped label's negative x is a point left of the frame)
    lanes = tuple(tuple(NO_POINT if x < 0 else x for x in _coords(lane, f"lanes[{i}]"))
                  for i, lane in enumerate(obj["lanes"]))
    for i, lane in enumerate(lanes):
        if len(lane) != len(h_samples):
            raise ValueError(f"lanes[{i}] has {len(lane)} points but h_samples has {len(h_samples)}")
    run_time = obj.get("run_time")
    if run_time is not None and not (is_number(run_time) and run_time >= 0):
        raise ValueError(f"run_time must be a number of milliseconds >= 0, got {json.dumps(run_time)}")
    return LaneLabel(
        raw_file=raw_file,
        h_samples=h_samples,
        lanes=lanes,
        run_time=None if run_time is None else float(run_time),
        where=where,
    )


def launcher_rank() -> int:
    """This process's rank as far as the data readers need it: the process group's when one is started, else
    the launcher's environment (torchrun's RANK, LOCAL_RANK; mpirun's, PMI's), else 0. Read without importing
    torch or needing the platform: `dtrain lanes prepare` and `evaluate` run without either."""
    dist = sys.modules.get("torch.distributed")  # imported by training, never here
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "LOCAL_RANK"):
        value = os.environ.get(name, "").strip()
        if value.isascii() and value.isdigit():  # '²' is a digit to isdigit(), not to int()
            return int(value)
    return 0


def stderr_warning(text: str) -> None:
    """The default `warn` of the readers: one line on stderr, from rank 0 only (every rank of a job reads the
    same files: three ranks printed the same warning three times)."""
    if launcher_rank() == 0:
        print(f"warning: {text}", file=sys.stderr)


def outside_frame(h_samples: Iterable[float], lanes: Iterable[Iterable[float]]) -> str | None:
    """What of a frame's labels lies outside the 1280x720 image (an x >= 1280, a row < 0 or >= 720), or None."""
    row = next((y for y in h_samples if not 0 <= y < IMAGE_HEIGHT), None)
    if row is not None:
        return f"row {row:g} is outside the {IMAGE_WIDTH}x{IMAGE_HEIGHT} frame"
    x = next((x for lane in lanes for x in lane if IMAGE_WIDTH <= x < math.inf), None)  # infinite: warned apart
    return None if x is None else f"x {x:g} is outside the {IMAGE_WIDTH}x{IMAGE_HEIGHT} frame"


def oddities(obj: dict, label: LaneLabel, max_lanes: int | None = MAX_LANES) -> list[str]:
    """What of a parsed line (its JSON object and the LaneLabel read from it) the official evaluation scores but
    training reads in its own terms: keys of ``_ODD`` (true/false for a number, a negative x other than -2, more
    lanes of two or more points than ``max_lanes``, None: any)."""
    values = [*obj["h_samples"], *(x for lane in obj["lanes"] for x in lane)]
    kinds = []
    if any(isinstance(v, bool) for v in values):
        kinds.append("bools")
    if any(not isinstance(x, bool) and x < 0 and x != NO_POINT for lane in obj["lanes"] for x in lane):
        kinds.append("negative")
    drawn = sum(1 for lane in label.lanes if sum(x != NO_POINT for x in lane) >= 2)
    if max_lanes is not None and drawn > max_lanes:
        kinds.append("lanes")
    return kinds


_ODD = {  # one warning line per kind and file: "FILE:LINE (N lines of this file) " + this
    "bools": "give true/false for a number (an x or row): read as 1/0, as the official evaluation (numpy) reads them",
    "negative": f"give a negative x other than {NO_POINT}: read as no point, as the official evaluation reads every "
                "x < 0",
    "lanes": f"hold more than {MAX_LANES} lanes: training draws the {MAX_LANES} nearest the camera (up to 2 left of "
             "it and 3 right), as SCNN-style TuSimple conversions keep the lanes nearest the camera; the official "
             "evaluation scores them all",
}


def iter_labels(path: str | os.PathLike, *, max_lanes: int | None = MAX_LANES,
                warn: Callable[[str], None] | None = stderr_warning) -> Iterator[LaneLabel]:
    """Yield the labels of a TuSimple JSON-lines file; blank lines are skipped.

    Everything the official evaluation scores is read (see ``parse_label``); `warn` gets one line per file for
    points outside the frame (kept: the evaluation scores them as given), and one per kind of ``oddities``
    (``max_lanes``: the lanes a frame may hold without a warning, None for prediction files).
    """
    path = input_file(path, "label file", f"give a TuSimple JSON-lines file (or run '{command('lanes', 'prepare')}')")
    outside: list[str] = []  # "FILE:LINE: what" of each line with a point outside the frame
    odd: dict[str, list[str]] = {kind: [] for kind in _ODD}  # kind -> "FILE:LINE" of each line
    for lineno, obj in json_lines(path):
        try:
            label = parse_label(obj, where=f"{path}:{lineno}")
        except ValueError as e:
            raise DataError(f"{path}:{lineno}: {e}") from None
        what = outside_frame(label.h_samples, label.lanes)
        if what:
            outside.append(f"{label.where}: {what}")
        for kind in oddities(obj, label, max_lanes):
            odd[kind].append(label.where)
        yield label
    if warn is None:
        return
    if outside:
        warn(f"{outside[0]} ({counted(len(outside), 'line')} of this file with points outside the frame): kept as given; "
             "masks draw only the part inside the frame, and the metric compares them as given, as the official "
             "script does")
    for kind, seen in odd.items():
        if seen:
            warn(f"{seen[0]} ({counted(len(seen), 'line')} of this file) {_ODD[kind]}")


def one_line_per_frame(labels: Sequence[LaneLabel], *,
                       warn: Callable[[str], None] | None = stderr_warning) -> list[LaneLabel]:
    """The labels with each raw_file once, holding its LAST line (in the place of its first), as the
    official evaluation's ``{raw_file: line}`` keeps a ground-truth frame; `warn` gets one line per
    file with repeated frames (a frame has one mask, so two different labels of it cannot both train)."""
    by_file: dict[str, LaneLabel] = {}
    first_at: dict[str, str] = {}
    repeats: dict[str, list[str]] = {}  # file -> "FILE:LINE: ..." of each repeated line
    for label in labels:
        first = first_at.setdefault(label.raw_file, label.where)
        if label.raw_file in by_file:
            file = label.where.rpartition(":")[0]
            repeats.setdefault(file, []).append(f"{label.where or label.raw_file}: frame {label.raw_file} is "
                                                f"labelled again{f' (first at {first})' if first else ''}")
        by_file[label.raw_file] = label
    if warn is not None:
        for seen in repeats.values():
            warn(f"{seen[0]} ({counted(len(seen), 'repeated line')} in this file): training uses each frame's last line "
                 "only, as the official evaluation keeps a ground-truth frame's last line")
    return list(by_file.values())


def json_lines(path: Path, blank: list[int] | None = None) -> Iterator[tuple[int, object]]:
    """(1-based line number, decoded object) of each non-blank line of a JSON-lines file; the numbers of
    the blank lines skipped go to `blank` when given (the official LaneEval refuses a file holding one).

    A line that is not UTF-8 or not JSON raises DataError naming the file and line (a byte-order
    mark at the start of the file is allowed, as some editors write one). Lines end at LF, CRLF or
    a lone CR, as in the official LaneEval, which reads `open(file).readlines()` in text mode.
    """
    lineno = 0
    with path.open("rb") as f:
        for raw in (line for chunk in f for line in chunk.splitlines()):  # bytes split at \n, \r\n, \r only
            lineno += 1
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{lineno}: not UTF-8 text (byte {e.start + 1} of the line): "
                                "give a TuSimple JSON-lines file") from None
            if not line.strip():
                if blank is not None:
                    blank.append(lineno)
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{lineno}: bad JSON ({e.msg} at column {e.colno})") from None
            except RecursionError:  # brackets nested deeper than Python's stack
                raise DataError(f"{path}:{lineno}: bad JSON (nested too deep): "
                                "give a TuSimple JSON-lines file") from None
            except ValueError:  # an integer of more digits than int() converts
                raise DataError(f"{path}:{lineno}: bad JSON (a number of more than {sys.get_int_max_str_digits()} "
                                "digits): give a TuSimple JSON-lines file") from None
            yield lineno, obj


def read_labels(path: str | os.PathLike, *, max_lanes: int | None = MAX_LANES,
                warn: Callable[[str], None] | None = stderr_warning) -> list[LaneLabel]:
    """All labels of a TuSimple JSON-lines file, every line (see ``iter_labels``)."""
    return list(iter_labels(path, max_lanes=max_lanes, warn=warn))


def write_labels(path: str | os.PathLike, labels: Iterable[LaneLabel]) -> int:
    """Write labels as JSON lines (atomically: a reader never sees half a file); returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with replacing(path) as f:
        for label in labels:
            f.write(json.dumps(label.to_json(), separators=(", ", ": ")) + "\n")
            n += 1
    return n


# Dataset layout shared by synth, prepare and the data loader. Splits follow the usual
# TuSimple practice (SCNN, LaneATT): 0313 + 0601 train, 0531 validation, test_label test.
SPLIT_FILES: dict[str, tuple[str, ...]] = {
    "train": ("label_data_0313.json", "label_data_0601.json"),
    "val": ("label_data_0531.json",),
    "test": ("test_label.json",),
}
TASKS_FILE = "test_tasks_0627.json"  # the test frames without lanes (test_set.zip): what a submission predicts
SEG_DIR = "seg_label"  # precomputed masks: seg_label/<W>x<H>/<folder>/<id>/20.png
LIST_DIR = "list"  # SCNN-style lists: list/train_gt.txt, list/val_gt.txt, list/test_gt.txt


def mask_relpath(raw_file: str, size: tuple[int, int]) -> str:
    """Relative path of the precomputed mask of a frame at size (width, height)."""
    rel = raw_file[len("clips/") :] if raw_file.startswith("clips/") else raw_file
    stem = rel[: -len(".jpg")] if rel.endswith(".jpg") else rel
    return f"{SEG_DIR}/{size[0]}x{size[1]}/{stem}.png"


def writable(out: Path, path: Path, who: str = "prepare") -> Path:
    """Make `path` (inside `out`) safe to write: remove every symlink at it or between `out` and it,
    create the missing folders as real ones. A link under --out may point anywhere on the machine
    (out/clips -> /etc): writing through it would write outside the dataset, so it is replaced."""
    rel = path.relative_to(out)
    out.mkdir(parents=True, exist_ok=True)  # --out itself is the user's choice, link or not
    cur = out
    for i, part in enumerate(rel.parts):
        cur = cur / part
        if cur.is_symlink():
            print(f"{who}: replacing the symbolic link {cur} -> {os.readlink(cur)}", file=sys.stderr)
            cur.unlink()
        if i < len(rel.parts) - 1:
            cur.mkdir(exist_ok=True)
    return path
