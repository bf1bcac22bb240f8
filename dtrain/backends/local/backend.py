"""The local backend: jobs are processes on this machine, state is SQLite, volumes are folders.

Our words -> its words: a job is a detached supervisor process (`jobs/<name>/`); a process is a
rank started by torchrun, mpirun or directly, wrapped by `rankrun`; a volume is a folder bound
at the mount path in a private mount namespace (bubblewrap); a snapshot is a manifest in the
content-addressed store (or a reflink copy, or a read-only btrfs subvolume snapshot when the
volume is a subvolume); a project is a row with a GPU quota and a FIFO
queue; a node is this host.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import resource
import shutil
import signal
import sqlite3
import stat
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from dtrain import db
from dtrain.backends.base import (Backend, DataSource, Event, FreedInfo, JobCount, JobInfo, JobPage, JobStatus,
                                  LogLine, NodeInfo, Notice, ProcessInfo, ProjectInfo, SnapshotInfo, StorageClassInfo,
                                  VolumeInfo)
from dtrain.backends.local.store import ACTIVE, QUEUED, SNAPSHOTTING, UNFINISHED, JobStore
from dtrain.config import UserConfig, home_dir
from dtrain.errors import ConflictError, EnvironmentError_, NotFoundError, NotReadyError, QuotaError, SpecError, StorageError
from dtrain.names import LABEL_JOB, check_name, counted, dotted_volume_refusal, listed, require_project, shown
from dtrain.spec import JobSpec, NewVolume, VolumeMount

# The job machinery (the supervisor's helpers, launchers, cgroups, GPU inventory, notebooks) is
# imported by the methods that use it: a volume or snapshot command needs none of it, and it was
# ~25 ms of every such command's start (tests/test_architecture.py holds that line).
if TYPE_CHECKING:
    from dtrain.backends.local import cgroups
    from dtrain.storage.info import Snapshot, Volume

LOST_AFTER_S = 60.0  # a Pending job whose supervisor never registered is lost after this
# A queued job whose supervisor was lost (killed, the machine restarted) gets a new one without
# spending a restart: it had not started. Bounded, as a supervisor that dies at every start
# would otherwise be started again by every command (and every waiting supervisor) for good.
QUEUED_RELAUNCHES = 5
REQUEUED = "nothing had started: a new supervisor keeps its place in the queue"
# ...or it had run, was preempted, and its processes were stopping (it still held its GPUs)
REQUEUED_PREEMPTED = "it was preempted and stopping: a new supervisor stops what is left and keeps its place in the queue"
RANK_MEMORY = 256 * 2**20  # a rank is a Python interpreter with torch loaded: ~250 MiB resident, measured


def _check_cpu_memory(spec: JobSpec) -> None:
    """--cpu and --memory beyond this machine's, refused as --gpu beyond its GPUs is: even idle it could
    never give them (a cluster keeps such a pod Pending for good: 'Insufficient cpu'). They are each
    process's cap here (its cgroup's), not a reservation: ranks, and other jobs, share the cores and
    the memory, never waiting for them (scheduler.py), so one process's figure is what is checked."""
    from dtrain.names import parse_size

    cpus = len(os.sched_getaffinity(0))
    if spec.cpu is not None and spec.cpu > cpus:
        raise QuotaError(f"job {spec.name!r} asks for {shown(spec.typed('cpu'))} CPUs per process but this machine "
                         f"has {cpus}; lower --cpu to {cpus} or less")
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if spec.memory is not None and parse_size(spec.memory, "--memory") > total:
        raise QuotaError(f"job {spec.name!r} asks for {spec.memory} of memory per process but this machine has "
                         f"{total / 2**30:.1f}Gi; lower --memory, e.g. --memory {total // 2**31}Gi")


