"""Resource limits for a rank: --memory and --cpu as kernel cgroup limits, where the machine allows it.

Each rank's command runs in its own cgroup, nested under the cgroup dtrain itself runs in (so the
limits sit inside whatever limits the machine already puts on dtrain, and nothing is moved out of
them): `<own>/dtrain-<job>-a<attempt>-r<rank>-<wrapper pid>`, with
- memory: `memory.max` (cgroup v2) or `memory.limit_in_bytes` (v1) = --memory;
- cpu: `cpu.max` (v2) or `cpu.cfs_quota_us` (v1) = --cpu cores.
Version 2 is used when the memory and cpu controllers are delegated to dtrain's own cgroup;
otherwise the version 1 hierarchies when they are mounted and writable; otherwise the limits are
advisory (recorded, shown by `describe`, rendered for Kubernetes, not enforced) and `support()`
says why. The kernel kills a process that goes over its memory limit; the cgroup's oom_kill
counter tells that apart from any other SIGKILL, so the job is reported "out of memory (limit X)".

Standard library only: rankrun imports it on every start.
"""

from __future__ import annotations

import errno
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

CPU_PERIOD_US = 100_000
ROOT = Path("/sys/fs/cgroup")


def _own_paths() -> dict[str, str]:
    """controller -> this process's cgroup path, from /proc/self/cgroup ('' is the v2 hierarchy)."""
    out = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


# The name RankCgroup.create is given (rankrun's _cgroup): dtrain-<job>-a<attempt>-r<rank>-<wrapper pid>
RANK_CGROUP = re.compile(r"dtrain-[a-z0-9-]+-a[0-9]+-r[0-9]+-[0-9]+")


