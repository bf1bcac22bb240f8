"""Audit 8, the SageMaker backend: what a SageMaker user would still meet.

- a host killed by a signal reports 128 + the signal (137 for SIGKILL) as the toolkit's shell does, not
  Popen's -9, in the FailureReason, its failure file (with the toolkit's OutOfMemory ExtraInfo) and the event;
- `logs` of a host whose container has not started again since a spot interruption or a retry showed the
  last attempt's stream as the current one; now none, with a note naming --previous;
"""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

import dtrain
from test_sagemaker_backend import moto_url  # noqa: F401  (a moto server for this module)
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
    assert reason.endswith(", exit code: 1") and "-9" not in reason  # the toolkit's container exits 1
    assert info.events[-1].message == "Training job failed: host algo-1 exited with code 137"


def test_logs_of_a_host_whose_container_has_not_started_again_show_the_current_attempt_empty(moto_url, caplog):
    """After a spot interruption the host's newest stream is the last attempt's until its container starts
    again: `logs` showed those old lines as the current attempt's. Now it shows none, with a one-line note
    naming --previous, which reads that stream; -f goes on into the new stream once it comes."""
    boto3 = pytest.importorskip("boto3")
    from test_sagemaker_backend import CFG, Clients, SageMakerBackend, _job_with_a_log_group
    from dtrain.backends.sagemaker.logs import Pace
    s = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1")
    clients = Clients(*(s.client(n, endpoint_url=moto_url) for n in ("sagemaker", "s3", "logs")))
    clients.s3.create_bucket(Bucket=CFG.bucket)
    name, start = "a8-interrupted", 1767225100
    now = int(time.time() * 1000) - 60_000  # CloudWatch refuses events older than 14 days
    group = _job_with_a_log_group(clients, name, 2)

    def stream(host: int, begun: int, *texts: str) -> None:
        clients.logs.create_log_stream(logGroupName=group, logStreamName=f"{name}/algo-{host}-{begun}")
        clients.logs.put_log_events(logGroupName=group, logStreamName=f"{name}/algo-{host}-{begun}", logEvents=[
            {"timestamp": now + (begun - start) * 10 + i, "message": x} for i, x in enumerate(texts)])

    for host in (1, 2):
        stream(host, start, f"host {host} try 0")
    when = datetime.fromtimestamp(start + 60, timezone.utc)

    class Interrupted:  # DescribeTrainingJob of a spot job interrupted after its hosts' first start
        def describe_training_job(self, **kw):
            desc = clients.sagemaker.describe_training_job(**kw)
            return {**desc, "TrainingJobStatus": "InProgress", "SecondaryStatus": "Starting",
                    "SecondaryStatusTransitions": [
                        {"Status": "Training", "StartTime": datetime.fromtimestamp(start, timezone.utc),
                         "StatusMessage": "Training image download completed. Training in progress."},
                        {"Status": "Interrupted", "StartTime": when, "StatusMessage": "Spot capacity reclaimed"},
                        {"Status": "Starting", "StartTime": when, "StatusMessage": "Launching requested instances"}]}

        def __getattr__(self, attr):
            return getattr(clients.sagemaker, attr)

    be = SageMakerBackend(CFG, clients=Clients(Interrupted(), clients.s3, clients.logs),
                          pace=Pace(first=0.0, most=0.0, status=1e9), sleep=lambda _s: None)
    def read(**kw) -> tuple[list[str], str | None]:  # the lines, and the call's one notice (None: none)
        lines = be.logs(name, **kw)
        texts = [ln.text for ln in lines]
        assert len(lines.notices) <= 1, lines.notices
        return texts, lines.notices[0].message if lines.notices else None

    with caplog.at_level("WARNING"):
        texts, note = read()
    assert texts == []
    assert "algo-1 (rank 0), algo-2 (rank 1) has not started again" in note
    assert f"'dtrain logs {name} --previous'" in note and "\n" not in note
    assert [r.getMessage() for r in caplog.records if r.name.startswith("dtrain")] == [f"dtrain: warning: {note}"]
    # --previous reads what there is: nothing missing
    assert read(previous=True) == (["host 1 try 0", "host 2 try 0"], None)
    stream(1, start + 120, "host 1 try 1")  # host 1's container started again, host 2's not yet
    texts, note = read()
    assert texts == ["host 1 try 1"] and "algo-2 (rank 1) has not started" in note and "algo-1" not in note
    assert read(rank=0) == (["host 1 try 1"], None)
    assert read(previous=True) == (["host 1 try 0", "host 2 try 0"], None)


def test_attempt_start_is_the_last_interruption_or_retry():
    from dtrain.backends.sagemaker.logs import current_start
    from dtrain.backends.sagemaker.status import attempt_start
    t = [{"Status": s, "StartTime": float(i)} for i, s in enumerate(
        ["Starting", "Training", "Interrupted", "Starting", "Training", "Restarting", "Training"])]
    assert attempt_start({"SecondaryStatusTransitions": t}) == 5.0
    assert attempt_start({"SecondaryStatusTransitions": t[:2]}) is None
    assert current_start(["j/algo-1-3", "j/algo-1-9"], 5.0) == 9  # started after the restart: current
    assert current_start(["j/algo-1-3"], 5.0) == 5  # not started since: nothing current yet
    assert current_start(["j/algo-1-3"], None) == 3
