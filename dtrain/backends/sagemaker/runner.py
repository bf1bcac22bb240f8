"""The runner of one --local SageMaker job: it plays SageMaker's part for hosts algo-1..N.

`python -m dtrain.backends.sagemaker.runner ROOT JOB`, started detached by LocalSageMaker:
1. Downloading: per host, a folder laid out as /opt/ml (config files, code unpacked from
   sourcedir.tar.gz, model/, output/); channels and checkpoints come from the local "S3" folder
   or a file:// path;
2. Training: each host runs in its own mount namespace (bubblewrap): its folder at /opt/ml,
   channels read-only at /opt/ml/input/data/<name>, the job's checkpoint folder at its CheckpointConfig's
   LocalPath (/opt/ml/checkpoints by default), an /etc/hosts where algo-1..N are this machine; the launch is the
   toolkit's (contract.launch); each host's output goes to its log stream; a requirements.txt in
   the code, or the code itself where it has a setup.py, is pip-installed first, as the toolkit
   does, into a Python environment of the job's;
3. Uploading: algo-1's /opt/ml/model -> model.tar.gz, /opt/ml/output/data -> output.tar.gz, after
   success and, as SageMaker does, after a stop or MaxRuntimeExceeded (what the job saved in its
   grace period after SIGTERM); links are never followed, and those leaving the folder stay out;
4. Completed, Failed (FailureReason, as SageMaker's: `AlgorithmError: <the failed host's
   /opt/ml/output/failure>, exit code: 1` (the toolkit's container's code), at most 1024 characters; where the job wrote no failure
   file, the toolkit's, whose ErrorMessage is the host's stderr from the first line naming an error
   on), Stopped on SIGTERM (StopTrainingJob), MaxRuntimeExceeded past the limit.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import site
import socket
import stat
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Iterator

from dtrain.backends.local.launch import job_path, outer_home
from dtrain.backends.sagemaker import checkpoint_lock, contract
from dtrain.backends.sagemaker.archive import link_leaves, unpack
from dtrain.backends.sagemaker.local import (LocalS3, locked_state, mount_problem, private_dirs, transition, uri_folder,
                                             write_json)
from dtrain.replace import open_in

GRACE_S = 120.0  # SageMaker's window between SIGTERM and the end (StopTrainingJob, MaxRuntimeInSeconds)
# A line that starts with an exception's name ("ValueError: bad lr", "torch...ChildFailedError:", an MPI
# rank's "[1,0]<stderr>:KeyError: 'x'"): where the toolkit's ErrorMessage starts (it watches stderr for the
# names of Python's errors; a traceback's source line, `raise ValueError(...)`, is not the error yet)
ERROR_LINE = re.compile(r"^(?:\[[\d,]+\]<std\w+>:)?\s*[A-Za-z_][\w.]*(?:Error|Exception|Interrupt)\b(?::|$)")
TAIL_LINES = 10  # of stderr, the ErrorMessage of a process that named no error
PIP_ERROR_LINE = re.compile(r"^ERROR: ")  # where pip's own error starts (its warnings and retries come before)
# The toolkit's ExtraInfo for a process that exited 137 (SIGKILL: the kernel's OOM killer, as a rule)
OOM_INFO = "OutOfMemory: Process killed by SIGKILL (signal 9)"
# The container's exit code when the toolkit's script, pip or module install fails: its trainer catches
# the ClientError those raise (ExecuteUserScriptError, InstallRequirementsError, InstallModuleError),
# writes /opt/ml/output/failure (where ExitCode is the script's own) and exits DEFAULT_FAILURE_CODE, 1,
# whatever the script's code; SageMaker's FailureReason ends with the container's: ", exit code: 1".
TOOLKIT_EXIT = 1


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Runner:
    def __init__(self, root: Path, name: str):
        self.root, self.name = root, name
        self.dir = root / "jobs" / name
        self.req = json.loads((self.dir / "request.json").read_text())
        self.s3 = LocalS3(root / "s3")
        self.procs: dict[str, subprocess.Popen] = {}
        self.pumps: list[threading.Thread] = []
        self.stderr: dict[str, ErrorLines] = {}  # per host, what the toolkit keeps of its stderr
        self.stopping = False
        self.python = sys.executable  # the job's interpreter: the job's own environment once requirements are in
        self.deadline = float("inf")  # MaxRuntimeInSeconds, counted from the start of training
        self.package = False  # the code has a setup.py: installed with pip and run as a module
        self.pip: tuple[str, list[str]] | None = None  # the install step: its error's name and pip's arguments
        self.installing = False  # spawn() is starting the install step (pip), not the entry point

    def status(self, secondary: str, message: str, *, primary: str = "InProgress", **fields) -> None:
        with locked_state(self.dir) as st:
            if st["TrainingJobStatus"] == "Stopping" and primary == "InProgress":
                return  # a stop arrived meanwhile; keep saying so
            transition(st, secondary, message, primary=primary)
            st.update(fields)

    # ---- 1. Downloading -----------------------------------------------------------------
    def s3_path(self, uri: str) -> Path:
        """Where a file:// or s3:// URI's data is on this machine; no link a job left is followed in the S3 folder."""
        return uri_folder(uri, self.s3)

    def prepare(self) -> dict[str, Path]:
        uri = self.req["CheckpointConfig"]["S3Uri"]
        self.checkpoints = self.s3_path(uri)
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        # held until the runner ends: no other local job given this folder starts meanwhile
        self.checkpoint_lock = checkpoint_lock.hold(self.checkpoints, self.s3.root, uri, self.name)
        self.mount = contract.checkpoint_path(self.req)  # CheckpointConfig.LocalPath: where the hosts see them
        why = contract.local_path_problem(self.mount) or mount_problem(self.mount, self.root)  # (as at create)
        if why:
            raise RuntimeError(why)
        source = contract.decode(self.req["HyperParameters"]["sagemaker_submit_directory"])
        archive = self.s3_path(source)
        channels = {}
        for ch in self.req.get("InputDataConfig") or []:
            src = ch["DataSource"].get("S3DataSource", {}).get("S3Uri")
            if src is None:
                raise RuntimeError(f"channel {ch['ChannelName']} is on EFS/FSx, which only SageMaker can reach; "
                                   f"use file:///PATH or s3:// (the local S3 folder) with --local")
            channels[ch["ChannelName"]] = self.s3_path(src)
            if not channels[ch["ChannelName"]].exists():
                raise RuntimeError(f"channel {ch['ChannelName']}: {src} does not exist on this machine")
        hosts = {}
        for host in contract.hosts(self.req):
            h = self.dir / "hosts" / host
            for sub in ("input/config", "input/data", "model", "output/data"):
                (h / sub).mkdir(parents=True, exist_ok=True)
            if self.mount.startswith(contract.OPT_ML + "/"):  # the checkpoints' mount point, in the host's folder
                (h / self.mount[len(contract.OPT_ML) + 1:]).mkdir(parents=True, exist_ok=True)
            for ch in channels:
                (h / "input" / "data" / ch).mkdir(exist_ok=True)  # mount points
            unpack(archive, h / "code")
            cfg = h / "input" / "config"
            write_json(cfg / "hyperparameters.json", self.req.get("HyperParameters") or {})
            write_json(cfg / "resourceconfig.json", contract.resource_config(self.req, host))
            write_json(cfg / "inputdataconfig.json", contract.input_data_config(self.req))
            if contract.checkpoint_config(self.req) is not None:  # as SageMaker: a job with a CheckpointConfig
                write_json(cfg / "checkpointconfig.json", contract.checkpoint_config(self.req))
            hosts[host] = h
        (self.dir / "etc-hosts").write_text(contract.etc_hosts(self.req, socket.gethostname()))
        self.channels = channels
        return hosts

    # ---- 2. Training --------------------------------------------------------------------
    def sandbox(self, host_dir: Path, *, offline: bool = False) -> list[str]:
        # A pid namespace per host, as a container has: killing the host's bwrap ends every process
        # in it (torchrun's workers included), so a stopped job writes nothing afterwards. So bwrap
        # must outlive the SIGTERM of a stop, as a container does: it runs with SIGTERM ignored (its
        # death would take the namespace down at once, leaving the job no time to save), and the
        # command inside gets SIGTERM's default back; SIGKILL after GRACE_S ends them all.
        argv = [*_with_sigterm(signal.SIG_IGN), "bwrap", "--dev-bind", "/", "/", "--die-with-parent",
                "--unshare-pid", "--proc", "/proc", *(["--unshare-net"] if offline else []),
                *private_dirs([contract.OPT_ML, *([] if self.mount.startswith(contract.OPT_ML + "/") else
                                                  [self.mount])]),
                "--bind", str(host_dir), contract.OPT_ML,
                "--bind", str(self.checkpoints), self.mount,
                "--ro-bind", str(self.dir / "etc-hosts"), "/etc/hosts"]
        for ch, path in self.channels.items():
            argv += ["--ro-bind", str(path), f"{contract.OPT_ML}/input/data/{ch}"]
        return argv + ["--chdir", contract.CODE_DIR, "--", *_with_sigterm(signal.SIG_DFL)]

    def install(self, hosts: dict[str, Path]) -> tuple[str, int] | None:
        """The toolkit's step before the entry point (contract.install_command): code with a setup.py is
        a package, `pip install . [-r requirements.txt]`; a script's requirements.txt, `pip install -r
        requirements.txt`. Here into a Python environment of the job's (jobs/NAME/venv), made once
        and run by every host: the hosts unpack the same code on one machine with one Python, so one
        install serves them all, where one per host would build identical environments at N times
        pip's cost. pip runs in algo-1's namespace (cwd /opt/ml/code, channels mounted) and, with
        EnableNetworkIsolation, without a network, as on SageMaker. None: nothing to install, or
        installed; else wait()'s answer (pip failed, a stop, MaxRuntimeInSeconds)."""
        names = contract.hosts(self.req)
        files = os.listdir(hosts[names[0]] / "code")
        self.package = contract.is_package(files)
        self.pip = contract.install_command(files)
        if self.pip is None:
            return None
        offline = bool(self.req.get("EnableNetworkIsolation"))
        what = "setup.py" if self.package else "requirements.txt"
        self.python = python_env(self.dir / "venv")
        self.note(names[0], f"{what}: {' '.join(['python', *self.pip[1]])} into the job's Python environment "
                            f"{self.dir / 'venv'}" + (" (EnableNetworkIsolation: no network)" if offline else ""))
        for host in names[1:]:
            self.note(host, f"{what}: pip installs it on {names[0]} into the job's Python environment, "
                            "which every host runs")
        self.installing = True  # pip's stderr names its error its own way
        self.spawn(names[0], self.sandbox(hosts[names[0]], offline=offline) + [self.python, *self.pip[1]])
        self.installing = False
        result = self.wait()
        self.drain()
        self.procs, self.pumps = {}, []
        return result

    def start(self, hosts: dict[str, Path]) -> None:
        port = free_port()
        for host, h in hosts.items():
            launch = contract.launch(self.req, host, master_port=port, python=self.python, package=self.package)
            if not launch.argv:
                self.note(host, f"{host}: MPI worker host, ranks run from algo-1")
                continue
            self.spawn(host, self.sandbox(h) + launch.argv)

    def spawn(self, host: str, argv: list[str]) -> None:
        """Start `argv` as `host`'s process, in its environment, its output going to the host's log."""
        cpus = max(1, (os.cpu_count() or 1) // len(contract.hosts(self.req)))
        tmp = self.dir / "tmp" / host  # a container's /tmp goes with it; here the job's folder does
        tmp.mkdir(parents=True, exist_ok=True)
        own = os.path.dirname(self.python)  # the job's environment first: `python` in a subshell is the job's
        path = job_path() if self.python == sys.executable else os.pathsep.join([own, job_path()])
        env = {"PATH": path, "HOME": outer_home(os.environ) or "/root", "LANG": "C.UTF-8",
               "PYTHONUNBUFFERED": "1", "PYTHONPATH": contract.CODE_DIR, "OMP_NUM_THREADS": str(cpus),
               "TMPDIR": str(tmp), **contract.environment(self.req, host, num_cpus=cpus)}
        log = open(self.dir / "logs" / f"{host}.log", "ab")  # both streams, a line at a time, as CloudWatch's
        p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self.procs[host] = p
        errors = self.stderr[host] = ErrorLines(PIP_ERROR_LINE if self.installing else ERROR_LINE)
        lock, left = threading.Lock(), [2]
        for stream, watch in ((p.stdout, None), (p.stderr, errors)):
            self.pumps.append(threading.Thread(target=_pump, args=(stream, log, lock, left, watch), daemon=True))
            self.pumps[-1].start()

    def drain(self) -> None:
        """Wait until every line the processes wrote is in their logs (before a failure quotes one)."""
        for pump in self.pumps:
            pump.join(timeout=10.0)

    def wait(self) -> tuple[str, int] | None:
        """None when every host exited 0; else (host, code) of the first failure (the rest are stopped)."""
        while True:
            codes = {h: exit_code(p.poll()) for h, p in self.procs.items()}
            bad = [(h, c) for h, c in codes.items() if c not in (None, 0)]
            if bad or self.stopping or time.monotonic() > self.deadline:
                self.kill()
                return bad[0] if bad else ("", -1 if self.stopping else -2)
            if all(c == 0 for c in codes.values()):
                return None
            time.sleep(0.2)

    def kill(self) -> None:
        for sig, pause in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 0)):
            for p in self.procs.values():
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, sig)
                    except ProcessLookupError:
                        pass
            deadline = time.monotonic() + pause
            while time.monotonic() < deadline and any(p.poll() is None for p in self.procs.values()):
                time.sleep(0.1)

    # ---- 3. Uploading -------------------------------------------------------------------
    def upload(self, hosts: dict[str, Path]) -> None:
        names = contract.hosts(self.req)
        first = hosts[names[0]]
        out = self.req["OutputDataConfig"]["S3OutputPath"].rstrip("/") + f"/{self.name}/output/"
        bucket, _, key = out[len("s3://"):].partition("/")
        for folder, archive in ((first / "model", "model.tar.gz"), (first / "output" / "data", "output.tar.gz")):
            with tempfile.TemporaryFile(dir=self.dir) as packed:  # put whole, as S3 does, never through a link
                with tarfile.open(fileobj=packed, mode="w:gz") as tar:
                    for path, arcname, why in archive_entries(folder):
                        if why:
                            self.note(names[0], f"{archive}: left out {why}")
                        else:
                            tar.add(path, arcname=arcname, recursive=False)
                packed.seek(0)
                self.s3.put_object(Bucket=bucket, Key=key + archive, Body=packed)

    def note(self, host: str, text: str) -> None:
        """A line of the platform's in the host's log stream (the job's own lines come through _pump)."""
        with open(self.dir / "logs" / f"{host}.log", "ab") as log:
            log.write(f"{int(time.time() * 1000)}\t{text}\n".encode())

    def failure(self, hosts: dict[str, Path], host: str, code: int) -> str:
        """The FailureReason, SageMaker's: `AlgorithmError: <the host's /opt/ml/output/failure>, exit code: 1`
        (the toolkit's container exits 1 for any script that failed; the file's ExitCode is the script's).
        Like the toolkit, write that file where the job wrote none, its ErrorMessage from the host's stderr
        (never stdout: a last progress line or an exit handler's print says nothing of the failure)."""
        output = hosts[host] / "output"
        note = read_failure(output)
        if note is None or not note.strip():
            command = contract.launch(self.req, host, master_port=0, python=self.python, package=self.package).argv
            errors = self.stderr.get(host) or ErrorLines()
            note = toolkit_error("ExecuteUserScriptError", code, errors.message(), command)
            write_failure(output, note)  # a link the job left there is neither followed nor replaced
        return algorithm_error(note, TOOLKIT_EXIT)

    def install_failure(self, hosts: dict[str, Path], host: str, code: int) -> str:
        """The FailureReason of a pip that failed, SageMaker's as for a script: `AlgorithmError: <the host's
        /opt/ml/output/failure>, exit code: 1`, that file being the toolkit's InstallModuleError or
        InstallRequirementsError, its ErrorMessage pip's stderr from its first `ERROR:` line on."""
        error, args = self.pip
        output = hosts[host] / "output"
        note = read_failure(output)
        if note is None or not note.strip():
            errors = self.stderr.get(host) or ErrorLines(PIP_ERROR_LINE)
            note = toolkit_error(error, code, errors.message(), [self.python, *args])
            write_failure(output, note)
        return algorithm_error(note, TOOLKIT_EXIT)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        try:
            self.status("Downloading", "Downloading input data and code")
            hosts = self.prepare()
            start = time.time()
            self.status("Training", "Training image download completed. Training in progress.",
                        TrainingStartTime=start)
            self.deadline = time.monotonic() + int(self.req["StoppingCondition"]["MaxRuntimeInSeconds"])
            result, why = self.install(hosts), self.install_failure  # pip's time counts, as in the container
            if result is None:
                self.start(hosts)
                result, why = self.wait(), self.failure
                self.drain()
            seconds = int(round(time.time() - start))
            times = dict(TrainingTimeInSeconds=seconds, BillableTimeInSeconds=seconds, TrainingEndTime=time.time())
            if result is None:
                self.status("Uploading", "Uploading generated training model")
                self.upload(hosts)
                self.status("Completed", "Training job completed", primary="Completed", **times)
            elif result[1] == -1:
                self.upload(hosts)  # as SageMaker does: what the job saved after SIGTERM is its model
                self.status("Stopped", "Training job stopped", primary="Stopped", **times)
            elif result[1] == -2:
                self.upload(hosts)
                self.status("MaxRuntimeExceeded", "Training job ran past MaxRuntimeInSeconds", primary="Stopped",
                            **times)
            else:
                reason = why(hosts, *result)  # SageMaker's names no host: the event does
                self.status("Failed", f"Training job failed: host {result[0]} exited with code {result[1]}",
                            primary="Failed", FailureReason=reason, **times)
        except Exception as err:  # anything before training: report it as SageMaker would, then exit
            self.kill()
            reason = f"ClientError: {err}"
            self.status("Failed", reason, primary="Failed", FailureReason=reason, TrainingEndTime=time.time())
        return 0


