"""Audit 8, the SageMaker backend: what a SageMaker user would still meet.

- a host killed by a signal reports 128 + the signal (137 for SIGKILL) as the toolkit's shell does, not
  Popen's -9, in the FailureReason, its failure file (with the toolkit's OutOfMemory ExtraInfo) and the event;
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import dtrain
from dtrain.spec import JobSpec
from dtrain.spec_sagemaker import SageMakerOptions


def _host_sandbox(home: Path, name: str, host: str = "algo-1", timeout: float = 60) -> int:
    """The pid of the outermost process of `host`'s namespace (bubblewrap, started by the job's runner)."""
    needle = f"{home}/sagemaker-local/jobs/{name}/hosts/{host}".encode()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if argv and argv[0].endswith(b"bwrap") and needle in b" ".join(argv):
                found[int(pid)] = ppid
        outer = [p for p, parent in found.items() if parent not in found]
        log = home / "sagemaker-local" / "jobs" / name / "logs" / f"{host}.log"
        if outer and log.exists() and b"up" in log.read_bytes():
            return outer[0]
        time.sleep(0.2)
    raise AssertionError(f"no running sandbox for {name}/{host}")


def test_a_host_killed_by_sigkill_exits_137_as_the_toolkit_reports_it(home, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("import time\nprint('up', flush=True)\ntime.sleep(120)\n")
    client = dtrain.Client(home=home, backend="sagemaker")
    client.submit(JobSpec(name="killed", command=("python", "train.py"), backend="sagemaker",
                          sagemaker=SageMakerOptions(local=True, source_dir=str(code))))
    os.kill(_host_sandbox(home, "killed"), signal.SIGKILL)  # the host goes as an OOM kill takes it
    info = client.wait("killed", timeout=60)
    assert info.status.value == "Failed", info.message
    reason = info.extra["failure_reason"]
    assert reason.startswith("AlgorithmError: ExecuteUserScriptError:\nExitCode 137\n"), reason
    assert 'ExtraInfo "OutOfMemory: Process killed by SIGKILL (signal 9)"' in reason
    assert reason.endswith(", exit code: 137") and "-9" not in reason
    assert info.events[-1].message == "Training job failed: host algo-1 exited with code 137"
