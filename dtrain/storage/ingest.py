"""Reading a volume's files into the store for a capture: each file opened as the walk saw it
(no link followed), read again while it changes, then cloned into a pack of its own (reflink) or
hashed chunk by chunk, the chunks the store lacks stored as they go by; hard links read once;
folders, links and special files recorded from their lstat. A mixin of Engine (engine.py), whose
`capture` walks the tree and hands these the files to read.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from dtrain.storage import fileio, hashing
from dtrain.storage import manifest as mf
from dtrain.storage.fileio import UNSUPPORTED, FileIO
from dtrain.storage.entries import SPECIALS, Entry
from dtrain.storage.packs import UNHASHED, Pack, Packer
from dtrain.storage.progress import Run
from dtrain.storage.reuse import meta_entry, same_meta

if TYPE_CHECKING:
    from dtrain.storage.packs import PackStore

READS_OF_A_CHANGING_FILE = 3  # reads of a file written to meanwhile before it is recorded as torn


class Ingest:
    """Mixed into Engine, which provides the byte seam, the chunk size, the method and the pack store."""

    if TYPE_CHECKING:
        io: FileIO
        chunk_size: int
        hash_algorithm: str
        method: str
        defer_hashing: bool
        racy_window_ns: int
        packs: PackStore
        _local: threading.local

        def request_sweep(self) -> None: ...

    def _entry(self, src: Path, rel: str, st: os.stat_result, old: dict, reading: dict,
               skipped: list, xattrs: dict) -> Entry | None:
        """`rel`'s entry: read by a worker, kept from the base, or made from `st` (a folder's
        extended attributes go into `xattrs`); None when it is gone."""
        if rel in reading:
            return reading[rel]
        if stat.S_ISREG(st.st_mode):
            return old[rel]  # same ctime: mode and owner are unchanged too
        if same_meta(old.get(rel), st):
            return old[rel]  # a symlink's target cannot change without a new ctime
        if stat.S_ISDIR(st.st_mode):
            try:
                fd = mf.open_beneath(src, rel, os.O_RDONLY | os.O_DIRECTORY)
            except OSError as err:
                if err.errno in mf.GONE:
                    return None
                raise
            try:
                xattrs[rel] = mf.read_xattrs(fd)
            finally:
                os.close(fd)
            return meta_entry(rel, st)
        if stat.S_ISLNK(st.st_mode):
            try:
                return meta_entry(rel, st, mf.readlink_beneath(src, rel))
            except OSError as err:
                # gone since the walk: removed, its folder moved behind a link, or (EINVAL) the
                # link itself replaced by something that is not a link
                if err.errno in mf.GONE or err.errno == errno.EINVAL:
                    return None
                raise
        if stat.S_IFMT(st.st_mode) in SPECIALS:  # a fifo, socket or device node: recorded, never opened
            return meta_entry(rel, st)
        skipped.append(rel)  # a type Linux does not make (a Solaris door): nothing to record it as
        return None

    def _twin(self, src: Path, rel: str, st: os.stat_result, first: Entry | None, packer: Packer | None,
              run: Run) -> Entry | None:
        """A hard link to a file read under another path: that path's entry, when it recorded the
        inode as the walk saw it here; otherwise (it changed or vanished in between) read anew."""
        if first is not None and (first.ino, first.ctime_ns, first.size, first.mtime_ns) == (
                st.st_ino, st.st_ctime_ns, st.st_size, st.st_mtime_ns):
            run.xattrs[rel] = run.xattrs.get(first.path)  # one inode: the same attributes
            return first._replace(path=rel)
        run.total += st.st_size
        return self._ingest_many(src, [(rel, st)], packer, run)[0][1]

    def _ingest_many(self, src: Path, items: list[tuple[str, os.stat_result]], packer: Packer | None,
                     run: Run) -> list:
        root_fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY)
        try:
            return [(rel, self._ingest(src, root_fd, rel, seen, packer, run)) for rel, seen in items]
        finally:
            os.close(root_fd)

    @staticmethod
    def _open_walked(src: Path, root_fd: int, rel: str, seen: os.stat_result) -> tuple[int, os.stat_result]:
        """Open a file the walk saw, with no link followed on the way (a folder swapped for a
        link mid-capture must not bring outside bytes in), and its fstat.

        One `open` of the whole relative path first, O_NOFOLLOW (and O_NONBLOCK: a fifo
        swapped in does not hang it); it is kept only when it reached the very file the walk
        lstat'ed, found by its device, inode and ctime, which a file reached through a link
        elsewhere cannot match. Anything else (the file changed or was replaced since the
        walk, or the open failed) is opened again by `open_beneath`, which checks every
        component. That stricter call goes through ctypes (openat2) or takes two system calls
        per folder; on two threads each extra call releasing the GIL cost a hand-over, and a
        first snapshot of 10,000 files took 20% longer."""
        try:
            fd = os.open(rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=root_fd)
        except OSError:
            fd = None
        if fd is not None:
            st = os.fstat(fd)
            if (st.st_ino, st.st_dev, st.st_ctime_ns) == (seen.st_ino, seen.st_dev, seen.st_ctime_ns):
                return fd, st
            os.close(fd)
        fd = mf.open_beneath(src, rel, os.O_RDONLY | os.O_NONBLOCK, root_fd=root_fd)
        try:
            return fd, os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise

    def _ingest(self, src: Path, root_fd: int, rel: str, seen: os.stat_result, packer: Packer | None,
                run: Run) -> Entry | None:
        """Hash one file chunk by chunk, storing chunks the store lacks; None if it vanished."""
        try:
            fd, st = self._open_walked(src, root_fd, rel, seen)
        except OSError as err:  # deleted, or moved behind a link, since the walk: recorded as gone
            if err.errno in mf.GONE:
                return None
            raise
        try:
            if not stat.S_ISREG(st.st_mode):  # replaced by a fifo, device or folder since the walk: gone
                return None
            # A file written to while it is read yields chunks of two versions: a checkpoint saved
            # in place during a snapshot was restored as a file that never existed. Read again
            # while its lstat fields move; one that never settles is recorded as read, flagged to
            # be read again next time (ctime 0), and reported.
            for attempt in range(READS_OF_A_CHANGING_FILE):
                chunks, size = self._read_file(fd, st, packer, run)
                now = os.fstat(fd)
                settled = (now.st_size, now.st_mtime_ns, now.st_ctime_ns) == (st.st_size, st.st_mtime_ns,
                                                                                st.st_ctime_ns)
                if settled or attempt == READS_OF_A_CHANGING_FILE - 1:
                    break
                st = now
                run.total += now.st_size
            if not settled:
                run.changing.append(rel)
            if attempt:
                self.request_sweep()  # chunks of the torn reads that no manifest names
            run.xattrs[rel] = mf.read_xattrs(fd)
        finally:
            os.close(fd)
        # a file that changed size or content while being read is recorded as read, and re-read next time
        ctime = st.st_ctime_ns if size == st.st_size and settled else 0
        return Entry(rel, "file", stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns, size,
                     chunks, st.st_ino, ctime)

    def _read_file(self, fd: int, st: os.stat_result, packer: Packer | None, run: Run) -> tuple[list[str], int]:
        """(chunk digests, bytes) of one read of an open file: cloned where the store reflinks,
        hashed (and stored when `packer` is given) chunk by chunk elsewhere."""
        if packer is not None and self.method == "reflink" and not run.fell_back and st.st_size:
            try:
                return self._clone_file(fd, st, packer, run)
            except OSError as err:
                if err.errno not in UNSUPPORTED:
                    raise
                run.fell_back = True
        # a file with fewer blocks than bytes has holes: chunks lying wholly in one are not read
        hashed = self._hash_chunks(fd, run, packer, st.st_size, sparse=st.st_blocks * 512 < st.st_size)
        return [d for d, _ in hashed], sum(n for _, n in hashed)

    def _clone_file(self, fd: int, st: os.stat_result, packer: Packer, run: Run) -> tuple[list[str], int]:
        """Clone the whole file into a pack of its own; chunks the store already holds are
        punched out of the clone. The digests must name what the clone holds: they are read
        from the source (its pages are cached; the clone's are not) when the source provably
        did not change meanwhile (same size, mtime and ctime after hashing, and a ctime older
        than the racy window), from the clone otherwise."""
        pack = self.packs.new_pack()
        try:
            started = time.time_ns()
            self.io.clone(fd, pack.fd, st.st_size, 0, 0)
            if self.defer_hashing:
                return self._unhashed_chunks(pack, packer, run)
            hashed = None
            if st.st_ctime_ns < started - self.racy_window_ns:
                hashed = self._hash_chunks(fd, run)
                now = os.fstat(fd)
                if (now.st_size, now.st_mtime_ns, now.st_ctime_ns) != (st.st_size, st.st_mtime_ns, st.st_ctime_ns):
                    hashed = None  # rewritten while we looked: what the clone holds is unknown
            if hashed is None:
                hashed = self._hash_chunks(pack.fd, run)
            chunks, offset, dead = [], 0, []
            for digest, n in hashed:
                if packer.wants(digest):
                    pack.rows.append((digest, pack.name, offset, n))
                    run.add(added=n, objects=1)
                else:
                    dead.append((offset, n))
                chunks.append(digest)
                offset += n
            if not pack.rows:
                pack.discard()
                return chunks, offset
            for start, length in dead:
                fileio.punch_hole(pack.fd, start, length)
        except BaseException:
            pack.discard()
            raise
        packer.seal(pack, sync=False)  # thousands of small clones: one syncfs at the end instead
        return chunks, offset

    def _unhashed_chunks(self, pack: Pack, packer: Packer, run: Run) -> tuple[list[str], int]:
        """A clone indexed as it is, nothing read: chunk ids `u-<pack>-<i>` stand for hashes that
        verify computes and records later. Identical content is not deduplicated on this path;
        the clones share their extents with the volume, so it costs no disk."""
        size = os.fstat(pack.fd).st_size  # what the clone holds, even if the source grew meanwhile
        chunks = []
        for i, offset in enumerate(range(0, size, self.chunk_size)):
            chunks.append(f"{UNHASHED}{pack.name}-{i}")
            pack.rows.append((chunks[-1], pack.name, offset, min(self.chunk_size, size - offset)))
        run.add(added=size, objects=len(chunks))
        packer.seal(pack, sync=False)
        return chunks, size

    def _hash_chunks(self, fd: int, run: Run, packer: Packer | None = None,
                     size: int | None = None, sparse: bool = False) -> list[tuple[str, int]]:
        """(digest, length) of each chunk of a file, read to its end; with `packer`, the
        chunks the store lacks are stored as they go by.

        `size`, the file's size when it was opened, ends the reading there: a file that grew
        since has a newer ctime and size, so the next capture reads it again (without it, a
        small file took a second read to find its end).

        `sparse`: a chunk inside a hole (SEEK_DATA finds no data in it) is named as zeros without
        reading it: a 1 TiB file of holes costs one lseek per chunk, not a terabyte of reads."""
        out, offset, buf = [], 0, self._buffer()
        whole = len(buf)
        while True:
            want = whole if size is None else min(whole, size - offset)
            if want <= 0:
                break
            if sparse and want == whole and _in_hole(fd, offset, want):
                digest = hashing.zeros(want, self.hash_algorithm)
                if packer is not None and packer.wants(digest):
                    packer.put(memoryview(bytes(want)), digest)
                    run.add(done=want, added=want, objects=1)
                else:
                    run.add(done=want)
                out.append((digest, want))
                offset += want
                continue
            n = self.io.read_into(fd, buf[:want], offset)
            if not n:
                break
            digest = hashing.digest(buf[:n], self.hash_algorithm)
            if packer is not None and packer.wants(digest):
                packer.put(buf[:n], digest)
                run.add(done=n, read=n, added=n, objects=1)
            else:
                run.add(done=n, read=n)
            out.append((digest, n))
            offset += n
            if n < want:
                break
        return out

    def _buffer(self) -> memoryview:
        buf = getattr(self._local, "buf", None)
        if buf is None or len(buf) != self.chunk_size:
            buf = self._local.buf = memoryview(bytearray(self.chunk_size))
        return buf


def _in_hole(fd: int, offset: int, length: int) -> bool:
    """True when no data lies in [offset, offset + length) of the file: a hole, reading as zeros."""
    try:
        return os.lseek(fd, offset, os.SEEK_DATA) >= offset + length
    except OSError as err:
        return err.errno == errno.ENXIO  # no data from here to the end of the file
