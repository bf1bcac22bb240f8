"""The local backend: jobs are processes on this machine, state is SQLite, volumes are folders.

Our words -> its words: a job is a detached supervisor process (`jobs/<name>/`); a process is a
rank started by torchrun, mpirun or directly, wrapped by `rankrun`; a volume is a folder bound
at the mount path in a private mount namespace (bubblewrap); a snapshot is a manifest in the
content-addressed store (or a reflink copy); a project is a row with a GPU quota and a FIFO
queue; a node is this host.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from dtrain.backends.base import (Backend, Event, FreedInfo, JobInfo, JobStatus, LogLine, NodeInfo, ProcessInfo,
                                  ProjectInfo, SnapshotInfo, VolumeInfo)
from dtrain.backends.local import launch
from dtrain.backends.local.scheduler import split_devices
from dtrain.backends.local.devices import inventory
from dtrain.backends.local.notebook import read_access
from dtrain.backends.local.rankrun import parse_line
from dtrain.backends.local.store import ACTIVE, JobStore
from dtrain.backends.local.supervisor import GRACE_S, kill_ranks, rank_records
from dtrain.config import UserConfig, home_dir
from dtrain.errors import ConflictError, EnvironmentError_, QuotaError, SpecError
from dtrain.spec import JobSpec, NewVolume

if TYPE_CHECKING:
    from dtrain.storage.info import Snapshot, Volume

LOST_AFTER_S = 60.0  # a Pending job whose supervisor never registered is lost after this


def _proc_start(pid: int) -> str | None:
    """The kernel's start time of a live, non-zombie pid (guards against pid reuse)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else fields[19]


