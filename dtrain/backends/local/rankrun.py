"""Runs one rank of a local job: the same environment contract whatever the launcher, and a log.

torchrun, mpirun or the supervisor starts `python -m dtrain.backends.local.rankrun --job-dir D
-- COMMAND...` once per process. It
- maps the launcher's variables to the Kubeflow PyTorchJob contract: RANK, WORLD_SIZE,
  LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (OpenMPI's OMPI_COMM_WORLD_* included);
- gives the rank its own GPUs: CUDA_VISIBLE_DEVICES from DTRAIN_RANK_DEVICES ("0,1;2,3": rank 0
  gets 0,1 and rank 1 gets 2,3; empty hides every GPU), numbered as NVML numbers them
  (CUDA_DEVICE_ORDER=PCI_BUS_ID);
- pins the rank to its own cores when the job set --cpu: DTRAIN_RANK_CPUS ("0;1": local rank 0
  on core 0, local rank 1 on core 1), applied to itself before starting the command, which inherits it;
- writes every output line, time-stamped, to D/logs/rank-R.log and to D/ranks/rank-R.json the
  command's identity (pid + start time + boot id), status, exit code or signal, and the step it
  resumed from (the line dtrain.markers.RESUMED that dtrain.training prints);
- runs the command in its own session, forwards SIGTERM/SIGINT/SIGHUP to it (so the workload
  can checkpoint), and once the command has exited stops whatever it left behind in its session:
  the rank ends when its command ends, even if a child still holds the output open;
- dies with its parent (PR_SET_PDEATHSIG) and takes the command down with it.
It imports only the standard library (and dtrain's stdlib-only modules) so it starts fast.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from dtrain.backends.local.cgroups import RankCgroup
from dtrain.backends.local.ranks import LogRefused, open_log
from dtrain.procs import Ident, signal_session
from dtrain.replace import replace_file
from dtrain.markers import resumed_step

PR_SET_PDEATHSIG = 1
LEFTOVER_GRACE_S = 1.0  # SIGTERM to what the command left in its session, then SIGKILL
DRAIN_S = 2.0  # wait this long for output after the command exits (a child may have left the session)
LINE_MAX = 1 << 20  # a longer output line is kept as several records: an endless line never fills memory


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
        # The ids are NVML's (nvidia-smi's), which number GPUs by PCI bus; CUDA numbers them fastest
        # first unless told otherwise, so on a machine of mixed GPUs the rank would run on another
        # job's GPU, and `dtrain nodes` would show its use under the wrong job.
        out["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return out


def rank_cpus(env: dict[str, str]) -> set[int] | None:
    """Pure: the cores of this local rank from DTRAIN_RANK_CPUS, None when the job is not pinned."""
    groups = env.get("DTRAIN_RANK_CPUS")
    if not groups:
        return None
    per_rank = groups.split(";")
    local = int(env.get("LOCAL_RANK", "0"))
    return {int(c) for c in per_rank[local].split(",")} if local < len(per_rank) else None


# Characters that end a line for str.splitlines and Python's text files (universal newlines),
# besides "\n". A record holding one (tqdm's "\r" progress updates) would read back as several
# lines, the later ones without a time: such a text is written JSON-quoted, after a tab.
_BREAKS = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_RECORD = re.compile(r"(\S+)([ \t])(.*)\Z", re.DOTALL)
_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z\Z")  # format_line's, exactly


def format_line(text: str, when: float) -> str:
    """One record, one line of the file for every line reader: `STAMP TEXT`, or `STAMP<tab>"TEXT"`
    (JSON, ASCII only) when TEXT holds a line break such as "\r"; parse_line gives TEXT back as it was."""
    stamp = datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if _BREAKS.search(text):
        return f"{stamp}\t{json.dumps(text)}\n"
    return f"{stamp} {text}\n"


def parse_line(line: str) -> tuple[float | None, str]:
    """(unix time, text) of a record format_line wrote; (None, the line) for anything else."""
    line = line.rstrip("\n")
    m = _RECORD.match(line)
    if m is None:
        return None, line
    stamp, sep, text = m.groups()
    try:  # fromisoformat: 0.3 us a line, strptime 6 us (a million-line log read in 7 s less)
        when = datetime.fromisoformat(stamp).timestamp() if _STAMP.match(stamp) else None
    except ValueError:  # a month 13
        when = None
    if when is None:
        return None, line
    if sep == "\t":
        try:
            quoted = json.loads(text)
        except ValueError:
            return when, text
        return when, quoted if isinstance(quoted, str) else text
    return when, text


def _write_json(path: Path, data: dict) -> None:
    """Replace the record whole; on a full disk (no room for the new file), overwrite the old one in
    place instead: a record is small and its old blocks are already the file's, and a rank whose
    final record could not be written would be shown Running for good."""
    text = json.dumps(data)
    try:
        replace_file(path, text)
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)  # never through a link
        except FileNotFoundError:  # a first record: no old blocks to reuse, and the disk is what refused
            raise err from None
        try:
            raw = text.encode()
            if os.pwrite(fd, raw, 0) != len(raw):
                raise err
            os.ftruncate(fd, len(raw))
        finally:
            os.close(fd)


def _unrecorded(what: str, state: Path, err: OSError, job_dir: Path, project: str | None) -> None:
    """One line in launcher.log (our stderr, on that same full disk: said where it still fits) for a rank
    record the disk refused: the record, the home disk's free space and what to delete there."""
    from dtrain.backends.local.ranks import disk_full, room_advice

    home = job_dir.parent.parent
    full = disk_full(home) or f"the disk holding {home} refused it"
    with contextlib.suppress(OSError):
        print(f"dtrain: {what}: its record {state} could not be written: {err.strerror}; {full}: "
              f"{room_advice(home, project)}", file=sys.stderr, flush=True)


