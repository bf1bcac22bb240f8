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
import sys
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

# The entries and their checks live in entries.py, what a capture tells from lstat in reuse.py;
# dtrain's modules import them from there, and every name is still manifest.NAME (tests, outside users).
from dtrain.storage.entries import (DEVICES,  # noqa: F401  (re-exported)
                                    FIELDS, KINDS, SPECIALS, _BAD_PART, _DEVICE_NUMBER, _KIND_NAMES, _SPECIAL_NAMES,
                                    _WHOLE, Entry, LazyEntries, _check_entries, _check_fields, _checked_xattrs,
                                    hard_links)
from dtrain.storage.reuse import (_KEY_FIELDS,  # noqa: F401  (re-exported)
                                  TreeKey, meta_entry, same_meta, tree_key, unchanged)

VERSION = 1  # what a manifest without special files is written as (every dtrain reads it)
VERSION_SPECIALS = 2  # one that holds fifos, sockets, device nodes or xattrs: older dtrain refuses it whole



# Manifests this process found sound, by the BLAKE2 digest of their bytes (at most SOUND_KEPT): the
# checks of entries.py cost a third of a parse (24 of 74 ms of CPU for 15,000 entries), and a verify parsed
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
