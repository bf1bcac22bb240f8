"""Find out how this process was launched and join its process group.

One training script runs unchanged under every launcher dtrain targets. Each
launcher tells a process who it is through environment variables:

    launcher                  rank / size / local rank                  rendezvous
    torchrun                  RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
    Kubeflow PyTorchJob (v1)  RANK WORLD_SIZE (per pod) + PET_NNODES,     MASTER_ADDR MASTER_PORT
                              PET_NODE_RANK, PET_NPROC_PER_NODE for a
                              torchrun started inside the pod
    Open MPI (mpirun)         OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,      MASTER_ADDR MASTER_PORT, exported
                              LOCAL_SIZE}                                 by the caller (mpirun -x ...); on
                                                                          SageMaker, whose toolkit exports
                                                                          neither, SM_HOSTS' first host, 7777
    MPICH / Intel MPI (PMI)   PMI_RANK PMI_SIZE (MPI_LOCALRANKID)         same as Open MPI
    SageMaker                 SM_HOSTS SM_CURRENT_HOST: one process       first host, port 29500; MASTER_ADDR
                              per host, rank = index of the host          and MASTER_PORT override both

`detect_runtime` reads the environment and nothing else, so it is tested
without starting processes; `setup_distributed` acts on what it returns.
"""

from __future__ import annotations

import gc
import json
import os
import re
import reprlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from dtrain.errors import SpecError

DEFAULT_MASTER_PORT = 29500  # torchrun's default; used for SageMaker when MASTER_PORT is unset
SAGEMAKER_MPI_PORT = 7777  # the port SageMaker's PyTorch toolkit gives MASTER_PORT
RUNTIMES = ("single", "torchrun", "pytorchjob", "mpi", "pmi", "sagemaker")


@dataclass(frozen=True, kw_only=True)
class DistInfo:
    rank: int  # global rank of this process, 0..world_size-1
    local_rank: int  # rank among the processes on this machine; picks the GPU
    world_size: int  # number of processes in the job
    local_world_size: int  # number of processes on this machine
    device: torch.device  # where this process keeps its model and batches
    backend: str | None  # 'nccl' or 'gloo'; None when no process group was started
    runtime: str  # one of RUNTIMES: the launcher that started this process

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1 or self.backend is not None


# ---------------------------------------------------------------- detection


def _int(env: Mapping[str, str], name: str, *, minimum: int = 0) -> int:
    """A launcher's count: torchrun, mpirun and the operators write plain digits (str(int)). int() also
    took '1_0', '+1' and other scripts' digits ('\u0663') from a launcher of the user's own, and its refusal
    of thousands of digits quoted them all: one line naming the variable, cut (reprlib) past 60."""
    raw = env[name]
    if not re.fullmatch(r"-?[0-9]{1,18}", raw.strip(), re.ASCII):  # -1: named by the bound below
        raise SpecError(f"{name}={reprlib.repr(raw)} is not an integer in digits; the launcher must set it "
                        f"to one from {minimum} (e.g. {name}={DEFAULT_MASTER_PORT if name == 'MASTER_PORT' else minimum})")
    value = int(raw.strip())
    if value < minimum:
        raise SpecError(f"{name}={value} must be >= {minimum}; check the launcher's environment")
    return value


def _opt_int(env: Mapping[str, str], name: str, *, minimum: int = 0) -> int | None:
    return _int(env, name, minimum=minimum) if env.get(name, "").strip() else None


def _require(env: Mapping[str, str], names: tuple[str, ...], runtime: str) -> None:
    missing = [n for n in names if not env.get(n, "").strip()]
    if missing:
        present = [n for n in names if n not in missing]
        raise SpecError(
            f"partial {runtime} environment: {', '.join(present)} set but {', '.join(missing)} missing; "
            f"launch with {runtime} or set all of {', '.join(names)}"
        )


def _master(env: Mapping[str, str], runtime: str, world_size: int) -> tuple[str | None, int | None]:
    addr = env.get("MASTER_ADDR", "").strip() or None
    port = _opt_int(env, "MASTER_PORT", minimum=1)
    if port is not None and port > 65535:
        raise SpecError(f"MASTER_PORT={port} is not a TCP port; use 1..65535")
    if world_size > 1 and (addr is None or port is None):
        hint = "-x MASTER_ADDR=<rank-0 host> -x MASTER_PORT=29500" if runtime == "mpi" else "MASTER_ADDR and MASTER_PORT"
        raise SpecError(
            f"{runtime} started {world_size} processes but MASTER_ADDR/MASTER_PORT are not both set "
            f"(MASTER_ADDR={addr!r}, MASTER_PORT={port!r}); export {hint} to every process"
        )
    return addr, port


