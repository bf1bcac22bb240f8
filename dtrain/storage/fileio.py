"""The byte-moving system calls of the snapshot engine, behind one small seam.

`FileIO` is the only place that reads, writes, copies or clones file contents; tests pass a
subclass to count the bytes read or to fake a full disk. The helpers below probe for
copy-on-write clones (``ioctl FICLONE``), swap two directories atomically
(``renameat2(RENAME_EXCHANGE)``) and name unnamed files (``linkat``).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from dtrain.errors import StorageError
from dtrain.storage.info import human_bytes

FICLONE = 0x40049409  # _IOW(0x94, 9, int): clone a whole file
FICLONERANGE = 0x4020940D  # _IOW(0x94, 13, struct file_clone_range)
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_TOPDIR_FL = 0x80086601, 0x40086602, 0x00020000  # chattr +T
RENAME_EXCHANGE = 2
AT_FDCWD = -100
# errnos meaning "this file system (or this pair of files) cannot do that": fall back to copying
UNSUPPORTED = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EBADF}
DISK_FULL = {errno.ENOSPC, errno.EDQUOT}


class FileIO:
    """Reads, writes, copies and clones byte ranges between open file descriptors."""

    def read_into(self, fd: int, buf: memoryview, offset: int) -> int:
        """Fill `buf` from `offset`; fewer bytes only at end of file."""
        done = 0
        while done < len(buf):
            n = os.preadv(fd, [buf[done:]], offset + done)
            if n == 0:
                break
            done += n
        return done

    def write_at(self, fd: int, data: memoryview, offset: int) -> None:
        done = 0
        while done < len(data):
            done += os.pwrite(fd, data[done:], offset + done)

    def copy(self, src: int, dst: int, length: int, src_offset: int, dst_offset: int) -> None:
        """Copy in the kernel (copy_file_range); plain reads and writes where it is refused."""
        done = 0
        try:
            while done < length:
                n = os.copy_file_range(src, dst, length - done, src_offset + done, dst_offset + done)
                if n == 0:
                    raise EOFError(f"source ended {length - done} bytes early")
                done += n
        except OSError as err:
            if err.errno not in UNSUPPORTED:
                raise
            self._copy_plain(src, dst, length - done, src_offset + done, dst_offset + done)

    def _copy_plain(self, src: int, dst: int, length: int, src_offset: int, dst_offset: int) -> None:
        buf = memoryview(bytearray(min(length, 1 << 20) or 1))
        done = 0
        while done < length:
            n = self.read_into(src, buf[: min(len(buf), length - done)], src_offset + done)
            if n == 0:
                raise EOFError(f"source ended {length - done} bytes early")
            view, pos = buf[:n], dst_offset + done
            while view:
                written = os.pwrite(dst, view, pos)
                view, pos = view[written:], pos + written
            done += n

    def clone(self, src: int, dst: int, length: int, src_offset: int, dst_offset: int) -> None:
        """Share extents copy-on-write (FICLONERANGE); OSError if the file system cannot."""
        if length and src_offset == 0 and dst_offset == 0 and os.fstat(src).st_size == length:
            fcntl.ioctl(dst, FICLONE, src)
            return
        fcntl.ioctl(dst, FICLONERANGE, struct.pack("qQQQ", src, src_offset, length, dst_offset))


def spread_subfolders(folder: Path) -> None:
    """Ask ext2/3/4 to place `folder`'s subfolders in different block groups (chattr +T).

    Inodes are allocated near their folder; the store's 256 object folders would otherwise
    share one group, where creating thousands of objects is slow (each allocation scans past
    recently deleted inodes). Other file systems ignore or refuse this; both are fine.
    """
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        flags = struct.unpack("i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack("i", 0)))[0]
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("i", flags | FS_TOPDIR_FL))
    except OSError:
        pass
    finally:
        os.close(fd)


class Abilities(NamedTuple):
    reflink: bool  # FICLONE works: copy-on-write clones
    tmpfile: bool  # O_TMPFILE works: unnamed files, named by linkat once complete


def probe(folder: Path) -> Abilities:
    """What the file system under `folder` can do, probed once and remembered in
    `folder/abilities.json` (probed again if the folder moves to another file system)."""
    record = folder / "abilities.json"
    dev = os.stat(folder).st_dev
    try:
        saved = json.loads(record.read_text())
        if saved.pop("dev") == dev:
            return Abilities(**saved)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = Abilities(reflink=probe_reflink(folder), tmpfile=probe_tmpfile(folder))
    tmp = folder / f".abilities-{os.urandom(16).hex()}"
    tmp.write_text(json.dumps({"dev": dev, **found._asdict()}))
    os.replace(tmp, record)
    return found


def probe_reflink(folder: Path) -> bool:
    """True when files in `folder` can be cloned copy-on-write (btrfs, XFS, bcachefs...)."""
    a, b = folder / f".probe-{os.urandom(16).hex()}", folder / f".probe-{os.urandom(16).hex()}"
    try:
        a.write_bytes(b"dtrain reflink probe\n")
        with open(a, "rb") as src, open(b, "wb") as dst:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
        return True
    except OSError as err:
        if err.errno in UNSUPPORTED:
            return False
        raise
    finally:
        a.unlink(missing_ok=True)
        b.unlink(missing_ok=True)


_LIBC = None
AT_SYMLINK_FOLLOW = 0x400
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 0x01, 0x02


def libc():
    """The C library through ctypes, loaded on first use: importing ctypes costs ~5 ms, and most
    commands (a snapshot on btrfs, an unchanged volume) never call into libc directly."""
    global _LIBC
    if _LIBC is None:
        import ctypes
        lib = ctypes.CDLL(None, use_errno=True)
        lib.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        lib.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
        _LIBC = lib
    return _LIBC


def last_errno() -> int:
    """errno as the last libc() call left it."""
    import ctypes

    return ctypes.get_errno()


def link_fd(fd: int, dst: str) -> None:
    """Give an unnamed (O_TMPFILE) file a name. os.link would call link(2), which does not
    follow the /proc/self/fd symlink, hence linkat(AT_SYMLINK_FOLLOW) through libc."""
    src = f"/proc/self/fd/{fd}".encode()
    if libc().linkat(AT_FDCWD, src, AT_FDCWD, os.fsencode(dst), AT_SYMLINK_FOLLOW) != 0:
        err = last_errno()
        raise OSError(err, os.strerror(err), dst)


def probe_tmpfile(folder: Path) -> bool:
    """True when unnamed files (O_TMPFILE) can be created in `folder` and linked by name."""
    name = os.fspath(folder / f".probe-{os.urandom(16).hex()}")
    try:
        fd = os.open(folder, os.O_TMPFILE | os.O_RDWR, 0o444)
    except OSError:
        return False
    try:
        link_fd(fd, name)
        os.unlink(name)
        return True
    except OSError:  # no /proc, or linking refused
        return False
    finally:
        os.close(fd)


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically; False where the kernel or file system cannot."""
    fn = getattr(libc(), "renameat2", None)
    if fn is None:
        return False
    if fn(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = last_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def punch_hole(fd: int, offset: int, length: int) -> None:
    """Free the blocks of a byte range (reads as zeros after); nothing where unsupported."""
    if libc().fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length) != 0:
        err = last_errno()
        if err not in UNSUPPORTED:
            raise OSError(err, os.strerror(err))


SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing a byte range of `fd` to disk, without waiting for it
    (sync_file_range(SYNC_FILE_RANGE_WRITE)): a later fdatasync then finds most of it written.
    Durability still comes from that fdatasync; where the call is refused, it only waits longer."""
    libc().sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE)


def syncfs(path: Path) -> None:
    """Flush every dirty page and inode of the file system holding `path` (syncfs(2))."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if libc().syncfs(fd) != 0:
            err = last_errno()
            raise OSError(err, os.strerror(err), str(path))
    finally:
        os.close(fd)


def fsync_path(path: Path, *, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def plain_command(words: str) -> str:
    """`dtrain WORDS` as a hint names it where no caller said how (the Client's adds -p PROJECT and
    --backend where a bare command would look elsewhere: Storage(command=...))."""
    return f"dtrain {words}"


def is_disk_full(err: BaseException) -> bool:
    return isinstance(err, OSError) and err.errno in DISK_FULL


def storage_error(err: OSError, doing: str, *, needed: int, where: Path,
                  command: Callable[[str], str] = plain_command) -> StorageError:
    """A full disk becomes a StorageError saying how much was needed and what to do (`command`:
    how its hint names a dtrain command)."""
    if isinstance(err, StorageError):
        return err
    if not is_disk_full(err):
        return StorageError(f"{doing} failed: {err}")
    try:
        fs = os.statvfs(where)
    except OSError:
        fs = None
    if fs is not None and fs.f_files and fs.f_favail == 0:  # bytes left, but no inode for one more file
        return StorageError(
            f"no room for new files on the device while {doing}: every inode under {where} is in use "
            f"({human_bytes(fs.f_bavail * fs.f_frsize)} free, but no file can be created); partial work was "
            f"removed. Delete files there (or old snapshots: '{command('snapshot delete NAME')}') and retry")
    free = 0 if fs is None else fs.f_bavail * fs.f_frsize
    return StorageError(
        f"no space left on the device while {doing}: needed up to {human_bytes(needed)}, "
        f"{human_bytes(free)} free under {where}; partial work was removed. Free space "
        f"(delete old snapshots: '{command('snapshot delete NAME')}') and retry")