def python_env(path: Path) -> str:
    """A venv at `path` whose python also imports every package of this interpreter's (torch, dtrain),
    after its own: a --system-site-packages venv made from a venv's python would see the base
    interpreter's packages instead. pip then finds them installed and installs only what is missing,
    into `path`. Where this interpreter has no pip, the venv gets its own. Returns its python."""
    import venv
    path = path.absolute()  # the hosts run it from /opt/ml/code
    venv.create(path, symlinks=True, with_pip=importlib.util.find_spec("pip") is None)
    own = sysconfig.get_path("purelib", "venv", vars={"base": str(path), "platbase": str(path)})
    # site.addsitedir rather than plain path lines: it also reads those folders' .pth files (editable installs)
    adds = "; ".join(f"site.addsitedir({d!r})" for d in site.getsitepackages())
    Path(own, "dtrain-job-python.pth").write_text(f"import site; {adds}\n")
    return str(path / "bin" / "python")


class ErrorLines:
    """What the toolkit keeps of a process's stderr for its failure file's ErrorMessage: from the first
    line naming an error (`start`: an exception's name; pip's `ERROR:`) on (each line once, as far as
    SageMaker's 1024 characters reach); a process that named none, its last TAIL_LINES lines."""

    def __init__(self, start: re.Pattern[str] = ERROR_LINE) -> None:
        self.start = start
        self.found: list[str] = []
        self.size = 0
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)

    def add(self, line: str) -> None:
        line = line.strip()[:contract.MAX_REASON]
        if not line:
            return
        self.tail.append(line)
        if (self.found or self.start.search(line)) and self.size < contract.MAX_REASON and line not in self.found:
            self.found.append(line)
            self.size += len(line) + 1

    def message(self) -> str:
        return "\n".join(self.found or self.tail)


