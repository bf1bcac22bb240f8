"""A SageMaker user's third round with `--local`: two jobs given one checkpoint URI (the second one refused
while the first runs, by a lock file both take, no flock of a folder: NFS takes none), and the channel's
ContentType in inputdataconfig.json, and the checkpoints seen at CheckpointConfig's LocalPath (checked),
as SageMaker does both. The runner prepares the hosts' folders from a CreateTrainingJob request in a job folder
of the local SageMaker root, as LocalSageMaker.create_training_job leaves it."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from dtrain.backends.sagemaker import contract
from dtrain.backends.sagemaker.checkpoint_lock import CheckpointsInUse
from dtrain.backends.sagemaker.local import LocalAWSError, LocalSageMaker
from dtrain.backends.sagemaker.runner import Runner


def _job(root: Path, name: str, *, channels: list[dict] = (), checkpoint: dict | None = None,
         program: bytes = b"pass\n") -> dict:
    """A request for job `name` under the local root `root`: its code (train.py: `program`) in the local S3,
    one host."""
    code = root / "s3" / "bucket" / "code" / "sourcedir.tar.gz"
    code.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(code, "w:gz") as tar:
        info = tarfile.TarInfo("train.py")
        info.size = len(program)
        tar.addfile(info, io.BytesIO(program))
    req = {"TrainingJobName": name,
           "HyperParameters": {"sagemaker_submit_directory": json.dumps("s3://bucket/code/sourcedir.tar.gz"),
                               "sagemaker_program": json.dumps("train.py")},
           "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
           "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
           "StoppingCondition": {"MaxRuntimeInSeconds": 600},
           "CheckpointConfig": checkpoint or {"S3Uri": f"s3://bucket/{name}/checkpoints"}}
    if channels:
        req["InputDataConfig"] = list(channels)
    d = root / "jobs" / name
    (d / "logs").mkdir(parents=True, exist_ok=True)
    (d / "request.json").write_text(json.dumps(req))
    return req


def test_inputdataconfig_names_a_channels_content_type(tmp_path):
    """inputdataconfig.json had no ContentType, where SageMaker writes the channel's from the request."""
    data = tmp_path / "data"
    data.mkdir()
    uri = {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"file://{data}"}}
    _job(tmp_path, "j1", channels=[{"ChannelName": "train", "DataSource": uri, "ContentType": "text/csv"},
                                   {"ChannelName": "test", "DataSource": uri}])
    hosts = Runner(tmp_path, "j1").prepare()
    written = json.loads((hosts["algo-1"] / "input" / "config" / "inputdataconfig.json").read_text())
    assert written == {"train": {"ContentType": "text/csv", "TrainingInputMode": "File",
                                 "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"},
                       "test": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated",
                                "RecordWrapperType": "None"}}


# The first job's runner, in a process of its own (a POSIX lock is the process's): it prepares the job, says
# so, and holds what it took until its stdin closes.
HOLDER = ("import sys; from pathlib import Path; from dtrain.backends.sagemaker.runner import Runner; "
          "Runner(Path(sys.argv[1]), sys.argv[2]).prepare(); print('ready', flush=True); sys.stdin.read()")