class LocalBackend(Backend):
    name = "local"

    def __init__(self, home: str | Path | None = None, *, storage=None):
        self.home = home_dir(home)
        self.store = JobStore(self.home / "state.db")
        self._storage = storage

    @property
    def storage(self):
        """The volume and snapshot store, opened on first use (plain jobs never touch it)."""
        if self._storage is None:
            from dtrain.storage.volumes import Storage
            self._storage = Storage(self.home, classes=UserConfig.load(self.home).class_roots())
        return self._storage

    # ---- submit ---------------------------------------------------------------------------
    def _submit(self, spec: JobSpec) -> JobInfo:
        cwd = spec.working_dir or os.getcwd()
        if not os.path.isdir(cwd):  # the supervisor and the ranks start there, on this host
            raise SpecError(f"--working-dir {cwd} is not a folder on this machine: give an existing folder")
        self._check_resources(spec)
        launch.check_tools(spec, cwd=cwd)
        self.store.check_free(spec.name)  # again in insert_job's transaction; here before volumes are made
        created = self._prepare_volumes(spec) if spec.volumes else []
        try:
            self.store.insert_job(spec, cwd=cwd, node=socket.gethostname())
        except Exception:
            for name in created:
                self.storage.delete_volume(name, force=True)
            raise
        job_dir = self.home / "jobs" / spec.name
        shutil.rmtree(job_dir, ignore_errors=True)  # left by a deleted job of the same name
        (job_dir / "logs").mkdir(parents=True)
        pid = _spawn_detached([sys.executable, "-m", "dtrain.backends.local.supervisor", str(self.home), spec.name],
                              log=job_dir / "supervisor.log", cwd=cwd)
        self.store.update(spec.name, supervisor_pid=pid, supervisor_start=_proc_start(pid))
        return self._get(spec.name)

    def _check_resources(self, spec: JobSpec) -> None:
        gpus = len(inventory())
        if spec.gpus_requested > gpus:
            raise QuotaError(f"job {spec.name!r} needs {spec.gpus_requested} GPUs ({spec.processes} processes x "
                             f"{spec.gpu}) but this machine has {gpus}; lower --processes or --gpu")
        quota = self.store.project_quota(spec.project)
        if quota is not None and spec.gpus_requested > quota:
            raise QuotaError(f"job {spec.name!r} needs {spec.gpus_requested} GPUs but project {spec.project!r} has a "
                             f"quota of {quota}; lower --gpu/--processes or raise it with "
                             f"'dtrain project create {spec.project} --gpu-quota N'")
        for v in spec.volumes:
            if not isinstance(v, NewVolume):
                self.storage.get_volume(v.volume)  # NotFoundError names the volume
        if spec.snapshot_volume and spec.snapshot_volume not in {m.volume for m in spec.resolved_volumes()}:
            self.storage.get_volume(spec.snapshot_volume)

    def _prepare_volumes(self, spec: JobSpec) -> list[str]:
        """Create the job's new volumes (pvc-<job>-<i>); all or none."""
        new = spec.new_volumes()
        existing = {v.name for v in self.storage.list_volumes()}
        for name, _v in new:
            if name in existing:
                raise ConflictError(f"volume {name!r} (for --pvc of job {spec.name!r}) already exists; mount it with "
                                    f"--pvc {name}:MOUNT or remove it with 'dtrain volume delete {name}'")
        created = []
        try:
            for name, v in new:
                self.storage.create_volume(name, size=v.size, storage_class=v.storage_class)
                created.append(name)
        except Exception:
            for name in created:
                self.storage.delete_volume(name, force=True)
            raise
        return created

    # ---- read -----------------------------------------------------------------------------
    def _get(self, name: str) -> JobInfo:
        row = self._reconcile(self.store.job(name))
        return self._info(row)

    def _list(self) -> list[JobInfo]:
        return [self._info(self._reconcile(row)) for row in self.store.jobs()]

    def _reconcile(self, row):
        """A job whose supervisor died while nobody watched is Failed, never Running."""
        if row["status"] not in ACTIVE:
            return row
        pid = row["supervisor_pid"]
        if pid is None:
            if time.time() - row["created"] < LOST_AFTER_S:
                return row
            reason = "its supervisor never started"
        elif _proc_start(pid) != row["supervisor_start"]:
            reason = f"its supervisor (pid {pid}) is gone: killed, or the machine restarted"
        else:
            return row
        kill_ranks(self.home / "jobs" / row["name"])
        self.store.set_status(row["name"], "Failed", f"lost: {reason}")
        return self.store.job(row["name"])

    def _info(self, row) -> JobInfo:
        spec = JobSpec.from_dict(json.loads(row["spec"]))
        status = JobStatus(row["status"])
        records = {r["rank"]: r for r in rank_records(self.home / "jobs" / spec.name)}
        devices = self.store.job_devices(spec.name)
        groups = split_devices(devices, spec.processes, spec.gpu) if devices else []
        procs = []
        for rank in range(spec.processes):
            rec = records.get(rank, {})
            pstatus = rec.get("status", "Pending")
            if status.terminal and pstatus in ("Pending", "Running"):
                pstatus = "Stopped" if status == JobStatus.DELETED else ("Failed" if pstatus == "Running" else pstatus)
            procs.append(ProcessInfo(rank=rank, status=pstatus, exit_code=rec.get("exit_code"),
                                     devices=tuple(groups[rank]) if groups else (), node=row["node"]))
        running = sum(p.status == "Running" for p in procs) if status == JobStatus.RUNNING else 0
        pending = sum(p.status == "Pending" for p in procs) if status.value in ACTIVE else 0
        events = tuple(Event(time=e["time"], status=e["status"], message=e["message"])
                       for e in self.store.events(spec.name))
        return JobInfo(name=spec.name, spec=spec, status=status, backend=self.name, created=row["created"],
                       started=row["started"], finished=row["finished"], node=row["node"],
                       gpus_allocated=len(devices), processes_running=running, processes_pending=pending,
                       processes=tuple(procs), events=events, restarts=max([row["restarts"]] + [
                           r.get("restart", 0) for r in records.values()]),
                       message=row["message"], snapshot=row["snapshot"],
                       extra={"cwd": row["cwd"], "job_dir": str(self.home / "jobs" / spec.name),
                              "source_snapshot": row["source_snapshot"], "exit_code": row["exit_code"]})

    def _logs(self, name, *, rank, tail, since, follow) -> Iterator[LogLine]:
        logs_dir = self.home / "jobs" / name / "logs"
        offsets: dict[Path, int] = {}

        def read_new() -> list[LogLine]:
            lines = []
            files = sorted(logs_dir.glob("rank-*.log")) if logs_dir.exists() else []
            for path in files:
                r = int(path.stem.split("-")[1])
                if rank is not None and r != rank:
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    f.seek(offsets.get(path, 0))
                    data = f.read()
                    complete = data[:data.rfind("\n") + 1]  # keep a half-written line for later
                    offsets[path] = offsets.get(path, 0) + len(complete.encode("utf-8"))
                for line in complete.splitlines():
                    when, text = parse_line(line)
                    if since is None or (when is not None and when >= since):
                        lines.append(LogLine(rank=r, time=when, text=text))
            lines.sort(key=lambda ln: (ln.time or 0.0, ln.rank))
            return lines

        first = read_new()
        yield from (first[-tail:] if tail is not None else first) if tail != 0 else []
        while follow:
            done = self._get(name).status.terminal
            yield from read_new()
            if done:
                return
            time.sleep(0.2)

    # ---- delete and nodes -----------------------------------------------------------------
    def _delete(self, name: str) -> JobInfo:
        row = self.store.job(name)
        was_active = row["status"] in ACTIVE
        self.store.set_status(name, "Deleted", "deleted by the user")  # refused if already Deleted
        pid = row["supervisor_pid"]
        if was_active and pid and _proc_start(pid) == row["supervisor_start"]:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + GRACE_S + 5
            while _proc_start(pid) == row["supervisor_start"] and time.monotonic() < deadline:
                time.sleep(0.1)
            if _proc_start(pid) == row["supervisor_start"]:
                os.killpg(pid, signal.SIGKILL)
        kill_ranks(self.home / "jobs" / name)
        return self._get(name)

    def _exec(self, name: str, command: list[str], *, rank: int) -> int:
        """nsenter into the rank's mount namespace (bubblewrap's, when the job has volumes), in
        its working folder, with its environment read from /proc."""
        rec = {r.get("rank"): r for r in rank_records(self.home / "jobs" / name)}.get(rank) or {}
        pid = rec.get("pid")
        env = _environ(pid) if pid and rec.get("exit_code") is None else None
        # The record's pid is trusted only while that process still carries this job's rank.
        if env is None or env.get("DTRAIN_JOB_NAME") != name or env.get("RANK") != str(rank):
            raise ConflictError(f"rank {rank} of job {name!r} is not running now; see 'dtrain describe job {name}'")
        nsenter = shutil.which("nsenter")
        if nsenter is None:
            raise EnvironmentError_("dtrain exec needs nsenter (Debian package util-linux)")
        argv = [nsenter, "--target", str(pid), "--mount", "--wd"]
        if os.stat(f"/proc/{pid}/ns/user").st_ino != os.stat("/proc/self/ns/user").st_ino:
            argv += ["--user", "--preserve-credentials"]  # bubblewrap run without root: a user namespace
        return subprocess.run([*argv, "--", *command], env=env).returncode

    def _purge(self, name: str) -> None:
        self.store.purge(name)
        shutil.rmtree(self.home / "jobs" / name, ignore_errors=True)

    def _nodes(self) -> list[NodeInfo]:
        gpus = inventory()
        held = self.store.allocations()
        return [NodeInfo(name=socket.gethostname(), gpus_allocatable=len(gpus), gpus_allocated=len(held),
                         cpus=os.cpu_count(),
                         memory=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
                         gpus=tuple(replace(g, job=held.get(g.index)) for g in gpus))]

    def _render(self, spec: JobSpec) -> list[dict]:
        """A local job is its spec: the dry run shows what would be stored."""
        return [spec.to_dict()]

    def _notebook_url(self, info: JobInfo) -> str:
        return read_access(self.home / "jobs" / info.name, info.name).url

    # ---- projects -------------------------------------------------------------------------
    def _create_project(self, name: str, *, gpu_quota: int | None) -> None:
        gpus = len(inventory())
        if gpu_quota is not None and gpu_quota > gpus:
            raise QuotaError(f"a GPU quota of {gpu_quota} is larger than this machine's {gpus} GPUs; "
                             f"use --gpu-quota {gpus} or less")
        self.store.upsert_project(name, gpu_quota)

    def _list_projects(self) -> list[ProjectInfo]:
        jobs = self.store.jobs()
        held = self.store.allocations()
        out = []
        for p in self.store.projects():
            names = {j["name"] for j in jobs if j["project"] == p["name"]}
            out.append(ProjectInfo(name=p["name"], backend=self.name, gpu_quota=p["gpu_quota"],
                                   gpus_allocated=sum(job in names for job in held.values()), jobs=len(names)))
        return out

    # ---- volumes and snapshots --------------------------------------------------------------
    def volume_users(self, volume: str) -> list[str]:
        users = []
        for row in self.store.jobs():
            if row["status"] in ACTIVE:
                spec = JobSpec.from_dict(json.loads(row["spec"]))
                if volume in {m.volume for m in spec.resolved_volumes()} | {spec.snapshot_volume}:
                    users.append(spec.name)
        return users

    # A local dry run has no manifest to print: it says what would be made, after the same checks.
    def _render_volume(self, name, *, size, storage_class):
        return [{"backend": self.name, "create": "volume", "name": name, "size": size,
                 "storage_class": storage_class or "local"}]

    def _render_snapshot(self, volume, *, name, job):
        self.storage.get_volume(volume)
        return [{"backend": self.name, "create": "snapshot", "volume": volume,
                 "name": name or f"{volume}-<UTC time>", "job": job}]

    def _render_restore(self, name, *, to, in_place):
        snap = self.storage.get_snapshot(name)
        return [{"backend": self.name, "restore": name, "into": snap.volume if in_place else to,
                 "in_place": in_place}]

    def _create_volume(self, name, *, size, storage_class):
        return self._volume(self.storage.create_volume(name, size=size, storage_class=storage_class or "local"))

    def _update_volume(self, name: str, *, storage_class: str) -> VolumeInfo:
        """Move the volume to another class's root folder (storage/move.py), refused while jobs use it."""
        return self._volume(self.storage.update_volume(name, storage_class=storage_class,
                                                       check_users=lambda: self._refuse_users(name)))

    def _render_volume_update(self, name: str, *, storage_class: str) -> dict:
        vol = self.storage.get_volume(name)
        root = self.storage.class_root(storage_class)
        same = os.stat(vol.path).st_dev == os.stat(root).st_dev
        return {"volume": name, "from_class": vol.storage_class, "to_class": storage_class,
                "from": str(vol.path.parent), "to": str(root / name),
                "method": "rename" if same else "copy, verified by hashing both trees"}

    def _refuse_users(self, volume: str) -> None:
        writers, readers = [], []
        for row in self.store.jobs():
            if row["status"] in ACTIVE:
                spec = JobSpec.from_dict(json.loads(row["spec"]))
                mounts = [m for m in spec.resolved_volumes() if m.volume == volume]
                if spec.snapshot_volume == volume or any(not m.read_only for m in mounts):
                    writers.append(spec.name)
                elif mounts:
                    readers.append(spec.name)
        if writers:
            raise ConflictError(f"volume {volume!r} is mounted read-write by job(s) {', '.join(writers)}: a "
                                f"move would lose their writes; wait for them or 'dtrain delete' them first")
        if readers:
            raise ConflictError(f"volume {volume!r} is mounted read-only by job(s) {', '.join(readers)}: a move "
                                f"removes the old folder under them; wait for them or 'dtrain delete' them first")

    def _list_volumes(self):
        return [self._volume(v) for v in self.storage.list_volumes()]

    def _get_volume(self, name):
        return self._volume(self.storage.get_volume(name))

    def _delete_volume(self, name, *, force):
        self.storage.delete_volume(name, in_use_by=self.volume_users(name), force=force)

    def _create_snapshot(self, volume, *, name, job, progress):
        spec = source = None
        if job is not None:
            row = self.store.job(job)
            spec, source = json.loads(row["spec"]), row["source_snapshot"]
        return self._snapshot(self.storage.create_snapshot(volume, name=name, job=job, job_spec=spec,
                                                           source_snapshot=source, progress=progress))

    def _list_snapshots(self):
        return [self._snapshot(s) for s in self.storage.list_snapshots()]

    def _get_snapshot(self, name):
        return self._snapshot(self.storage.get_snapshot(name))

    def _restore_snapshot(self, name, *, to, in_place, progress):
        if in_place:
            users = self.volume_users(self.storage.get_snapshot(name).volume)
            if users:
                raise ConflictError(f"cannot restore {name!r} in place while job(s) {', '.join(users)} use the "
                                    f"volume; wait for them or delete them first")
        return self._volume(self.storage.restore_snapshot(name, to=to, in_place=in_place, progress=progress))

    def _delete_snapshot(self, name):
        freed = self.storage.delete_snapshot(name)
        return FreedInfo(snapshot=freed.snapshot, backend=self.name, bytes=freed.bytes, pending=freed.pending,
                         extra={"objects": freed.objects})

    def _verify_snapshot(self, name):
        return self.storage.verify(name)

    def _diff_snapshots(self, a, b):
        return self.storage.diff(a, b)

    def _volume(self, v: Volume) -> VolumeInfo:
        return VolumeInfo(name=v.name, backend=self.name, size=v.size, size_bytes=v.size_bytes,
                          storage_class=v.storage_class, created=v.created, origin_snapshot=v.origin_snapshot,
                          used_bytes=_disk_usage(v.path), labels=dict(v.labels), extra={"path": str(v.path), "uid": v.uid,
                                                        "head_snapshot": v.head_snapshot})

    def _snapshot(self, s: Snapshot) -> SnapshotInfo:
        return SnapshotInfo(name=s.name, backend=self.name, volume=s.volume, created=s.created, job=s.job,
                            job_spec=s.job_spec, source_snapshot=s.source_snapshot, files=s.files, bytes=s.bytes,
                            volume_size=s.volume_size, storage_class=s.storage_class,
                            extra={"id": s.id, "volume_uid": s.volume_uid, "added_bytes": s.added_bytes,
                                   "method": s.method})


def _disk_usage(root: Path) -> int:
    """Bytes the files under `root` take on disk, as `du` counts them (allocated blocks; a file
    with several hard links once). It walks the folder, so `volume list` costs what `du` costs."""
    seen, total = set(), 0
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue  # removed while we walked
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def _environ(pid: int) -> dict[str, str] | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    return dict(item.split("=", 1) for item in raw.decode("utf-8", "replace").split("\0") if "=" in item)


def _spawn_detached(argv: list[str], *, log: Path, cwd: str) -> int:
    """Double fork so the supervisor is nobody's child: it outlives the CLI and never lingers as a zombie."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # intermediate child
        try:
            os.close(read_fd)
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                fd = os.open(str(log), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.closerange(3, 1024)
                os.chdir(cwd)
                os.execv(argv[0], argv)
            os.write(write_fd, str(grandchild).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    os.waitpid(pid, 0)
    with os.fdopen(read_fd) as f:
        return int(f.read())
