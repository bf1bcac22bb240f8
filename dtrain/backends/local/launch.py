"""Pure translation of a job spec into the local command line: sandbox, launcher, rank wrapper.

    bwrap [mounts]  --  torchrun|mpirun [launcher flags]  --  rankrun --job-dir D --  COMMAND
    (only with       (only for distributed jobs)             (one per process)
     volumes or --large-shm)

Each layer is a real engine: bubblewrap for the private mount namespace, torch.distributed.run
(c10d rendezvous) or OpenMPI's mpirun for the processes.
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dtrain.errors import SetupError, SpecError
from dtrain.names import shown
from dtrain.spec import (NOTEBOOK_HOME, OUTER_HOME, OWNED_ENV, WORKSPACES_ENV, JobSpec, notebook_home, outer_home,
                         workspaces_dir)


@dataclass(frozen=True, kw_only=True)
class Mount:
    """A host folder bound into the job's mount namespace."""

    source: Path | None  # host path of the volume's data; None: a volume the job creates (empty)
    target: str  # path the job sees, e.g. /mnt
    read_only: bool = False


def behind(path: str, mounts: Sequence[Mount]) -> tuple[Mount | None, str | None]:
    """Where a path the job sees (absolute) is on the host: (the deepest mount that holds it, the
    host path behind it), None for the host path inside a volume not made yet; (None, path) when
    no mount holds it."""
    path = os.path.normpath(path)
    holders = [m for m in mounts if path == m.target or path.startswith(m.target.rstrip("/") + "/")]
    if not holders:
        return None, path
    m = max(holders, key=lambda m: len(m.target))
    return m, None if m.source is None else str(m.source) + path[len(m.target.rstrip("/")):]


@dataclass(frozen=True, kw_only=True)
class LaunchPlan:
    argv: list[str]  # the full command line the supervisor runs
    env: dict[str, str] = field(default_factory=dict)  # variables added to the supervisor's env
    cwd: str = "/"  # where it runs


