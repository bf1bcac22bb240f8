"""The local backend: jobs are processes on this machine, state is SQLite, volumes are folders.

Our words -> its words: a job is a detached supervisor process (`jobs/<name>/`); a process is a
rank started by torchrun, mpirun or directly, wrapped by `rankrun`; a volume is a folder bound
at the mount path in a private mount namespace (bubblewrap); a snapshot is a manifest in the
content-addressed store (or a reflink copy, or a read-only btrfs subvolume snapshot when the
volume is a subvolume); a project is a row with a GPU quota and a FIFO
queue; a node is this host.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import sqlite3
import stat
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from dtrain import db
from dtrain.backends.base import Backend, JobCount, JobInfo, JobPage, JobStatus, NodeInfo
from dtrain.backends.local.control import JobControl
from dtrain.backends.local.projects import LocalProjects
from dtrain.backends.local.reading import JobRecords
from dtrain.backends.local.reconcile import Reconciling
from dtrain.backends.local.store import QUEUED, UNFINISHED, JobStore, injected_word, under_injected
from dtrain.backends.local.volumes import VolumeHooks, _disk_usage  # noqa: F401  (_disk_usage: re-exported)
from dtrain.config import UserConfig, home_dir
from dtrain.errors import ConflictError, NotFoundError, QuotaError, SetupError, SpecError, WordedQuota
from dtrain.names import LABEL_JOB, counted, dotted_volume_refusal, given_as, named, require_project, shown
from dtrain.spec import JobSpec, NewVolume, VolumeMount

# The job machinery (the supervisor's helpers, launchers, cgroups, GPU inventory, notebooks) is
# imported by the methods that use it: a volume or snapshot command needs none of it, and it was
# ~25 ms of every such command's start (tests/test_architecture.py holds that line; the mixins'
# modules keep the rule too).
if TYPE_CHECKING:
    from dtrain.storage.info import Volume

RANK_MEMORY = 256 * 2**20  # a rank is a Python interpreter with torch loaded: ~250 MiB resident, measured


def _check_cpu_memory(spec: JobSpec) -> None:
    """--cpu and --memory beyond this machine's, refused as --gpu beyond its GPUs is: even idle it could
    never give them (a cluster keeps such a pod Pending for good: 'Insufficient cpu'). They are each
    process's cap here (its cgroup's), not a reservation: ranks, and other jobs, share the cores and
    the memory, never waiting for them (scheduler.py), so one process's figure is what is checked. Each
    names the argument as the caller's door spells it (WordedQuota: the Client's cpu=, the CLI's --cpu)."""
    from dtrain.names import parse_size

    cpus = len(os.sched_getaffinity(0))
    if spec.cpu is not None and spec.cpu > cpus:
        asked = shown(spec.typed("cpu"))
        raise WordedQuota(lambda door: f"job {spec.name!r} asks for {asked} CPUs per process but this machine has "
                                       f"{cpus}; lower {named('cpu', door)} to {cpus} or less")
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if spec.memory is not None and parse_size(spec.memory, "--memory") > total:
        half = f"{total // 2**31}Gi"
        raise WordedQuota(lambda door: f"job {spec.name!r} asks for {spec.memory} of memory per process but this "
                                       f"machine has {total / 2**30:.1f}Gi; lower {named('memory', door)}, e.g. "
                                       f"{given_as('memory', half, door, quoted=True)}")


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


