"""A SageMaker user's second round: a hyperparameter in the toolkit's own namespace, an FSx channel
without its mount name, a model.tar.gz whose download breaks off or cannot fit on the disk, and the
CIFAR10 workload given the channels SageMaker examples use (`train`, `test`, `validation`).

AWS's side is boto3 against moto's server and against a TCP server that answers GetObject with a
body cut short (or a Content-Length no disk holds); the workload runs as the toolkit starts it,
with the SM_* variables it sets."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading

import pytest

boto3 = pytest.importorskip("boto3")
from botocore.config import Config  # noqa: E402

from conftest import Dtrain  # noqa: E402
from test_cifar10 import TRAIN, _env  # noqa: E402
from test_sagemaker_backend import moto_url  # noqa: E402,F401  (a moto server for this module)

from dtrain.backends.sagemaker import render  # noqa: E402
from dtrain.backends.sagemaker.backend import Clients, SageMakerBackend  # noqa: E402
from dtrain.backends.sagemaker.config import SageMakerConfig  # noqa: E402
from dtrain.errors import BackendError, QuotaError, SpecError  # noqa: E402
from dtrain.spec import JobSpec  # noqa: E402
from dtrain.spec_sagemaker import Channel, SageMakerOptions, parse_hyperparameters  # noqa: E402
from dtrain.workloads.cifar10.data import write_synthetic  # noqa: E402

CFG = SageMakerConfig(role="arn:aws:iam::123456789012:role/SageMakerRole", bucket="dtrain-leftovers2",
                      subnets=("subnet-0abc1234",), security_groups=("sg-0abc1234",))


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text and "Traceback" not in text, text
    return text


def _session():
    return boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                 region_name="us-east-1")


# ---------------------------------------------------------------- what the request carries


@pytest.mark.parametrize("hp", ["sagemaker_torch_distributed_enabled=true", "sagemaker_program=other.py",
                                "sagemaker_anything=1"])
def test_a_hyperparameter_in_the_toolkits_namespace_is_refused(hp):
    """The toolkit reads sagemaker_* itself (the first turns a one-process job into torchrun) and never
    passes one to the script: accepting it changed the launch or lost the value without a word."""
    with pytest.raises(SpecError) as err:
        parse_hyperparameters([hp])
    assert "belong to the SageMaker training toolkit" in _one_line(err.value)
    with pytest.raises(SpecError):
        SageMakerOptions(hyperparameters=dict([hp.split("=", 1)]))


def test_the_cli_refuses_a_toolkit_hyperparameter_before_anything_is_sent(home, tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    d = Dtrain(home)
    r = d("submit", "toolkit-hp", "--backend", "sagemaker", "--local", "--hp",
          "sagemaker_torch_distributed_enabled=true", "--dry-run", "--", "python", "train.py", cwd=str(tmp_path),
          check=False)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "sagemaker_torch_distributed_enabled" in r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("uri", ["fsx://fs-0123456789abcdef0", "fsx://fs-0123456789abcdef0/",
                                 "fsx://fs-0123456789abcdef0//", "fsx://fs-0123456789abcdef0/toolongname/x"])
def test_an_fsx_channel_names_its_mount_name(uri):
    """SageMaker's DirectoryPath on FSx for Lustre is /MOUNTNAME/PATH: "/" was sent as is. ("//data" is
    "/data" as a mount reads it, mount name "data": spec_sagemaker.Channel._file_system_uri.)"""
    with pytest.raises(SpecError) as err:
        Channel(name="training", uri=uri)
    assert "mount name" in _one_line(err.value)


def test_an_fsx_channel_with_its_mount_name_is_sent_as_sagemaker_reads_it():
    spec = JobSpec(name="fsx-ok", command=("python", "train.py"), backend="sagemaker",
                   sagemaker=SageMakerOptions(channels=("training=fsx://fs-0123456789abcdef0/abcdefgh/cifar10",)))
    [ch] = render.training_job_request(spec, CFG)["InputDataConfig"]
    assert ch["DataSource"]["FileSystemDataSource"]["DirectoryPath"] == "/abcdefgh/cifar10"
    assert ch["DataSource"]["FileSystemDataSource"]["FileSystemType"] == "FSxLustre"
    assert Channel(name="training", uri="fsx://fs-0123456789abcdef0//data").uri == "fsx://fs-0123456789abcdef0/data"


# ---------------------------------------------------------------- model.tar.gz that will not come


@pytest.fixture
def s3_answering(request):
    """An S3 endpoint whose every GetObject is 200 with `head` Content-Length and `body` bytes, then a
    hang-up: a connection that breaks midway through a large download."""
    length, sent = request.param
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\nContent-Type: application/x-gzip"
                             f"\r\n\r\n".encode() + b"\x1f" * sent)

    threading.Thread(target=serve, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    yield _session().client("s3", endpoint_url=url, config=Config(retries={"max_attempts": 1}))
    listener.close()


def _ended_job(moto_url, name: str) -> Clients:  # noqa: F811
    """A job moto has completed (it names its model.tar.gz), with moto's SageMaker and CloudWatch."""
    s = _session()
    sm, logs = s.client("sagemaker", endpoint_url=moto_url), s.client("logs", endpoint_url=moto_url)
    sm.create_training_job(**render.training_job_request(
        JobSpec(name=name, command=("python", "train.py"), backend="sagemaker"), CFG))
    return Clients(sm, None, logs)


