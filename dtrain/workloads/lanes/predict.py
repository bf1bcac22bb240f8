"""Lane predictions in TuSimple format, overlay images, and the metric when ground truth exists.

    python -m dtrain.workloads.lanes predict --checkpoint OUT/model.pt --data-dir DIR --split test \\
        --out pred.json [--overlays DIR --max-overlays 20]

Each output line is {raw_file, h_samples, lanes, run_time}; run_time is the model plus decoding
time per frame in milliseconds, after one untimed pass (warm-up). Overlays show the frame with
predicted lanes in colour and the ground truth, where the label has it, as thin black lines.
"""

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from PIL import Image, ImageDraw

from dtrain.errors import DataError, SpecError
from dtrain.replace import replacing
from dtrain.training import keep_freed_memory, load_checkpoint
from dtrain.training.resume import first_fault
from dtrain.workloads.inputs import MAX_BATCH, Parser, can_write, command, in_range, input_file, out_folder
from dtrain.workloads.lanes.data import load_image, normalize, rgb_frame, split_lines
from dtrain.workloads.lanes.masks import decode_lanes
from dtrain.workloads.lanes.recipes import native_bf16, precision_name
from dtrain.workloads.lanes.metric import MAX_RUN_TIME_MS, evaluate
from dtrain.workloads.lanes.model import SCNN, SCNNConfig, probabilities
from dtrain.workloads.lanes.tusimple import SPLIT_FILES, TASKS_FILE, LaneLabel, read_labels, write_labels

LANE_COLOURS = ((255, 64, 64), (64, 220, 64), (64, 128, 255), (255, 200, 0), (230, 64, 230))
OVERLAY_SIZE = (640, 360)  # (W, H) of overlay images: small files, lanes still plain to see


class FrameSet(torch.utils.data.Dataset):
    """Normalised frames of a list of labels, for inference (no masks rendered)."""

    def __init__(self, root: str | os.PathLike, labels: Sequence[LaneLabel], size: tuple[int, int]) -> None:
        self.root, self.labels, self.size = Path(root), list(labels), size

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return normalize(load_image(self.root / self.labels[i].raw_file, self.size)), i


def split_labels(root: str | os.PathLike, split: str) -> list[LaneLabel]:
    """Every line of a split's label files, in file order (NotFoundError when its label file is missing): a
    frame labelled twice is predicted twice, so the predictions match the file line for line, as the official
    evaluation wants them."""
    return split_lines(root, split)


def frames_to_predict(root: str | os.PathLike, split: str) -> tuple[list[LaneLabel], str | None]:
    """The frames `predict` predicts, and the task file they come from when it is not the split's.

    The test split without test_label.json (a separate download) but with test_set.zip's
    test_tasks_0627.json is the benchmark's submission case: its frames are predicted, unscored."""
    tasks = Path(root) / TASKS_FILE
    if split == "test" and not any((Path(root) / name).is_file() for name in SPLIT_FILES["test"]) and tasks.is_file():
        return read_labels(tasks, max_lanes=None), TASKS_FILE
    return split_labels(root, split), None


