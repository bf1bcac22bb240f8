"""What a capture tells from lstat alone, so that an unchanged volume costs no reads: the entry of a
folder, symlink or special file (meta_entry), whether a path is as its previous manifest recorded it
(same_meta, unchanged), and the key of a whole walk (tree_key) that lets an unchanged tree reuse
its base manifest without comparing entries.
"""

from __future__ import annotations

import os
import stat
import struct
from typing import NamedTuple

from dtrain.storage.entries import DEVICES, KINDS, Entry

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
