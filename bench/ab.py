"""What the A/B scripts share: two checkouts, interleaved runs, one report; and the bounds
check every bench script gives its numbers."""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from dtrain.names import counted
from dtrain.workloads.inputs import Parser as _WholeFlags


class Parser(_WholeFlags):
    """Every bench script's parser: flags whole, as the dtrain CLI and the workloads take them (`--rep 3`
    is refused naming --repeats, where argparse ran with --repeats), a usage error on one line; numbers
    stay plain int and float, as the scripts' bounds checks read them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("type", int, int)
        self.register("type", float, float)


def checkout(text: str) -> Path:
    """An argparse type: a folder holding the dtrain package. The scripts put it first on
    PYTHONPATH, and where it holds none Python would quietly import the installed dtrain, so an
    A/B against a mistyped path would time one checkout against itself."""
    path = Path(text)
    if not (path / "dtrain" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a dtrain checkout (it holds no dtrain/__init__.py): "
                                         "give a clone or a 'git worktree add' folder")
    return path


def add_checkouts(parser: argparse.ArgumentParser, *, repeats: int, unit: str) -> None:
    """--old, --new and --repeats (1-1000 `unit` per checkout)."""
    parser.add_argument("--old", type=checkout, required=True, help="a checkout of the code before")
    parser.add_argument("--new", type=checkout, required=True, help="a checkout of the code after")
    parser.add_argument("--repeats", type=int, default=repeats, help=f"{unit} per checkout (1-1000)")


def bounded(parser: argparse.ArgumentParser, *checks: tuple[str, int, int, int]) -> None:
    """(flag, value, lowest, highest) each: the first value out of range ends the script with
    one line naming the flag and the range (argparse's exit 2)."""
    for flag, value, lo, hi in checks:
        if not lo <= value <= hi:
            parser.error(f"{flag} {value} is out of range: give {lo} to {hi}")


def size(parser: argparse.ArgumentParser, text: str, *, lo: int = 16, hi: int = 4096) -> tuple[int, int]:
    """--size WIDTHxHEIGHT as (width, height), each `lo` to `hi`, or one line naming the problem."""
    w, _, h = text.lower().partition("x")
    if not (w.isdigit() and h.isdigit()):
        parser.error(f"--size {text!r} is not WIDTHxHEIGHT: give e.g. 512x288")
    bounded(parser, ("--size width", int(w), lo, hi), ("--size height", int(h), lo, hi))
    return int(w), int(h)


def device(parser: argparse.ArgumentParser, text: str):
    """--device as a torch.device this machine has, or one line naming the problem: a CUDA device
    asked for where there is none would otherwise end in a traceback, or a run labelled cuda
    that ran on the CPU."""
    import torch

    try:
        dev = torch.device(text)
    except (RuntimeError, ValueError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        parser.error(f"--device {text!r} is not a device: give cpu, cuda or cuda:N")
    if dev.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {text}: this torch ({torch.__version__}) sees no CUDA device: give --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        n = torch.cuda.device_count()
        parser.error(f"--device {text}: this machine has {counted(n, 'CUDA device')}: give cuda:0 to cuda:{n - 1}")
    return dev


def output_file(parser: argparse.ArgumentParser, path, flag: str = "--json") -> None:
    """A file the script writes when it has finished: refused now, in one line, where it cannot
    be written then, instead of a traceback that loses the figures of a long run."""
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        parser.error(f"{flag} {path} is a folder: give a file name")
    if not path.parent.is_dir():
        parser.error(f"{flag} {path}: there is no folder {path.parent}: make it first")


def checked(parser: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    args = parser.parse_args(argv)
    bounded(parser, ("--repeats", args.repeats, 1, 1000))
    return args


def order(i: int, sides: tuple[str, str] = ("old", "new")) -> tuple[str, str]:
    """Which side (by default: which checkout) goes first in round `i`: they take turns."""
    return sides if i % 2 == 0 else sides[::-1]


def report(wall: dict[str, list[float]], inside: dict[str, list[float]] | None = None) -> None:
    for k in ("old", "new"):
        within = f", in process {statistics.median(inside[k]) * 1000:.0f} ms" if inside and inside[k] else ""
        print(f"{k}: median wall {statistics.median(wall[k]) * 1000:.0f} ms (fastest {min(wall[k]) * 1000:.0f} ms)"
              f"{within}")
    print(f"old / new (median wall): {statistics.median(wall['old']) / statistics.median(wall['new']):.2f}x")