@torch.no_grad()
def predict_labels(model: torch.nn.Module, root: str | os.PathLike, labels: Sequence[LaneLabel], *,
                   batch_size: int = 8, threshold: float = 0.3, device: torch.device | str = "cpu",
                   num_workers: int = 0, bf16: bool | None = None) -> list[LaneLabel]:
    """Predicted lanes of every labelled frame, as TuSimple prediction labels in the same order.

    `bf16`: bfloat16 autocast, frames channels-last; None: where the device computes bf16 natively
    (CUDA, a CPU with AMX-BF16 or AVX512-BF16).
    """
    device = torch.device(device)
    bf16 = native_bf16(device) if bf16 is None else bf16
    layout = torch.channels_last if bf16 else torch.contiguous_format
    was_training = model.training
    model.eval()
    size = model.cfg.input_size
    loader = torch.utils.data.DataLoader(FrameSet(root, labels, size), batch_size=batch_size, num_workers=num_workers)
    out: list[LaneLabel] = []

    def run(img: torch.Tensor):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16 and device.type in ("cuda", "cpu")):
            prob, exist = probabilities(model, img.to(device, memory_format=layout))
        return prob.cpu().numpy(), exist.cpu().numpy()

    warmed: set[tuple[int, ...]] = set()
    for img, idx in loader:
        if tuple(img.shape) not in warmed:
            # One untimed pass first for each batch shape: the first call's one-time set-up (kernel
            # choice, buffers, lazy initialisation) is no frame's run time, and a new shape (the last,
            # partial batch) sets up again. The official metric scores a frame over 200 ms as wrong,
            # so without this a loaded machine failed the first batch, and then the last one.
            run(img)
            warmed.add(tuple(img.shape))
        start = time.perf_counter()
        prob, exist = run(img)
        lanes = [decode_lanes(prob[k], exist[k], labels[i].h_samples, threshold=threshold) for k, i in enumerate(idx.tolist())]
        ms = (time.perf_counter() - start) * 1000 / len(idx)
        for i, lane in zip(idx.tolist(), lanes):
            out.append(LaneLabel(raw_file=labels[i].raw_file, h_samples=labels[i].h_samples,
                                 lanes=tuple(tuple(x) for x in lane), run_time=round(ms, 2)))
    model.train(was_training)
    return out


def checkpoint_fix() -> str:
    return f"pass OUT_DIR/model.pt or a ckpt-<step>.pt that '{command('lanes', 'train')}' wrote"


def load_model(path: str | os.PathLike, device: torch.device | str = "cpu") -> SCNN:
    """An SCNN from a training checkpoint (ckpt-<step>.pt) or a final model.pt."""
    fix = checkpoint_fix()
    input_file(path, "checkpoint", fix)
    try:
        state = load_checkpoint(path, map_location="cpu")
    except DataError as e:  # torch explains over many lines; the kind of fault is enough here
        why = type(e.__cause__).__name__ if e.__cause__ is not None else "unreadable"
        raise DataError(f"{path} cannot be loaded as a checkpoint ({why}: not a file torch.save wrote, "
                        f"or a damaged one): {fix}") from None
    if isinstance(state, dict) and isinstance(state.get("extra"), dict) and "model_config" in state["extra"]:
        state = {**state, "model_config": state["extra"]["model_config"]}  # a Checkpointer file
    if not isinstance(state, dict) or "model" not in state or not isinstance(state.get("model_config"), dict):
        raise DataError(f"{path} is not an SCNN checkpoint (no 'model'/'model_config'): {fix}")
    try:
        cfg = dict(state["model_config"])
        cfg["input_size"] = tuple(cfg["input_size"])
        model = SCNN(SCNNConfig(**cfg))
        model.load_state_dict(state["model"])
    except (TypeError, ValueError, KeyError, RuntimeError) as e:  # another model's keys or shapes
        why = f"its model_config has no {e.args[0]!r}" if isinstance(e, KeyError) else first_fault(e)
        raise DataError(f"{path} does not hold an SCNN this code builds ({why}): {fix}") from None
    return model.to(device).eval()