@contextlib.contextmanager
def _holding(root: Path, name: str):
    """Job `name`'s runner prepared in a process of its own (HOLDER) while the block runs; it ends cleanly after."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(root), name], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "ready\n"
        yield
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0


@pytest.mark.parametrize("where", ["s3", "file"])
def test_a_second_local_job_given_a_running_jobs_checkpoint_uri_is_refused(tmp_path, where):
    """Each job locked a file of its own host's /opt/ml where the checkpoint folder took no flock (NFS), so two
    --local jobs given one checkpoint URI both ran, writing the same checkpoints."""
    uri = "s3://bucket/shared/ckpt" if where == "s3" else f"file://{tmp_path / 'nfs' / 'ckpt'}"
    for name in ("j1", "j2"):
        _job(tmp_path, name, checkpoint={"S3Uri": uri})
    with _holding(tmp_path, "j1"):
        with pytest.raises(CheckpointsInUse) as refused:
            Runner(tmp_path, "j2").prepare()
        assert str(refused.value) == (f"the checkpoint folder of {uri} is in use by the local job j1, which writes "
                                      f"its checkpoints there: wait for it to end, or give this job another "
                                      f"--checkpoint-s3-uri")
        assert not (tmp_path / "jobs" / "j2" / "hosts").exists()  # refused before anything was laid out
    Runner(tmp_path, "j2").prepare()  # the first job has ended: its lock went with it
    assert not list((tmp_path / "s3").rglob("*.training.lock"))  # no object of the local S3


@pytest.mark.parametrize("where", ["s3", "file"])
@pytest.mark.parametrize("running", ["outer", "inner"])
def test_a_local_job_given_a_uri_nested_with_a_running_jobs_is_refused(tmp_path, where, running):
    """Only the very same URI was caught: a job given s3://bucket/shared/ckpt/j2 while another wrote
    s3://bucket/shared/ckpt (or the reverse) ran, and the two wrote into one folder. A sibling URI, or one whose
    name only begins with the other's (ckpt2), is a folder of its own."""
    base = "s3://bucket/shared/ckpt" if where == "s3" else f"file://{tmp_path / 'nfs' / 'ckpt'}"
    outer, inner = base, base + "/j2"
    first, second = (outer, inner) if running == "outer" else (inner, outer)
    _job(tmp_path, "j1", checkpoint={"S3Uri": first})
    _job(tmp_path, "j2", checkpoint={"S3Uri": second})
    _job(tmp_path, "j3", checkpoint={"S3Uri": base + "2"})
    _job(tmp_path, "j4", checkpoint={"S3Uri": outer + "/j4"})  # within the outer: only given while it is free
    with _holding(tmp_path, "j1"):
        with pytest.raises(CheckpointsInUse) as refused:
            Runner(tmp_path, "j2").prepare()
        how = (f"lies within the one the local job j1 writes its checkpoints to: wait for it to end, or give this job "
               f"a --checkpoint-s3-uri outside it") if running == "outer" else (
               f"holds the one the local job j1 writes its checkpoints to: wait for it to end, or give this job a "
               f"--checkpoint-s3-uri that does not hold it")
        assert str(refused.value) == f"the checkpoint folder of {second} {how}"
        assert not (tmp_path / "jobs" / "j2" / "hosts").exists()
        Runner(tmp_path, "j3").prepare()  # ckpt2: not within ckpt
        if running == "inner":
            Runner(tmp_path, "j4").prepare()  # a sibling of the running job's folder
    Runner(tmp_path, "j2").prepare()  # the first job has ended: its lock went with it


def test_submit_refuses_a_local_job_given_a_running_jobs_checkpoint_uri_in_one_line(home, dt, tmp_path):
    """create_training_job did not ask the lock: the second job was made, and only failed once its runner started
    (a FailureReason). Submit (the SDK's, the CLI's) refuses it at once now, nothing made, and so does
    create_training_job itself; the runner asks again (two submits at once)."""
    from dtrain import Client
    from dtrain.errors import ConflictError
    from dtrain.spec import JobSpec

    root = home / "sagemaker-local"
    uri = "s3://bucket/shared/ckpt"
    _job(root, "j1", checkpoint={"S3Uri": uri})
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("pass\n")
    line = ("the checkpoint folder of {} is in use by the local job j1, which writes its checkpoints there: wait for "
            "it to end, or give this job another --checkpoint-s3-uri")
    with _holding(root, "j1"):
        for given in (uri, uri + "/"):
            with pytest.raises(ConflictError) as refused:
                Client(home=home, backend="sagemaker").submit(JobSpec(
                    name="j2", command=["python", "train.py"], backend="sagemaker",
                    sagemaker={"local": True, "checkpoint_uri": given, "source_dir": str(tmp_path / "code")}))
            assert str(refused.value) == line.format(given)
        said = dt("submit", "j2", "--local", "--checkpoint-s3-uri", uri + "/sub", "--source-dir",
                  str(tmp_path / "code"), "--", "python", "train.py", check=False)
        assert said.returncode != 0 and said.stderr == (
            f"dtrain: error: the checkpoint folder of {uri}/sub lies within the one the local job j1 writes its "
            f"checkpoints to: wait for it to end, or give this job a --checkpoint-s3-uri outside it\n"), said.stderr
        assert not (root / "jobs" / "j2").exists()  # nothing made, not even its folder
        req = dict(_job(tmp_path / "other", "j2", checkpoint={"S3Uri": uri}), TrainingJobName="j2")
        with pytest.raises(LocalAWSError) as refused:
            LocalSageMaker(root).create_training_job(**req)
        assert refused.value.response["Error"]["Message"] == line.format(uri)
        assert not (root / "jobs" / "j2").exists()


