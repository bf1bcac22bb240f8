"""What a snapshot records: one entry per path (type, mode, owner, mtime, content), and the
comparisons built on it (incremental reuse, diff).

A manifest is gzip'd JSON: a header plus one row per path, sorted, so a parent folder always
comes before what it holds. Paths are relative, '/'-separated, '.' for the volume's root;
names that are not UTF-8 survive through Python's surrogate escapes.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import stat
import struct
import sys
import re
import threading
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import chain, compress, repeat
from operator import itemgetter, not_
from pathlib import Path
from typing import NamedTuple

VERSION = 1  # what a manifest without special files is written as (every dtrain reads it)
VERSION_SPECIALS = 2  # one that holds fifos, sockets, device nodes or xattrs: older dtrain refuses it whole
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


# Manifests this process found sound, by the BLAKE2 digest of their bytes (at most SOUND_KEPT): the
# checks above cost a third of a parse (24 of 74 ms of CPU for 15,000 entries), and a verify parsed
# every manifest twice (its sweep, then its check), a server the same ones again and again. The same
# bytes pass the same checks, so they run once per manifest; a manifest edited since is other bytes.
_SOUND: dict[bytes, None] = {}
SOUND_KEPT = 4096


class Manifest(NamedTuple):
    """The full content of a volume at one point in time."""

    entries: Sequence[Entry]  # sorted by path: a tuple, or LazyEntries loaded on first use
    started_ns: int  # wall clock when the capture began: files changed later must be re-read
    chunk_size: int  # bytes per chunk of the files it lists
    id: str | None = None  # the stored manifest it was loaded from, if any
    subvolume: str | None = None  # a native snapshot: its read-only subvolume (native.py), entries read from it
    hash: str = "blake3"  # what new content was hashed with; each digest also names its algorithm
    # extended attributes (user.*, ACLs, capabilities) of files and folders: path -> {name: value
    # in base64}; only the paths that have some, so a volume without them costs nothing
    xattrs: Mapping[str, Mapping[str, str]] | None = None
    key: TreeKey | None = None  # the walk it was captured from (commit keeps it beside; not in the file)

    def digests(self) -> set[str]:
        """Store objects it needs (a native snapshot needs none: the subvolume holds its content)."""
        return set() if self.subvolume else {d for e in self.entries for d in e.chunks}

    def dump(self) -> bytes:
        specials = not self.subvolume and (bool(self.xattrs) or any(e.kind in _SPECIAL_NAMES for e in self.entries))
        body = {"version": VERSION_SPECIALS if specials else VERSION, "hash": self.hash, "chunk_size": self.chunk_size,
                "started_ns": self.started_ns, "fields": FIELDS,
                "entries": () if self.subvolume else tuple(self.entries)}
        if self.subvolume:
            body["subvolume"] = self.subvolume
        if self.xattrs and not self.subvolume:
            body["xattrs"] = self.xattrs
        return gzip.compress(json.dumps(body, separators=(",", ":")).encode(), compresslevel=1)

    @classmethod
    def parse(cls, blob: bytes, manifest_id: str | None = None) -> Manifest:
        """The manifest `blob` holds; ValueError for anything else (cut short, bytes flipped,
        not a manifest): callers treat a damaged manifest as one, never as a crash."""
        import hashlib  # here, not at start-up (see tree_key)

        sound = hashlib.blake2b(blob, digest_size=16).digest()
        checked = sound in _SOUND
        try:
            body = json.loads(gzip.decompress(blob))
        except (EOFError, OSError, zlib.error, UnicodeDecodeError, ValueError) as err:
            # EOFError: cut short; BadGzipFile (an OSError): not gzip; zlib.error: flipped bytes
            raise ValueError(f"unreadable manifest ({type(err).__name__}: {err})") from None
        if not isinstance(body, dict):
            raise ValueError("malformed manifest: not a JSON object")
        if body.get("version") not in (VERSION, VERSION_SPECIALS) or tuple(body.get("fields", ())) != FIELDS:
            raise ValueError(f"unsupported manifest version {body.get('version')!r}")
        try:
            rows = body["entries"]
            if not checked:
                _check_entries(rows)
            entries = tuple(map(Entry._make, rows))
            if not checked:
                _check_fields(entries)
            started_ns, chunk_size = body["started_ns"], body["chunk_size"]
            xattrs = _checked_xattrs(body.get("xattrs"))
        except (TypeError, KeyError) as err:
            raise ValueError(f"malformed manifest entry: {err}") from None
        if not (isinstance(started_ns, int) and isinstance(chunk_size, int) and chunk_size > 0):
            raise ValueError("malformed manifest header")
        subvolume = body.get("subvolume")  # a name under the store's subvols/, never a path
        if subvolume is not None and not (isinstance(subvolume, str) and subvolume not in ("", ".", "..")
                                          and "/" not in subvolume and "\0" not in subvolume):
            raise ValueError(f"malformed manifest header: subvolume {str(subvolume)[:80]!r} is not a name")
        if not checked:
            if len(_SOUND) >= SOUND_KEPT:
                _SOUND.clear()  # one call, safe beside other threads; they are checked again once
            _SOUND[sound] = None
        return cls(entries=entries, started_ns=started_ns, chunk_size=chunk_size, id=manifest_id,
                   subvolume=subvolume, hash=body.get("hash", "sha256"), xattrs=xattrs)

    def same_tree(self, entries: tuple[Entry, ...]) -> bool:
        """True when `entries` describe exactly this tree (inodes and ctimes included)."""
        return entries == self.entries


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


def read_xattrs(fd: int) -> dict[str, str] | None:
    """The extended attributes of an open file or folder, {name: value in base64}; None when it
    has none (or the file system keeps none)."""
    try:
        names = os.listxattr(fd)
    except OSError as err:
        if err.errno in (errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM, errno.EACCES):
            return None
        raise
    if not names:
        return None
    import base64

    found = {}
    for name in sorted(names):
        try:
            found[name] = base64.b64encode(os.getxattr(fd, name)).decode()
        except OSError as err:
            if err.errno not in (errno.ENODATA, errno.EPERM, errno.EACCES):  # removed since listed; not ours to read
                raise
    return found or None


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


def open_beneath(root: str | os.PathLike, rel: str, flags: int = os.O_RDONLY, *, root_fd: int | None = None,
                 mode: int = 0o600) -> int:
    """Open `rel` under `root` without following a symbolic link on the way, nor leaving `root`:
    a folder swapped for a link mid-walk fails with ELOOP (or ENOTDIR) instead of leading out.

    Where the kernel has openat2(2) (Linux 5.6+), one call with RESOLVE_BENEATH and
    RESOLVE_NO_SYMLINKS: the kernel checks every component. Elsewhere (or where a seccomp filter
    refuses it) one component at a time, each opened with O_NOFOLLOW relative to its parent's
    descriptor: the same guarantee in two system calls per component (a first snapshot of
    10,000 files four folders deep spent a fifth of its samples here).

    `root_fd`, a descriptor of `root` the caller holds open, spares opening `root` again for
    each path (a capture opens 10,000 files beneath one root). `mode`: of a file O_CREAT makes
    (a restore creates every file this way, so that none is written through a link)."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise OSError(errno.EXDEV, "a path beneath a folder has no '..'", rel)
    if root_fd is not None and parts:
        opened = _openat2(root_fd, "/".join(parts), flags | os.O_NOFOLLOW, mode)
        if opened is not None:
            return opened
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    if not parts:
        return fd
    try:
        opened = _openat2(fd, "/".join(parts), flags | os.O_NOFOLLOW, mode)
        if opened is not None:
            os.close(fd)
            return opened
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            how = (flags if last else os.O_RDONLY | os.O_DIRECTORY) | os.O_NOFOLLOW
            nxt = os.open(part, how, mode, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


_OPENAT2 = 437  # the syscall's number on every Linux architecture (new calls share one table)
_RESOLVE = 0x02 | 0x04 | 0x08  # RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH
_UNUSABLE = (errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG)  # old kernel, seccomp, unknown flags
_openat2_impl = None  # (syscall, open_how type, {flags: its struct}) once loaded; False where unusable


def _openat2(dirfd: int, path: str, flags: int, mode: int = 0o600) -> int | None:
    """A descriptor of `path` beneath `dirfd` (no link followed, no way out); None where openat2
    cannot be used here, when the kernel asks for a retry (EAGAIN: a rename raced the lookup), or
    when the path is longer than the kernel takes in one call (a deep volume's files)."""
    global _openat2_impl
    if _openat2_impl is None:
        _openat2_impl = _load_openat2()
    if not _openat2_impl:
        return None
    call, open_how, hows = _openat2_impl
    mode = mode if flags & os.O_CREAT else 0  # the kernel refuses a mode otherwise
    how = hows.get((flags, mode))
    if how is None:  # made once per set of flags and kept: the kernel only reads it
        import ctypes
        made = open_how(flags | os.O_CLOEXEC, mode, _RESOLVE)
        how = hows[flags, mode] = (ctypes.byref(made), ctypes.sizeof(made))
    fd = call(_OPENAT2, dirfd, os.fsencode(path), *how)
    if fd >= 0:
        return fd
    import ctypes
    err = ctypes.get_errno()
    if err in _UNUSABLE:
        _openat2_impl = False  # the component walk from now on (it reports a genuine error itself)
        return None
    if err in (errno.EAGAIN, errno.ENAMETOOLONG):  # a rename raced it; a path over PATH_MAX (4096 bytes)
        return None  # the component walk opens each name on its own, however deep the path
    raise OSError(err, os.strerror(err), path)


def _load_openat2():
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    class OpenHow(ctypes.Structure):  # struct open_how, include/uapi/linux/openat2.h
        _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]

    try:
        call = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return False
    call.restype = ctypes.c_long
    call.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
    return call, OpenHow, {}