def draw_overlay(root: str | os.PathLike, pred: LaneLabel, gt: LaneLabel | None, path: str | os.PathLike) -> None:
    """The frame with predicted lanes in colour (dots at the h_samples) and GT lanes as thin black lines."""
    with Image.open(Path(root) / pred.raw_file) as im:
        frame = rgb_frame(im, Path(root) / pred.raw_file).copy()  # a copy outlives the file
    sx, sy = OVERLAY_SIZE[0] / frame.width, OVERLAY_SIZE[1] / frame.height
    frame = frame.resize(OVERLAY_SIZE, Image.BILINEAR)
    draw = ImageDraw.Draw(frame)

    def points(label: LaneLabel, lane: Sequence[int]) -> list[tuple[float, float]]:
        return [(x * sx, y * sy) for x, y in zip(lane, label.h_samples) if x >= 0]

    for lane in gt.lanes if gt is not None else ():
        if len(pts := points(gt, lane)) > 1:
            draw.line(pts, fill=(0, 0, 0), width=1)  # black shows on paint and asphalt alike
    for k, lane in enumerate(pred.lanes):
        pts = points(pred, lane)
        colour = LANE_COLOURS[k % len(LANE_COLOURS)]
        if len(pts) > 1:
            draw.line(pts, fill=colour, width=3)
        for x, y in pts:
            draw.ellipse((x - 2.5, y - 2.5, x + 2.5, y + 2.5), fill=colour)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with replacing(path, "wb") as f:  # a link at `path` is replaced, never written through
        frame.save(f, format="PNG")


def overlay_name(raw_file: str) -> str:
    return raw_file.removeprefix("clips/").removesuffix(".jpg").replace("/", "_") + ".png"