def _check_ranks(info: dict[str, Any]) -> dict[str, Any]:
    rank, size = info["rank"], info["world_size"]
    if size < 1:
        raise SpecError(f"world size {size} ({info['runtime']}) must be >= 1")
    if not 0 <= rank < size:
        raise SpecError(f"rank {rank} is outside 0..{size - 1} for world size {size} ({info['runtime']})")
    local, local_size = info["local_rank"], info["local_world_size"]
    if local is not None and local_size is not None and not 0 <= local < local_size:
        raise SpecError(f"local rank {local} is outside 0..{local_size - 1} ({info['runtime']})")
    return info


def _torchrun(env: Mapping[str, str]) -> dict[str, Any]:
    _require(env, ("RANK", "WORLD_SIZE"), "torchrun")
    pet = any(k.startswith("PET_") for k in env)
    runtime = "pytorchjob" if pet else "torchrun"
    rank, size = _int(env, "RANK"), _int(env, "WORLD_SIZE", minimum=1)
    local_rank = _opt_int(env, "LOCAL_RANK")
    local_size = _opt_int(env, "LOCAL_WORLD_SIZE", minimum=1)
    if local_rank is None:
        # A pod (or custom launcher) running the script directly: one process per node. The
        # Kubeflow operator counts PET_NPROC_PER_NODE processes per pod in WORLD_SIZE, which
        # only a torchrun inside the pod starts.
        nproc = env.get("PET_NPROC_PER_NODE", "1").strip()
        if nproc.isdigit() and int(nproc) > 1:
            raise SpecError(
                f"PET_NPROC_PER_NODE={nproc} but this process was not started by torchrun; "
                f"run the command under torchrun inside the pod or set nprocPerNode to 1"
            )
        local_rank, local_size = 0, 1
    addr, port = _master(env, runtime, size)
    return {"runtime": runtime, "rank": rank, "world_size": size, "local_rank": local_rank,
            "local_world_size": local_size, "master_addr": addr, "master_port": port}


def _mpi(env: Mapping[str, str]) -> dict[str, Any]:
    _require(env, ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), "mpi")
    size = _int(env, "OMPI_COMM_WORLD_SIZE", minimum=1)
    if "SM_HOSTS" in env:
        env = _sagemaker_master(env)
    addr, port = _master(env, "mpi", size)
    return {"runtime": "mpi", "rank": _int(env, "OMPI_COMM_WORLD_RANK"), "world_size": size,
            "local_rank": _opt_int(env, "OMPI_COMM_WORLD_LOCAL_RANK"),
            "local_world_size": _opt_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", minimum=1),
            "master_addr": addr, "master_port": port}


def _sagemaker_master(env: Mapping[str, str]) -> Mapping[str, str]:
    """`env` with MASTER_ADDR and MASTER_PORT where a SageMaker MPI job lacks them: the training
    toolkit's mpirun exports the SM_* variables to every host but not those two (set only where the
    toolkit itself runs, on the first host), so a rank on another host takes what the toolkit set
    there: the first of SM_HOSTS, port 7777."""
    try:
        hosts = json.loads(env["SM_HOSTS"])
    except json.JSONDecodeError:
        return env  # _master then names what is missing
    if not isinstance(hosts, list) or not hosts or not isinstance(hosts[0], str) or not hosts[0]:
        return env
    filled = dict(env)
    if not filled.get("MASTER_ADDR", "").strip():
        filled["MASTER_ADDR"] = hosts[0]
    filled.setdefault("MASTER_PORT", str(SAGEMAKER_MPI_PORT))
    return filled


def _pmi(env: Mapping[str, str]) -> dict[str, Any]:
    _require(env, ("PMI_RANK", "PMI_SIZE"), "pmi")
    size = _int(env, "PMI_SIZE", minimum=1)
    addr, port = _master(env, "pmi", size)
    # MPICH's Hydra and Intel MPI export the node-local rank under these names.
    local = _opt_int(env, "MPI_LOCALRANKID")
    local_size = _opt_int(env, "MPI_LOCALNRANKS", minimum=1)
    return {"runtime": "pmi", "rank": _int(env, "PMI_RANK"), "world_size": size, "local_rank": local,
            "local_world_size": local_size, "master_addr": addr, "master_port": port}


