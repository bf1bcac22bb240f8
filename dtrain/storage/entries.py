"""One path of a snapshot (Entry), the kinds of file a manifest records, and the checks that a
manifest's rows can be restored as they say, made in bulk when one is loaded (manifest.py);
LazyEntries (entries loaded on first use) and hard_links (paths that were one file).
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from itertools import chain, compress, repeat
from operator import itemgetter, not_
from typing import NamedTuple

# Special files are kept as `cp -a`, `rsync -a`, tar and restic keep them: a fifo a job made
# for its workers was dropped with a warning only the CLI printed, and missing after a restore.
SPECIALS = {stat.S_IFIFO: "fifo", stat.S_IFSOCK: "socket", stat.S_IFCHR: "chardev", stat.S_IFBLK: "blockdev"}
DEVICES = {"chardev": stat.S_IFCHR, "blockdev": stat.S_IFBLK}
KINDS = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink", **SPECIALS}
_KIND_NAMES = set(KINDS.values())
_SPECIAL_NAMES = set(SPECIALS.values())
_DEVICE_NUMBER = re.compile(r"[0-9]{1,10}:[0-9]{1,10}")


class Entry(NamedTuple):
    """One path of a snapshot. A tuple, stored as a JSON array in this field order: loading
    and comparing ten thousand of them must cost milliseconds (incremental snapshots)."""

    path: str  # relative to the volume root, '/'-separated; '.' is the root itself
    kind: str  # 'file', 'dir', 'symlink', or a special file: 'fifo', 'socket', 'chardev', 'blockdev'
    mode: int  # permission bits, setuid/setgid/sticky included
    uid: int  # owner, restored when running as root
    gid: int  # group, restored when running as root
    mtime_ns: int  # modification time, restored exactly
    size: int = 0  # bytes of a file
    # a file's chunk digests (in order; see hashing.py) or unhashed id; a symlink's target; a
    # device node's 'major:minor'
    data: list[str] | str = ""
    ino: int = 0  # inode at capture: with ctime_ns, tells an unchanged file without reading it
    ctime_ns: int = 0  # 0 forces the next snapshot to read the file again

    @property
    def chunks(self) -> list[str]:
        return self.data if self.kind == "file" else []

    @property
    def target(self) -> str:
        """What a symlink points to (never followed)."""
        return self.data if self.kind == "symlink" else ""

    @property
    def device(self) -> int:
        """A device node's number (st_rdev); 0 for anything else."""
        if self.kind not in DEVICES:
            return 0
        major, minor = self.data.split(":")
        return os.makedev(int(major), int(minor))


FIELDS = Entry._fields
# a path component that is empty, '.' or '..' (an absolute path starts with an empty one), in
# paths joined by NUL (which no name holds)
_BAD_PART = re.compile(r"(?:^|\0|/)\.{0,2}(?=/|\0|$)")


def _check_entries(rows: list) -> None:
    """TypeError unless every row can be restored as it says: relative paths with no '..' and
    no empty part (a damaged manifest must never lead a restore out of its folder) and known
    kinds. In bulk: a check per entry cost as much as loading it."""
    listed = [r[0] for r in rows if r[0] != "."]
    paths = "\0".join(listed)  # TypeError if one is not a string
    if "" in listed:
        raise TypeError("an empty path")
    # each separator one NUL, so a bad part is 0-2 dots between two: plain substring searches, 1.5 ms
    # of CPU for 15,000 paths against _BAD_PART's 8.3, which then only names the path
    flat = f"\0{paths}\0".replace("/", "\0")
    if paths and ("\0\0" in flat or "\0.\0" in flat or "\0..\0" in flat) and (bad := _BAD_PART.search(paths)):
        start = paths.rfind("\0", 0, bad.start() + 1) + 1
        end = paths.find("\0", bad.end())
        raise TypeError(f"path {paths[start:end if end >= 0 else None][:80]!r} has an empty, '.' or '..' part")
    kinds = {r[1] for r in rows}
    if not kinds <= _KIND_NAMES:
        raise TypeError(f"unknown kind among {sorted({str(r[1]) for r in rows} - _KIND_NAMES)[:3]}")
    if kinds & DEVICES.keys():
        for r in rows:
            if r[1] in DEVICES and not (len(r) > 7 and isinstance(r[7], str) and _DEVICE_NUMBER.fullmatch(r[7])):
                raise TypeError(f"device {str(r[0])[:80]!r} has no 'major:minor' number")


# the fields a restore writes as they are, and what the system calls take (inode and ctime are only
# compared with what a later walk sees: any value of them merely has the file read again)
_WHOLE = (("mode", 0, 0o7777), ("uid", 0, 2**32 - 2), ("gid", 0, 2**32 - 2), ("mtime_ns", -2**63, 2**63 - 1),
          ("size", 0, 2**63 - 1))