@pytest.mark.parametrize("s3_answering", [(10_000_000, 100_000)], indirect=True)
def test_a_model_download_that_breaks_off_is_one_line_and_leaves_nothing(moto_url, s3_answering, tmp_path):  # noqa: F811
    """botocore raises a cut body from read(), after get_object returned: that was a traceback (and the
    job's stored spec, read the same way, was one too)."""
    c = _ended_job(moto_url, "cut-download")
    be = SageMakerBackend(CFG, clients=Clients(c.sagemaker, s3_answering, c.logs))
    with pytest.raises(BackendError) as err:
        be.artifacts("cut-download", to=tmp_path / "model")
    line = _one_line(err.value)
    assert "model.tar.gz broke off after 100000 of 10000000 bytes" in line and "run the command again" in line
    assert list(tmp_path.iterdir()) == []  # no partial archive, no target folder


@pytest.mark.parametrize("s3_answering", [(2**62, 0)], indirect=True)
def test_a_model_larger_than_the_free_disk_is_refused_before_the_download(moto_url, s3_answering, tmp_path):  # noqa: F811
    """A model.tar.gz the disk cannot hold was downloaded until the disk was full (and the stored spec,
    read first, was read whole into memory: a MemoryError for this Content-Length)."""
    assert shutil.disk_usage(tmp_path).free < 2**62
    c = _ended_job(moto_url, "huge-model")
    be = SageMakerBackend(CFG, clients=Clients(c.sagemaker, s3_answering, c.logs))
    with pytest.raises(QuotaError) as err:
        be.artifacts("huge-model", to=tmp_path / "model")
    assert f"is {2**62} bytes and {tmp_path} has" in _one_line(err.value)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- the channels CIFAR10 is given


@pytest.fixture(scope="module")
def split_channels(tmp_path_factory):
    """The train batches in one folder and the test batch in another, as two channels hold them."""
    root = tmp_path_factory.mktemp("channels")
    folder = write_synthetic(root / "train", n_train=40, n_test=10, seed=3)
    (root / "test" / folder.name).mkdir(parents=True)
    (folder / "test_batch").rename(root / "test" / folder.name / "test_batch")
    return root