def _sagemaker(env: Mapping[str, str]) -> dict[str, Any]:
    _require(env, ("SM_HOSTS", "SM_CURRENT_HOST"), "sagemaker")
    raw = env["SM_HOSTS"]
    try:
        hosts = json.loads(raw)
    except json.JSONDecodeError:
        raise SpecError(f"SM_HOSTS={raw!r} is not JSON; SageMaker sets it to a list like '[\"algo-1\",\"algo-2\"]'") from None
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h for h in hosts):
        raise SpecError(f"SM_HOSTS={raw!r} must be a non-empty JSON list of host names")
    if len(set(hosts)) != len(hosts):
        raise SpecError(f"SM_HOSTS={raw!r} lists a host twice; each host must appear once")
    current = env["SM_CURRENT_HOST"].strip()
    if current not in hosts:
        raise SpecError(f"SM_CURRENT_HOST={current!r} is not in SM_HOSTS={hosts}; the two must come from one job")
    num_gpus = _opt_int(env, "SM_NUM_GPUS")
    addr = env.get("MASTER_ADDR", "").strip() or hosts[0]
    port = _opt_int(env, "MASTER_PORT", minimum=1) or DEFAULT_MASTER_PORT
    if port > 65535:
        raise SpecError(f"MASTER_PORT={port} is not a TCP port; use 1..65535")
    return {"runtime": "sagemaker", "rank": hosts.index(current), "world_size": len(hosts), "local_rank": 0,
            "local_world_size": 1, "master_addr": addr, "master_port": port,
            "hosts": hosts, "current_host": current, "num_gpus": num_gpus}