def shm_size(total_memory: int | None = None, host_shm: int | None = None) -> int:
    """--large-shm: half of the machine's memory, as a Kubernetes Memory emptyDir defaults to, and
    never less than the host's /dev/shm, which a job without the flag sees (a host may size it at
    all of memory: the flag then gave a job half the /dev/shm it had without it)."""
    if total_memory is None:
        total_memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if host_shm is None:
        try:
            st = os.statvfs("/dev/shm")
            host_shm = st.f_blocks * st.f_frsize
        except OSError:  # no /dev/shm on the host: the job's own is the only one
            host_shm = 0
    return max(total_memory // 2, host_shm)


def shadow_args(mounts: list[Mount], *, lexists=os.path.lexists, listdir=os.listdir,
                readlink=os.readlink) -> list[str]:
    """bubblewrap arguments that make a missing mount point exist inside the sandbox only.

    The sandbox sees the host's root as is (--dev-bind / /), so bubblewrap creating the folders of
    a mount point like /opt/x/deep would create them on the host. Instead, the deepest folder that
    exists (/opt) is covered by a tmpfs inside the sandbox, its entries are bound back from the
    host one by one (links recreated), and the new folders are made in that tmpfs.
    """
    targets = sorted({m.target.rstrip("/") for m in mounts}, key=lambda t: t.count("/"))
    args: list[str] = []
    shadowed: set[str] = set()
    for target in targets:
        if lexists(target):
            continue
        base = os.path.dirname(target)
        while not lexists(base):
            base = os.path.dirname(base)
        inside = [t for t in targets if t != target and (base == t or base.startswith(t.rstrip("/") + "/"))]
        if base in shadowed or inside:
            continue  # already covered, or inside another volume (made there, not on the host)
        shadowed.add(base)
        args += ["--tmpfs", base]
        for name in sorted(listdir(base)):
            path = os.path.join(base, name)
            if os.path.islink(path):
                args += ["--symlink", readlink(path), path]
            else:
                args += ["--dev-bind-try", path, path]
    return args


def sandbox_prefix(mounts: list[Mount], *, large_shm: bool, cwd: str, bwrap: str = "bwrap",
                   shadows: list[str] = (), hidden: Sequence[str] = ()) -> list[str]:
    """bubblewrap arguments: the host's root as is, with the volume roots (`hidden`) covered by an
    empty tmpfs, plus the job's volumes and /dev/shm. bubblewrap binds each volume from the host's
    root as it was, so a volume inside a hidden root is still mounted where the job asked."""
    argv = [bwrap, "--dev-bind", "/", "/", "--die-with-parent", *shadows]
    for root in hidden:  # after the shadows: a shadowed folder's entries bound back are covered too
        argv += ["--tmpfs", root]
    # Parents first, whatever the flags' order: a volume at /a/b stays visible over one at /a.
    for m in sorted(mounts, key=lambda m: m.target.rstrip("/").count("/")):
        argv += ["--ro-bind" if m.read_only else "--bind", str(m.source), m.target]
    if large_shm:
        argv += ["--size", str(shm_size()), "--tmpfs", "/dev/shm"]
    return argv + ["--chdir", cwd, "--"]


def hidden_roots(roots: Sequence[str | os.PathLike], *, cwd: str, mounts: Sequence[Mount],
                 exists=os.path.isdir, realpath=os.path.realpath) -> list[str]:
    """The volume roots (every storage class's folder) a job with volumes must not see: through them
    it would reach every other volume, and the host folder of a volume it mounts read-only (which
    it could then write). A root the job's working folder or dtrain's own Python lies in stays (the
    job could not start), as does one that is not a folder (bubblewrap would make it on the host)."""
    own = [cwd if behind(cwd, mounts)[0] is None else None, sys.prefix]
    out = []
    for root in dict.fromkeys(realpath(os.fspath(r)) for r in roots):
        inside = [p for p in own if p and (p == root or p.startswith(root.rstrip("/") + "/"))]
        if exists(root) and not inside:
            out.append(root)
    return out


def rank_prefix(job_dir: Path, python: str = sys.executable) -> list[str]:
    return [python, "-m", "dtrain.backends.local.rankrun", "--job-dir", str(job_dir), "--"]


def launcher_argv(spec: JobSpec, *, job_dir: Path, master_port: int, python: str = sys.executable,
                  mpirun: str = "mpirun", env: Mapping[str, str] | None = None) -> list[str]:
    """The launcher command for the spec, wrapping every process in rankrun. `env`: the job's
    variables (job_env's), of which mpirun passes on those set (-x of an unset one: a warning)."""
    inner = rank_prefix(job_dir, python) + list(spec.command)
    if spec.launcher == "torchrun":
        # No torchrun restarts: the supervisor relaunches the whole gang, the same for every launcher,
        # and records each attempt. torchrun's own folder goes with the job: left to itself it makes
        # a /tmp/torchelastic_* folder per run and never removes it.
        return [python, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={spec.processes}",
                "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{master_port}",
                "--max-restarts=0", "--monitor-interval=0.5", f"--log-dir={job_dir / 'torchelastic'}",
                # torchrun reads each argument as a string.Template (${local_rank}, and $$ for $): escaped,
                # the command gets its arguments as given, as under mpirun or in a PyTorchJob's pod
                "--no-python", *(arg.replace("$", "$$") for arg in inner)]
    if spec.launcher == "mpi":
        exported = ["MASTER_ADDR", "MASTER_PORT", "DTRAIN_RANK_DEVICES", "DTRAIN_RANK_CPUS", "DTRAIN_ATTEMPT",
                    "OMP_NUM_THREADS", "PYTHONUNBUFFERED", "DTRAIN_JOB_NAME", "DTRAIN_MEMORY", "DTRAIN_CPU", *spec.env]
        flags = [x for k in dict.fromkeys(exported) if env is None or k in env for x in ("-x", k)]
        return [mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np",
                str(spec.processes), *flags, *inner]
    return inner


def notebook_env(job_dir: Path, port: int, token: str) -> dict[str, str]:
    """Jupyter reads its port and token from the environment: the token stays off the command line;
    no retry on another port, so the recorded port is the one it serves."""
    return {"JUPYTER_PORT": str(port), "JUPYTER_PORT_RETRIES": "0", "JUPYTER_TOKEN": token,
            "JUPYTER_RUNTIME_DIR": str(job_dir / "jupyter")}


def rank_cores(available: Sequence[int], processes: int, per_rank: float,
               core_of: Mapping[int, int] | None = None) -> list[list[int]] | None:
    """Pure: `per_rank` cores (rounded up) of `available` for each process; None if they don't fit.

    With --cpu, each rank gets its own cores, so the scheduler cannot put two ranks' threads on
    one core while another idles, nor move a rank (and its warm caches) between cores. When the
    cores do not go round, ranks share them anyway: pinning would only forbid the idle ones.

    The ranks are spread out. Hyperthreads of one physical core (`core_of`: logical core ->
    its physical core, from `physical_cores`) share its execution units, so a rank takes one
    thread of each of its physical cores before their siblings, and no two ranks share a physical
    core while others are free. And the ranks' cores lie evenly apart over what is free instead of
    side by side: a virtual machine need not show its host's hyperthreads, and on one (16 vCPUs,
    1 thread per core as it reports) two DDP ranks on vCPUs 0 and 1 ran at 64% efficiency against
    107% on vCPUs 0 and 8 (docs/benchmarks.md, "Scaling"). Picking again from the cores picked
    gives the same groups, as the scheduler and the launcher both call this.
    """
    need = max(1, math.ceil(per_rank))
    cores = sorted(available)
    if need * processes > len(cores):
        return None
    physical: dict[int, list[int]] = {}
    for c in cores:
        physical.setdefault(c if core_of is None else core_of.get(c, c), []).append(c)
    units = sorted(physical.values())  # each physical core's free threads, by lowest number
    groups = []
    for i in range(processes):
        mine = units[i * len(units) // processes:(i + 1) * len(units) // processes]
        pool = [u[0] for u in mine] + [c for u in mine for c in u[1:]]  # one thread per core first
        if len(pool) < need:  # more cores per rank than the spread leaves: whole cores, side by side
            packed = [c for u in units for c in u]
            return [packed[r * need:(r + 1) * need] for r in range(processes)]
        groups.append(pool[:need])
    return groups


def pick_cores(free: Sequence[int], processes: int, per_rank: float) -> list[list[int]] | None:
    """`rank_cores` of the free cores with this machine's hyperthread siblings (the scheduler's
    choice and the launcher's, which picks again from the scheduler's)."""
    free = sorted(free)
    return rank_cores(free, processes, per_rank, physical_cores(free))


def physical_cores(cores: Sequence[int], sysfs: str = "/sys/devices/system/cpu") -> dict[int, int]:
    """Logical core -> the lowest-numbered thread of its physical core (Linux's thread_siblings_list);
    a core whose topology cannot be read stands for itself."""
    out = {}
    for c in cores:
        try:
            text = Path(f"{sysfs}/cpu{c}/topology/thread_siblings_list").read_text().strip()
            out[c] = min(int(part.split("-")[0]) for part in text.split(","))
        except (OSError, ValueError):
            out[c] = c
    return out


def job_env(spec: JobSpec, *, devices: list[list[str]], master_port: int, attempt: int,
            cpus: int | None = None, available: Sequence[int] | None = None) -> dict[str, str]:
    """Variables every process gets, on top of the submitter's environment."""
    cpus = cpus or os.cpu_count() or 1
    threads = spec.cpu if spec.cpu is not None else max(1, cpus // spec.processes)
    env = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(master_port),
        "DTRAIN_JOB_NAME": spec.name,
        "DTRAIN_PROJECT": spec.project,
        "DTRAIN_RANK_DEVICES": ";".join(",".join(g) for g in devices),
        "DTRAIN_ATTEMPT": str(attempt),
        "OMP_NUM_THREADS": str(max(1, int(threads))),
        "PYTHONUNBUFFERED": "1",
    }
    if spec.memory is not None:
        env["DTRAIN_MEMORY"] = spec.memory  # rankrun's cgroup limit (per process)
    if spec.cpu is not None:
        env["DTRAIN_CPU"] = repr(float(spec.cpu))
    if spec.launcher == "none":
        env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    cores = pick_cores(os.sched_getaffinity(0) if available is None else available, spec.processes, spec.cpu) \
        if spec.cpu is not None else None
    if cores:
        env["DTRAIN_RANK_CPUS"] = ";".join(",".join(map(str, c)) for c in cores)
    env["PATH"] = job_path()
    env.update(spec.env)
    return env


# What a launcher sets for each of its processes: an OpenMPI rank's OMPI_* and PMIX_* (its MCA
# settings too, which a user passes on with -e), a torchrun worker's TORCHELASTIC_*, GROUP_* and ROLE_*.
_LAUNCHED_BY = (("OMPI_COMM_WORLD_SIZE", ("OMPI_", "PMIX_")),
                ("TORCHELASTIC_RUN_ID", ("TORCHELASTIC_", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_")))


def inherited_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Pure: the submitter's environment less what dtrain or a launcher set for the job it runs in.

    A job submitted from inside another (a notebook's terminal, a job that submits jobs) started with
    that job's variables: its DTRAIN_MEMORY and DTRAIN_CPU limits and DTRAIN_RANK_CPUS cores (a job
    without --memory was held to the notebook's), its Jupyter token, and an OpenMPI rank's variables,
    with which mpirun refuses to start ("mpirun does not support recursive calls"). And the notebook's
    HOME, its workspace volume: the job's ~/.cache, ~/.kube and pip --user went onto that volume (as a
    Kubeflow pod's HOME is its image's, never its submitter's), so it gets the HOME the notebook replaced,
    unless the user set another there (`HOME=/x dtrain submit`): that one is kept (outer_home)."""
    drop = {*OWNED_ENV, *notebook_env(Path("/"), 0, ""), OUTER_HOME, NOTEBOOK_HOME, WORKSPACES_ENV}
    prefixes = tuple(p for marker, group in _LAUNCHED_BY if marker in environ for p in group)
    env = {k: v for k, v in environ.items() if k not in drop and not k.startswith(prefixes)}
    if outer_home(environ) is not None:
        env["HOME"] = outer_home(environ)
    return env


def job_path(path: str | None = None) -> str:
    """Jobs see dtrain's own Python environment first, so `python` and `dtrain` are the submitter's."""
    path = os.environ.get("PATH", "") if path is None else path
    own = os.path.dirname(sys.executable)
    parts = [p for p in path.split(os.pathsep) if p and p != own]
    return os.pathsep.join([own, *parts])


def plan(spec: JobSpec, *, job_dir: Path, cwd: str, mounts: list[Mount], devices: list[list[str]],
         master_port: int, attempt: int = 0, notebook_token: str | None = None,
         cores: Sequence[int] | None = None, hidden: Sequence[str] = ()) -> LaunchPlan:
    """A notebook (spec.notebook) serves on `master_port` with `notebook_token`: one process, no
    rendezvous. `cores`: the cores the scheduler pinned this job to (none: its ranks are not pinned).
    `hidden`: folders the sandbox covers (hidden_roots)."""
    env = job_env(spec, devices=devices, master_port=master_port, attempt=attempt, available=cores or [])
    argv = launcher_argv(spec, job_dir=job_dir, master_port=master_port, env=env)
    if mounts or spec.large_shm:
        # bubblewrap is dtrain's, found where check_namespaces found it: not in the job's PATH (-e PATH)
        argv = sandbox_prefix(mounts, large_shm=spec.large_shm, cwd=cwd, shadows=shadow_args(mounts),
                              bwrap=shutil.which("bwrap") or "bwrap", hidden=hidden) + argv
    # Where dtrain.training.MetricsWriter also writes, so the dashboard and /metrics find the curves.
    env["DTRAIN_METRICS_FILE"] = str(job_dir / "metrics.jsonl")  # OWNED_ENV: a spec stored before that kept its own
    if spec.notebook:
        env.update(notebook_env(job_dir, master_port, notebook_token or ""))
        # Its home is its workspace (Jupyter's root folder), as a Kubeflow notebook's is its workspace
        # volume: ~/.jupyter, ~/.ipython, pip --user go there, not into the host user's home. dtrain
        # run in its terminal keeps the dtrain home (jobs/NAME in it) it found there through ~/.dtrain.
        if "HOME" not in spec.env:  # -e HOME=... as given
            env["HOME"] = notebook_home(spec) or cwd
        if WORKSPACES_ENV not in spec.env:  # its own layout on a home teammates' notebooks share (spec/notebook.py)
            env[WORKSPACES_ENV] = workspaces_dir(spec.name, env["HOME"])
        if outer_home(os.environ):  # what a job submitted from its terminal gets back as HOME (inherited_env)
            env[OUTER_HOME] = outer_home(os.environ)
            env[NOTEBOOK_HOME] = env["HOME"]  # a HOME other than this there is the user's, and kept
        env.setdefault("DTRAIN_HOME", str(job_dir.parent.parent))
    env.setdefault("DTRAIN_MODEL_DIR", str(job_dir / "model"))  # what `dtrain artifacts` copies
    # The supervisor starts the sandbox from the host folder behind the job's working folder (which
    # may be inside a volume); bubblewrap's --chdir takes the job there.
    host_cwd = behind(cwd, mounts)[1] if mounts else cwd
    return LaunchPlan(argv=argv, env=env, cwd=host_cwd or cwd)


def check_tools(spec: JobSpec, *, cwd: str, path: str | None = None, mounts: Sequence[Mount] = ()) -> None:
    """Fail at submit time, not inside the job, when a tool the job needs is missing. `cwd` and a
    command given by its path are as the job sees them: through its volumes (`mounts`), and a
    command by name in the job's PATH: `-e PATH=...` replaces it (job_env), so it is searched."""
    search = spec.env["PATH"] if "PATH" in spec.env else job_path(path)
    cmd = spec.command[0]
    if "/" in cmd:
        mount, host = behind(os.path.join(cwd, cmd), mounts)
        where = (f"the volume mounted at {mount.target}" if mount is not None else
                 "this machine's folders" if os.path.isabs(cmd) else "the working folder")
        found = host is not None and os.path.exists(host)
    else:
        where = "the PATH given with -e PATH" if "PATH" in spec.env else "PATH"
        found, host = shutil.which(cmd, path=search), None
    if not found and spec.notebook:
        raise SetupError(f"notebooks run JupyterLab ({cmd}), which is not installed here: "
                                "pip install 'dtrain[notebook]' (jupyterlab and ipykernel)")
    if not found:  # the user's mistakes (SpecError): what the machine lacks is an SetupError
        raise SpecError(f"command {shown(cmd)} not found (looked in {where}); " + (
            "check the path after '--'" if os.path.isabs(cmd) else  # a full path already: no use saying give one
            "check the spelling after '--', or give its full path"))
    if host is not None:
        _check_program(cmd, host, mounts)
    if spec.launcher == "mpi" and not shutil.which("mpirun", path=search):
        host = shutil.which("mpirun", path=job_path(path))
        if "PATH" in spec.env and host:  # the job runs mpirun from its own PATH
            raise SpecError(f"submit-mpi runs OpenMPI's mpirun, which is not in the PATH given with -e PATH: "
                            f"add its folder ({os.path.dirname(host)}) to that PATH")
        raise SetupError("submit-mpi needs OpenMPI's mpirun, which is not installed: "
                                "apt-get install openmpi-bin (or submit the job with submit-dist, which runs torchrun)")
    if spec.volumes or spec.large_shm:
        check_namespaces()


def _check_program(cmd: str, host: str, mounts: Sequence[Mount]) -> None:
    """A command given by its path must be a file the job can run: not a folder, executable, and
    a script's interpreter (its #! line) must exist, as the job sees it."""
    if os.path.isdir(host):
        raise SpecError(f"command {shown(cmd)} is a folder, not a program: name the script or program in it")
    if not os.access(host, os.X_OK):
        raise SpecError(f"command {shown(cmd)} is not executable: chmod +x {shlex.quote(cmd)}, or run it through "
                        f"its interpreter (e.g. -- sh {shlex.quote(cmd)}, or -- python {shlex.quote(cmd)})")
    if not os.path.isfile(host):  # a fifo's open would wait for a writer: the kernel says the rest at start
        return
    try:
        with open(host, "rb") as f:
            head = f.read(256).split(b"\n", 1)[0]
    except OSError:
        return  # executable but not readable: the kernel may still run it
    if not head.startswith(b"#!") or not head[2:].split():
        return
    if head.endswith(b"\r"):
        raise SpecError(f"command {shown(cmd)} has Windows line endings (its #! line ends in a carriage return, "
                        f"which the system takes as part of the interpreter's name): convert it with dos2unix "
                        f"{shlex.quote(cmd)}, or sed -i 's/\\r$//' {shlex.quote(cmd)}")
    named = os.fsdecode(head[2:].split()[0])
    at = behind(named, mounts)[1] if named.startswith("/") else None
    if not named.startswith("/") or at is None or not os.path.exists(at):
        raise SpecError(f"command {shown(cmd)} names the interpreter {shown(named)} in its #! line, which does not "
                        f"exist here: fix that line (e.g. #!/usr/bin/env python3)")


def check_namespaces(bwrap: str = "bwrap") -> None:
    """Volumes and --large-shm need a private mount namespace through bubblewrap."""
    if not shutil.which(bwrap):
        raise SetupError("mounting volumes (--pvc) and --large-shm need bubblewrap for a private mount "
                                "namespace: apt-get install bubblewrap")
    probe = subprocess.run([bwrap, "--dev-bind", "/", "/", "--", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise SetupError(f"bubblewrap cannot create a mount namespace here ({probe.stderr.strip()}); "
                                f"run as root or enable unprivileged user namespaces "
                                f"(sysctl kernel.unprivileged_userns_clone=1)")