def outside_rank(path: str) -> str | None:
    """Pure: the cgroup path above the first rank cgroup in `path`; None when `path` is in none."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        if RANK_CGROUP.fullmatch(part):
            return "/".join(parts[:i]) or "/"
    return None


def leave_rank_cgroups() -> None:
    """Move this process out of a job's rank cgroup it was started in, to the cgroup above it.

    A job submitted from inside another job (a notebook's terminal, a job that submits jobs) would
    have its supervisor, and so all its ranks, inside that job's rank cgroup: under that job's
    --memory and --cpu, and killed with whatever the rank left behind when it ends (rankrun stops
    every process of its cgroup). Each job is its own, as a job submitted from a Kubeflow notebook
    runs in pods of its own. Best effort: where the move is refused, the process stays."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        above = outside_rank(path)
        if above is None:
            continue
        mount = _v2_root() if not controllers else ROOT / controllers
        if mount is None:
            continue
        try:
            (mount / above.lstrip("/") / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            pass


def _v2_root() -> Path | None:
    if (ROOT / "cgroup.controllers").exists():
        return ROOT
    if (ROOT / "unified" / "cgroup.controllers").exists():
        return ROOT / "unified"
    return None


@dataclass(frozen=True, kw_only=True)
class Support:
    mode: str  # 'v2', 'v1' or 'none'
    detail: str  # what is enforced, or why nothing is
    bases: tuple[tuple[str, Path], ...] = ()  # (controller, folder new cgroups are made in)

    @property
    def enforced(self) -> bool:
        return self.mode != "none"


def _try_v2() -> Support | None:
    root, own = _v2_root(), _own_paths().get("")
    if root is None or own is None:
        return None
    base = root / own.lstrip("/")
    try:
        available = (base / "cgroup.controllers").read_text().split()
        if not {"memory", "cpu"} <= set(available):
            return None
        enabled = (base / "cgroup.subtree_control").read_text().split()
        if not {"memory", "cpu"} <= set(enabled):
            (base / "cgroup.subtree_control").write_text("+memory +cpu")
    except OSError:
        return None  # not delegated to us (or our cgroup holds processes: v2's no-internal-process rule)
    return Support(mode="v2", detail=f"cgroup v2 under {base}", bases=(("memory", base), ("cpu", base)))


def _try_v1() -> Support | None:
    own = _own_paths()
    bases = []
    for controller, mount in (("memory", "memory"), ("cpu", "cpu")):
        folder = ROOT / mount
        if controller not in own or not (folder / "cgroup.procs").exists():
            return None
        base = folder / own[controller].lstrip("/")
        if not os.access(base, os.W_OK):
            return None
        bases.append((controller, base))
    return Support(mode="v1", detail="cgroup v1 (memory, cpu) under " + ", ".join(str(b) for _c, b in bases),
                   bases=tuple(bases))


def support() -> Support:
    """How limits can be enforced on this machine."""
    found = _try_v2() or _try_v1()
    if found is None:
        return Support(mode="none", detail="advisory: no writable cgroup v2 memory+cpu delegation and no "
                                           "cgroup v1 memory and cpu hierarchies here; run it as root "
                                           "or delegate a cgroup to it")
    return found


@dataclass(frozen=True, kw_only=True)
class RankCgroup:
    mode: str
    paths: tuple[tuple[str, Path], ...]  # (controller, this rank's cgroup folder)

    @classmethod
    def create(cls, name: str, *, memory: int | None, cpu: float | None, found: Support | None = None) -> "RankCgroup | None":
        """Make the rank's cgroups with the limits; None when limits cannot be enforced or none are set."""
        found = found or support()
        if not found.enforced or (memory is None and cpu is None):
            return None
        paths = []
        try:
            for controller, base in found.bases:
                folder = base / name
                folder.mkdir(exist_ok=True)
                paths.append((controller, folder))
                _limit(found.mode, controller, folder, memory, cpu)
        except OSError:
            RankCgroup(mode=found.mode, paths=tuple(paths)).remove()
            return None
        return cls(mode=found.mode, paths=tuple(paths))

    def join(self) -> None:
        """Move the calling process in (from a child before exec: everything it starts stays in)."""
        done = set()
        for _controller, folder in self.paths:
            if folder not in done:
                (folder / "cgroup.procs").write_text(str(os.getpid()))
                done.add(folder)

    def oom_kills(self) -> int:
        """How many processes the kernel killed for going over the memory limit."""
        for controller, folder in self.paths:
            if controller == "memory":
                name = "memory.events" if self.mode == "v2" else "memory.oom_control"
                try:
                    for line in (folder / name).read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            return int(value)
                except (OSError, ValueError):
                    return 0
        return 0

    def pids(self) -> list[int]:
        out = set()
        for _controller, folder in self.paths:
            try:
                out |= {int(p) for p in (folder / "cgroup.procs").read_text().split()}
            except (OSError, ValueError):
                pass
        return sorted(out)

    def remove(self, wait_s: float = 0.0) -> bool:
        """Remove the folders; True when none is left. A process sent SIGKILL a moment ago is
        still in its cgroup until the kernel has taken it down (rmdir says EBUSY meanwhile):
        `wait_s` > 0 tries again for that long, so a stopped rank leaves no empty cgroup behind."""
        deadline = time.monotonic() + wait_s
        left = list(self.paths)
        while True:
            busy = []
            for controller, folder in left:
                try:
                    folder.rmdir()
                except FileNotFoundError:
                    pass
                except OSError as err:
                    if err.errno != errno.EBUSY:
                        return False  # not ours to remove after all (permissions): leave it
                    busy.append((controller, folder))
            if not busy:
                return True
            if time.monotonic() >= deadline:
                return False  # still holds a process that outlived the wait
            left = busy
            time.sleep(0.01)


def _limit(mode: str, controller: str, folder: Path, memory: int | None, cpu: float | None) -> None:
    if controller == "memory" and memory is not None:
        if mode == "v2":
            (folder / "memory.max").write_text(str(memory))
            (folder / "memory.swap.max").write_text("0") if (folder / "memory.swap.max").exists() else None
        else:
            (folder / "memory.limit_in_bytes").write_text(str(memory))
            swap = folder / "memory.memsw.limit_in_bytes"
            if swap.exists():  # no swapping past the limit either: over it means the OOM killer
                swap.write_text(str(memory))
    if controller == "cpu" and cpu is not None:
        quota = max(1000, int(cpu * CPU_PERIOD_US))
        if mode == "v2":
            (folder / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
        else:
            (folder / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
            (folder / "cpu.cfs_quota_us").write_text(str(quota))