def test_the_runner_fails_the_second_job_with_the_refusal_as_its_reason(tmp_path):
    """The refusal is the job's FailureReason, one line, as `dtrain status` shows it."""
    for name in ("j1", "j2"):
        _job(tmp_path, name, checkpoint={"S3Uri": "s3://bucket/shared/ckpt"})
    (tmp_path / "jobs" / "j2" / "state.json").write_text(json.dumps(
        {"TrainingJobStatus": "InProgress", "SecondaryStatus": "Starting", "CreationTime": 0.0,
         "transitions": [{"Status": "Starting", "StartTime": 0.0, "StatusMessage": "Preparing"}]}))
    with _holding(tmp_path, "j1"):
        run = subprocess.run([sys.executable, "-m", "dtrain.backends.sagemaker.runner", str(tmp_path), "j2"],
                             timeout=120)
        assert run.returncode == 0
    state = json.loads((tmp_path / "jobs" / "j2" / "state.json").read_text())
    assert state["TrainingJobStatus"] == "Failed"
    assert state["FailureReason"] == ("ClientError: the checkpoint folder of s3://bucket/shared/ckpt is in use by "
                                      "the local job j1, which writes its checkpoints there: wait for it to end, or "
                                      "give this job another --checkpoint-s3-uri")


def _started(root: Path, name: str) -> None:
    (root / "jobs" / name / "state.json").write_text(json.dumps(
        {"TrainingJobStatus": "InProgress", "SecondaryStatus": "Starting", "CreationTime": 0.0,
         "transitions": [{"Status": "Starting", "StartTime": 0.0, "StatusMessage": "Preparing"}]}))


# The job's program: it writes a checkpoint where its checkpointconfig.json's LocalPath says
SAVES = (b"import json, os; p = json.load(open('/opt/ml/input/config/checkpointconfig.json'))['LocalPath']; "
         b"open(os.path.join(p, 'ckpt-1.pt'), 'w').write('saved')\n")


@pytest.mark.parametrize("inside", [True, False])
def test_the_hosts_see_their_checkpoints_at_the_local_path(tmp_path, inside):
    """The checkpoints were mounted at /opt/ml/checkpoints whatever CheckpointConfig.LocalPath said: a job saving
    where its LocalPath is (SageMaker syncs that folder) saved into its host's folder, and nothing reached the
    checkpoint URI. Outside /opt/ml, a LocalPath that does not exist here is made in the sandbox only."""
    local = "/opt/ml/ckpt" if inside else str(tmp_path / "mnt" / "ckpt")
    _job(tmp_path, "j1", checkpoint={"S3Uri": "s3://bucket/ckpts/j1", "LocalPath": local}, program=SAVES)
    _started(tmp_path, "j1")
    subprocess.run([sys.executable, "-m", "dtrain.backends.sagemaker.runner", str(tmp_path), "j1"], timeout=300,
                   check=True)
    state = json.loads((tmp_path / "jobs" / "j1" / "state.json").read_text())
    assert state["TrainingJobStatus"] == "Completed", state
    assert (tmp_path / "s3" / "bucket" / "ckpts" / "j1" / "ckpt-1.pt").read_text() == "saved"
    assert not (tmp_path / "mnt").exists()  # no mount point left on this machine's disk
    assert not (tmp_path / "jobs" / "j1" / "hosts" / "algo-1" / "checkpoints").exists()  # no /opt/ml/checkpoints


