"""Rank 0's checks of what a run writes, and the one all-reduce after which every rank stops on its refusal.

Under torchrun only rank 0 checks that the output folders take files, that no link was planted at a file it
appends to, and takes the lock that makes it the one training writing them. A refusal only rank 0 raised left
the other ranks waiting in their first collective until the timeout, saying nothing useful. Rank0Checks runs
those checks on rank 0 and keeps the first refusal as one number (what rank 0 found, at which of the run's
places, and the errno), and stop_together all-reduces it: rank 0 raises its own error, every other rank one
line naming what rank 0 found there. One process: no collective.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dtrain.errors import ConflictError, DtrainError, SpecError
from dtrain.training import DistInfo, max_over_ranks

# What rank 0 found (the all-reduced number's low bits).
HELD, LINK, UNWRITABLE, FAILED = 1, 2, 3, 4
_FOUND_BITS, _PLACE_BITS = 3, 8


@dataclass(frozen=True)
class Place:
    """A file or folder the run writes, as every rank names it, and the fix a refusal there names
    ('give this run another --out-dir'). A lock's place is the file locked: its folder is the one held."""

    path: Path
    fix: str


def encode(found: int, place: int, err: int = 0) -> int:
    return found | place << _FOUND_BITS | err << (_FOUND_BITS + _PLACE_BITS)


def decode(code: int) -> tuple[int, int, int]:
    """(found, place, errno) of encode's number."""
    return (code & (1 << _FOUND_BITS) - 1, code >> _FOUND_BITS & (1 << _PLACE_BITS) - 1,
            code >> (_FOUND_BITS + _PLACE_BITS))


def found_in(e: BaseException, declared: int) -> tuple[int, int]:
    """(what rank 0 found, errno or 0) for the error a check raised: a lock another process holds (ConflictError),
    a symbolic link (ELOOP: open_append's O_NOFOLLOW), a file or folder that takes no write (any other OSError,
    also one a check turned into its own line, as can_write does), else what the check declares it finds."""
    if isinstance(e, ConflictError):
        return HELD, 0
    cause = e if isinstance(e, OSError) else e.__context__  # can_write's SpecError is raised in its except
    err = cause.errno if isinstance(cause, OSError) and isinstance(cause.errno, int) else 0
    if err == errno.ELOOP:
        return LINK, 0
    if isinstance(e, OSError):
        return UNWRITABLE, err
    if isinstance(e, DtrainError):
        return declared, err
    return FAILED, 0


def refusal(code: int, places: Sequence[Place], rank: int) -> DtrainError:
    """The line of a rank that stops because rank 0 found what `code` says."""
    found, index, err = decode(code)
    place = places[index]
    stops = f"so rank {rank} stops too"
    if found == HELD:
        return ConflictError(f"rank 0 found another training writing {place.path.parent}, {stops}: wait for it to "
                             f"end, or {place.fix}")
    if found == LINK:
        return SpecError(f"rank 0 found a symbolic link at {place.path}, {stops}: remove the link, or {place.fix}")
    if found == UNWRITABLE:
        why = f" ({os.strerror(err)})" if err else ""
        return SpecError(f"rank 0 found that {place.path} cannot be written{why}, {stops}: use a folder you can "
                         f"write to, with free space, or {place.fix}")
    return SpecError(f"rank 0 stopped on an error at {place.path} (rank 0's own line names it), {stops}")


class Rank0Checks:
    """Checks only rank 0 makes, then one all-reduce every rank calls (stop_together)."""

    def __init__(self, info: DistInfo, places: Sequence[Place]) -> None:
        if len(places) > 1 << _PLACE_BITS:
            raise ValueError(f"{len(places)} places: at most {1 << _PLACE_BITS}")
        self.info, self.places = info, list(places)
        self.error: BaseException | None = None
        self.code = 0

    def check(self, place: int, declared: int, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) on rank 0, before any refusal; None on the other ranks and after one. An error it raises is
        kept for stop_together, with what it found at `place` (found_in; `declared` for a DtrainError that is no
        lock, link nor errno of its own)."""
        if not self.info.is_main or self.error is not None:
            return None
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - every rank must reach the all-reduce; rank 0 raises it there
            what, err = found_in(e, declared)
            self.error, self.code = e, encode(what, place, err)
            return None

    def stop_together(self) -> None:
        """The one all-reduce: rank 0 raises its own error, every other rank the refusal naming what rank 0 found."""
        code = max_over_ranks(self.code, self.info.device)
        if self.error is not None:
            raise self.error
        if code:
            raise refusal(code, self.places, self.info.rank)