class LocalBackend(LocalProjects, JobControl, JobRecords, Reconciling, VolumeHooks, Backend):
    """Submitting (its checks, the supervisor's start), the job list's pages and counts, nodes,
    projects, dry runs and artifacts are here; the mixins hold the rest: reading.py (a job's record, its logs), reconcile.py (lost supervisors),
    control.py (delete, suspend, resume, exec), volumes.py (volumes and snapshots)."""

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
            self.store.insert_job(spec, cwd=cwd, node=socket.gethostname(), cmd=self.cmd,
                                  gpus_injected=os.environ.get("DTRAIN_GPUS"), in_project=True)
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
        except SetupError as err:  # nothing ran: say why now rather than "never started" a minute later
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

    def _check_resources(self, spec: JobSpec, *, volumes: bool = True,
                         injected: tuple[bool, str | None] = (False, None)) -> None:
        """`injected`: (known, DTRAIN_GPUS) of a stored job's submit (resume; store.injected_at_submit):
        a process started with another (a `dtrain server` from another shell) names the one that schedules it."""
        from dtrain.backends.local.devices import inventory
        from dtrain.backends.local.node import check_selector, node_labels

        if spec.node_selector:  # the one node: a selector it cannot match would wait for ever on Kubernetes
            check_selector(spec, node_labels(UserConfig.load(self.home).node_labels), str(self.home / "config.yaml"))
        most, why = max_local_processes()
        processes, gpu = shown(spec.typed("processes")), shown(spec.typed("gpu"))  # as typed: --processes 1E3
        if spec.processes > most:
            raise WordedQuota(lambda door: f"job {spec.name!r} asks for {processes} processes but this machine can "
                                           f"run at most {most} (limited by {why}); lower {named('processes', door)}")
        each = counted(spec.processes, 'process', 'processes', typed=processes)
        gpus = len(inventory())
        now = os.environ.get("DTRAIN_GPUS")
        known, submitted = injected
        if spec.gpus_requested > gpus and known and submitted != now:
            raise QuotaError(f"job {spec.name!r} was scheduled with {injected_word(submitted)} but this process sees "
                             f"{counted(gpus, 'GPU')} ({injected_word(now)}): start it with the same inventory, e.g. "
                             f"'{under_injected(submitted, 'dtrain server')}' or "
                             f"'{under_injected(submitted, self.cmd(f'resume {spec.name}', spec.project))}'")
        if spec.gpus_requested > gpus and not gpus:  # the reference's `--gpu 1` on a CPU workstation
            raise WordedQuota(lambda door: f"job {spec.name!r} needs {counted(spec.gpus_requested, 'GPU')} ({each} x "
                                           f"{gpu}) but this machine has no GPU: drop {named('gpu', door)} (or give "
                                           f"{given_as('gpu', '0', door)}) to run on its CPUs; DTRAIN_GPUS=N stands in "
                                           f"N GPUs to try the scheduler and quotas without them")
        if spec.gpus_requested > gpus:
            raise WordedQuota(lambda door: f"job {spec.name!r} needs {counted(spec.gpus_requested, 'GPU')} ({each} x "
                                           f"{gpu}) but this machine has {gpus}; lower {named('processes', door)} or "
                                           f"{named('gpu', door)}")
        _check_cpu_memory(spec)
        quota = self.store.project_quota(spec.project)
        if quota is not None and spec.gpus_requested > quota:
            raise_it = self.cmd(f"project create {spec.project} --gpu-quota N", None)
            raise WordedQuota(lambda door: f"job {spec.name!r} needs {counted(spec.gpus_requested, 'GPU')} but project "
                                           f"{spec.project!r} has a quota of {quota}; lower {named('gpu', door)}/"
                                           f"{named('processes', door)} or raise it with '{raise_it}'")
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

    def _page(self, *, project, statuses, limit, offset) -> JobPage:
        """Paged in SQL: only the page's jobs are read in full. The jobs that may run are reconciled
        first, so that one whose supervisor died is counted as what it is now (Failed, relaunched)."""
        self.reconcile_others(None)
        total, rows = self.store.page(project=project, limit=limit, offset=offset,
                                      statuses=None if statuses is None else sorted(s.value for s in statuses))
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

    # ---- artifacts, nodes, dry runs, notebooks ---------------------------------------------
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

    def _being_placed(self, info: JobInfo) -> bool:
        """A job just started (or resumed) is Pending, queued, until its supervisor's scheduler places it, a
        moment later; one the scheduler keeps waiting (for GPUs, a quota) says why instead."""
        return (info.message or "").endswith(QUEUED)

    def _notebook_url(self, info: JobInfo) -> str:
        from dtrain.backends.local.notebook import read_access

        return read_access(self.home / "jobs" / info.name, info.name,
                           lambda words: self.cmd(words, info.spec.project)).url


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
