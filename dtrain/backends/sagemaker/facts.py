"""What dtrain remembers of a training job between calls, so `list` need not ask AWS again.

Two facts stay true once read: the spec dtrain stored beside the code at submit (never written
again: a job's name is never reused) and the description of a job that has ended (Completed,
Failed, Stopped: it changes again only with its LastModifiedTime, which ListTrainingJobs shows).
An entry is kept per job under $DTRAIN_HOME/sagemaker-facts/REGION-ACCOUNT/NAME.json, and in
memory; it counts only for the job it was written for (the same ARN and creation time). A file
that is missing, damaged or not ours is a miss, never an error: the facts are read from AWS again.
"""

from __future__ import annotations

import json
import os
import re
import stat
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

from dtrain.replace import open_regular, replace_file

ROOT = "sagemaker-facts"
MAX_ENTRY = 4 * 2**20  # bytes: a description holds at most 100 hyperparameters of 2500 characters
ENDED = {"Completed", "Failed", "Stopped"}  # TrainingJobStatus that no run of the job leaves
_ARN = re.compile(r"^arn:[a-z-]+:sagemaker:([a-z0-9-]{1,32}):(\d{12}):training-job/([a-z0-9][a-z0-9-]{0,62})\Z")
_DROPPED = ("ResponseMetadata", "Environment")  # neither read by dtrain; Environment may hold secrets


def plain(desc: dict) -> dict:
    """A DescribeTrainingJob answer as JSON can hold it: times as unix seconds (status.seconds reads both)."""
    def conv(v: Any) -> Any:
        if isinstance(v, datetime):
            return v.timestamp()
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [conv(x) for x in v]
        return v
    return {k: conv(v) for k, v in desc.items() if k not in _DROPPED}


def _when(value: Any) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def settled(desc: dict, summary: dict) -> bool:
    """Whether a remembered description is still what DescribeTrainingJob would answer: the job had
    ended when it was read, and ListTrainingJobs shows the same status and modification time."""
    return (desc.get("TrainingJobStatus") in ENDED and desc.get("TrainingJobStatus") == summary.get("TrainingJobStatus")
            and _when(summary.get("LastModifiedTime")) is not None
            and _when(desc.get("LastModifiedTime")) == _when(summary.get("LastModifiedTime"))
            and _when(desc.get("TrainingEndTime")) == _when(summary.get("TrainingEndTime")))


class JobFacts:
    """Entries {"arn", "created", "spec"?, "desc"?} by ARN; on disk too when given a dtrain home."""

    def __init__(self, home: Path | None):
        self.root = home / ROOT if home is not None else None
        self._mem: dict[str, dict] = {}
        self._ours: set[Path] = set()  # folders found to be real folders (no links) by this process

    def _path(self, arn: str) -> Path | None:
        m = _ARN.match(arn or "")
        if m is None or self.root is None:
            return None
        return self.root / f"{m.group(1)}-{m.group(2)}" / f"{m.group(3)}.json"

    def get(self, arn: Any, created: Any) -> dict:
        """The entry of the job with this ARN and creation time; {} when none is known."""
        when = _when(created)
        if not isinstance(arn, str) or when is None:
            return {}
        entry = self._mem.get(arn)
        if entry is None:
            path = self._path(arn)
            entry = _read(path) if path is not None else None
        if not isinstance(entry, dict) or entry.get("arn") != arn or entry.get("created") != when:
            return {}
        self._mem[arn] = entry
        return entry

    def put(self, arn: Any, created: Any, **facts: Any) -> None:
        """Add facts to the job's entry (memory always; the file when the folder is safely ours)."""
        when = _when(created)
        if not isinstance(arn, str) or when is None:
            return
        entry = {**self.get(arn, when), **facts, "arn": arn, "created": when}
        self._mem[arn] = entry
        path = self._path(arn)
        if path is not None and (path.parent in self._ours or _own_folder(path.parent)):
            self._ours.add(path.parent)
            try:
                replace_file(path, json.dumps(entry))
            except (OSError, TypeError, ValueError):
                pass  # a full disk, a read-only home, a value JSON cannot hold: read from AWS next time

    def names(self, region: str) -> set[str]:
        """The names of the jobs in `region` that an entry is kept for (those `list` or `describe`
        read), in memory or on disk: what AWS has, as last seen, without asking it."""
        found = {m.group(3) for m in map(_ARN.match, self._mem) if m and m.group(1) == region}
        if self.root is None:
            return found
        try:
            folders = [f for f in os.listdir(self.root) if re.fullmatch(rf"{re.escape(region)}-\d{{12}}", f)]
            for folder in folders:
                found.update(n[:-5] for n in os.listdir(self.root / folder) if n.endswith(".json"))
        except OSError:  # no facts kept yet, or a folder not ours to read
            pass
        return found

    def regions(self, name: str) -> set[str]:
        """The regions whose kept facts name a job `name` (of any account), in memory or on disk."""
        return self._regions(name)

    def seen_regions(self) -> set[str]:
        """The regions whose kept facts name any job (of any account), in memory or on disk."""
        return self._regions(None)

    def _regions(self, name: str | None) -> set[str]:
        """The regions of the kept facts of job `name`, or (None) of any job."""
        found = {m.group(1) for m in map(_ARN.match, self._mem) if m and name in (None, m.group(3))}
        try:
            folders = os.listdir(self.root) if self.root is not None else []
            found.update(m.group(1) for f in folders if (m := re.fullmatch(r"([a-z0-9-]+)-\d{12}", f))
                         and (os.path.isfile(self.root / f / f"{name}.json") if name is not None
                              else any(n.endswith(".json") for n in os.listdir(self.root / f))))
        except OSError:  # no facts kept yet, or a folder not ours to read
            pass
        return found

    def keep_only(self, arns: Iterable[str]) -> None:
        """Forget the files of jobs a listing no longer shows, in the folders of the jobs it showed."""
        keep = {p for p in map(self._path, arns) if p is not None}
        for folder in {p.parent for p in keep}:
            if not _own_folder(folder, make=False):
                continue
            try:
                names = [n for n in os.listdir(folder) if n.endswith(".json")]
            except OSError:
                continue
            for name in names:
                if folder / name not in keep:
                    try:
                        os.unlink(folder / name)
                    except OSError:
                        pass


def _own_folder(folder: Path, *, make: bool = True) -> bool:
    """The facts folder and its parent are real folders (made here when missing), never links."""
    for path in (folder.parent, folder):
        try:
            if make:
                path.mkdir(mode=0o700, exist_ok=True)
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                return False
        except OSError:
            return False
    return True


def _read(path: Path) -> Any:
    """A file's JSON: a regular file (no link, no fifo) of at most MAX_ENTRY bytes; None otherwise."""
    f = open_regular(path)
    if f is None:
        return None
    with f:
        try:
            if os.fstat(f.fileno()).st_size > MAX_ENTRY:
                return None
            return json.loads(f.read(MAX_ENTRY + 1))
        except (OSError, ValueError):
            return None