CONTRACT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def _contract_alone(env: Mapping[str, str]) -> bool:
    """A process whose RANK, WORLD_SIZE, ... no torchrun (TORCHELASTIC_RUN_ID) nor Kubeflow operator (PET_*)
    set, but dtrain's rank wrapper (rankrun), so that a script written for torchrun runs unchanged: of world
    size 1 (dtrain's one-process launch, the command run under plain `python`), or the same rank and world size
    as OpenMPI's (a `dtrain submit-mpi` job's ranks, started by mpirun). Its runtime is what started it without
    them (single, or mpi), not torchrun, which never ran: a submit-mpi job's ranks said runtime=torchrun."""
    if "TORCHELASTIC_RUN_ID" in env or any(k.startswith("PET_") for k in env):
        return False
    by_mpirun = all(env.get(ours, "").strip() == env.get(mpi, "").strip() != ""
                    for ours, mpi in (("RANK", "OMPI_COMM_WORLD_RANK"), ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE")))
    return env.get("WORLD_SIZE", "").strip() == "1" or by_mpirun


def detect_runtime(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Say who this process is from its environment alone.

    Returns a dict with runtime, rank, world_size, local_rank and local_world_size
    (both None when the launcher does not say), master_addr and master_port (None
    for a single process); SageMaker adds hosts, current_host and num_gpus.
    """
    env = os.environ if env is None else env
    if _contract_alone(env):  # given the PyTorchJob variables by dtrain's rank wrapper, not its launcher
        env = {k: v for k, v in env.items() if k not in CONTRACT}
    # torchrun's variables win: torchrun may itself run under mpirun or inside a
    # SageMaker or Kubeflow container, and then the children carry both sets.
    if "TORCHELASTIC_RUN_ID" in env or ("LOCAL_RANK" in env and "RANK" in env):
        info = _torchrun(env)
    elif "OMPI_COMM_WORLD_RANK" in env or "OMPI_COMM_WORLD_SIZE" in env:
        info = _mpi(env)
    elif "PMI_RANK" in env or "PMI_SIZE" in env:
        info = _pmi(env)
    elif "RANK" in env or "WORLD_SIZE" in env:
        info = _torchrun(env)
    elif "SM_HOSTS" in env or "SM_CURRENT_HOST" in env:
        info = _sagemaker(env)
    else:
        info = {"runtime": "single", "rank": 0, "world_size": 1, "local_rank": 0, "local_world_size": 1,
                "master_addr": None, "master_port": None}
    return _check_ranks(info)


# ---------------------------------------------------------------- process group


def _pick_device(device: str | None, local_rank: int) -> torch.device:
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type != "cuda":
        return dev
    count = torch.cuda.device_count()
    if count == 0:
        raise SpecError(f"device {device!r} asked for but no CUDA GPU is visible; use --device cpu")
    index = dev.index if dev.index is not None else local_rank % count
    if index >= count:
        raise SpecError(f"CUDA device {index} does not exist ({count} visible); use fewer processes per machine")
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def setup_distributed(
    backend: str | None = None, *, device: str | None = None, env: Mapping[str, str] | None = None, timeout_s: float = 300
) -> DistInfo:
    """Join the job's process group (if there is more than one process) and pick a device.

    The backend defaults to NCCL on CUDA and Gloo otherwise. A process group that
    the caller already started is reused as it is.
    """
    info = detect_runtime(env)
    local_rank = info["local_rank"]
    if local_rank is None:
        # The launcher did not say: assume ranks are packed per machine, one per GPU.
        gpus = torch.cuda.device_count() if device != "cpu" else 0
        local_rank = info["rank"] % gpus if gpus else 0
    local_size = info["local_world_size"] or 1
    dev = _pick_device(device, local_rank)
    common = dict(local_rank=local_rank, local_world_size=local_size, device=dev, runtime=info["runtime"])
    if dist.is_available() and dist.is_initialized():
        return DistInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), backend=dist.get_backend(), **common)
    if backend == "nccl" and dev.type != "cuda":
        # checked for one process too, so a command tried alone does not fail once torchrun starts two
        # (there init_process_group raised "Distributed package doesn't have NCCL built in", a traceback per rank)
        raise SpecError(f"backend nccl needs a CUDA GPU and this process runs on {dev.type}: use --backend gloo, "
                        "or leave --backend out to pick one for the device")
    if info["world_size"] == 1:
        return DistInfo(rank=0, world_size=1, backend=None, **common)
    backend = backend or ("nccl" if dev.type == "cuda" else "gloo")
    if backend not in ("nccl", "gloo", "mpi"):
        raise SpecError(f"backend {backend!r} is not supported; use nccl (GPU) or gloo (CPU)")
    host = info["master_addr"]
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://{host}:{info['master_port']}",
        rank=info["rank"],
        world_size=info["world_size"],
        timeout=timedelta(seconds=timeout_s),
    )
    return DistInfo(rank=info["rank"], world_size=info["world_size"], backend=backend, **common)


_USED_GROUP = False  # set by teardown: this process ran a process group, see exit_process


def teardown() -> None:
    """Leave the process group; a no-op when there is none, so safe to call twice.

    Every rank waits for the others first (a barrier), so no rank tears its end down while a
    peer still sends. Then the group is destroyed, but with a DistributedDataParallel wrapper
    in the process that does not end the group's native threads: measured on torch 2.13 with
    gloo, a plain group leaves no thread behind destroy_process_group, while a group that a DDP
    wrapper used keeps its two pt_gloo_runloop workers and its gloo_tcp_loop alive even after
    the wrapper is collected (tests/test_teardown.py pins this). Those threads then meet
    the interpreter's shutdown, which is where a rank aborts with "terminate called without an
    active exception". Entry points therefore leave through `exit_process`.
    """
    global _USED_GROUP
    if dist.is_available() and dist.is_initialized():
        _USED_GROUP = True
        gc.collect()  # a DDP wrapper in a reference cycle goes now, not at exit
        dist.barrier()
        dist.destroy_process_group()


def exit_process(code: int) -> NoReturn:
    """End a training process: flush stdout/stderr, then, if it ran a process group, leave without
    interpreter finalization (os._exit), so no thread of the group is torn down by the shutdown
    (see teardown); otherwise sys.exit. Outputs are closed by then: checkpoints and metrics are
    written with fsync/flush inside the training function."""
    sys.stdout.flush()
    sys.stderr.flush()
    if _USED_GROUP:
        os._exit(code)
    sys.exit(code)


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def multi_rank() -> bool:
    """True inside an initialised process group of more than one rank: where a collective does
    anything."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def broadcast_buffers(module: torch.nn.Module, src: int = 0) -> None:
    """Give every rank rank `src`'s buffers of `module` (a collective); nothing for one process.

    DDP broadcasts rank 0's buffers at the start of each forward, and then each rank's forward
    updates its own from its own batch (BatchNorm's running statistics), so after a step only
    rank 0 holds the buffers a checkpoint saves. Call this before every rank evaluates."""
    if multi_rank():
        for buf in module.buffers():
            dist.broadcast(buf, src)


def all_reduce_mean(t: torch.Tensor) -> torch.Tensor:
    """Average `t` across ranks in place and return it; the identity for one process."""
    if multi_rank():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        t /= dist.get_world_size()
    return t


def max_over_ranks(value: int, device: torch.device) -> int:
    """The largest of every rank's `value` (one all-reduce every rank calls: rank 0's refusal reaches the
    others, which would otherwise wait in their next collective); `value` itself for one process."""
    if not multi_rank():
        return value
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t[0])


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum `t` across ranks in place and return it; the identity for one process."""
    if multi_rank():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t
