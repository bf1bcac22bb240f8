"""Native copy-on-write snapshots: a volume folder that is a btrfs subvolume is snapshotted by
the kernel, in constant time whatever it holds.

Layout under the store root::

    subvols/<name>               one read-only subvolume snapshot per snapshot taken this way
    manifests/<id>.hashes.json.gz   content hashes of one, once verify has computed them

The manifest of such a snapshot names its subvolume and lists no entries: they are read from
the read-only subvolume when asked for (diff, verify, the paths a damaged file breaks), never on
the snapshot's critical path. Their files are *unhashed*: the content id of a file is
``u-<inode>-<mtime>-<size>`` (a btrfs snapshot keeps inode numbers and times, so an unchanged
file has the same id in every snapshot of a volume and in the live volume, and a rewritten one a
new id; ctime is left out because chmod changes it, and a diff would then call the content
changed). So `diff` between such snapshots judges content by inode, mtime and size, as rsync
does: a rewrite that keeps all three (set back with utime) shows as unchanged there, while
`verify` still hashes every byte. `verify` computes the BLAKE3 hashes of the files, records them on the first pass and
compares against them on later ones.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from dtrain.replace import replace_file
from dtrain.storage import btrfs, hashing
from dtrain.storage.info import CaptureStats
from dtrain.storage.fileio import DISK_FULL
from dtrain.storage.entries import SPECIALS, Entry, LazyEntries
from dtrain.storage.manifest import Manifest, walk
from dtrain.storage.reuse import meta_entry

DISK_REFUSED = DISK_FULL | {errno.EROFS}  # a write the disk refused (db.no_room's errnos)
UNHASHED = "u-"  # prefix of a content id that is not a hash (see the module docstring)


def unhashed_id(st: os.stat_result) -> str:
    return f"{UNHASHED}{st.st_ino}-{st.st_mtime_ns}-{st.st_size}"


def tree_entries(root: Path) -> tuple[Entry, ...]:
    """Every path under `root` as manifest entries, files with unhashed content ids (no reads)."""
    out = []
    for rel, st in walk(root):
        if stat.S_ISREG(st.st_mode):
            out.append(Entry(rel, "file", stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns,
                             st.st_size, [unhashed_id(st)], st.st_ino, st.st_ctime_ns))
        elif stat.S_ISLNK(st.st_mode):
            out.append(meta_entry(rel, st, os.readlink(root if rel == "." else root / rel)))
        elif stat.S_ISDIR(st.st_mode) or stat.S_IFMT(st.st_mode) in SPECIALS:
            out.append(meta_entry(rel, st))
    return tuple(out)


class Subvolumes:
    """Read-only subvolume snapshots under <store>/subvols, taken and restored by the kernel."""

    def __init__(self, store_root: Path):
        self.dir = Path(store_root) / "subvols"
        self.enabled = btrfs.is_btrfs(store_root)
        self._fs = btrfs.fs_uuid(store_root) if self.enabled else None
        if self.enabled:
            self.dir.mkdir(exist_ok=True)

    def usable(self, src: Path) -> bool:
        """A subvolume on the store's own btrfs (a volume of another storage class may live on
        another file system, where a snapshot cannot land in the store)."""
        return self.enabled and btrfs.is_subvolume(src) and btrfs.fs_uuid(src) == self._fs

    def path(self, name: str) -> Path:
        return self.dir / name

    def capture(self, src: Path) -> str | None:
        """A read-only snapshot of `src`; None when the kernel refuses (no rights, another file system)."""
        name = os.urandom(16).hex()
        try:
            btrfs.snapshot(src, self.dir / name, readonly=True)
        except OSError:
            return None
        return name

    def capture_manifest(self, src: Path, started: int, chunk_size: int, store: bool,
                         ) -> tuple[Manifest, CaptureStats] | None:
        """A read-only snapshot of `src` as a manifest whose entries are listed lazily (constant
        time, nothing read); None when the kernel refuses (then the content path runs). With
        store=False (diff against the live volume): the live entries, with the same unhashed ids."""
        if not store:
            entries = tree_entries(src)
            return Manifest(entries=entries, started_ns=started, chunk_size=chunk_size), _stats(entries)
        name = self.capture(src)
        if name is None:
            return None
        return Manifest(entries=self.entries(name), started_ns=started, chunk_size=chunk_size,
                        subvolume=name), _stats(())

    def entries(self, name: str) -> LazyEntries:
        return LazyEntries(lambda: tree_entries(self.dir / name))

    def restore(self, name: str, dest: Path) -> None:
        """A writable snapshot of a stored one at `dest` (new): the restored volume is a subvolume too."""
        btrfs.snapshot(self.dir / name, dest, readonly=False)

    def names(self) -> list[str]:
        return sorted(os.listdir(self.dir)) if self.enabled and self.dir.is_dir() else []

    def delete(self, name: str) -> None:
        btrfs.delete(self.dir / name)

    def bytes(self, name: str) -> int:
        return sum(st.st_size for _, st in walk(self.dir / name) if stat.S_ISREG(st.st_mode))


def _stats(entries) -> CaptureStats:
    # files and bytes stay 0 for a stored native snapshot: counting them means walking the tree,
    # the one cost that grows with the volume (verify counts them)
    return CaptureStats(files=sum(e.kind == "file" for e in entries), bytes=sum(e.size for e in entries),
                        read_bytes=0, added_bytes=0, added_objects=0, skipped=(), method="subvolume")


def load_hashes(path: Path) -> dict[str, str] | None:
    """{content id: BLAKE3 hash} recorded by an earlier verify, None before the first."""
    try:
        return json.loads(gzip.decompress(path.read_bytes()))
    except FileNotFoundError:
        return None


def save_hashes(path: Path, hashes: dict[str, str]) -> None:
    replace_file(path, gzip.compress(json.dumps(hashes, sort_keys=True).encode(), compresslevel=1))


def verify_tree(root: Path, entries: Sequence[Entry], hashes_file: Path, read_into, buf: memoryview,
                *, save: bool = True) -> tuple[int, int, set[str], bool]:
    """Hash every file of a read-only subvolume with BLAKE3: record the hashes on the first pass
    (unless `save` is False: a full disk), compare with them on later ones. Returns (files, bytes,
    content ids found corrupt, whether hashes computed now could not be recorded: the disk refused
    the write, as it does when it filled, and what was checked is reported all the same)."""
    recorded = load_hashes(hashes_file)
    found: dict[str, str] = {}
    files = total = 0
    for e in entries:
        if e.kind != "file" or e.data[0] in found:
            continue
        h, done = hashing.hasher_for(hashing.PREFIX), 0
        fd = os.open(root / e.path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            while n := read_into(fd, buf, done):
                h.update(buf[:n])
                done += n
        finally:
            os.close(fd)
        found[e.data[0]] = h.hexdigest()
        files, total = files + 1, total + done
    if recorded is None:
        if not save:
            return files, total, set(), bool(found)
        try:
            save_hashes(hashes_file, found)
        except OSError as err:  # a disk that filled: the files were hashed and nothing is corrupt
            if err.errno not in DISK_REFUSED:
                raise
            return files, total, set(), True
        return files, total, set(), False
    return files, total, {cid for cid, digest in found.items() if recorded.get(cid, digest) != digest}, False
