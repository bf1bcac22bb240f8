"""Checkpoints that are either complete on disk or absent.

A job killed mid-save (preemption, OOM, a node lost) must never leave a file
that `latest_checkpoint` would pick up and then fail to load. `save_atomic`
writes to a new hidden temp file in the target folder (same filesystem, so the
rename is atomic; `dtrain.replace`), fsyncs it, renames it over the target and
fsyncs the folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

from dtrain.errors import DataError, StorageError
from dtrain.numbers import plain_numbers
from dtrain.replace import replacing

CKPT_RE = re.compile(r"^ckpt-(\d+)\.pt\Z")  # complete checkpoints; temp files start with '.'


def checkpoint_path(folder: str | os.PathLike, step: int) -> Path:
    """The conventional name for the checkpoint of `step`: <folder>/ckpt-<step>.pt."""
    return Path(folder) / f"ckpt-{step}.pt"


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return  # some filesystems (and Windows) cannot open a folder; the rename is still atomic
    try:
        os.fsync(fd)
    except OSError:
        pass  # fsync on a folder is unsupported on some network filesystems
    finally:
        os.close(fd)


class _Writes:
    """A file object for torch.save that keeps the OSError of a failed write: torch's writer turns
    it into a RuntimeError ("[enforce fail at inline_container.cc] unexpected pos ..."), which says
    nothing of a full disk."""

    def __init__(self, f: Any) -> None:
        self.f, self.error = f, None

    def write(self, data: Any) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        try:
            self.f.flush()
        except OSError as e:
            self.error = e
            raise


def save_atomic(obj: Any, path: str | os.PathLike) -> None:
    """torch.save `obj` to `path` so that readers see the old file or the new one, never a part.

    StorageError (one line) when the disk refuses the write (full, read-only, forbidden): the old
    file is kept and the part written is removed."""
    path = Path(path)
    writes = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with replacing(path, "wb", durable=True) as f:
            writes = _Writes(f)
            # a flag's number keeps its typed text for a refusal (`--lr 5e-2`) and reaches the optimizer's
            # param_groups and the scheduler's base_lrs; torch.load(weights_only=True) refuses its class
            torch.save(plain_numbers(obj, in_place=True), writes)
    except OSError as e:
        raise StorageError(f"cannot write checkpoint {path}: {e.strerror or e}; check free space and permissions") from e
    except RuntimeError as e:
        if writes is None or writes.error is None:
            raise
        e = writes.error
        raise StorageError(f"cannot write checkpoint {path}: {e.strerror or e}; check free space and permissions") from e
    _fsync_dir(path.parent)


def latest_checkpoint(folder: str | os.PathLike) -> Path | None:
    """The complete checkpoint with the highest step in `folder` (ckpt-<step>.pt), or None."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    best: tuple[int, Path] | None = None
    for p in folder.iterdir():
        m = CKPT_RE.match(p.name)
        if m and p.is_file() and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), p)
    return best[1] if best else None


def load_checkpoint(
    path: str | os.PathLike, *, map_location: str | torch.device = "cpu", weights_only: bool = True
) -> Any:
    """torch.load a checkpoint written by save_atomic; DataError if it is not one.

    weights_only=True (the default) loads tensors, numbers, strings and containers
    of them only; pass False for checkpoints holding other objects from a trusted source.
    """
    path = Path(path)
    try:
        return torch.load(path, map_location=map_location, weights_only=weights_only)
    except FileNotFoundError:
        raise DataError(f"checkpoint {path} does not exist; list the folder or use latest_checkpoint()") from None
    except Exception as e:  # torch raises several unrelated types for a damaged file
        # torch explains over many lines (how to allow-list globals, ...): the first says what it is
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), "")[:200]
        raise DataError(
            f"checkpoint {path} cannot be loaded ({type(e).__name__}{': ' + first if first else ''}): it is damaged "
            f"or not a file torch.save wrote; use another checkpoint"
        ) from e
