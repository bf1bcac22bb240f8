"""Runs one rank of a local job: the same environment contract whatever the launcher, and a log.

torchrun, mpirun or the supervisor starts `python -m dtrain.backends.local.rankrun --job-dir D
-- COMMAND...` once per process. It
- maps the launcher's variables to the Kubeflow PyTorchJob contract: RANK, WORLD_SIZE,
  LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (OpenMPI's OMPI_COMM_WORLD_* included);
- gives the rank its own GPUs: CUDA_VISIBLE_DEVICES from DTRAIN_RANK_DEVICES ("0,1;2,3": rank 0
  gets 0,1 and rank 1 gets 2,3; empty hides every GPU);
- pins the rank to its own cores when the job set --cpu: DTRAIN_RANK_CPUS ("0;1": local rank 0
  on core 0, local rank 1 on core 1), applied to itself before starting the command, which inherits it;
- writes every output line, time-stamped, to D/logs/rank-R.log and its pid, status and exit
  code to D/ranks/rank-R.json;
- dies with its parent (PR_SET_PDEATHSIG) and takes the command down with it.
It imports only the standard library so it adds little to start-up.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

PR_SET_PDEATHSIG = 1


def _pdeathsig(sig: int) -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except OSError:
        pass


def contract_env(env: dict[str, str]) -> dict[str, str]:
    """Pure: the PyTorchJob-style variables for this rank, from whatever launched it."""
    out = dict(env)
    if "OMPI_COMM_WORLD_RANK" in env:
        out["RANK"] = env["OMPI_COMM_WORLD_RANK"]
        out["WORLD_SIZE"] = env["OMPI_COMM_WORLD_SIZE"]
        out["LOCAL_RANK"] = env.get("OMPI_COMM_WORLD_LOCAL_RANK", env["OMPI_COMM_WORLD_RANK"])
        out["LOCAL_WORLD_SIZE"] = env.get("OMPI_COMM_WORLD_LOCAL_SIZE", env["OMPI_COMM_WORLD_SIZE"])
    out.setdefault("RANK", "0")
    out.setdefault("WORLD_SIZE", "1")
    out.setdefault("LOCAL_RANK", out["RANK"])
    out.setdefault("LOCAL_WORLD_SIZE", out["WORLD_SIZE"])
    groups = env.get("DTRAIN_RANK_DEVICES")
    if groups is not None:
        per_rank = groups.split(";")
        rank = int(out["RANK"])
        out["CUDA_VISIBLE_DEVICES"] = per_rank[rank] if rank < len(per_rank) else ""
    return out


def rank_cpus(env: dict[str, str]) -> set[int] | None:
    """Pure: the cores of this local rank from DTRAIN_RANK_CPUS, None when the job is not pinned."""
    groups = env.get("DTRAIN_RANK_CPUS")
    if not groups:
        return None
    per_rank = groups.split(";")
    local = int(env.get("LOCAL_RANK", "0"))
    return {int(c) for c in per_rank[local].split(",")} if local < len(per_rank) else None


def format_line(text: str, when: float) -> str:
    stamp = datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{stamp} {text}\n"


def parse_line(line: str) -> tuple[float | None, str]:
    stamp, sep, text = line.rstrip("\n").partition(" ")
    try:
        when = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None, line.rstrip("\n")
    return when, text


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 4 or argv[0] != "--job-dir" or argv[2] != "--":
        print("usage: python -m dtrain.backends.local.rankrun --job-dir DIR -- COMMAND...", file=sys.stderr)
        return 2
    job_dir, command = Path(argv[1]), argv[3:]
    _pdeathsig(signal.SIGTERM)
    env = contract_env(dict(os.environ))
    rank = int(env["RANK"])
    cores = rank_cpus(env)
    if cores:
        os.sched_setaffinity(0, cores)
    (job_dir / "logs").mkdir(parents=True, exist_ok=True)
    (job_dir / "ranks").mkdir(parents=True, exist_ok=True)
    record = {"rank": rank, "status": "Running", "started": time.time(), "exit_code": None,
              "restart": int(env.get("TORCHELASTIC_RESTART_COUNT", env.get("DTRAIN_ATTEMPT", "0")))}
    state = job_dir / "ranks" / f"rank-{rank}.json"
    log = open(job_dir / "logs" / f"rank-{rank}.log", "a", buffering=1, encoding="utf-8")
    try:
        proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, preexec_fn=lambda: _pdeathsig(signal.SIGKILL))
    except OSError as err:
        log.write(format_line(f"dtrain: cannot start {command[0]!r}: {err.strerror}", time.time()))
        _write_json(state, {**record, "status": "Failed", "exit_code": 127, "finished": time.time()})
        return 127
    _write_json(state, {**record, "pid": proc.pid})

    def forward(sig, _frame):
        if proc.poll() is None:
            proc.send_signal(sig)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    for raw in iter(proc.stdout.readline, b""):
        log.write(format_line(raw.decode("utf-8", "replace").rstrip("\r\n"), time.time()))
    code = proc.wait()
    code = 128 - code if code < 0 else code
    _write_json(state, {**record, "pid": proc.pid, "status": "Succeeded" if code == 0 else "Failed",
                        "exit_code": code, "finished": time.time()})
    log.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
