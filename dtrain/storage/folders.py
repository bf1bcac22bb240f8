"""Volume folders on disk: staging, swapping, tidying what killed processes left, removing.

Staging and trash folders are named '.<kind>-<owner>-<hex>' beside the folder they replace, the
owner being its maker's pid, start time and boot (`owner_tag`), so that `owner_dead` tells a killed
process's leftovers from a live one's work (volumes.py), even once its pid names another process.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path

from dtrain import procs
from dtrain.storage import btrfs, fileio

# In a volume's folder from its making until its row commits (volumes.py): a folder of a volume
# root that no row names is a kill's leftover to remove only when it holds this (or nothing); any
# other is not dtrain's to delete (a folder made by hand, a volume of a state.db lost or restored
# from a backup).
PENDING = ".dtrain-pending"

def swap(staging: Path, data: Path) -> None:
    """Put `staging` at `data` and the old data at `staging`, atomically where the kernel can."""
    if fileio.exchange(staging, data):
        return
    old = data.parent / staging_name("old")
    os.rename(data, old)  # a crash here leaves no data/: collect_volume puts .old-* back
    os.rename(staging, data)
    os.rename(old, staging)


def collect_volume(folder: Path) -> list[Path]:
    """Staging folders of killed in-place restores inside one volume folder (and the marker of
    its making, left by a kill just after its row committed: see PENDING)."""
    items = list(os.scandir(folder))
    if any(i.name == PENDING for i in items):
        os.unlink(folder / PENDING)
    leftovers = [Path(i.path) for i in items if i.name.startswith(".") and owner_dead(i.name)]
    if not (folder / "data").exists():
        for old in (p for p in leftovers if p.name.startswith(".old-")):
            os.rename(old, folder / "data")
            leftovers.remove(old)
            break
    return leftovers


def staging_name(kind: str) -> str:
    """A private name for a staging, trash or swap entry: '.<kind>-<owner>-<hex>'. It carries its
    creator's identity (`owner_tag`), so that owner_dead can tell a crash's leftover from work in
    progress."""
    return f".{kind}-{owner_tag()}-{os.urandom(4).hex()}"


_tag: tuple[int, str] | None = None  # (pid, its tag): read once per process (a fork has its own pid)


def owner_tag() -> str:
    """This process in a file name: '<pid>.<start>.<boot>', its pid, the kernel's start time of it
    (/proc/PID/stat field 22) and the first 8 digits of the boot id. A pid alone is no identity:
    after a reboot or a wrap a long-lived unrelated process may hold a killed restore's pid, which
    kept its volume-sized staging folder for as long as that process ran. Just '<pid>' where /proc
    does not tell (read by pid alone, as the names of older dtrains are)."""
    global _tag
    pid = os.getpid()
    if _tag is None or _tag[0] != pid:
        start, boot = procs.start_time(pid), procs.boot_id()[:8]
        ok = start is not None and start.isdigit() and re.fullmatch(r"[0-9a-f]{8}", boot)
        _tag = (pid, f"{pid}.{start}.{boot}" if ok else str(pid))
    return _tag[1]


_OWNER = r"[0-9]{1,7}(?:\.[0-9]{1,20}\.[0-9a-f]{8})?"  # owner_tag's; an older dtrain's: the pid alone


def tag_gone(tag: str) -> bool | None:
    """Whether the process an owner_tag names is gone: its pid is not running, or runs with another
    start time or in another boot (a reused pid); None when `tag` is no owner tag. A tag of the
    pid alone (an older dtrain's) is judged by the pid."""
    if not re.fullmatch(_OWNER, tag):
        return None
    pid, _, rest = tag.partition(".")
    if pid_gone(int(pid)):
        return True
    if not rest:
        return False
    start, _, boot = rest.partition(".")
    if (now := procs.boot_id()[:8]) and boot != now:
        return True
    running = procs.start_time(int(pid))  # None: a zombie, or hidden from us (hidepid): not known
    return running is not None and running != start


def uncommitted(folder: Path) -> bool:
    """A folder a create or restore made (it holds PENDING, or nothing: killed before writing it)
    whose row never committed; never a file, a link or a folder made by anyone else."""
    if os.path.islink(folder) or not os.path.isdir(folder):
        return False
    if os.path.lexists(folder / PENDING):
        return True
    with os.scandir(folder) as items:
        return next(items, None) is None


# The names staging_name makes ('.<kind>-<owner>-<8 hex>') and a delete's '.deleting-<owner>-<volume
# uid>' (volumes.py): nothing else in a volume root is taken for a dead process's leftover. A user's
# '.bak-2024-x' there was deleted as one (pid 2024 not running), and a '.backup-20240101123456-x'
# stopped every volume and snapshot command with an OverflowError from os.kill.
_STAGING = re.compile(rf"\.(?:tmp|restore|old|trash|deep|move)-(?P<staging>{_OWNER})-[0-9a-f]{{8}}"
                      rf"|\.deleting-(?P<deleting>{_OWNER})-[0-9a-f]{{32}}")


def owner_dead(name: str) -> bool:
    """Whether `name` is a staging, trash or swap entry (see staging_name) whose maker is gone."""
    match = _STAGING.fullmatch(name)
    return match is not None and bool(tag_gone(match.group("staging") or match.group("deleting")))


def pid_gone(pid: int) -> bool:
    """Whether no process has this pid (a pid that cannot exist is gone; this process is not)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    except (OverflowError, ValueError):
        return True
    return pid <= 0


def make_data_folder(path: Path) -> None:
    """A volume's data folder: a btrfs subvolume where the volume root is on btrfs (snapshots
    then take constant time), a plain folder elsewhere or where subvolumes are not allowed."""
    path.parent.mkdir(parents=True, exist_ok=True)  # made by the caller, holding its PENDING marker
    if btrfs.is_btrfs(path.parent):
        with contextlib.suppress(OSError):
            btrfs.create(path)
            return
    path.mkdir()


def rmtree(path: Path) -> None:
    """Remove a tree even where restored folders are read-only; subvolumes (the tree itself or
    a volume's data folder in it) are deleted whole by the kernel. A link (or a file) at `path` is
    unlinked, never followed; what another command removed meanwhile (two commands collecting the
    same leftover) is not an error. A tree of any depth: a job may leave 1,000 nested folders in
    its volume (shutil.rmtree recursed once per level, past Python's limit)."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not os.path.isdir(path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    try:
        subs = [path, *(Path(i.path) for i in os.scandir(path) if i.is_dir(follow_symlinks=False))]
    except FileNotFoundError:
        return
    for sub in subs:
        if btrfs.is_subvolume(sub):
            with contextlib.suppress(OSError):
                btrfs.delete(sub)
    with contextlib.suppress(FileNotFoundError):
        _remove_contents(path)
        os.rmdir(path)


DEEPEST_OPEN = 64  # folders held open at once by _remove_contents; deeper ones are moved up first


def _remove_contents(path: Path) -> None:
    """Empty the folder `path` without recursion and without following a link: each folder is
    opened relative to its parent (O_NOFOLLOW); one more than DEEPEST_OPEN levels down is renamed
    to the top and emptied later, so no tree runs out of stack or descriptors."""
    top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        while _empty_levels(top):  # True while folders moved up are left to empty
            pass
    finally:
        os.close(top)


def _empty_levels(top: int) -> bool:
    moved = False
    levels = [("", top, os.scandir(top))]  # (name in its parent, descriptor, its listing)
    try:
        while levels:
            _, fd, items = levels[-1]
            for item in items:
                try:
                    if not item.is_dir(follow_symlinks=False):
                        _retry_writable(fd, lambda: os.unlink(item.name, dir_fd=fd))
                        continue
                    if len(levels) > DEEPEST_OPEN:
                        os.rename(item.name, staging_name("deep"), src_dir_fd=fd, dst_dir_fd=top)
                        moved = True
                        continue
                    child = _open_folder(fd, item.name)
                except FileNotFoundError:  # removed meanwhile by another command
                    continue
                levels.append((item.name, child, os.scandir(child)))
                break
            else:
                name, fd, items = levels.pop()
                items.close()
                if levels:
                    os.close(fd)
                    parent = levels[-1][1]
                    with contextlib.suppress(FileNotFoundError):
                        _retry_writable(parent, lambda: os.rmdir(name, dir_fd=parent))
        return moved
    finally:
        for _, fd, items in levels:
            items.close()
            if fd != top:
                os.close(fd)


def _open_folder(parent: int, name: str) -> int:
    """A subfolder's descriptor, never through a link; one without read permission is given it."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        return os.open(name, flags, dir_fd=parent)
    except PermissionError:
        at = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
        try:
            os.chmod(f"/proc/self/fd/{at}", 0o700)  # the folder itself: a link was refused above
        finally:
            os.close(at)
        return os.open(name, flags, dir_fd=parent)


def _retry_writable(folder: int, call):
    """`call`, again after making `folder` (a descriptor) writable and searchable when it was
    refused: a restored read-only folder."""
    try:
        return call()
    except PermissionError:
        os.fchmod(folder, 0o700)
        return call()


def disk_usage(root: Path) -> int:
    """Bytes the files under `root` take on disk, as `du` counts them (allocated blocks; a file
    with several hard links once). It walks the folder, so `volume list` costs what `du` costs."""
    seen, total, folders = set(), 0, [os.fspath(root)]
    while folders:  # not os.walk: it recursed once per level, and a job may nest 1,000 folders
        try:
            with os.scandir(folders.pop()) as items:
                for item in items:
                    try:
                        st = item.stat(follow_symlinks=False)
                    except OSError:
                        continue  # removed while we walked
                    if stat.S_ISDIR(st.st_mode):
                        folders.append(item.path)
                    if (st.st_dev, st.st_ino) not in seen:
                        seen.add((st.st_dev, st.st_ino))
                        total += st.st_blocks * 512
        except OSError:
            continue  # removed, or unreadable, as os.walk passed over it
    return total
