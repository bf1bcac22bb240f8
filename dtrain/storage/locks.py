"""The per-volume lock: a flock on the volume's folder (<root>/<name>, which holds data/), shared
while a snapshot reads the folder or a job is about to mount it, exclusive while a restore swaps,
a move or a delete replaces it; and the wait for a move under way (move.py). A mixin of Storage
(volumes.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from dtrain.errors import ConflictError, StorageError
from dtrain.storage.info import Volume

if TYPE_CHECKING:
    from dtrain.storage.move import Mover


class VolumeLocks:
    """Mixed into Storage, which provides the mover and the volumes' rows."""

    if TYPE_CHECKING:
        mover: Mover

        def get_volume(self, name: str) -> Volume: ...

    def settled(self, name: str) -> None:
        """Refuse while another process moves the volume to another class."""
        row = self.mover.live(name)
        if row is not None:
            raise ConflictError(f"volume {name!r} is moving to storage class {row['dst_class']!r} (pid "
                                f"{row['pid']}): retry when that 'dtrain volume update' has finished")

    @contextlib.contextmanager
    def hold(self, vol: Volume, *, exclusive: bool, wait: bool = False):
        """A lock on one volume: shared while a snapshot reads its folder, exclusive while a
        command replaces, moves or removes that folder (an in-place restore's swap, a move, a
        delete). Without it a snapshot taken meanwhile recorded a mix of the old and the new files,
        or the files not yet read as gone, and called it a snapshot. Refused at once when held,
        unless `wait` (the swap and the delete are short; they wait for a snapshot to finish). A
        flock on the volume's folder (<root>/<name>, which holds data/): nothing to create, so it
        works on a full disk, and a killed process drops it with its descriptors. Yields the volume
        as it is now, refused when another command deleted or moved it since `vol` was read."""
        try:
            fd = _lock_fd(vol)
        except FileNotFoundError:  # deleted meanwhile (get_volume says so), or Lost: nothing to hold
            yield self._same(vol)
            return
        except OSError as err:  # ELOOP, ENOTDIR: a link or a file put at the volume's folder by hand
            raise StorageError(f"volume {vol.name!r}: {vol.path.parent} is not the folder made for it "
                               f"({err.strerror}); a link there is never followed: put the volume's folder "
                               f"back in its place") from None
        try:
            try:
                fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                raise ConflictError(f"volume {vol.name!r} is busy: another command is snapshotting, restoring, "
                                    f"moving or deleting it; retry when that has finished") from None
            yield self._same(vol)
        finally:
            os.close(fd)

    def _same(self, vol: Volume) -> Volume:
        """The volume `vol` as it is now; refused when another command deleted or moved it."""
        now = self.get_volume(vol.name)
        if (now.uid, now.path) != (vol.uid, vol.path):
            raise ConflictError(f"volume {vol.name!r} was moved or deleted by another command just now; retry")
        return now

    def volume_path(self, name: str) -> Path:
        """The folder a job mounts (at /mnt in the reference setup), once no move is under way and
        no in-place restore is swapping it. The job's record is active before this is asked, so an
        in-place restore that takes the volume's lock later sees the job and is refused; one that
        holds it now is waited for here (a shared lock, taken and dropped), and the job mounts the
        restored folder, not the one the swap moves aside and removes."""
        while True:
            while self.mover.live(name) is not None:  # see move.py: jobs wait for a running move
                time.sleep(0.2)
            vol = self.get_volume(name)
            try:
                fd = _lock_fd(vol)
            except OSError:  # Lost (the job's start says so), or moved just now (asked again)
                if self.mover.live(name) is None:
                    return vol.path
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
            finally:
                os.close(fd)
            if self.mover.live(name) is None and self.get_volume(name).path == vol.path:
                return vol.path


def _lock_fd(vol: Volume) -> int:
    """A descriptor of the volume's folder (<root>/<name>), the one Storage.hold and volume_path
    lock: opened without following a link at its name."""
    return os.open(vol.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