def _start(command: list[str], env: dict[str, str], cgroup: RankCgroup | None) -> subprocess.Popen:
    def child() -> None:
        _pdeathsig(signal.SIGKILL)  # after setsid (start_new_session): the command dies with rankrun
        if cgroup is not None:
            cgroup.join()  # before exec: the command and all it starts are limited
    return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=child)


def _pump(proc: subprocess.Popen, log, log_name: str, record: dict, state: Path) -> None:
    """Copy output lines to the log, recording at once the step the workload resumed from.

    A log that cannot be written (its disk is full) stops the command (SIGTERM: a workload
    checkpoints if it can) with the reason in the rank's record; its output is still read to the
    end, so that the command never blocks on a full pipe and the job never hangs Running."""
    for raw in iter(lambda: proc.stdout.readline(LINE_MAX), b""):
        if "log_error" in record:
            continue  # drained, not kept
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        try:
            step = resumed_step(text)
            if step is not None:
                record["resumed_step"], record["resumed_at"] = step, time.time()  # its event's time
                _write_json(state, record)
            log.write(format_line(text, time.time()))
        except OSError as err:
            record["log_error"] = f"{err.strerror or err} ({log_name})"
            with contextlib.suppress(OSError):
                _write_json(state, record)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)


def _end_session(ident: Ident | None, cgroup: RankCgroup | None) -> None:
    """Stop what the finished command left in its session (and its cgroup): TERM, a short grace, KILL."""
    if ident is not None and signal_session(ident, signal.SIGTERM):
        deadline = time.monotonic() + LEFTOVER_GRACE_S
        while time.monotonic() < deadline and signal_session(ident, 0):
            time.sleep(0.05)
        signal_session(ident, signal.SIGKILL)
    if cgroup is not None:  # also catches a process that left the session (setsid)
        for pid in cgroup.pids():
            try:
                os.kill(pid, signal.SIGKILL)  # a member of our own cgroup is ours
            except ProcessLookupError:
                pass


def _cgroup(env: dict[str, str], rank: int) -> RankCgroup | None:
    memory, cpu = env.get("DTRAIN_MEMORY"), env.get("DTRAIN_CPU")
    if not memory and not cpu:
        return None
    from dtrain.names import parse_size

    name = f"dtrain-{env.get('DTRAIN_JOB_NAME', 'job')}-a{env.get('DTRAIN_ATTEMPT', '0')}-r{rank}-{os.getpid()}"
    return RankCgroup.create(name, memory=parse_size(memory, "--memory") if memory else None,
                             cpu=float(cpu) if cpu else None)