def algorithm_error(failure: str, code: int) -> str:
    """SageMaker's FailureReason of a host that exited non-zero: the failure file's text (the job's own or
    the toolkit's) and the exit code, in at most MAX_REASON characters (the file's text is cut to fit)."""
    head, tail = "AlgorithmError: ", f", exit code: {code}"
    text, room = failure.strip(), contract.MAX_REASON - len(head) - len(tail)
    return head + (text if len(text) <= room else text[:room - 3] + "...") + tail


def toolkit_error(error: str, code: int, message: str, command: list[str]) -> str:
    """The toolkit's failure file for a command that failed (its _CalledProcessError), with its
    ExtraInfo line for a process killed by SIGKILL (137)."""
    extra = f'\nExtraInfo "{OOM_INFO}"' if code == 128 + signal.SIGKILL else ""
    return f'{error}:\nExitCode {code}\nErrorMessage "{message}"{extra}\nCommand "{" ".join(command)}"'


def exit_code(code: int | None) -> int | None:
    """A process's exit status as a shell and the toolkit report it: 128 + N for one killed by signal N
    (137 for SIGKILL), where Popen says -N."""
    return 128 - code if code is not None and code < 0 else code


def _with_sigterm(disposition: signal.Handlers) -> list[str]:
    """A prefix that execs the rest of the command with SIGTERM ignored or at its default: an ignored
    signal stays ignored across exec, the one disposition a parent can hand down."""
    name = "SIG_IGN" if disposition == signal.SIG_IGN else "SIG_DFL"
    return [sys.executable, "-c", f"import os, signal, sys; signal.signal(signal.SIGTERM, signal.{name}); "
                                  f"os.execvp(sys.argv[1], sys.argv[1:])"]