def readlink_beneath(root: str | os.PathLike, rel: str) -> str:
    """A link's target, reading its parent folder without following links (see open_beneath)."""
    parent, _, name = rel.rpartition("/")
    fd = open_beneath(root, parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return os.readlink(name, dir_fd=fd)
    finally:
        os.close(fd)


GONE = (errno.ENOENT, errno.ELOOP, errno.ENOTDIR)  # removed, or replaced by a link, since it was listed


MAX_OPEN_LEVELS = 64  # folders held open at once while scanning (two descriptors each)


def scan(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """lstat every path under `root` (root included as '.'), in no order; symlinks are not followed,
    not even a folder swapped for one during the walk.

    Depth first, each folder opened relative to its parent's descriptor with O_NOFOLLOW (one
    system call; a folder swapped for a link fails with ELOOP and is skipped as gone). Deeper than
    MAX_OPEN_LEVELS, a folder waits and is opened from `root` later (see open_beneath), so a deep
    tree never runs out of descriptors."""
    yield ".", os.lstat(root)
    levels: list[tuple[str, int, Iterator[os.DirEntry]]] = []
    waiting = [""]
    try:
        while levels or waiting:
            if not levels:
                prefix = waiting.pop()
                try:
                    fd = open_beneath(root, prefix, os.O_RDONLY | os.O_DIRECTORY)
                except OSError as err:
                    if err.errno in GONE:
                        continue
                    raise
                _enter(levels, prefix, fd)
            prefix, fd, it = levels[-1]
            for item in it:  # resumed where it stopped when a subfolder was entered below
                rel = prefix + item.name
                try:
                    st = item.stat(follow_symlinks=False)
                except OSError as err:
                    if err.errno in GONE:  # removed (or swapped) between readdir and lstat: gone
                        continue
                    raise
                yield rel, st
                if not stat.S_ISDIR(st.st_mode):
                    continue
                if len(levels) >= MAX_OPEN_LEVELS:
                    waiting.append(rel + "/")
                    continue
                try:
                    child = os.open(item.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except OSError as err:
                    if err.errno in GONE:
                        continue
                    raise
                _enter(levels, rel + "/", child)
                break
            else:
                levels.pop()
                _leave(fd, it)
    finally:
        for _, fd, it in levels:
            _leave(fd, it)


def _enter(levels: list, prefix: str, fd: int) -> None:
    try:
        levels.append((prefix, fd, os.scandir(fd)))
    except BaseException:
        os.close(fd)
        raise


def _leave(fd: int, it) -> None:
    try:
        it.close()
    finally:
        os.close(fd)


def walk(root: Path) -> list[tuple[str, os.stat_result]]:
    """`scan`, sorted by path (paths are unique, so only they are compared)."""
    return sorted(scan(root))


_KEY_FIELDS = struct.Struct("<IIIqqQq")  # what `unchanged` and `same_meta` compare, file type included


def tree_key(items: list[tuple[str, os.stat_result]]) -> TreeKey | None:
    """A digest of every path with the lstat fields that `unchanged` and `same_meta` compare,
    in `scan` order (a folder's listing keeps its order while nothing in it changes; another
    order only costs the full comparison). Two walks with the same key saw the same tree, so a
    capture whose walk matches the key recorded with its base manifest needs neither to load
    that manifest nor to compare it entry by entry (15,000 paths: ~0.1 s). None when the tree
    holds a file of a type no manifest records."""
    import hashlib  # here: ~5 ms of start-up that a snapshot on btrfs never needs

    fields, files, size, newest = [], 0, 0, 0
    for _, st in items:
        kind = stat.S_IFMT(st.st_mode)
        if kind not in KINDS:
            return None
        if kind == stat.S_IFREG:
            files, size, newest = files + 1, size + st.st_size, max(newest, st.st_ctime_ns)
        fields.append(_KEY_FIELDS.pack(st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns,
                                       st.st_ino, st.st_ctime_ns))
    key = hashlib.blake2b(len(items).to_bytes(8, "little"), digest_size=32)
    key.update("\0".join(rel for rel, _ in items).encode("utf-8", "surrogateescape"))  # names hold no NUL
    key.update(b"".join(fields))
    return TreeKey(key.hexdigest(), files, size, newest)


class TreeKey(NamedTuple):
    """What `tree_key` found."""

    digest: str  # of the paths and their lstat fields, in walk order
    files: int  # regular files
    bytes: int  # their total size
    newest_ctime_ns: int  # the latest ctime of a file: a match counts only if it precedes the capture


def meta_entry(rel: str, st: os.stat_result, data: str = "") -> Entry:
    """A folder's, symlink's or special file's entry (`data`: the symlink's target; a device's
    number is taken from `st`)."""
    kind = KINDS[stat.S_IFMT(st.st_mode)]
    if kind in DEVICES:
        data = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    return Entry(rel, kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns, 0, data,
                 st.st_ino, st.st_ctime_ns)


def same_meta(prev: Entry | None, st: os.stat_result) -> bool:
    """A folder, symlink or special file recorded exactly as `st` says (a symlink's target and a
    device's number are fixed at creation: replacing them makes a new inode and ctime)."""
    return (prev is not None and prev.kind == KINDS.get(stat.S_IFMT(st.st_mode)) and prev.kind != "file"
            and prev.mtime_ns == st.st_mtime_ns and prev.ino == st.st_ino and prev.ctime_ns == st.st_ctime_ns
            and prev.mode == stat.S_IMODE(st.st_mode) and prev.uid == st.st_uid and prev.gid == st.st_gid)


def unchanged(prev: Entry | None, st: os.stat_result, cutoff_ns: int, damaged: set[str]) -> bool:
    """Same file as at the previous capture, judged by lstat alone (no read), with intact content.

    A file whose ctime is too close to the previous capture's start may have been rewritten
    within the same timestamp tick after it was read, so it counts as changed.
    """
    return (prev is not None and prev.kind == "file" and prev.size == st.st_size
            and prev.mtime_ns == st.st_mtime_ns and prev.ino == st.st_ino
            and prev.ctime_ns == st.st_ctime_ns and 0 < prev.ctime_ns < cutoff_ns
            and not (damaged and damaged.intersection(prev.chunks)))


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


class Change(NamedTuple):
    """How one path differs between two points in time."""

    path: str  # relative path, '.' for the root
    kind: str  # 'added', 'removed' or 'modified'
    fields: tuple[str, ...] = ()  # for 'modified': among 'type', 'content', 'mode', 'owner', 'mtime', 'xattrs'

    def to_dict(self) -> dict:
        return {"path": self.path, "kind": self.kind, "fields": list(self.fields)}


def diff(a: Manifest, b: Manifest) -> list[Change]:
    """Changes from `a` to `b`, sorted by path."""
    old = {e.path: e for e in a.entries}
    new = {e.path: e for e in b.entries}
    old_x, new_x = a.xattrs or {}, b.xattrs or {}
    changes = []
    for path in sorted(old.keys() | new.keys()):
        x, y = old.get(path), new.get(path)
        if x is None:
            changes.append(Change(path=path, kind="added"))
        elif y is None:
            changes.append(Change(path=path, kind="removed"))
        elif fields := _changed_fields(x, y) + (("xattrs",) if old_x.get(path) != new_x.get(path) else ()):
            changes.append(Change(path=path, kind="modified", fields=fields))
    return changes


def _changed_fields(x: Entry, y: Entry) -> tuple[str, ...]:
    if x.kind != y.kind:
        return ("type",)
    checks = (("content", (x.data, x.size) != (y.data, y.size)),  # chunks, a link's target, a device number
              ("mode", x.mode != y.mode), ("owner", (x.uid, x.gid) != (y.uid, y.gid)),
              ("mtime", x.mtime_ns != y.mtime_ns))
    return tuple(name for name, differs in checks if differs)
