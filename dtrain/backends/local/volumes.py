"""The local backend's volume and snapshot hooks over the store (dtrain.storage), with the jobs
that use a volume checked first (LocalBackend's mixin)."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from dtrain.backends.base import FreedInfo, SnapshotInfo, StorageClassInfo, VolumeInfo
from dtrain.backends.local.store import ACTIVE, UNFINISHED
from dtrain.errors import ConflictError
from dtrain.names import LABEL_JOB, check_name, listed, them
from dtrain.spec import JobSpec
from dtrain.storage.folders import disk_usage as _disk_usage  # re-exported by backend.py

if TYPE_CHECKING:
    from dtrain.storage.info import Snapshot, Volume


class VolumeHooks:
    """LocalBackend's volume and snapshot hooks."""

    def volume_users(self, volume: str, *, suspended: bool = True) -> list[str]:
        """Jobs that mount `volume` or snapshot it: the active ones and, with `suspended`, those a
        `dtrain resume` would start on it again."""
        users = []
        for row in self.store.jobs_in(UNFINISHED if suspended else ACTIVE):
            spec = JobSpec.from_stored(json.loads(row["spec"]))
            if volume in {m.volume for m in spec.resolved_volumes()} | {spec.snapshot_volume}:
                users.append(spec.name)
        return users

    # A local dry run has no manifest to print: it says what would be made, after the same checks.
    def _render_volume(self, name, *, size, storage_class):
        root = self.storage.class_root(storage_class or "local", claim=False)  # an unknown class: create's line
        return [{"backend": self.name, "create": "volume", "name": name, "size": size,
                 "storage_class": storage_class or "local", "path": str(root / name)}]

    def _render_snapshot(self, volume, *, name, job):
        self.storage.get_volume(volume)
        return [{"backend": self.name, "create": "snapshot", "volume": volume,
                 "name": name or f"{volume}-<UTC time>", "job": job}]

    def _render_restore(self, name, *, to, in_place, storage_class):
        snap = self.storage.get_snapshot(name)
        if in_place:  # refused as the restore would be
            target = self.storage.in_place_target(snap)
            return [{"backend": self.name, "restore": name, "into": target.name, "in_place": True,
                     "storage_class": target.storage_class}]
        # as Storage._clone picks it (the snapshot's class, where this machine has it); refused in its words
        storage_class, root = self.storage.restore_root(snap, to, storage_class, claim=False)
        check_name(to, "volume")
        self.storage.ensure_free(to)  # a name taken: the restore's one line, not a plan that cannot run
        return [{"backend": self.name, "restore": name, "into": to, "in_place": False,
                 "storage_class": storage_class, "path": str(root / to)}]

    def _create_volume(self, name, *, size, storage_class):
        return self._volume(self.storage.create_volume(name, size=size, storage_class=storage_class or "local"),
                            measure=False)

    def _list_storage_classes(self) -> list[StorageClassInfo]:
        """'local' (<home>/volumes, the default) and config.yaml's classes, as their first use would find them."""
        return [StorageClassInfo(name=c.name, backend=self.name, default=c.name == "local", root=str(c.root),
                                 status=c.status, message=c.message,
                                 free_bytes=c.free_bytes, total_bytes=c.total_bytes, volumes=c.volumes,
                                 folders=c.folders)
                for c in self.storage.storage_classes()]

    def volumes_in(self, folder: str) -> dict[str, int]:
        """This machine's volumes in `folder` (a class root, as each volume records it), counted by class."""
        return self.storage.volumes_in(folder)

    def volumes_around(self, folder: str) -> dict[tuple[str, str], int]:
        """This machine's volumes in folders nesting in or around `folder`, counted by class and folder."""
        return self.storage.volumes_around(folder)

    def _update_volume(self, name: str, *, storage_class: str) -> VolumeInfo:
        """Move the volume to another class's root folder (storage/move.py), refused while jobs use it."""
        before = self.storage.get_volume(name)
        info = self._volume(self.storage.update_volume(name, storage_class=storage_class,
                                                       check_users=lambda: self._refuse_users(name)), measure=False)
        info.extra["moved"] = info.extra["path"] != str(before.path)  # False: already there, as kubectl's "(no change)"
        if not info.extra["moved"] and before.storage_class != storage_class:
            info.extra["relabeled"] = before.storage_class  # the class's folder is the one it was in: not moved
        return info

    def _render_volume_update(self, name: str, *, storage_class: str) -> dict:
        vol = self.storage.get_volume(name)
        root = self.storage.class_root(storage_class, claim=False)  # refused as the move would be
        there = root
        while not there.exists():  # a class folder not made yet: the file system it will be made on
            there = there.parent
        same = os.stat(vol.path).st_dev == os.stat(there).st_dev
        here = vol.storage_class == storage_class and vol.path.parent.parent == root  # Storage.update_volume's test
        shared = os.path.realpath(vol.path.parent.parent) == os.path.realpath(root)
        return {"volume": name, "from_class": vol.storage_class, "to_class": storage_class,
                "from": str(vol.path.parent), "to": str(root / name),
                "method": "none (the volume is already in this class)" if here
                else "none (the class's folder is the one the volume is in: only its class changes)" if shared
                else "rename" if same else "copy, verified by hashing both trees"}

    def _refuse_users(self, volume: str) -> None:
        writers, readers = [], []
        for row in self.store.active_jobs():
            spec = JobSpec.from_stored(json.loads(row["spec"]))
            mounts = [m for m in spec.resolved_volumes() if m.volume == volume]
            if spec.snapshot_volume == volume or any(not m.read_only for m in mounts):
                writers.append(spec.name)
            elif mounts:
                readers.append(spec.name)
        if writers:
            raise ConflictError(f"volume {volume!r} is mounted read-write by {listed(writers, 'job')}: a "
                                f"move would lose {them(writers, 'their')} writes; {self._keep_or_stop(writers, 'move')}")
        if readers:
            raise ConflictError(f"volume {volume!r} is mounted read-only by {listed(readers, 'job')}: a move "
                                f"removes the old folder under {them(readers)}; {self._keep_or_stop(readers, 'move')}")

    def _keep_or_stop(self, jobs: list[str], what: str) -> str:
        # a Suspended job holds no mount and resumes on the moved or restored folder: the way to keep it (a tier
        # changed, a restore in place mid-training)
        it = them(jobs)
        return (f"wait for {it}, suspend {it} for the {what} ({self.storage.stop_hint(jobs, 'suspend')}; resume {it} "
                f"after), or stop {it} ({self.storage.stop_hint(jobs)})")

    def _names(self, what):
        """Names read from the tables alone: the listing hooks build every job's record and du every volume."""
        return self.store.names() if what == "job" else (self.storage.names(what), [])

    def _list_volumes(self):
        volumes = self.storage.list_volumes()
        gone = self._gone([(v.origin_snapshot, v.created) for v in volumes])  # one query for all
        return [self._volume(v, origin_gone=(v.origin_snapshot, v.created) in gone) for v in volumes]

    def _get_volume(self, name):
        return self._volume(self.storage.get_volume(name))

    def _delete_volume(self, name, *, force):
        users = self.volume_users(name)
        if users and not force:
            self.storage.get_volume(name)  # a volume that is gone says so first
            running = self.volume_users(name, suspended=False)
            if held := [j for j in users if j not in running]:  # a Suspended job never finishes on its own
                hint = self.storage.stop_hint
                first = (f"wait for {', '.join(running)} to finish or stop {them(running)} ({hint(running)}); " if running else "")
                raise ConflictError(f"volume {name!r} is in use by {listed(users, 'job')}: {first}"
                                    f"{', '.join(held)} {'is' if len(held) == 1 else 'are'} Suspended, which never "
                                    f"{'finishes' if len(held) == 1 else 'finish'} on its own: delete {them(held)} ({hint(held)}) "
                                    f"or resume and wait ({hint(held, 'resume')}), or delete with --force")
        self.storage.delete_volume(name, in_use_by=users, force=force)

    def _create_snapshot(self, volume, *, name, job, progress):
        spec = source = None
        unfinished = None
        if job is not None:
            row = self.store.job(job)
            spec, source = json.loads(row["spec"]), row["source_snapshot"]
            unfinished = row["status"] if row["status"] in ACTIVE else None  # its results are not all written
            if unfinished is None:  # its logs too, as --snapshot-on-success's snapshot holds them
                self._copy_logs(volume, job)
        writers = self._writers(volume)
        snap = self._snapshot(self.storage.create_snapshot(volume, name=name, job=job, job_spec=spec,
                                                           source_snapshot=source, progress=progress,
                                                           job_uid=self.store.uid(row) if job is not None else None))
        if writers := [*writers, *(w for w in self._writers(volume) if w not in writers)]:  # when it began or ended
            _log().warning("warning: volume %r was mounted read-write by running %s while snapshot %r read "
                           "it: its files were read one by one while they may have changed, so it is not a point "
                           "in time; take it after the job ends (--snapshot-on-success does) or suspend the job "
                           "first (%s)", volume, listed(writers, "job"), snap.name,
                           self._job_cmd(f"suspend {writers[0]}", writers[0]))
        if unfinished:
            _log().warning("warning: job %r was still %s: snapshot %r holds the results it had written so far, "
                           "not its final ones", job, unfinished, snap.name)
        elif job is not None:
            self._snapshot_taken_for(row, volume, snap.name)
        return snap

    def _snapshot_taken_for(self, row, volume: str, snapshot: str) -> None:
        """`snapshot create VOLUME --job J` as the message of a job whose --snapshot-on-success snapshot
        was not taken (every process exited 0, the snapshot failed or its supervisor was lost) says to
        run it: that snapshot becomes the job's (`describe` shows it; an event says who took it), once.
        The job stays Failed, as it ended; the message's advice is answered by the event."""
        spec = JobSpec.from_dict(json.loads(row["spec"]))
        if (row["status"] != "Failed" or row["exit_code"] != 0 or row["snapshot"]
                or spec.snapshot_volume != volume):
            return
        name = row["name"]
        self.store.update(name, snapshot=snapshot)
        self.store.add_event(name, "Failed", f"snapshot {snapshot} of volume {volume} taken by "
                                             f"'{self.cmd(f'snapshot create {volume} --job {name}', row['project'])}'")

    def _copy_logs(self, volume: str, job: str) -> None:
        """An ended job's logs copied into `volume` before `snapshot create VOL --job J` takes it
        (see joblogs.py); a warning says why not, and the snapshot is taken all the same."""
        from dtrain.backends.local.joblogs import LogsNotCopied, copy_job_logs, logs_path
        try:
            copy_job_logs(self.home / "jobs" / job, self.storage.get_volume(volume).path, job)
        except LogsNotCopied as err:
            _log().warning("warning: job %r's logs were not copied into volume %r (%s): %s; the snapshot is "
                           "taken without them", job, volume, logs_path(job), err)

    def _holds_job_logs(self, snapshot, job):
        from dtrain.backends.local.joblogs import logs_path
        return self.storage.has_folder(snapshot, logs_path(job))

    def _writers(self, volume: str) -> list[str]:
        """Running jobs that mount `volume` read-write: a snapshot taken now reads files they change."""
        writers = []
        for row in self.store.jobs_in(("Running",)):
            spec = JobSpec.from_stored(json.loads(row["spec"]))
            if any(m.volume == volume and not m.read_only for m in spec.resolved_volumes()):
                writers.append(spec.name)
        return writers

    def _list_snapshots(self):
        return self._snapshot_records(self.storage.list_snapshots())

    def _get_snapshot(self, name):
        return self._snapshot(self.storage.get_snapshot(name))

    def _job_uids(self, names):
        return {name: uid for name, uid in self.store.live_uids().items() if name in names}  # one query for all

    def _restore_snapshot(self, name, *, to, in_place, storage_class, progress):
        users = ()
        if in_place:
            volume = self.storage.get_snapshot(name).volume
            if jobs := self.volume_users(volume, suspended=False):  # not running
                # a Suspended job holds no mount (and resumes on the restored folder): the way to keep it
                raise ConflictError(f"cannot restore {name!r} in place while {listed(jobs, 'job')} "
                                    f"use{'s' if len(jobs) == 1 else ''} the "
                                    f"volume; {self._keep_or_stop(jobs, 'restore')}")
            users = functools.partial(self.volume_users, volume, suspended=False)  # asked again before the swap
        return self._volume(self.storage.restore_snapshot(name, to=to, in_place=in_place, storage_class=storage_class,
                                                          in_use_by=users, progress=progress), measure=False)

    def _delete_snapshot(self, name):
        freed = self.storage.delete_snapshot(name)
        return FreedInfo(snapshot=freed.snapshot, backend=self.name, bytes=freed.bytes, pending=freed.pending,
                         no_room=freed.no_room,
                         extra={"objects": freed.objects})

    def _verify_snapshot(self, name):
        return self.storage.verify(name)

    def _diff_snapshots(self, a, b):
        return self.storage.diff(a, b)

    def _volume(self, v: Volume, *, measure: bool = True, origin_gone: bool | None = None) -> VolumeInfo:
        """The record of `v`; `measure` walks its files for `used_bytes` (what `du` costs). The
        verbs that just wrote a volume (create, restore, move) return it unmeasured: a restore
        on btrfs takes a few milliseconds, and walking the 15,000 uncached inodes of the new
        subvolume took 0.8 s; list and get measure. `origin_gone`: whether its origin snapshot was
        deleted since, where a listing asked for all its rows at once (None: asked here)."""
        if origin_gone is None:
            origin_gone = (v.origin_snapshot, v.created) in self._gone([(v.origin_snapshot, v.created)])
        return VolumeInfo(name=v.name, backend=self.name, size=v.size, size_bytes=v.size_bytes,
                          storage_class=v.storage_class, created=v.created, origin_snapshot=v.origin_snapshot,
                          origin_snapshot_deleted=origin_gone,
                          status="Lost" if self._lost(v) else "Bound", job=v.labels.get(LABEL_JOB),
                          used_bytes=_disk_usage(v.path) if measure else None, labels=dict(v.labels),
                          extra={"path": str(v.path), "uid": v.uid, "head_snapshot": v.head_snapshot,
                                 "snapshots": v.snapshots, "origin_snapshot_deleted": origin_gone})

    def _snapshot(self, s: Snapshot) -> SnapshotInfo:
        return self._snapshot_records([s])[0]

    def _snapshot_records(self, snaps: list[Snapshot]) -> list[SnapshotInfo]:
        """The records of `snaps`, in two queries whatever their number (whose volume and whose source
        snapshot were deleted since); the base class marks an earlier run's (Backend._mark_earlier_runs)."""
        volumes, _ = self.storage.still_there([s.volume_uid for s in snaps], [])
        gone = self._gone([(s.source_snapshot, s.created) for s in snaps])
        marks = [{"source_snapshot_deleted": (s.source_snapshot, s.created) in gone,
                  "volume_deleted": s.volume_uid not in volumes} for s in snaps]
        return [SnapshotInfo(name=s.name, backend=self.name, volume=s.volume, created=s.created, job=s.job,
                             job_uid=s.job_uid,
                             job_spec=s.job_spec, source_snapshot=s.source_snapshot, files=s.files, bytes=s.bytes,
                             volume_size=s.volume_size, storage_class=s.storage_class, **marked,
                             extra={"id": s.id, "volume_uid": s.volume_uid, "added_bytes": s.added_bytes,
                                    "method": s.method, **marked})  # extra's copy of the marks: for one release
                for s, marked in zip(snaps, marks)]

    def _gone(self, sources: list[tuple[str | None, float]]) -> set[tuple[str, float]]:
        """The (snapshot, since) pairs whose snapshot (that a volume was restored from, or a snapshot's data
        started from) was deleted since, in one query: `volume list` and `snapshot list` mark it '(deleted)',
        as `describe job` does. A pair without a snapshot is never in it."""
        asked = [(name, since) for name, since in sources if name is not None]
        there = self.storage.sources_there(asked)
        return {pair for pair in asked if pair not in there}


def _log():
    import logging  # only a snapshot taken under running jobs warns; plain commands start without it

    return logging.getLogger(__name__)
