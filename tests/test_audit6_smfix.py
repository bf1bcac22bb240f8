"""SageMaker as its users expect it: `list` without AWS credentials still shows the --local jobs,
a --local job's FailureReason follows SageMaker's contract, and `logs` shows a host's current
container start (--previous the one before), as local and Kubernetes show the current attempt."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import DTRAIN


def _no_aws_env(home: Path, tmp_path: Path) -> dict[str, str]:
    """The environment of a machine without any AWS credentials (and no instance role to ask)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(DTRAIN_HOME=str(home), AWS_CONFIG_FILE=str(tmp_path / "no-config"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"), AWS_EC2_METADATA_DISABLED="true")
    return env


def _dtrain(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([DTRAIN, *args], env=env, capture_output=True, text=True, timeout=120, cwd=cwd)


def _wait(env: dict[str, str], name: str, timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = json.loads(_dtrain(env, "describe", "job", name, "--json").stdout)
        if info["status"] in ("Succeeded", "Failed"):
            return info
        time.sleep(0.3)
    raise AssertionError(f"{name} did not end: {info}")


@pytest.mark.slow
def test_list_without_aws_credentials_shows_the_local_jobs_and_says_why_aws_is_missing(tmp_path, monkeypatch):
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)  # the server below takes this environment, with _no_aws_env's on top
    home, code = tmp_path / "home", tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    env = _no_aws_env(home, tmp_path)
    assert _dtrain(env, "config", "backend", "sagemaker").returncode == 0
    assert _dtrain(env, "config", "sagemaker", "--role", "arn:aws:iam::123456789012:role/R",
                   "--bucket", "my-training-bucket").returncode == 0
    # Nothing could be listed at all (no --local job, AWS unreachable): the AWS error, non-zero
    empty = _dtrain(env, "--backend", "sagemaker", "list")
    assert empty.returncode != 0 and "no AWS credentials" in empty.stderr and "NAME" not in empty.stdout
    assert _dtrain(env, "submit", "here", "--backend", "sagemaker", "--local", "--", "python", "train.py",
                   cwd=code).returncode == 0
    _wait(env, "here")
    shown = _dtrain(env, "--backend", "sagemaker", "list")
    assert shown.returncode == 0, shown.stderr
    assert "here" in shown.stdout and "Succeeded" in shown.stdout
    lines = shown.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dtrain: warning: ") and "not listed" in lines[0]
    assert "credentials" in lines[0] and "AWS_PROFILE" in lines[0]  # what is wrong and how to fix it
    js = _dtrain(env, "--backend", "sagemaker", "list", "--json")
    assert js.returncode == 0 and [j["name"] for j in json.loads(js.stdout)] == ["here"]
    assert "not listed" in js.stderr
    # The HTTP list (and the dashboard's Jobs page, which shows it) says the same in a Warning header
    from server_util import ServerProcess
    server = ServerProcess(home, env=env, cwd=code)
    try:
        for query in ("", "?limit=20"):
            got = server.http.get("/api/v1/jobs" + query)
            assert got.status_code == 200 and [j["name"] for j in got.json()] == ["here"]
            warning = got.headers["warning"]
            assert warning.startswith('299 dtrain "SageMaker jobs on AWS') and warning.endswith('"')
            assert "not listed" in warning and "credentials" in warning and "\n" not in warning
    finally:
        server.stop()


def _local_failure(home: Path, tmp_path: Path, name: str, script: str):
    import dtrain
    from dtrain.spec import JobSpec
    from dtrain.spec_sagemaker import SageMakerOptions
    code = tmp_path / f"code-{name}"
    code.mkdir()
    (code / "train.py").write_text(script)
    client = dtrain.Client(home=home, backend="sagemaker")
    client.submit(JobSpec(name=name, command=("python", "train.py"), backend="sagemaker",
                          sagemaker=SageMakerOptions(local=True, source_dir=str(code))))
    info = client.wait(name, timeout=90)
    assert info.status.value == "Failed", info.message
    return info


def test_failure_reason_comes_from_stderr_not_from_the_last_line_on_stdout(home, tmp_path):
    """The toolkit's ErrorMessage is stderr's from the error on; a progress line or an exit handler's
    print on stdout, written last, said nothing of why the job failed and was its FailureReason."""
    script = ("import atexit\natexit.register(lambda: print('saved 3 checkpoints', flush=True))\n"
              "print('step 1 loss 2.3', flush=True)\nraise ValueError('learning rate must be positive, got -1')\n")
    info = _local_failure(home, tmp_path, "stdout-last", script)
    reason = info.extra["failure_reason"]
    assert reason.startswith("AlgorithmError: ExecuteUserScriptError:\nExitCode 1\nErrorMessage \"ValueError: "
                             "learning rate must be positive, got -1\"\nCommand \"") and reason.endswith(", exit code: 1")
    assert "saved 3 checkpoints" not in reason and "step 1" not in reason
    assert "learning rate must be positive" in info.message and "\n" not in info.message


def test_a_long_failure_stays_within_sagemakers_1024_characters(home, tmp_path):
    script = "import sys\nprint('x' * 5000, file=sys.stderr)\nraise RuntimeError('y' * 3000)\n"
    info = _local_failure(home, tmp_path, "long", script)
    reason = info.extra["failure_reason"]
    assert len(reason) <= 1024 and reason.endswith(", exit code: 1") and "RuntimeError: yyy" in reason
    own = "import sys\nopen('/opt/ml/output/failure', 'w').write('z' * 4000)\nsys.exit(7)\n"
    info = _local_failure(home, tmp_path, "own-long", own)
    reason = info.extra["failure_reason"]
    assert len(reason) <= 1024 and reason.startswith("AlgorithmError: zzz") and reason.endswith(", exit code: 1")  # the toolkit's container exits 1


def test_logs_show_each_hosts_current_container_start_and_follow_goes_on_into_a_new_one(moto_url):
    """A retry or a spot interruption starts every host's container again, each start a CloudWatch
    stream `JOB/algo-N-<start>`: `logs` read every start's lines run together, where local and
    Kubernetes show the current attempt (--previous the one before)."""
    boto3 = pytest.importorskip("boto3")
    from test_sagemaker_backend import CFG, Clients, SageMakerBackend, _job_with_a_log_group
    from dtrain.backends.sagemaker.logs import Pace
    s = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1")
    clients = Clients(*(s.client(n, endpoint_url=moto_url) for n in ("sagemaker", "s3", "logs")))
    clients.s3.create_bucket(Bucket=CFG.bucket)
    name, t = "moto-attempts", int(time.time() * 1000) - 60_000
    group = _job_with_a_log_group(clients, name, 2)

    def stream(host: int, start: int, *texts: str) -> None:
        clients.logs.create_log_stream(logGroupName=group, logStreamName=f"{name}/algo-{host}-{start}")
        clients.logs.put_log_events(logGroupName=group, logStreamName=f"{name}/algo-{host}-{start}", logEvents=[
            {"timestamp": t + start - 1767225000 + i, "message": x} for i, x in enumerate(texts)])

    for host in (1, 2):
        stream(host, 1767225100, f"host {host} try 0")
        stream(host, 1767225200, f"host {host} try 1")
    be = SageMakerBackend(CFG, clients=clients, pace=Pace(first=0.0, most=0.0, status=1e9))
    assert [ln.text for ln in be.logs(name)] == ["host 1 try 1", "host 2 try 1"]
    assert [ln.text for ln in be.logs(name, rank=1)] == ["host 2 try 1"]
    assert [ln.text for ln in be.logs(name, previous=True)] == ["host 1 try 0", "host 2 try 0"]
    # -f: a start that comes while following (the next spot interruption) is followed into
    class Restarting:  # CloudWatch Logs where host 1 starts again after the first listing of streams
        listed = 0

        def describe_log_streams(self, **kw):
            self.listed += 1
            if self.listed == 2:
                stream(1, 1767225300, "host 1 try 2")
            return clients.logs.describe_log_streams(**kw)

        def __getattr__(self, attr):
            return getattr(clients.logs, attr)

    be = SageMakerBackend(CFG, clients=Clients(clients.sagemaker, clients.s3, Restarting()),
                          pace=Pace(first=0.0, most=0.0, status=0.0), sleep=lambda _s: None)
    assert [ln.text for ln in be.logs(name, rank=0, follow=True)] == ["host 1 try 1", "host 1 try 2"]

from test_sagemaker_backend import moto_url  # noqa: E402,F401  (a moto server for this module)


@pytest.mark.slow  # a browser and a --local job: about 15 s
def test_the_dashboards_jobs_page_says_why_the_aws_jobs_are_missing(tmp_path, monkeypatch):
    from test_dashboard_browser import CHROMEDRIVER, CHROMIUM, By, WebDriverWait, chrome, text_of
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("chromium and chromedriver are not installed (scripts/setup.sh installs them)")
    from server_util import ServerProcess
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    home, code = tmp_path / "home", tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    env = _no_aws_env(home, tmp_path)
    _dtrain(env, "config", "backend", "sagemaker")
    _dtrain(env, "config", "sagemaker", "--role", "arn:aws:iam::123456789012:role/R", "--bucket", "my-training-bucket")
    assert _dtrain(env, "submit", "here", "--backend", "sagemaker", "--local", "--", "python", "train.py",
                   cwd=code).returncode == 0
    _wait(env, "here")
    server = ServerProcess(home, env=env, cwd=code)
    try:
        with chrome() as browser:
            browser.get(server.url + "/#/jobs")
            WebDriverWait(browser, 60, poll_frequency=0.2).until(lambda d: text_of(d, "#jobs-table tr[data-job='here']"))
            warning = browser.find_element(By.ID, "jobs-warning").text
            assert warning.startswith("SageMaker jobs on AWS") and "not listed" in warning and "credentials" in warning
            assert '299 dtrain' not in warning and '\\"' not in warning  # the header's words, unwrapped
    finally:
        server.stop()