def archive_entries(folder: Path, prefix: str = "") -> Iterator[tuple[Path, str, str]]:
    """(path, name in the archive, why it is left out or "") for everything under `folder`, links
    as links: never followed, and left out when they point outside it (absolute, or up past its
    top), since `dtrain artifacts` refuses an archive holding such a link. A job that replaced
    the folder itself by a link gets an empty archive."""
    if not prefix and (folder.is_symlink() or not folder.is_dir()):
        if folder.is_symlink():
            yield folder, "", f"{folder.name}/: it is a link ({os.readlink(folder)}), not a folder"
        return
    for item in sorted(folder.iterdir()):
        name = prefix + item.name
        if item.is_symlink():
            target = os.readlink(item)
            yield item, name, f"{name} -> {target}: the link leaves the folder" if link_leaves(name, target) else ""
        elif item.is_dir():
            yield item, name, ""
            yield from archive_entries(item, name + "/")
        else:
            yield item, name, "" if item.is_file() else f"{name}: not a regular file"


def read_failure(output: Path) -> str | None:
    """The host's /opt/ml/output/failure (its first MAX_REASON characters, as SageMaker reads it);
    None where there is none, or where the job put a link (at the file or at output/) or a fifo."""
    fd = _open_failure(output, os.O_RDONLY | os.O_NONBLOCK)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        return f.read(4 * contract.MAX_REASON).decode(errors="replace")[:contract.MAX_REASON]