def _toolkit_run(tmp_path, channels: dict, *args: str) -> subprocess.CompletedProcess:
    """The workload as the training toolkit starts it: its SM_* variables name the channels."""
    import json
    env = _env(SM_CHANNELS=json.dumps(sorted(channels)),
               **{f"SM_CHANNEL_{name.upper()}": str(path) for name, path in channels.items()})
    return subprocess.run(TRAIN + ["--max-steps", "2", "--log-interval", "0", "--model-dir", str(tmp_path / "m"),
                                   *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_cifar10_scores_the_test_channel(split_channels, tmp_path):
    """`{"training": ..., "test": ...}`: the test channel was ignored, and a training channel without
    test_batch failed with 'copy or unpack the whole dataset again'."""
    r = _toolkit_run(tmp_path, {"training": split_channels / "train", "test": split_channels / "test",
                                "validation": split_channels / "test"})
    assert r.returncode == 0, r.stderr
    assert "FINAL test_accuracy=" in r.stdout
    assert "channel validation not read: this workload reads training and test" in r.stdout
    r = _toolkit_run(tmp_path, {"training": split_channels / "train"}, "--test-dir", str(split_channels / "nope"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "nope does not exist" in r.stderr


def test_cifar10_without_a_training_channel_names_the_channels_it_was_given(split_channels, tmp_path):
    r = _toolkit_run(tmp_path, {"train": split_channels / "train", "test": split_channels / "test"})
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "no 'training' channel among this job's SageMaker channels (test, train)" in r.stderr
    assert not (tmp_path / "m").exists()


# ---------------------------------------------------------------- what a --local job's script finds

# Lines of SageMaker's examples and the toolkit's docs: the platform's TRAINING_JOB_NAME, the toolkit's
# Environment as SM_TRAINING_ENV (every property), and the SM_* variables it exports for them.
ENV_SCRIPT = """import json, os
env = json.loads(os.environ["SM_TRAINING_ENV"])
print("job", os.environ["TRAINING_JOB_NAME"], os.environ["TRAINING_JOB_ARN"].endswith("training-job/envs"))
print("env", env["job_name"], env["num_gpus"], env["output_data_dir"], env["is_master"], env["master_hostname"])
print("channels", env["channel_input_dirs"], env["hyperparameters"])
print("framework", json.loads(os.environ["SM_FRAMEWORK_PARAMS"]), os.environ["SM_OUTPUT_INTERMEDIATE_DIR"])
print("groups", os.environ["SM_CURRENT_INSTANCE_GROUP"], json.loads(os.environ["SM_CURRENT_INSTANCE_GROUP_HOSTS"]))
"""


def test_a_local_job_finds_the_variables_sagemaker_and_its_toolkit_set(home, tmp_path):
    import dtrain
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(ENV_SCRIPT)
    (tmp_path / "data").mkdir()
    client = dtrain.Client(home=home, backend="sagemaker")
    client.submit(JobSpec(name="envs", command=("python", "train.py", "--epochs", "2"), backend="sagemaker",
                          sagemaker=SageMakerOptions(local=True, source_dir=str(tmp_path / "code"),
                                                     channels=(f"training=file://{tmp_path / 'data'}",))))
    info = client.wait("envs", timeout=60)
    text = [ln.text for ln in client.logs("envs")]
    assert info.status.value == "Succeeded", (info.message, text)
    assert "job envs True" in text
    assert "env envs 0 /opt/ml/output/data True algo-1" in text
    assert "channels {'training': '/opt/ml/input/data/training'} {'epochs': '2'}" in text
    assert "framework {} /opt/ml/output/intermediate" in text
    assert "groups homogeneousCluster ['algo-1']" in text


# ---------------------------------------------------------------- logs of a job that never logged


def test_logs_of_a_job_that_failed_before_any_host_logged_say_why(home, tmp_path):
    """A job that fails while SageMaker fetches its data never starts a container, so it has no log
    stream: `dtrain logs` printed nothing and exited 0, with or without -f."""
    import dtrain
    from dtrain.errors import NotFoundError
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('never runs')\n")
    client = dtrain.Client(home=home, backend="sagemaker")
    spec = JobSpec(name="no-data", command=("python", "train.py"), backend="sagemaker",
                   sagemaker=SageMakerOptions(local=True, source_dir=str(tmp_path / "code"),
                                              channels=("training=s3://dtrain-local/gone",)))
    # submit refuses a channel that is not there: the job is created as a caller of the API would (the data
    # gone between a submit and the download)
    backend = client.backend("sagemaker")
    backend.local.sagemaker.create_training_job(**render.training_job_request(spec, backend.config.for_local()))
    assert client.wait("no-data", timeout=60).status.value == "Failed"
    for kw in ({}, {"follow": True}, {"rank": 0}):
        with pytest.raises(NotFoundError) as err:
            list(client.logs("no-data", **kw))
        line = _one_line(err.value)
        assert line.startswith("job 'no-data' ended Failed before any host logged a line: ClientError: channel "
                               "training: "), line
        assert "does not exist on this machine; see dtrain --backend sagemaker describe job no-data" in line
    # as printed: the default backend (local) has no such job; 'dtrain describe job no-data' said not found
    said = line.rsplit("; see ", 1)[1].split()
    assert Dtrain(home).json(*said[1:])["status"] == "Failed"


# ---------------------------------------------------------------- code the toolkit's torchrun refuses


def test_a_torchrun_job_whose_code_has_setup_py_is_refused_before_any_upload(home, tmp_path):
    """The toolkit takes a folder holding setup.py for a Python package (its _entry_point_type.get), and
    TorchDistributedRunner raises ClientError for one: the job failed on AWS after its instances started,
    while --local ran it."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(name='mine')\n")
    d = Dtrain(home)
    r = d("submit-dist", "pkg", "--backend", "sagemaker", "--local", "--processes", "2", "--", "python", "train.py",
          cwd=str(tmp_path), check=False)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "setup.py: SageMaker's training toolkit runs a code folder holding setup.py as a Python package" in r.stderr
    assert not (home / "sagemaker-local" / "jobs" / "pkg").exists()
    r = d("submit", "pkg-one", "--backend", "sagemaker", "--local", "--dry-run", "--", "python", "train.py",
          cwd=str(tmp_path), check=False)
    assert r.returncode == 0, r.stderr  # one process: the toolkit runs the package with python -m


# ---------------------------------------------------------------- the local S3 folder and links


@pytest.mark.parametrize("where", ["output/model.tar.gz", "output"])
def test_a_link_a_job_left_in_the_local_s3_is_never_written_through(home, tmp_path, where):
    """A checkpoint URI is any S3 prefix, so a job's /opt/ml/checkpoints may hold its own output prefix
    (or another job's): a link it leaves at output/model.tar.gz, or at output/, made the runner write the
    model archive wherever the link pointed."""
    import dtrain
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "model.tar.gz").write_text("precious\n")
    target = victim / "model.tar.gz" if where == "output/model.tar.gz" else victim
    script = (f"import os\nos.makedirs('/opt/ml/checkpoints/output', exist_ok=True)\n" if where != "output" else
              "import os\n") + f"os.symlink({str(target)!r}, '/opt/ml/checkpoints/{where}')\n"
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(script)
    client = dtrain.Client(home=home, backend="sagemaker")
    client.submit(JobSpec(name="linky", command=("python", "train.py"), backend="sagemaker",
                          sagemaker=SageMakerOptions(local=True, source_dir=str(tmp_path / "code"),
                                                     checkpoint_uri="s3://dtrain-local/dtrain/linky")))
    info = client.wait("linky", timeout=60)
    assert (victim / "model.tar.gz").read_text() == "precious\n" and sorted(victim.iterdir()) == [victim / "model.tar.gz"]
    assert info.status.value == "Failed" and "is a link" in _one_line(info.message), info.message