def check_out_file(path: str | os.PathLike, data_dir: str | os.PathLike,
                   checkpoint: str | os.PathLike | None = None) -> Path:
    """--out as a file path predictions can replace whole; SpecError before any work when it cannot be.

    Predictions never go into the dataset folder (its labels, lists, masks and prepare.json are
    what the next run reads) nor onto the checkpoint they come from: either would be lost."""
    path = Path(path)
    if path.is_dir():
        raise SpecError(f"--out {path} is a folder: give a file path for the predictions, e.g. {path / 'pred.json'}")
    target, data = path.resolve(), Path(data_dir).resolve()
    if target.is_relative_to(data):
        raise SpecError(f"--out {path} lies inside --data-dir {data_dir}: predictions would replace or mix with "
                        "the dataset's files; give a file outside it, e.g. pred.json")
    if checkpoint is not None and path.exists() and Path(checkpoint).exists() and os.path.samefile(path, checkpoint):
        raise SpecError(f"--out {path} is the --checkpoint it predicts with: predictions would replace the "
                        "model; give another file, e.g. pred.json")
    out_folder(path.parent, f"--out {path}: its folder")
    if not os.access(path.parent, os.W_OK):
        raise SpecError(f"--out {path}: its folder cannot be written (permission denied): give a folder you can write to")
    can_write(path.parent, f"--out {path}: its folder")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog="dtrain lanes predict", description="Predict lanes of a split in TuSimple format.")
    # --checkpoint and --out are required after the numbers are checked (parser.require): those are named first
    parser.add_argument("--checkpoint", help="model.pt or ckpt-<step>.pt written by training (required)")
    parser.add_argument("--data-dir", default=os.environ.get("DATA_DIR", "/mnt/tusimple"), help="prepared TuSimple folder")
    parser.add_argument("--split", default="test", choices=sorted(SPLIT_FILES), help="which split (default test)")
    parser.add_argument("--out", help="prediction file to write (JSON lines; required)")
    parser.add_argument("--overlays", help="folder for overlay PNGs")
    parser.add_argument("--max-overlays", type=int, default=20, help="overlay images to write at most")
    parser.add_argument("--batch-size", type=int, default=8, help="frames per forward pass (default 8)")
    parser.add_argument("--threshold", type=float, default=0.3, help="lane probability needed for a point")
    parser.add_argument("--limit", type=int, help="predict only the first N frames")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu or cuda")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction,
                        help="bfloat16 autocast (default: where the device computes it natively; --no-bf16: float32)")
    parser.add_argument("--keep-heap", action=argparse.BooleanOptionalAction, default=True,
                        help="keep freed memory mapped between batches (default on; glibc only)")
    parser.add_argument("--json", action="store_true", help="print the metric as one JSON object")
    args = parser.parse_args(argv)
    for flag, value, low, high in (("--max-overlays", args.max_overlays, 0, 100_000),
                                   ("--batch-size", args.batch_size, 1, MAX_BATCH),
                                   ("--threshold", args.threshold, 0.0, 1.0),
                                   ("--limit", 1 if args.limit is None else args.limit, 1, 1_000_000)):
        in_range(flag, value, low, high)
    parser.require(args, "--checkpoint", "--out")

    try:
        device = torch.device(args.device)
    except RuntimeError:
        parser.error(f"--device {args.device!r} is not a device: give cpu or cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA GPU is visible here: give --device cpu")
    if device.type not in ("cpu", "cuda"):
        parser.error(f"--device {args.device}: predict runs on cpu or cuda")
    bf16 = native_bf16(device) if args.bf16 is None else args.bf16
    # The frames first and the checkpoint file before --overlays, so that a run refused for its inputs
    # creates no folder of theirs (a missing --data-dir: none at all); the model is loaded after.
    labels, tasks = frames_to_predict(args.data_dir, args.split)
    out = check_out_file(args.out, args.data_dir, args.checkpoint)
    input_file(args.checkpoint, "checkpoint", checkpoint_fix())
    if args.overlays:
        can_write(out_folder(args.overlays, "--overlays"), "--overlays")
    # Every batch allocates and frees the same activations, as a training step does: with glibc's
    # defaults a 512x288 batch of 8 (width 0.125) faulted ~100,000 pages in again each time, and
    # its forward, the run_time the metric reads, took 0.57 s against 0.43 s with them kept (0
    # faults; one thread, the 3rd to 5th batch). Set before the model is built, so its tensors follow it.
    heap = keep_freed_memory() if args.keep_heap else "off"
    model = load_model(args.checkpoint, device)
    labels = labels[: args.limit]
    if not labels:
        raise DataError(f"split {args.split!r} of {args.data_dir} holds no frames "
                        f"({tasks or ', '.join(SPLIT_FILES[args.split])} is empty): give a split with frames")
    if tasks:
        print(f"no {', '.join(SPLIT_FILES['test'])} in {args.data_dir}: predicting the {len(labels)} frames of "
              f"{tasks} (a submission; no metric without the labels)", file=sys.stderr)
    preds = predict_labels(model, args.data_dir, labels, batch_size=args.batch_size, threshold=args.threshold,
                           device=device, bf16=bf16)
    write_labels(out, preds)
    print(f"wrote {len(preds)} predictions to {args.out} ({precision_name(device, bf16)}, "
          f"freed memory kept: {heap})", file=sys.stderr)
    if args.overlays:
        for pred, gt in list(zip(preds, labels))[: args.max_overlays]:
            draw_overlay(args.data_dir, pred, gt if gt.lanes else None, Path(args.overlays) / overlay_name(pred.raw_file))
        print(f"wrote {min(len(preds), args.max_overlays)} overlays to {args.overlays}", file=sys.stderr)
    if any(label.lanes for label in labels):
        result = evaluate(preds, labels,
                          warn=lambda text: print(f"dtrain lanes predict: warning: {text}", file=sys.stderr))
        result["run_time_ms"] = round(sum(p.run_time for p in preds) / max(len(preds), 1), 2)
        slow = sum((p.run_time or 0.0) > MAX_RUN_TIME_MS for p in preds)
        if slow:  # the official rule: else a loaded machine reads as a worse model
            print(f"dtrain lanes predict: warning: {slow} of {len(preds)} frames took over "
                  f"{MAX_RUN_TIME_MS:g} ms and are scored as misses (the official rule), however right their "
                  f"lanes; a loaded machine slows prediction", file=sys.stderr)
        print(json.dumps(result) if args.json else
              f"accuracy {result['accuracy']:.4f}  fp {result['fp']:.4f}  fn {result['fn']:.4f}  "
              f"frames {result['frames']}  run_time {result['run_time_ms']} ms/frame")
    return 0


if __name__ == "__main__":
    sys.exit(main())