@pytest.mark.parametrize("local, says", [
    ("ckpt", "is not an absolute path"),
    ("/opt/ml/checkpoints/../model", "has '.', '..' or '//' in it"),
    ("/mnt//ckpt", "has '.', '..' or '//' in it"),
    ("/opt/ml/model/ckpt", "is in /opt/ml/model, the toolkit's own folder"),
    ("/opt/ml/input", "is in /opt/ml/input, the toolkit's own folder"),
    ("/opt/ml", "holds /opt/ml, the container's own folder"),
    ("/", "holds /opt/ml, the container's own folder"),
    ("/proc/ckpt", "is in /proc, which the container's system mounts"),
    ("/mnt/c\nkpt", "has a control character"),
    ("/" + "c" * 5000, "has 5001 characters, at most 4096"),
    ("HOME", "holds the local SageMaker's folder"),
    ("/dtrain-no-such-top/ckpt", "--local makes it in a folder above it that exists on this machine, and only / "
                                 "does"),
])
def test_a_bad_local_path_is_one_line_and_no_job(tmp_path, local, says):
    if local == "HOME":  # the folder above the local SageMaker's: the hosts' code and logs would be hidden
        local = str(tmp_path.parent)
    req = _job(tmp_path / "made", "j1", checkpoint={"S3Uri": "s3://bucket/c", "LocalPath": local})
    with pytest.raises(LocalAWSError) as refused:
        LocalSageMaker(tmp_path).create_training_job(**req)
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    message = refused.value.response["Error"]["Message"]
    assert says in message and "\n" not in message, message
    assert message.endswith(f": {contract.LOCAL_PATH_FIX}"), message
    assert not (tmp_path / "jobs").exists()


@pytest.mark.parametrize("local", ["/opt/ml/checkpoints", "/opt/ml/checkpoints/", "/opt/ml/ckpt", "/mnt/ckpt",
                                   "/tmp/ckpt"])
def test_a_local_path_sagemaker_takes_is_taken(local):
    assert contract.local_path_problem(local) is None


# ---- the option at every door: the SDK's field, the CLI's flag, a job file's and the HTTP API's key ---------
BAD = "/opt/ml/model/ckpt"
WHY = f"it is in /opt/ml/model, the toolkit's own folder; {contract.LOCAL_PATH_FIX}"


def test_the_sdk_names_its_field(home):
    from dtrain import Client
    from dtrain.spec import JobSpec

    with pytest.raises(Exception) as refused:
        Client(home=home, backend="sagemaker").render(
            JobSpec(name="x", command=["true"], sagemaker={"local": True, "checkpoint_local_path": BAD}))
    assert str(refused.value) == f"invalid checkpoint_local_path {BAD!r}: {WHY}", refused.value


def test_the_cli_names_the_flag_and_a_job_file_its_option(dt, tmp_path):
    said = dt("submit", "x", "--local", "--checkpoint-local-path", BAD, "--", "true", check=False)
    assert (said.returncode, said.stderr) == (2, f"dtrain: error: invalid --checkpoint-local-path {BAD!r}: {WHY}\n")
    (tmp_path / "job.yaml").write_text(f"name: x\ncommand: [\"true\"]\nsagemaker: {{checkpoint_local_path: {BAD}}}\n")
    said = dt("submit", "-f", str(tmp_path / "job.yaml"), check=False)  # the file's option, as written there
    assert (said.returncode, said.stderr) == (2, f"dtrain: error: job file '{tmp_path / 'job.yaml'}': invalid "
                                                 f"sagemaker: checkpoint_local_path: {BAD!r}: {WHY}\n")


def test_the_request_carries_the_local_path_given():
    from dtrain.backends.sagemaker.config import SageMakerConfig
    from dtrain.backends.sagemaker.render import training_job_request
    from dtrain.spec import JobSpec

    cfg = SageMakerConfig(role="arn:aws:iam::123456789012:role/SageMakerRole", bucket="dtrain-leftovers3")
    spec = JobSpec(name="x", command=["python", "train.py"], backend="sagemaker",
                   sagemaker={"checkpoint_local_path": "/mnt/ckpt"})
    assert training_job_request(spec, cfg)["CheckpointConfig"]["LocalPath"] == "/mnt/ckpt"
    spec = JobSpec(name="x", command=["python", "train.py"])
    assert training_job_request(spec, cfg)["CheckpointConfig"]["LocalPath"] == "/opt/ml/checkpoints"


def test_the_http_api_names_the_flag(home):
    from fastapi.testclient import TestClient

    from dtrain import Client
    from dtrain.server.app import create_app

    http = TestClient(create_app(lambda: Client(home=home), sample_every=3600), base_url="http://127.0.0.1:8000")
    posted = http.post("/api/v1/jobs", json={"name": "x", "command": ["true"], "backend": "sagemaker",
                                             "sagemaker": {"local": True, "checkpoint_local_path": BAD}})
    assert posted.status_code == 422, posted.text
    assert posted.json()["error"] == f"invalid --checkpoint-local-path {BAD!r}: {WHY}"