def exit_fields(returncode: int) -> dict:
    """A shell-style exit code (128 + N for signal N) and the signal's name when a signal ended it."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return {"exit_code": 128 - returncode, "signal": name}
    return {"exit_code": returncode, "signal": None}


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
    with contextlib.suppress(OSError):  # a file in its place: open_log below says so in one line
        (job_dir / "logs").mkdir(parents=True, exist_ok=True)
    (job_dir / "ranks").mkdir(parents=True, exist_ok=True)
    record = {"rank": rank, "status": "Running", "started": time.time(), "exit_code": None, "signal": None,
              "restart": int(env.get("DTRAIN_ATTEMPT", env.get("TORCHELASTIC_RESTART_COUNT", "0"))),
              "wrapper": Ident.of(os.getpid()).to_record()}
    state = job_dir / "ranks" / f"rank-{rank}.json"
    try:  # never through a link or into a fifo someone left at its name (the job's processes can write there)
        log = os.fdopen(open_log(job_dir / "logs", f"rank-{rank}.log"), "a", buffering=1, encoding="utf-8")
    except LogRefused as err:
        print(f"dtrain: rank {rank} was not started: {err}", file=sys.stderr, flush=True)
        _write_json(state, {**record, "status": "Failed", "exit_code": 1, "log_refused": str(err),
                            "finished": time.time()})
        return 1
    log_name = str(job_dir / "logs" / f"rank-{rank}.log")
    started: list[subprocess.Popen] = []
    held: list[int] = []  # a stop that came before the command started: passed on once it has

    def forward(sig, _frame):
        if not started:
            held.append(sig)  # not dying of it here: the cgroup made below would outlive us
        elif started[0].poll() is None:
            started[0].send_signal(sig)  # the command alone: a workload checkpoints, its loader workers keep going
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    cgroup = _cgroup(env, rank)
    if cgroup is not None:  # recorded before anything runs in it, so that a stop finds it
        record["cgroup"] = {"mode": cgroup.mode, "paths": [[c, str(p)] for c, p in cgroup.paths]}
        try:
            _write_json(state, record)
        except OSError as err:  # a full disk: the command never starts, the supervisor fails the job
            cgroup.remove()
            _unrecorded(f"rank {rank} was not started", state, err, job_dir, env.get("DTRAIN_PROJECT"))
            return 1
    if held:  # stopped before anything ran: nothing to start
        if cgroup is not None:
            cgroup.remove()
        fields = exit_fields(-held[0])
        _write_json(state, {**record, **fields, "status": "Failed", "finished": time.time()})
        return fields["exit_code"]
    try:
        proc = _start(command, env, cgroup)
    except OSError as err:
        log.write(format_line(f"dtrain: cannot start {command[0]!r}: {err.strerror}", time.time()))
        _write_json(state, {**record, "status": "Failed", "exit_code": 127, "finished": time.time()})
        if cgroup is not None:
            cgroup.remove()
        return 127
    started.append(proc)
    ident = Ident.of(proc.pid)
    record.update(ident.to_record() if ident else {"pid": proc.pid})
    try:
        _write_json(state, record)
    except OSError as err:  # a full disk: unrecorded, nothing could find or stop the command; it never runs so
        _end_session(ident, cgroup)
        proc.wait()
        if cgroup is not None:
            cgroup.remove(wait_s=LEFTOVER_GRACE_S)
        _unrecorded(f"rank {rank} was stopped", state, err, job_dir, env.get("DTRAIN_PROJECT"))
        return 1
    if held:
        forward(held[0], None)
    pump = threading.Thread(target=_pump, args=(proc, log, log_name, record, state), daemon=True)
    pump.start()
    fields = exit_fields(proc.wait())
    _end_session(ident, cgroup)
    pump.join(DRAIN_S)
    if cgroup is not None:
        if cgroup.oom_kills():
            fields["oom"] = env["DTRAIN_MEMORY"]  # the limit it went over
        cgroup.remove(wait_s=LEFTOVER_GRACE_S)  # what _end_session killed may still be on its way out
    _write_json(state, {**record, **fields, "status": "Succeeded" if fields["exit_code"] == 0 else "Failed",
                        "finished": time.time()})
    if not pump.is_alive():  # else a process that left the session still writes; it goes with us
        with contextlib.suppress(OSError):  # a log that could not be written is in the record
            log.close()
    return fields["exit_code"]


if __name__ == "__main__":
    sys.exit(main())