def write_failure(output: Path, text: str) -> None:
    """Write the host's /opt/ml/output/failure unless something is there (the toolkit keeps the
    job's own), never through a link the job left at the file or at output/."""
    fd = _open_failure(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    if fd is not None:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)


def _open_failure(output: Path, flags: int) -> int | None:
    """output/failure opened with `flags`, no link followed at either; None where that fails."""
    return open_in(output, "failure", flags)


def _pump(stream, log, lock: threading.Lock, left: list[int], watch: ErrorLines | None = None) -> None:
    """Copy a process's stream into its host's log, a stamped line at a time (the host's other stream
    writes the same file under `lock`; `left` counts the streams still open, the last closes the log);
    `watch` also sees each line (stderr's)."""
    for raw in iter(stream.readline, b""):
        line = raw.rstrip(b"\n")
        with lock:
            log.write(f"{int(time.time() * 1000)}\t".encode() + line + b"\n")
            log.flush()
        if watch is not None:
            watch.add(line.decode(errors="replace"))
    with lock:
        left[0] -= 1
        if not left[0]:  # the host's other stream has ended too
            log.close()


def main(argv: list[str] | None = None) -> int:
    root, name = (argv or sys.argv[1:])[:2]
    return Runner(Path(root), name).run()


if __name__ == "__main__":
    sys.exit(main())