def max_local_processes() -> tuple[int, str]:
    """How many ranks this machine can run at once, and which limit decides it."""
    limits = [(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // RANK_MEMORY,
               f"its memory at {RANK_MEMORY // 2**20} MiB per process")]
    soft, _hard = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY:
        limits.append((soft // 4, f"RLIMIT_NPROC {soft} (4 processes per rank: wrapper, command, helpers)"))
    try:
        limits.append((int(Path("/proc/sys/kernel/pid_max").read_text()) // 4, "kernel.pid_max / 4"))
    except (OSError, ValueError):
        pass
    count, why = min(limits)
    return max(1, count), why


class LocalBackend(Backend):
    name = "local"

    def __init__(self, home: str | Path | None = None, *, storage=None,
                 command: Callable[[str, str | None], str] | None = None, project: str | None = None):
        """`command(words, project)`: the `dtrain WORDS` a hint names for a job (volume) of `project`,
        so that it works as printed (the Client's adds `-p PROJECT` and `--backend` where config.yaml
        sends the default project elsewhere); None: plain `dtrain WORDS`. `project`: the one whose
        volumes and snapshots this backend was opened for (the Client's `-p`): their messages'
        hints name it (None: the configured project)."""
        self.home = home_dir(home)
        self._storage = storage
        self._command = command
        self._project = project
        self.store = JobStore(self.home / "state.db", list_command=self.cmd("list jobs", project))
        db.keep_reserve(self.home)  # a purge's room on a full disk, in a home that never used volumes too

    def cmd(self, words: str, project: str | None) -> str:
        """`dtrain WORDS` as a hint names it for a job (volume) of `project` (see `command`)."""
        return self._command(words, project) if self._command is not None else f"dtrain {words}"

    def _job_cmd(self, words: str, name: str) -> str:
        """`cmd` for job `name`'s own project."""
        try:
            project = self.store.job(name)["project"]
        except NotFoundError:
            project = None
        return self.cmd(words, project)

    @property
    def storage(self):
        """The volume and snapshot store, opened on first use (plain jobs never touch it)."""
        if self._storage is None:
            from dtrain.storage.volumes import Storage
            self._storage = Storage(self.home, classes=UserConfig.load(self.home).class_roots(),
                                    command=lambda words: self.cmd(words, self._project), job_command=self._job_cmd)
        return self._storage

    # ---- submit ---------------------------------------------------------------------------
    def _submit(self, spec: JobSpec) -> JobInfo:
        import socket

        from dtrain.backends.local import launch

        self._check_project(spec)
        self._check_resources(spec)
        mounts = [launch.Mount(source=self.storage.get_volume(v.volume).path if isinstance(v, VolumeMount) else None,
                               target=v.mount_path) for v in spec.volumes]
        self._check_hidden(mounts)
        # Jupyter serves its working folder: without a volume or --working-dir, a new one of the
        # notebook's own, never the caller's (which may hold the dtrain home and its server token).
        own_folder = spec.notebook and not spec.volumes and not spec.working_dir
        cwd = str(self.home / "jobs" / spec.name / "work") if own_folder else (spec.working_dir or os.getcwd())
        mount, host_cwd = launch.behind(cwd, mounts)
        # a new volume is empty, but its mount point is a folder: the job may start there
        new_root = mount is not None and mount.source is None and os.path.normpath(cwd) == mount.target
        if not own_folder and not new_root and (host_cwd is None or not os.path.isdir(host_cwd)):  # the ranks start there
            raise SpecError(f"--working-dir {cwd} is not a folder " +
                            ("on this machine" if mount is None else f"in the volume mounted at {mount.target}") +
                            ": give an existing folder")
        launch.check_tools(spec, cwd=cwd, mounts=mounts)
        self.store.check_free(spec.name, self.cmd)  # again in insert_job's transaction; here before volumes are made
        job_dir = self.home / "jobs" / spec.name
        if job_dir.is_symlink():  # the job's logs and records would be written wherever it points
            raise ConflictError(f"{job_dir} is a symbolic link, and a job's folder is never one: remove it "
                                f"and submit again (nothing was started)")
        if (job_dir / "work").exists() and (job_dir.parent / f".{spec.name}.work").exists():
            raise ConflictError(f"{job_dir.parent / ('.' + spec.name + '.work')} holds an earlier notebook's files "
                                f"set aside by a submit that did not finish: move them away and submit again "
                                f"(nothing was started)")
        created = self._prepare_volumes(spec) if spec.volumes else []
        try:
            self.store.insert_job(spec, cwd=cwd, node=socket.gethostname(), cmd=self.cmd)
        except Exception:
            for name in created:
                self.storage.delete_volume(name, force=True)
            raise
        # A deleted job of the same name left its folder: its logs and records go, but a notebook's
        # work folder is the user's files (Kubeflow keeps a notebook's workspace volume), so it is
        # set aside and kept as the new job's (a crash meanwhile leaves it in jobs/.NAME.work).
        kept = job_dir.parent / f".{spec.name}.work"
        old_work = job_dir / "work"
        if old_work.is_dir() and not old_work.is_symlink() and not job_dir.is_symlink() and not kept.exists():
            old_work.rename(kept)
        shutil.rmtree(job_dir, ignore_errors=True)
        job_dir.parent.mkdir(exist_ok=True)
        try:
            job_dir.mkdir()  # never through a link that appeared since the check: mkdir does not follow it
        except FileExistsError:
            self.store.purge(spec.name)
            for name in created:
                self.storage.delete_volume(name, force=True)
            raise ConflictError(f"{job_dir} appeared while the job was submitted (a link or a file that submit did "
                                f"not make): remove it and submit again (nothing was started)") from None
        (job_dir / "logs").mkdir()
        if kept.is_dir() and not kept.is_symlink():
            kept.rename(job_dir / "work")
        elif own_folder:
            (job_dir / "work").mkdir(mode=0o700)
        self._start_supervisor(spec.name, replacing=(None, None))
        return self._get(spec.name)

    def _start_supervisor(self, name: str, *, replacing: tuple, message: str = "",
                          restarts: int | None = None) -> bool:
        """Start a supervisor and record it, if the job's recorded (pid, start) is still `replacing`.

        Two commands that both find a lost supervisor both start one; the compare-and-set on the
        recorded supervisor lets one win, and the loser's supervisor is stopped before it acts.
        """
        from dtrain.backends.local.ranks import supervisor_token
        from dtrain.procs import Ident, signal_process, spawn_detached

        # Started in the job's folder: the job's working folder may exist only inside its volumes
        # (the launch plan starts the job there, through the host folder behind it).
        folder = self.home / "jobs" / name
        try:
            pid = spawn_detached([sys.executable, "-m", "dtrain.backends.local.supervisor", str(self.home), name],
                                 log=folder / "supervisor.log", cwd=str(folder), what=f"job {name}'s supervisor")
        except EnvironmentError_ as err:  # nothing ran: say why now rather than "never started" a minute later
            if self.store.replace_supervisor(name, old=replacing, pid=None, token=None):  # still ours to end
                self.store.set_status(name, "Failed", f"{err}; fix that and submit the job again")
            raise
        ident = Ident.of(pid)
        token = supervisor_token(ident) if ident else None
        try:
            if self.store.replace_supervisor(name, old=replacing, pid=pid, token=token, message=message,
                                             restarts=restarts):
                return True
        except sqlite3.OperationalError:  # not recorded (a full disk refused it): it must not run unrecorded
            signal_process(ident, signal.SIGKILL)
            raise
        signal_process(ident, signal.SIGKILL)
        return False

    def _check_project(self, spec: JobSpec) -> None:
        """The CLI, the SDK, the HTTP API, notebooks and pipeline steps all submit through here."""
        if spec.project != "default":
            require_project(spec.project, [p["name"] for p in self.store.projects()])

    def _check_resources(self, spec: JobSpec, *, volumes: bool = True) -> None:
        from dtrain.backends.local.devices import inventory
        from dtrain.backends.local.node import check_selector, node_labels

        if spec.node_selector:  # the one node: a selector it cannot match would wait for ever on Kubernetes
            check_selector(spec, node_labels(UserConfig.load(self.home).node_labels), str(self.home / "config.yaml"))
        most, why = max_local_processes()
        processes, gpu = shown(spec.typed("processes")), shown(spec.typed("gpu"))  # as typed: --processes 1E3
        if spec.processes > most:
            raise QuotaError(f"job {spec.name!r} asks for {processes} processes but this machine can run at "
                             f"most {most} (limited by {why}); lower --processes")
        each = counted(spec.processes, 'process', 'processes', typed=processes)
        gpus = len(inventory())
        if spec.gpus_requested > gpus and not gpus:  # the reference's `--gpu 1` on a CPU workstation
            raise QuotaError(f"job {spec.name!r} needs {counted(spec.gpus_requested, 'GPU')} ({each} x "
                             f"{gpu}) but this machine has no GPU: drop --gpu (or give --gpu 0) to run on its "
                             f"CPUs; DTRAIN_GPUS=N stands in N GPUs to try the scheduler and quotas without them")
        if spec.gpus_requested > gpus:
            raise QuotaError(f"job {spec.name!r} needs {counted(spec.gpus_requested, 'GPU')} ({each} x "
                             f"{gpu}) but this machine has {gpus}; lower --processes or --gpu")
        _check_cpu_memory(spec)
        quota = self.store.project_quota(spec.project)
        if quota is not None and spec.gpus_requested > quota:
            raise QuotaError(f"job {spec.name!r} needs {counted(spec.gpus_requested, 'GPU')} but project {spec.project!r} has a "
                             f"quota of {quota}; lower --gpu/--processes or raise it with "
                             f"'{self.cmd(f'project create {spec.project} --gpu-quota N', None)}'")
        if not volumes:
            return
        for v in spec.volumes:
            if not isinstance(v, NewVolume):
                self._check_existing(v, spec.project)
        if spec.snapshot_volume and spec.snapshot_volume not in {m.volume for m in spec.resolved_volumes()}:
            self.storage.get_volume(spec.snapshot_volume)

    def _check_existing(self, v: VolumeMount, project: str | None = None) -> None:
        if "." in v.volume:  # a Kubernetes claim's full name (names.check_mounted_volume): never a local volume's
            raise SpecError(dotted_volume_refusal(v.volume, v.mount_path))
        try:
            vol = self.storage.get_volume(v.volume)  # NotFoundError names the volume
        except NotFoundError as err:
            if v.volume != "local" and v.volume not in self.storage.classes:
                raise
            # `--pvc local:/mnt`: a new volume of the class was meant, and its size left out
            raise NotFoundError(f"{err}; '{v.volume}' is a storage class: a new volume of it is --pvc "
                                f"{v.volume}:SIZE:{v.mount_path}, e.g. {v.volume}:10Gi:{v.mount_path}") from None
        if self._lost(vol):  # else the job fails at its start, the reason in launcher.log
            raise ConflictError(f"volume {vol.name!r} has lost its folder {vol.path} (removed by hand, or the disk of "
                                f"storage class {vol.storage_class!r} is not mounted): put it back, or restore a "
                                f"snapshot of it into a new volume (see '{self.cmd(f'snapshot list --volume {vol.name}', project)}')")

    def _lost(self, vol: Volume) -> bool:
        """A volume whose data folder is gone: Kubernetes' Lost (a PVC whose volume is gone). A
        volume being moved to another class is not: its folder changes place during the move."""
        try:
            if stat.S_ISDIR(os.lstat(vol.path).st_mode):
                return False
        except OSError:
            pass
        return self.storage.mover.live(vol.name) is None

    def _check_hidden(self, mounts) -> None:
        """A volume mounted over the dtrain home, dtrain's own Python (its environment, and the
        installation that environment links to) or the system's programs would hide, inside the
        job, the files its processes write (logs, rank records) or run. And the place of each
        mount must be one the sandbox can mount over: a folder, or nothing yet, reached through no
        symbolic link (a link, or a file, there fails the job's start)."""
        from dtrain.backends.local.launch import behind

        needed = (("the dtrain home", self.home), ("dtrain's Python environment", Path(sys.prefix)),
                  ("the Python installation under dtrain's environment", Path(sys.base_prefix)),
                  ("the Python interpreter", Path(sys.executable).resolve().parent),
                  ("dtrain's code", Path(__file__).resolve().parents[2]),
                  *(("the system's programs and libraries", Path(p)) for p in ("/usr", "/bin", "/lib", "/lib64")))
        for what, path in needed:
            for spelled in {str(path), os.path.realpath(path)}:
                mount, _ = behind(spelled, mounts)
                if mount is not None:
                    raise SpecError(f"a volume mounted at {mount.target} would hide {what} ({path}) from the job, "
                                    f"which needs it to run and to record its logs: mount it elsewhere, e.g. /mnt")
        for m in mounts:
            _check_mount_point(m.target, [o for o in mounts if o is not m])

    def _prepare_volumes(self, spec: JobSpec) -> list[str]:
        """Create the job's new volumes (pvc-<job>-<i>), labelled with the job as its PVCs are on Kubernetes
        (`volume describe`: `Job:`); all or none."""
        new = spec.new_volumes()
        existing = {v.name for v in self.storage.list_volumes()}
        for name, _v in new:
            if name in existing:
                raise ConflictError(f"volume {name!r} (for --pvc of job {spec.name!r}) already exists; mount it with "
                                    f"--pvc {name}:MOUNT or remove it with '{self.cmd(f'volume delete {name}', spec.project)}'")
        created = []
        try:
            for name, v in new:
                self.storage.create_volume(name, size=v.size, storage_class=v.storage_class,
                                           labels={LABEL_JOB: spec.name})
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

    def _page(self, *, project, status, limit, offset) -> JobPage:
        """Paged in SQL: only the page's jobs are read in full. The jobs that may run are reconciled
        first, so that one whose supervisor died is counted as what it is now (Failed, relaunched)."""
        self.reconcile_others(None)
        total, rows = self.store.page(project=project, status=None if status is None else status.value,
                                      limit=limit, offset=offset)
        return JobPage(total=total, jobs=tuple(self._info(row) for row in rows))  # read after the reconciling

    def _mounting_page(self, volumes, *, project, limit) -> JobPage:
        """In SQL, as `_page`: the volumes each job's stored spec mounts, and the new ones named after it."""
        self.reconcile_others(None)
        total, rows = self.store.mounting_page(volumes, project=project, limit=limit)
        return JobPage(total=total, jobs=tuple(self._info(row) for row in rows))

    def _summary(self, *, project) -> tuple[list[JobCount], list[JobInfo]]:
        """Counted in SQL, after reconciling the jobs that may run (as `_page` does); only the
        unfinished jobs' records are built."""
        self.reconcile_others(None)
        counts = [JobCount(project=p, status=JobStatus(s), jobs=n) for p, s, n in self.store.count(project=project)]
        unfinished = [self._info(row) for row in self.store.jobs_in(UNFINISHED)
                      if project is None or row["project"] == project]
        return counts, unfinished

    def _reconcile(self, row):
        """A job whose supervisor died while nobody watched is relaunched (restarts left) or Failed, never Running.

        The command that notices first claims the job (a compare-and-set recording itself as the
        job's supervisor, see ranks.supervisor_token) before it stops anything: a command that read
        the job before another one relaunched it would otherwise stop the new attempt's ranks as
        leftovers of the lost one."""
        if row["status"] not in ACTIVE:
            return row
        from dtrain.backends.local.ranks import (disk_full, full_disk_advice, full_disk_signs, kill_ranks, own_causes,
                                                 parse_ident, supervisor_token)
        from dtrain.procs import Ident

        sup = parse_ident(row["supervisor_pid"], row["supervisor_start"])
        if sup is None:
            if time.time() - row["created"] < LOST_AFTER_S:
                return row
            reason = "its supervisor never started"
        elif sup.alive():
            return row
        elif full := disk_full(self.home):  # it died writing there (fail_for_room could record nothing)
            reason = f"its supervisor (pid {sup.pid}) is gone: most likely a write it needed failed, as {full}"
        elif signs := full_disk_signs(self.home / "jobs" / row["name"]):  # freed since: what it left says so
            reason = (f"its supervisor (pid {sup.pid}) is gone: most likely a write it needed failed on the home "
                      f"disk, full then ({signs})")
        else:
            reason = f"its supervisor (pid {sup.pid}) is gone: killed, or the machine restarted"
        name = row["name"]
        job_dir = self.home / "jobs" / name
        reason += own_causes(job_dir)
        old = (row["supervisor_pid"], row["supervisor_start"])
        me = Ident.of(os.getpid())
        claim = (me.pid, supervisor_token(me, claim=True))
        # A full (or read-only) disk, as when the job filled it, refuses the record: the job is shown
        # for what it is, and recorded by the first command that can write (`list` must still show it).
        room = (full_disk_advice(self.home, lambda job: self.cmd(f"delete {job} --purge", row["project"]))
                if sup is not None and disk_full(self.home) else "free space there")
        unrecorded = {**dict(row), "status": "Failed", "finished": time.time(),
                      "message": f"lost: {reason} (not recorded yet: the disk holding $DTRAIN_HOME is full or "
                                 f"read-only; {room})"}
        try:
            claimed = self.store.replace_supervisor(name, old=old, pid=claim[0], token=claim[1])
        except sqlite3.OperationalError as err:
            if not db.disk_refused(err):
                raise
            return unrecorded
        if not claimed:
            return self.store.job(name)  # another command got there first (or the job ended)
        try:
            kill_ranks(job_dir)  # only processes whose recorded identity still matches
            spec = JobSpec.from_stored(json.loads(row["spec"]))
            last = self.store.events(name)[-1:]
            if not job_dir.is_dir():  # a supervisor started there would have nowhere to write
                self.store.set_status(name, "Failed", f"lost: its folder {job_dir} was removed while it was "
                                      f"{row['status'].lower()}; submit it again")
            elif last and last[0]["message"].startswith(SNAPSHOTTING):  # trained: never run it again
                self._snapshot_lost(name, last[0]["message"][len(SNAPSHOTTING):], since=last[0]["time"],
                                    reason=reason)
            elif sup is not None and row["status"] == "Running" and (done := _all_exited_0(job_dir, spec)):
                # lost after its ranks ended well, before it recorded so (killed; a full or locked
                # database refused the write): the job is done, never trained again nor Failed
                if spec.snapshot_volume:
                    self._snapshot_lost(name, spec.snapshot_volume, since=min(r["finished"] for r in done),
                                        reason=reason)
                else:
                    self.store.set_status(name, "Succeeded", "all processes exited 0" + "".join(
                        f"; rank {r['rank']}'s log is incomplete: {r['log_error']}" for r in done
                        if r.get("log_error")) + f"; its supervisor (pid {sup.pid}) was lost before it recorded this "
                        f"(killed, the machine restarted, or the database could not be written then)", exit_code=0)
            elif sup is not None and row["status"] == "Pending" and self._queued_relaunches(name) < QUEUED_RELAUNCHES:
                # Nothing of it ran: a new supervisor takes its place in the queue, and no restart is spent
                try:
                    self._start_supervisor(name, replacing=claim, message=f"lost: {reason}; " + (
                        REQUEUED_PREEMPTED if self.store.job_devices(name) else REQUEUED))
                except EnvironmentError_:
                    pass  # the job is Failed, saying why: what listed it goes on
            elif sup is not None and row["restarts"] < spec.max_restarts:
                restart = row["restarts"] + 1
                try:
                    self._start_supervisor(name, restarts=restart, replacing=claim,
                                           message=f"lost: {reason}; relaunching every rank from the last "
                                                   f"checkpoint (restart {restart} of {spec.max_restarts})")
                except EnvironmentError_:
                    pass  # the job is Failed, saying why: what listed it goes on
            elif spec.notebook:  # `dtrain notebook` takes no --max-restarts: say what starts it again
                self.store.set_status(name, "Failed", f"lost: {reason}; start it again: "
                                      f"'{self.cmd(f'delete {name}', spec.project)}' (its files are kept), "
                                      f"then '{self.cmd(f'notebook {name} ...', spec.project)}'")
            else:
                self.store.set_status(name, "Failed", f"lost: {reason}" + (
                    f"; no restarts left (--max-restarts {spec.max_restarts})" if sup is not None else ""))
        except BaseException as err:  # give the job back as it was: the next command tries again
            refused = isinstance(err, sqlite3.OperationalError) and db.disk_refused(err)
            try:
                self.store.replace_supervisor(name, old=claim, pid=old[0], token=old[1])
            except sqlite3.OperationalError as again:
                if not (refused and db.disk_refused(again)):
                    raise
            if refused:
                return unrecorded
            raise
        return self.store.job(name)

    def _snapshot_lost(self, name: str, volume: str, *, since: float, reason: str) -> None:
        """The supervisor died after every rank exited 0, while snapshotting for --snapshot-on-success:
        the job is Succeeded if that snapshot was registered, else Failed saying how to take it."""
        snaps = [s for s in self.storage.list_snapshots(volume=volume, job=name)
                 if s.created >= int(since)]  # a snapshot's time is kept to the second
        if snaps:
            self.store.set_status(name, "Succeeded", f"all processes exited 0; snapshot {snaps[-1].name} (its "
                                  f"supervisor was lost after taking it)", exit_code=0, snapshot=snaps[-1].name)
            return
        self.store.set_status(name, "Failed", f"lost: {reason}, after every process exited 0, while taking the "
                              f"snapshot of volume {volume}: the results are on the volume; take it with "
                              f"'{self._job_cmd(f'snapshot create {volume} --job {name}', name)}'", exit_code=0)

    def _queued_relaunches(self, name: str) -> int:
        return sum(e["status"] == "Pending" and e["message"].endswith((REQUEUED, REQUEUED_PREEMPTED)) for e in self.store.events(name))

    def reconcile_others(self, name: str | None) -> None:
        """What `list` does, for every active job but `name` (None: every one): one whose supervisor
        died is relaunched or Failed, releasing its devices. A page and a summary call it before
        they count; a supervisor waiting for its turn calls it now and then:
        a lost job ahead of it in the queue, or holding the devices it waits for, would otherwise
        block it until somebody ran a command."""
        for row in self.store.active_jobs():
            if row["name"] != name:
                self._reconcile(row)
        self._release_stopped()

    def _release_stopped(self) -> None:
        """A deleted or suspended job holds its devices until its processes are gone: its stop (the
        `delete` or `suspend` command, or its supervisor) releases them. One whose stop was cut
        short (both killed) is released here, once its supervisor is gone, after its leftovers."""
        from dtrain.backends.local.ranks import kill_ranks

        for row in self.store.held_by_stopped():
            sup = _supervisor(row)
            if sup is None or not sup.alive():
                kill_ranks(self.home / "jobs" / row["name"])
                try:
                    self.store.release(row["name"])
                except sqlite3.OperationalError as err:  # a full or read-only disk: a later command does it
                    if not db.disk_refused(err):
                        raise

    def _info(self, row) -> JobInfo:
        from dtrain.backends.local.scheduler import split_devices
        from dtrain.backends.local.ranks import TERMINATING, rank_records, still_stopping

        spec = JobSpec.from_stored(json.loads(row["spec"]))
        status = JobStatus(row["status"])
        records = {r["rank"]: r for r in rank_records(self.home / "jobs" / spec.name)}
        events = self.store.events(spec.name)
        suspended = max((e["time"] for e in events if e["status"] == "Suspended"), default=None)
        devices = self.store.job_devices(spec.name)
        # after its end (or a suspension) the devices are released: each rank shows those it ran on
        ran_on = devices or (self.store.recorded(row, "ran_on") or [] if status != JobStatus.PENDING else [])
        groups = split_devices(ran_on, spec.processes, spec.gpu) if ran_on else []
        node = row["node"] if row["started"] is not None else None  # a job never placed ran on no node
        procs = []
        for rank in range(spec.processes):
            # A Pending job runs nothing: what a resumed job's ranks recorded is of the run it stopped
            rec = records.get(rank, {}) if status != JobStatus.PENDING else {}
            pstatus = rec.get("status", "Pending")
            if status != JobStatus.RUNNING and still_stopping(records.get(rank, {})):
                # preempted (Pending again), suspended or deleted, its process not yet exited: a
                # pod Terminating; Pending (or Stopped) once it has
                pstatus = TERMINATING
            elif status.terminal and pstatus in ("Pending", "Running"):
                pstatus = "Stopped" if status == JobStatus.DELETED else ("Failed" if pstatus == "Running" else pstatus)
            elif status == JobStatus.DELETED and _ended_by(rec, row["finished"]):
                pstatus = "Stopped"  # its exit (143: SIGTERM) was `dtrain delete`'s doing, not a failure
            elif status == JobStatus.SUSPENDED and (pstatus in ("Pending", "Running") or _ended_by(rec, suspended)):
                pstatus = "Stopped"  # as for a deletion: the suspension ended it
            procs.append(ProcessInfo(rank=rank, status=pstatus, exit_code=rec.get("exit_code"),
                                     devices=tuple(groups[rank]) if groups else (), node=node,
                                     pod=f"{spec.name}-{rank}"))  # Run:AI's short form: `--pod NAME-R` is rank R
        running = sum(p.status == "Running" for p in procs) if status == JobStatus.RUNNING else 0
        pending = sum(p.status == "Pending" for p in procs) if status.value in ACTIVE else 0
        events = tuple(Event(time=e["time"], status=e["status"], message=e["message"]) for e in events)
        sources = self._data_sources(self.store.recorded(row, "data_sources") or [])
        return JobInfo(name=spec.name, spec=spec, status=status, backend=self.name, created=row["created"],
                       uid=self.store.uid(row),
                       started=row["started"], finished=row["finished"], node=node,
                       gpus_allocated=len(devices), processes_running=running, processes_pending=pending,
                       processes=tuple(procs), events=events, restarts=max([row["restarts"]] + [
                           r.get("restart", 0) for r in records.values()]),
                       message=row["message"], snapshot=row["snapshot"], data_sources=sources,
                       extra={"limits": _limits_note(spec), "cwd": row["cwd"],
                              "job_dir": str(self.home / "jobs" / spec.name),
                              # its snapshot's source (a job of before recorded no other), else its first volume's
                              "source_snapshot": row["source_snapshot"] or next(
                                  (s.snapshot for s in sources), None),
                              "exit_code": row["exit_code"],
                              # its --snapshot-on-success snapshot was deleted since (`snapshot delete`)
                              "snapshot_deleted": bool(row["snapshot"]) and not self.storage.has_job_snapshot(
                                  row["snapshot"], spec.name, row["created"], self.store.uid(row))})

    def _data_sources(self, recorded: list[dict]) -> tuple[DataSource, ...]:
        """The snapshots a job's volumes held when it started, as its supervisor recorded them, each
        said deleted where that snapshot or volume (by uid: a name may be reused) is gone now."""
        if not recorded:
            return ()
        volumes, snapshots = self.storage.still_there([r["volume_uid"] for r in recorded],
                                                      [r["snapshot_uid"] for r in recorded])
        return tuple(DataSource(volume=r["volume"], snapshot=r["snapshot"],
                                snapshot_deleted=r["snapshot_uid"] not in snapshots,
                                volume_deleted=r["volume_uid"] not in volumes) for r in recorded)

    def _logs(self, name, *, rank, tail, since, follow, previous=False) -> Iterator[LogLine | Notice]:
        from collections import deque

        from dtrain.backends.local.logfiles import LogFiles
        from dtrain.backends.local.ranks import log_launches

        job_dir = self.home / "jobs" / name
        # Every attempt appends to the same rank-N.log; the supervisor records where each launch began
        launches = log_launches(job_dir)
        if previous:
            row = self.store.job(name)
            if len(launches) < 2:
                raise NotFoundError(_no_previous(name, row["restarts"], launches,
                                                 self.cmd(f"logs {name}", row["project"])))
            low, high = launches[-2]["starts"], launches[-1]["starts"]
            # a rank whose log was not there when the latest attempt began wrote nothing before it
            window = {r: (low.get(r, 0), high.get(r, 0))
                      for r in range(JobSpec.from_stored(json.loads(row["spec"])).processes)}
        else:
            if follow and self._relaunching(name, launches):
                # Resumed (or preempted and queued again): its last run has ended, or is ending, and the next has
                # not begun. Followed, the current attempt is the one to come, as kubectl -f follows the container
                # that runs: a follower got the ended run's lines first, then the new run's, every line of the run
                # before shown again. A read without -f still gives the last run's lines (why it stopped).
                yield Notice(code="logs-incomplete", message=(  # said at once (logs() logs it): -f may wait
                    f"job {name!r} is Pending again ({self.store.job(name)['message'] or 'queued'}): following its "
                    f"next run, which has not started; '{self._job_cmd(f'logs {name}', name)}' shows the last run's lines"))
                launches = self._next_launch(name, launches)
                if launches is None:  # stopped (suspended, deleted) before it ran again: nothing to follow
                    return
            window = {r: (o, None) for r, o in launches[-1]["starts"].items()} if launches else {}
        files = LogFiles(job_dir / "logs", rank=rank, since=since, window=window)
        # the last `tail` lines of the job are among the last `tail` of each rank
        yield from files.read() if tail is None else deque(files.read(last=tail), maxlen=tail)
        while follow:
            # Ended once nothing runs and its supervisor has exited: a suspended job is recorded
            # Suspended before its supervisor is signalled, and its ranks' checkpoint lines come after.
            row = self._reconcile(self.store.job(name))
            sup = _supervisor(row)
            done = JobStatus(row["status"]).stopped and (sup is None or not sup.alive())
            yield from files.read()
            if done:
                return
            time.sleep(0.2)

    def _relaunching(self, name: str, launches: list[dict]) -> bool:
        """Pending again after its last launch began (resumed, or preempted): that run has ended, or
        is ending, and the next one has not started."""
        if not launches or self.store.status(name) != "Pending":
            return False
        began = launches[-1].get("time") or 0.0
        return any(e["status"] == "Pending" and e["time"] > began for e in self.store.events(name))

    def _next_launch(self, name: str, launches: list[dict]) -> list[dict] | None:
        """Wait until a launch after `launches[-1]` is recorded: the launches then; None once the job
        has stopped without one."""
        from dtrain.backends.local.ranks import log_launches

        job_dir, last = self.home / "jobs" / name, launches[-1]
        while True:
            now = log_launches(job_dir)
            if now and (now[-1]["attempt"], now[-1]["time"]) != (last["attempt"], last["time"]):
                return now
            row = self._reconcile(self.store.job(name))
            if JobStatus(row["status"]).stopped:
                return None
            time.sleep(0.2)

    # ---- delete and nodes -----------------------------------------------------------------
    def _delete(self, name: str) -> JobInfo:
        from dtrain.backends.local.ranks import kill_ranks

        row = self.store.job(name)
        was_active = row["status"] in ACTIVE
        try:  # refused if already Deleted; its devices are held until its processes are gone
            self.store.set_status(name, "Deleted", "deleted by the user", hold=True)
        except sqlite3.OperationalError as err:
            # A full or read-only disk must not keep a runaway job (one filling that disk) running:
            # its processes are stopped all the same, and the record waits for a retry.
            if not was_active or not db.disk_refused(err):
                raise
            unrecorded = err
        else:
            unrecorded = None
        if was_active:
            self._stop(name, row)
        else:  # a suspended (or ended) job's leftovers, if any
            kill_ranks(self.home / "jobs" / name)
        if unrecorded is None:  # else it is still recorded as it was, and holds its devices
            self.store.release(name)
        if unrecorded is not None:
            raise StorageError(f"job {name!r} was stopped, but its deletion could not be recorded: the state "
                               f"database could not be written ({unrecorded}): the disk holding $DTRAIN_HOME is "
                               f"probably full or read-only; free space there (df -h) and run "
                               f"'{self._job_cmd(f'delete {name}', name)}' again")
        return self._get(name)

    def _suspend(self, name: str) -> JobInfo:
        """As `_delete`, but the job reads Suspended and `dtrain resume` queues it again: the status
        is recorded first (the supervisor, finding it, records nothing after the stop), then its
        supervisor gets SIGTERM and passes it on; its devices are free once its processes are gone
        (they may still use them while they write their checkpoint)."""
        row = self.store.job(name)
        again = ("(its kernels ended; its files are kept)" if json.loads(row["spec"]).get("notebook")
                 else "from its last checkpoint")  # a notebook has no checkpoint to go on from
        if not self.store.set_status(name, "Suspended", f"suspended by the user; "
                                                        f"'{self.cmd(f'resume {name}', row['project'])}' starts it "
                                                        f"again {again}", hold=True):
            raise ConflictError(f"job {name!r} is {self.store.status(name)}: only a Pending or Running job can "
                                f"be suspended")
        self._stop(name, row)
        self.store.release(name)
        return self._get(name)

    def _stopping_wait(self, name: str) -> float:
        """As long as `_resume` waits for a last supervisor still stopping its ranks (`_exited`)."""
        from dtrain.backends.local.ranks import GRACE_S, parse_ident

        row = self.store.job(name)
        sup = parse_ident(row["supervisor_pid"], row["supervisor_start"])
        return GRACE_S + 5 if sup is not None and sup.alive() else 0.0

    def _resume(self, name: str) -> JobInfo:
        """Suspended -> Pending with a new supervisor, which waits for devices as a new job's does;
        the restarts spent so far stay spent. The last supervisor may still be stopping its ranks (an
        idle notebook's suspends itself): waited for as `delete` waits, then refused."""
        from dtrain.backends.local.ranks import kill_ranks, parse_ident, supervisor_token
        from dtrain.procs import Ident

        row = self.store.job(name)
        sup = parse_ident(row["supervisor_pid"], row["supervisor_start"])
        if sup is not None and not _exited(sup):
            raise ConflictError(f"job {name!r} is still stopping (its supervisor, pid {sup.pid}, has not exited): "
                                f"run '{self.cmd(f'resume {name}', row['project'])}' again in a minute")
        spec = JobSpec.from_stored(json.loads(row["spec"]))
        self._check_resources(spec, volumes=False)  # a quota may have been lowered since
        for mount in spec.resolved_volumes():  # and a volume deleted (--force) or lost: say so now
            self._check_existing(mount, spec.project)
        me = Ident.of(os.getpid())
        claim = (me.pid, supervisor_token(me, claim=True))  # ours until the new supervisor records itself
        self.store.resume(name, "resumed by the user; " + QUEUED, claim=claim, release=False)
        # A rank its killed supervisor left (its stop cut short) must not run beside the next run's,
        # nor keep using the devices it held once they go to another job. Killed only by the resume
        # that queued the job, before its supervisor starts: a second resume at once (refused just
        # above) killed first, and so the ranks the winner's new supervisor had started meanwhile.
        kill_ranks(self.home / "jobs" / name)
        self.store.release_preempted(name)
        self._start_supervisor(name, replacing=claim)
        return self._get(name)

    def _stop(self, name: str, row) -> None:
        """Stop what runs of a job whose new status (Deleted, Suspended) is recorded: SIGTERM to its
        supervisor, which passes it on (the workloads checkpoint and exit), SIGKILL after the grace
        period, then whatever rank is left. `row` is the job as it was before."""
        from dtrain.backends.local.ranks import kill_ranks
        from dtrain.procs import signal_process

        sup = _supervisor(row)
        if signal_process(sup, signal.SIGTERM) and not _exited(sup):
            signal_process(sup, signal.SIGKILL)
        kill_ranks(self.home / "jobs" / name)

    def _artifacts(self, name: str, *, to: Path) -> Path:
        """Copy the job's model folder ($DTRAIN_MODEL_DIR in the job: jobs/<name>/model) to `to`."""
        from dtrain.backends import targets

        self._get(name)
        source = self.home / "jobs" / name / "model"
        if source.is_symlink():  # the job's processes can write its folder: a link there is never followed
            raise ConflictError(f"the model folder of job {name!r} ({source}) is a symbolic link (to {os.readlink(source)}), "
                                f"and artifacts copies only what the job wrote into it: copy that folder yourself "
                                f"if you trust it; nothing was copied")
        if not source.is_dir():
            raise NotFoundError(f"job {name!r} wrote no model folder: save into $DTRAIN_MODEL_DIR in the job")
        return targets.filled(to, lambda staging: targets.copy_tree(source, staging))

    def _exec(self, name: str, command: list[str], *, rank: int) -> int:
        """nsenter into the rank's mount namespace (bubblewrap's, when the job has volumes), in
        its working folder, with its environment read from /proc."""
        import subprocess

        from dtrain.backends.local.ranks import rank_records
        from dtrain.procs import Ident

        rec = {r.get("rank"): r for r in rank_records(self.home / "jobs" / name)}.get(rank)
        if rec is None:  # the job reads Running once its first rank is; this one is still being launched
            raise NotReadyError(f"rank {rank} of job {name!r} has not started yet (its process is being "
                                f"launched): try again in a moment; see "
                                f"'{self._job_cmd(f'describe job {name}', name)}'")
        ident = Ident.from_record(rec)
        pid = ident.pid if ident is not None else None
        env = _environ(pid) if ident is not None and ident.alive() and rec.get("exit_code") is None else None
        # The record's pid is trusted only while that process still carries this job's rank.
        if env is None or env.get("DTRAIN_JOB_NAME") != name or env.get("RANK") != str(rank):
            raise ConflictError(f"rank {rank} of job {name!r} is not running now; "
                                f"see '{self._job_cmd(f'describe job {name}', name)}'")
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
        import socket

        from dtrain.backends.local.devices import inventory
        from dtrain.backends.local.node import node_labels

        gpus = inventory()
        self.reconcile_others(None)  # a lost job's GPUs are not shown held by a job `list` calls Failed
        held, projects = self.store.allocations(), self.store.allocation_projects()
        return [NodeInfo(name=socket.gethostname(), gpus_allocatable=len(gpus), gpus_allocated=len(held),
                         cpus=os.cpu_count(), labels=node_labels(UserConfig.load(self.home).node_labels),
                         memory=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
                         gpus=tuple(replace(g, job=held.get(g.index), project=projects.get(held.get(g.index)))
                                    for g in gpus))]

    def _render(self, spec: JobSpec) -> list[dict]:
        """A local job is its spec: the dry run shows what would be stored, and refuses what submit would
        refuse that can be read without creating anything (the project, this machine, the quota, the
        volumes it mounts, the classes of new ones, a name in use): a plan that cannot run is not shown."""
        self._check_project(spec)
        self._check_resources(spec)  # the volumes mounted: a missing one is submit's NotFoundError
        new = spec.new_volumes()  # their names (pvc-JOB-i) must be volume names, as submit requires
        existing = {v.name for v in self.storage.list_volumes()} if new else set()
        for name, v in new:
            self.storage.class_root(v.storage_class, claim=False)  # an unknown class: create's line
            if name in existing:
                raise ConflictError(f"volume {name!r} (for --pvc of job {spec.name!r}) already exists; mount it with "
                                    f"--pvc {name}:MOUNT or remove it with '{self.cmd(f'volume delete {name}', spec.project)}'")
        self.store.check_free(spec.name, self.cmd)
        return [spec.to_dict()]

    def _planned_snapshot(self, spec: JobSpec) -> str:
        """Named when taken, by the time: no earlier run's snapshot can hold the name (one that does
        in the same second gets -2), so there is nothing to look up."""
        return (f"{spec.snapshot_volume}-<UTC time it is taken, YYYYMMDD-HHMMSS>, a name of its own whatever "
                f"earlier runs of {spec.name} left")

    def _notebook_url(self, info: JobInfo) -> str:
        from dtrain.backends.local.notebook import read_access

        return read_access(self.home / "jobs" / info.name, info.name,
                           lambda words: self.cmd(words, info.spec.project)).url

    # ---- projects -------------------------------------------------------------------------
    def _create_project(self, name: str, *, gpu_quota: int | None, no_gpu_quota: bool) -> None:
        from dtrain.backends.local.devices import inventory

        gpus = len(inventory())
        if gpu_quota is not None and gpu_quota > gpus:
            raise QuotaError(f"a GPU quota of {gpu_quota} is larger than this machine's {counted(gpus, 'GPU')}; "
                             f"give a quota of {gpus} or less")
        self.store.upsert_project(name, gpu_quota, keep_quota=gpu_quota is None and not no_gpu_quota)

    def _list_projects(self) -> list[ProjectInfo]:
        self.reconcile_others(None)  # as `list` does, so that a lost job's GPUs are not counted
        jobs: dict[str, int] = {}
        for project, status, n in self.store.count(project=None):  # a deleted job is no longer the
            if status != "Deleted":  # project's (`list` hides it too)
                jobs[project] = jobs.get(project, 0) + n
        held = self.store.allocations()  # devices are held by jobs that may run only
        project_of = {row["name"]: row["project"] for row in (*self.store.active_jobs(), *self.store.held_by_stopped())}
        return [ProjectInfo(name=p["name"], backend=self.name, gpu_quota=p["gpu_quota"], jobs=jobs.get(p["name"], 0),
                            gpus_allocated=sum(project_of.get(job) == p["name"] for job in held.values()))
                for p in self.store.projects()]

    # ---- volumes and snapshots --------------------------------------------------------------
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
        if storage_class is None:  # as Storage._clone picks it: the snapshot's, where this machine has it
            storage_class = self.storage.snapshot_class(snap)
        root = self.storage.class_root(storage_class, claim=False)  # an unknown class: the restore's one line
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
                                 free_bytes=c.free_bytes, total_bytes=c.total_bytes, volumes=c.volumes)
                for c in self.storage.storage_classes()]

    def _update_volume(self, name: str, *, storage_class: str) -> VolumeInfo:
        """Move the volume to another class's root folder (storage/move.py), refused while jobs use it."""
        before = self.storage.get_volume(name).path
        info = self._volume(self.storage.update_volume(name, storage_class=storage_class,
                                                       check_users=lambda: self._refuse_users(name)), measure=False)
        info.extra["moved"] = info.extra["path"] != str(before)  # False: already there, as kubectl's "(no change)"
        return info

    def _render_volume_update(self, name: str, *, storage_class: str) -> dict:
        vol = self.storage.get_volume(name)
        root = self.storage.class_root(storage_class, claim=False)  # refused as the move would be
        there = root
        while not there.exists():  # a class folder not made yet: the file system it will be made on
            there = there.parent
        same = os.stat(vol.path).st_dev == os.stat(there).st_dev
        here = vol.storage_class == storage_class and vol.path.parent.parent == root  # Storage.update_volume's test
        return {"volume": name, "from_class": vol.storage_class, "to_class": storage_class,
                "from": str(vol.path.parent), "to": str(root / name),
                "method": "none (the volume is already in this class)" if here
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
                                f"move would lose their writes; {self._keep_or_stop(writers, 'move')}")
        if readers:
            raise ConflictError(f"volume {volume!r} is mounted read-only by {listed(readers, 'job')}: a move "
                                f"removes the old folder under them; {self._keep_or_stop(readers, 'move')}")

    def _keep_or_stop(self, jobs: list[str], what: str) -> str:
        # a Suspended job holds no mount and resumes on the moved or restored folder: the way to keep it (a tier
        # changed, a restore in place mid-training)
        return (f"wait for them, suspend them for the {what} ({self.storage.stop_hint(jobs, 'suspend')}; resume them "
                f"after), or stop them ({self.storage.stop_hint(jobs)})")

    def _names(self, what):
        """Names read from the tables alone: the listing hooks build every job's record and du every volume."""
        return self.store.names() if what == "job" else (self.storage.names(what), [])

    def _list_volumes(self):
        return [self._volume(v) for v in self.storage.list_volumes()]

    def _get_volume(self, name):
        return self._volume(self.storage.get_volume(name))

    def _delete_volume(self, name, *, force):
        users = self.volume_users(name)
        if users and not force:
            self.storage.get_volume(name)  # a volume that is gone says so first
            running = self.volume_users(name, suspended=False)
            if held := [j for j in users if j not in running]:  # a Suspended job never finishes on its own
                hint = self.storage.stop_hint
                first = (f"wait for {', '.join(running)} to finish or stop them ({hint(running)}); " if running else "")
                raise ConflictError(f"volume {name!r} is in use by {listed(users, 'job')}: {first}"
                                    f"{', '.join(held)} {'is' if len(held) == 1 else 'are'} Suspended, which never "
                                    f"{'finishes' if len(held) == 1 else 'finish'} on its own: delete {'it' if len(held) == 1 else 'them'} ({hint(held)}) "
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

    def _writers(self, volume: str) -> list[str]:
        """Running jobs that mount `volume` read-write: a snapshot taken now reads files they change."""
        writers = []
        for row in self.store.jobs_in(("Running",)):
            spec = JobSpec.from_stored(json.loads(row["spec"]))
            if any(m.volume == volume and not m.read_only for m in spec.resolved_volumes()):
                writers.append(spec.name)
        return writers

    def _list_snapshots(self):
        return [self._snapshot(s) for s in self.storage.list_snapshots()]

    def _get_snapshot(self, name):
        return self._snapshot(self.storage.get_snapshot(name))

    def _job_uids(self, names):
        return {name: uid for name, uid in self.store.uids().items() if name in names}  # one query for all

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

    def _volume(self, v: Volume, *, measure: bool = True) -> VolumeInfo:
        """The record of `v`; `measure` walks its files for `used_bytes` (what `du` costs). The
        verbs that just wrote a volume (create, restore, move) return it unmeasured: a restore
        on btrfs takes a few milliseconds, and walking the 15,000 uncached inodes of the new
        subvolume took 0.8 s; list and get measure."""
        return VolumeInfo(name=v.name, backend=self.name, size=v.size, size_bytes=v.size_bytes,
                          storage_class=v.storage_class, created=v.created, origin_snapshot=v.origin_snapshot,
                          status="Lost" if self._lost(v) else "Bound", job=v.labels.get(LABEL_JOB),
                          used_bytes=_disk_usage(v.path) if measure else None, labels=dict(v.labels),
                          extra={"path": str(v.path), "uid": v.uid, "head_snapshot": v.head_snapshot,
                                 "snapshots": v.snapshots})

    def _snapshot(self, s: Snapshot) -> SnapshotInfo:
        """The record of `s`; the base class marks an earlier run's (Backend._mark_earlier_runs)."""
        return SnapshotInfo(name=s.name, backend=self.name, volume=s.volume, created=s.created, job=s.job,
                            job_uid=s.job_uid,
                            job_spec=s.job_spec, source_snapshot=s.source_snapshot, files=s.files, bytes=s.bytes,
                            volume_size=s.volume_size, storage_class=s.storage_class,
                            extra={"id": s.id, "volume_uid": s.volume_uid, "added_bytes": s.added_bytes,
                                   "method": s.method})


def _log():
    import logging  # only a snapshot taken under running jobs warns; plain commands start without it

    return logging.getLogger(__name__)


@functools.cache
def _cgroup_support() -> cgroups.Support:
    from dtrain.backends.local import cgroups

    return cgroups.support()


def _limits_note(spec: JobSpec) -> str | None:
    """What --memory/--cpu mean here: enforced through cgroups, or only advisory (and why)."""
    if spec.memory is None and spec.cpu is None:
        return None
    found = _cgroup_support()
    asked = ", ".join(x for x in (f"memory {spec.memory}" if spec.memory else "",
                                  f"cpu {spec.cpu:g}" if spec.cpu is not None else "") if x)
    if found.enforced:
        return f"{asked} per process, enforced ({found.detail})"
    return f"{asked} per process, {found.detail}"


def _supervisor(row):
    """The Ident of the supervisor a job's row records, or None: none recorded, or a claim (a
    command relaunching the job, whose relaunch is refused once the job has moved on)."""
    from dtrain.backends.local.ranks import is_claim, parse_ident

    if is_claim(row["supervisor_start"]):
        return None
    return parse_ident(row["supervisor_pid"], row["supervisor_start"])


def _all_exited_0(job_dir: Path, spec: JobSpec) -> list[dict]:
    """The rank records of the job's last attempt when every one of its processes exited 0 (none
    missing), else []: what a supervisor lost before recording the job's success left behind."""
    from dtrain.backends.local.ranks import rank_records

    records = rank_records(job_dir)
    if len(records) != spec.processes or any(r.get("exit_code") != 0 for r in records):
        return []
    if any(not isinstance(r.get("finished"), (int, float)) for r in records):
        return []
    return records


def _exited(sup) -> bool:
    """Wait for a supervisor (an Ident) to exit, as long as it may take to stop its ranks (the grace
    period, and a little); whether it did."""
    from dtrain.backends.local.ranks import GRACE_S

    deadline = time.monotonic() + GRACE_S + 5  # LocalBackend._stopping_wait says so
    while sup.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    return not sup.alive()


def _ended_by(rec: dict, deleted: float | None) -> bool:
    """Whether a rank's record says it ended once its job was deleted (`finished` is then the
    deletion's time, recorded before any process is signalled): stopped, not failed or done."""
    ended = rec.get("finished")
    return isinstance(ended, (int, float)) and deleted is not None and ended >= deleted


def _disk_usage(root: Path) -> int:
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


def _environ(pid: int) -> dict[str, str] | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    return dict(item.split("=", 1) for item in raw.decode("utf-8", "replace").split("\0") if "=" in item)


def _check_mount_point(target: str, others) -> None:
    """Each folder on the way to a mount point, as the job will find it (on this machine, or in
    another of its volumes mounted above): a symbolic link or a file there is refused, as
    bubblewrap would fail to mount over it when the job starts."""
    from dtrain.backends.local.launch import behind

    above, host = behind(target, others)
    if above is None:
        start, rest = "/", target
    elif host is None:  # inside a new volume, empty: made when the job starts
        return
    else:
        start, rest = str(above.source), target[len(above.target.rstrip("/")):]
    at = start
    for part in rest.strip("/").split("/"):
        at = os.path.join(at, part)
        try:
            st = os.lstat(at)
        except FileNotFoundError:
            return  # made when the job starts
        except OSError as err:
            raise SpecError(f"cannot mount a volume at {target}: {at} cannot be read here ({err.strerror}); "
                            f"mount it elsewhere, e.g. /mnt") from None
        if stat.S_ISLNK(st.st_mode):
            real = os.path.realpath(at)
            raise SpecError(f"cannot mount a volume at {target}: {at} is a symbolic link (to {real}), which a "
                            f"volume cannot be mounted through; give the real path or another place, e.g. /mnt")
        if not stat.S_ISDIR(st.st_mode):
            raise SpecError(f"cannot mount a volume at {target}: {at} is a file, not a folder; mount it elsewhere, "
                            f"e.g. /mnt")


def _no_previous(name: str, restarts: int, launches: list[dict], logs: str) -> str:
    """Why `logs --previous` has nothing to show, as kubectl's "previous terminated container not found"."""
    if restarts and not launches:  # restarted before dtrain recorded where attempts begin
        return (f"job {name!r} restarted {counted(restarts, 'time')}, but where its attempts' lines begin was not "
                f"recorded (it ran under an older dtrain): '{logs}' shows every attempt's lines")
    return (f"job {name!r} has no previous attempt (previous terminated container not found): it has not "
            f"restarted; '{logs}' shows its current attempt")