def _check_fields(entries: tuple[Entry, ...]) -> None:
    """TypeError unless every entry's fields are what a restore writes as they say (a manifest
    edited by hand: a mode 'rwx', a uid 'root', a link target that is no text crashed a restore
    half way), every path is listed once and every path's folder is listed as a folder (else a
    restore failed half way on a bare errno, and a file listed under a link that points out of
    the volume was kept from being written there only by O_NOFOLLOW, while verify called such a
    snapshot sound). In bulk, C-level passes over columns: a loop per entry doubled the load."""
    if not entries:
        return
    for name, low, high in _WHOLE:
        at = FIELDS.index(name)
        column = tuple(map(itemgetter(at), entries))
        if set(map(type, column)) != {int} or min(column) < low or max(column) > high:
            e = next(e for e in entries if type(e[at]) is not int or not low <= e[at] <= high)
            raise TypeError(f"path {e.path[:80]!r} has {name} {str(e[at])[:40]!r}, not a whole number from "
                            f"{low} to {high}")
    paths, kinds = tuple(map(itemgetter(0), entries)), tuple(map(itemgetter(1), entries))
    data = tuple(map(itemgetter(FIELDS.index("data")), entries))
    is_file = tuple(map("file".__eq__, kinds))
    files = tuple(compress(data, is_file))
    if set(map(type, files)) - {list} or set(map(type, chain.from_iterable(files))) - {str}:
        e = next(e for e in entries if e.kind == "file" and not (type(e.data) is list
                                                                and all(type(c) is str for c in e.data)))
        raise TypeError(f"file {e.path[:80]!r} has content {str(e.data)[:40]!r}, not a list of object names")
    if set(map(type, compress(data, map(not_, is_file)))) - {str}:
        e = next(e for e in entries if e.kind != "file" and type(e.data) is not str)
        raise TypeError(f"{e.kind} {e.path[:80]!r} has data {str(e.data)[:40]!r}, not text")
    if len(set(paths)) != len(paths):
        seen: set[str] = set()
        twice = next(p for p in paths if p in seen or seen.add(p))
        raise TypeError(f"path {twice[:80]!r} is listed twice")
    folders = set(compress(paths, map("dir".__eq__, kinds)))
    # str.rpartition over repeat('/'): 2.0 ms of CPU for 15,000 paths, methodcaller's call per path 3.2
    if stray := set(map(itemgetter(0), map(str.rpartition, paths, repeat("/")))) - folders - {""}:
        raise TypeError(f"path {min(stray)[:80]!r} holds entries but is not listed as a folder")


def _checked_xattrs(xattrs) -> dict[str, dict[str, str]] | None:
    """TypeError unless `xattrs` maps paths to {name: base64 value} (a damaged manifest must never
    crash a restore)."""
    if xattrs is None:
        return None
    if not (isinstance(xattrs, dict) and all(isinstance(v, dict) and all(isinstance(n, str) and isinstance(x, str)
                                                                        for n, x in v.items())
                                             for v in xattrs.values())):
        raise TypeError("xattrs are not a map of paths to names and values")
    return xattrs


class LazyEntries(Sequence):
    """A manifest's entries, loaded on first use (then kept): read from a read-only subvolume
    (native.py), or from a stored manifest that an unchanged tree shares (engine.py)."""

    def __init__(self, load: Callable[[], tuple[Entry, ...]]):
        self._load, self._entries, self._lock = load, None, threading.Lock()

    def _get(self) -> tuple[Entry, ...]:
        with self._lock:
            if self._entries is None:
                self._entries = self._load()
            return self._entries

    def __getitem__(self, i):
        return self._get()[i]

    def __len__(self) -> int:
        return len(self._get())

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._get())

    def __eq__(self, other) -> bool:
        return tuple(self._get()) == tuple(other)

    __hash__ = None


def hard_links(entries: Sequence[Entry]) -> dict[str, str]:
    """Paths that were one file (hard links to one inode) at capture: each later path -> the
    first one, in path order. Two entries count as one file only when every field they share
    agrees: inode, ctime, size, mtime, mode, owner and content. A file removed mid-capture whose
    inode number a new file took has another ctime or content, and stays a file of its own; an
    entry with ctime 0 (a file that changed while read) never joins one."""
    seen: dict[int, int] = {}
    for e in entries:
        if e.kind == "file" and e.ino and e.ctime_ns:
            seen[e.ino] = seen.get(e.ino, 0) + 1
    if all(n == 1 for n in seen.values()):  # the usual volume: no inode under two paths
        return {}
    first: dict[tuple, str] = {}
    links = {}
    for e in entries:
        if e.kind == "file" and seen.get(e.ino, 0) > 1 and e.ctime_ns:
            data = tuple(e.data) if isinstance(e.data, list) else e.data
            key = (e.ino, e.ctime_ns, e.size, e.mtime_ns, e.mode, e.uid, e.gid, data)
            if key in first:
                links[e.path] = first[key]
            else:
                first[key] = e.path
    return links
