"""btrfs subvolumes through their ioctls (no btrfs-progs at run time).

A volume folder that is a subvolume is snapshotted in constant time whatever it holds: the
kernel shares the whole tree copy-on-write. The calls here create a subvolume, take a
read-only or writable snapshot of one, and delete one. Every call raises OSError when the
file system or the caller's rights do not allow it; callers fall back to the content path.
"""

from __future__ import annotations

import fcntl
import os
import struct

from dtrain.storage.fileio import libc

SUPER_MAGIC = 0x9123683E  # statfs f_type of btrfs
FIRST_FREE_OBJECTID = 256  # the inode number of every subvolume's root folder
_ARGS_SIZE = 4096  # struct btrfs_ioctl_vol_args and _v2 are both 4096 bytes


def _iow(nr: int, size: int = _ARGS_SIZE) -> int:
    return (1 << 30) | (size << 16) | (0x94 << 8) | nr


SUBVOL_CREATE = _iow(14)  # BTRFS_IOC_SUBVOL_CREATE: struct btrfs_ioctl_vol_args
SNAP_DESTROY = _iow(15)  # BTRFS_IOC_SNAP_DESTROY
SNAP_CREATE_V2 = _iow(23)  # BTRFS_IOC_SNAP_CREATE_V2: struct btrfs_ioctl_vol_args_v2
SUBVOL_RDONLY = 1 << 1  # BTRFS_SUBVOL_RDONLY
FS_INFO = (2 << 30) | (1024 << 16) | (0x94 << 8) | 31  # BTRFS_IOC_FS_INFO: struct btrfs_ioctl_fs_info_args


def is_btrfs(path: str | os.PathLike) -> bool:
    """True when `path` lives on btrfs (statfs through libc: os.statvfs has no f_type)."""
    import ctypes  # on first use: ~5 ms of start-up otherwise

    buf = ctypes.create_string_buffer(120)  # struct statfs on 64-bit Linux; f_type comes first
    if libc().statfs(os.fsencode(os.fspath(path)), buf) != 0:
        return False
    return struct.unpack_from("l", buf.raw)[0] == SUPER_MAGIC


def is_subvolume(path: str | os.PathLike) -> bool:
    """A folder on btrfs whose inode is a subvolume root."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return st.st_ino == FIRST_FREE_OBJECTID and is_btrfs(path)


def fs_uuid(path: str | os.PathLike) -> bytes | None:
    """The file system's UUID, the same in every subvolume of it (st_dev differs per subvolume)."""
    buf = bytearray(1024)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        fcntl.ioctl(fd, FS_INFO, buf)
    except OSError:
        return None
    finally:
        os.close(fd)
    return bytes(buf[16:32])  # after max_id and num_devices


def _vol_args(name: bytes, fd: int = 0) -> bytearray:
    if len(name) > 4087 or b"/" in name:
        raise OSError(22, f"bad subvolume name {name!r}")
    buf = bytearray(_ARGS_SIZE)
    struct.pack_into("q", buf, 0, fd)
    buf[8:8 + len(name)] = name
    return buf


def _in_parent(path: str | os.PathLike):
    path = os.path.abspath(os.fspath(path))
    return os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY), os.fsencode(os.path.basename(path))


def _name_ioctl(request: int, path: str | os.PathLike) -> None:
    """An ioctl on `path`'s parent folder that names its subvolume (create, destroy)."""
    parent, name = _in_parent(path)
    try:
        fcntl.ioctl(parent, request, _vol_args(name))
    finally:
        os.close(parent)


def create(path: str | os.PathLike) -> None:
    """Make a new, empty subvolume at `path` (which must not exist)."""
    _name_ioctl(SUBVOL_CREATE, path)


def snapshot(source: str | os.PathLike, dest: str | os.PathLike, *, readonly: bool) -> None:
    """Snapshot the subvolume `source` at `dest` (new), in constant time."""
    src = os.open(source, os.O_RDONLY | os.O_DIRECTORY)
    parent, name = _in_parent(dest)
    try:
        buf = bytearray(_ARGS_SIZE)
        struct.pack_into("qQQ", buf, 0, src, 0, SUBVOL_RDONLY if readonly else 0)
        if len(name) > 4039:
            raise OSError(22, f"bad subvolume name {name!r}")
        buf[56:56 + len(name)] = name  # fd, transid, flags, 4 x u64 union, then the name
        fcntl.ioctl(parent, SNAP_CREATE_V2, buf)
    finally:
        os.close(parent)
        os.close(src)


def delete(path: str | os.PathLike) -> None:
    """Delete the subvolume at `path` with everything in it (read-only ones too, as root)."""
    _name_ioctl(SNAP_DESTROY, path)
