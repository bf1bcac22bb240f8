"""`--backend sagemaker --local`: the SageMaker contract on this machine, driven through the CLI.

The CIFAR10 workload runs unchanged on two local hosts (algo-1, algo-2, each in its own mount
namespace, torchrun across them) and ends with the weights plain torchrun gives; its model comes
back through model.tar.gz; a job stopped mid-way and rerun resumes from /opt/ml/checkpoints.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch

from conftest import DTRAIN, Dtrain
from test_cifar10 import PER_RANK_BATCH, SEED, STEPS, TRAIN_ARGS, _check, _env, _free_port, _popen, _weights, data_dir, reference  # noqa: F401,E501

from dtrain.backends.base import Backend

REPO = Path(__file__).resolve().parents[1]
CIFAR = ["python", "-m", "dtrain.workloads.cifar10", "train", "--batch-size", str(PER_RANK_BATCH)]


@pytest.fixture
def sm(home) -> Dtrain:
    d = Dtrain(home, env=_env())  # no launcher variables of the test runner leak into the job
    d("config", "backend", "sagemaker")
    yield d
    for job in json.loads(d("list", "--json", check=False).stdout or "[]"):
        if job["status"] in ("Pending", "Running"):
            d("delete", job["name"], check=False)


@pytest.fixture(scope="module")
def code_dir(tmp_path_factory) -> Path:
    """The uploaded code: an empty folder, as the workload comes from dtrain's own environment.
    Not the checkout: after `make demo` it also holds demo-out/ (gigabytes), which is no code."""
    return tmp_path_factory.mktemp("code")


def submit(d: Dtrain, name: str, data: Path, code: Path, args: list[str], *extra: str) -> None:
    d("submit-dist", name, "--backend", "sagemaker", "--local", "--processes", "2", "--channel",
      f"training=file://{data}", "--source-dir", str(code), "-e", "OMP_NUM_THREADS=1", *extra, "--", *CIFAR, *args,
      cwd=str(REPO))


def test_wait_and_logs_hooks_are_the_base_ones():
    from dtrain.backends.sagemaker.backend import SageMakerBackend
    for verb in ("wait", "logs", "submit", "get", "list", "delete", "artifacts"):
        assert getattr(SageMakerBackend, verb) is getattr(Backend, verb)


@pytest.mark.slow
def test_cifar10_on_two_local_hosts_matches_torchrun(sm, reference, data_dir, code_dir, tmp_path):  # noqa: F811
    expected, _, _ = reference
    submit(sm, "cifar", data_dir, code_dir, TRAIN_ARGS)
    assert sm("wait", "cifar", "--timeout", "300", check=False).returncode == 0, sm("logs", "cifar").stdout
    info = sm.json("describe", "job", "cifar")
    assert info["extra"]["instance_count"] == 2 and [p["node"] for p in info["processes"]] == ["algo-1", "algo-2"]
    logs = sm("logs", "cifar", "--rank", "0").stdout
    assert "runtime=torchrun world_size=2" in logs and "FINAL test_accuracy=" in logs
    assert "FINAL" not in sm("logs", "cifar", "--rank", "1").stdout  # host algo-2's own stream
    job = sm.home / "sagemaker-local" / "jobs" / "cifar" / "hosts"
    config = json.loads((job / "algo-2" / "input" / "config" / "resourceconfig.json").read_text())
    assert config["current_host"] == "algo-2" and config["hosts"] == ["algo-1", "algo-2"]
    hps = json.loads((job / "algo-1" / "input" / "config" / "hyperparameters.json").read_text())
    assert json.loads(hps["sagemaker_torch_distributed_enabled"]) is True and json.loads(hps["seed"]) == str(SEED)
    assert (job / "algo-1" / "model" / "model.pth").is_file()  # rank 0 saved into /opt/ml/model
    for host in ("algo-1", "algo-2"):  # each host's temporary files stay with the job, as a container's /tmp
        assert list((job.parent / "tmp" / host).glob("torchelastic_*")), host
    sm("artifacts", "cifar", "--to", str(tmp_path / "model"))
    got = _weights(tmp_path / "model")
    assert got.keys() == expected.keys()
    # the per-step metrics are output data ($SM_OUTPUT_DATA_DIR -> output.tar.gz), not part of the model
    assert not (tmp_path / "model" / "metrics.jsonl").exists()
    [output] = (sm.home / "sagemaker-local" / "s3").rglob("cifar/output/output.tar.gz")
    with tarfile.open(output) as tar:
        rows = [json.loads(line) for line in tar.extractfile("metrics.jsonl").read().splitlines()]
    assert [r["step"] for r in rows[:-1]] == list(range(1, STEPS + 1)) and "test_accuracy" in rows[-1]
    for k in expected:
        assert torch.equal(got[k], expected[k]), k


def _torchrun(data: Path, out: Path, steps: int, extra: tuple[str, ...] = ()) -> dict:
    args = [a if a != "12" else str(steps) for a in TRAIN_ARGS] + list(extra)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_free_port()),
           "-m", "dtrain.workloads.cifar10", "train", "--data-dir", str(data), "--model-dir", str(out),
           "--batch-size", str(PER_RANK_BATCH), *args]
    _check([_popen(cmd, _env())])
    return _weights(out)


@pytest.mark.slow
def test_job_stopped_midway_resumes_from_checkpoints(sm, data_dir, code_dir, tmp_path):  # noqa: F811
    ckpt_uri = "s3://dtrain-local/shared/cifar-ckpt"
    ckpts = sm.home / "sagemaker-local" / "s3" / "dtrain-local" / "shared" / "cifar-ckpt"
    long_run = [a if a != "12" else "100000" for a in TRAIN_ARGS] + ["--epochs", "1000", "--checkpoint-every", "4"]
    submit(sm, "first", data_dir, code_dir, long_run, "--checkpoint-s3-uri", ckpt_uri)
    deadline = time.monotonic() + 240
    while not list(ckpts.glob("ckpt-*.pt")) and time.monotonic() < deadline:
        time.sleep(0.1)
    sm("delete", "first")
    assert sm("wait", "first", "--timeout", "60", check=False).stdout.startswith("first: Deleted")
    done = max(int(p.stem[5:]) for p in ckpts.glob("ckpt-*.pt"))
    time.sleep(2)
    assert max(int(p.stem[5:]) for p in ckpts.glob("ckpt-*.pt")) == done  # no process of the job lives on
    steps = done + 4  # stopped after step `done`; the rerun trains 4 more
    # as many epochs as the first run had: a loaded machine may see the first checkpoint only past the
    # default 2 epochs' steps (the rerun then ended where it resumed: CI saw "steps=79" for 83)
    epochs = ("--epochs", "1000")
    args = [a if a != "12" else str(steps) for a in TRAIN_ARGS] + ["--checkpoint-every", "4", *epochs]
    submit(sm, "second", data_dir, code_dir, args, "--checkpoint-s3-uri", ckpt_uri)
    assert sm("wait", "second", "--timeout", "300", check=False).returncode == 0, sm("logs", "second").stdout
    logs = sm("logs", "second", "--rank", "0").stdout
    assert re.search(rf"resumed from step {done} \(/opt/ml/checkpoints/ckpt-{done}\.pt\)", logs), logs
    assert f"steps={steps} " in logs
    sm("artifacts", "second", "--to", str(tmp_path / "resumed"))
    expected = _torchrun(data_dir, tmp_path / "straight", steps, epochs)
    got = _weights(tmp_path / "resumed")
    for k in expected:
        assert torch.equal(got[k], expected[k]), k


# ---------------------------------------------------------------- bad input: one line, exit 2, nothing stored


def _state(home: Path) -> tuple:
    cfg = home / "config.yaml"
    files = sorted(str(p.relative_to(home)) for p in home.rglob("*")) if home.exists() else []
    return cfg.read_text() if cfg.exists() else None, files


@pytest.mark.parametrize("args, message", [
    (["submit", "x", "--backend", "sagemaker", "--", "python", "t.py"], "dtrain config sagemaker --role"),
    (["submit", "x", "--local", "--instance-type", "p3.2xlarge", "--", "python", "t.py"], "start with 'ml.'"),
    (["submit", "x", "--local", "--spot", "--max-runtime", "3600", "--max-wait", "60", "--", "python", "t.py"],
     "--max-wait 60 is below --max-runtime 3600"),
    (["submit", "x", "--local", "--max-runtime", "99999999999", "--", "python", "t.py"], "--max-runtime"),
    (["submit", "x", "--backend", "local", "--spot", "--", "python", "t.py"], "need backend sagemaker, not 'local': use --backend sagemaker"),
    (["config", "sagemaker", "--role", "admin"], "--role 'admin'"),
    (["config", "sagemaker", "--subnets", "subnet-0abc1234"], "both --subnets and --security-groups"),
    (["artifacts", "nope", "--to", "/tmp/x"], "not found"),
])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(sm, args, message):
    before = _state(sm.home)
    r = sm(*args, check=False)
    assert r.returncode == 2, r
    assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert _state(sm.home) == before


def test_efs_channel_without_vpc_is_refused(sm, tmp_path):
    sm("config", "sagemaker", "--role", "arn:aws:iam::123456789012:role/R", "--bucket", "my-bucket")
    before = _state(sm.home)
    r = sm("submit", "x", "--backend", "sagemaker", "--channel", "d=efs://fs-0123456789abcdef0/data", "--",
           "python", "t.py", check=False, cwd=str(tmp_path))
    assert r.returncode == 2 and "--subnets subnet-... --security-groups sg-..." in r.stderr
    assert _state(sm.home) == before


def test_aws_error_code_reaches_the_cli(sm, tmp_path):
    """No bucket on a real S3 API (moto's server): the CLI says NoSuchBucket, exits non-zero, stores nothing."""
    from moto.server import ThreadedMotoServer
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        sm("config", "sagemaker", "--role", "arn:aws:iam::123456789012:role/R", "--bucket", "no-such-bucket")
        (tmp_path / "t.py").write_text("")
        before = _state(sm.home)
        env = {**sm.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing"}
        r = subprocess.run([DTRAIN, "submit", "x", "--backend", "sagemaker", "--", "python", "t.py"], env=env,
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "NoSuchBucket" in r.stderr and r.stderr.count("\n") == 1, r.stderr
        assert _state(sm.home) == before
    finally:
        server.stop()


# ---------------------------------------------------------------- the SDK door and the local backend's artifacts

SCRIPT = """import json, os, sys
print("hps", json.loads(os.environ["SM_HPS"]), "args", sys.argv[1:], flush=True)
print("data", sorted(os.listdir(os.environ["SM_CHANNEL_TRAINING"])), flush=True)
open(os.path.join(os.environ["SM_MODEL_DIR"], "model.txt"), "w").write(os.environ["SM_CURRENT_HOST"])
"""


@pytest.mark.slow
def test_sdk_client_runs_a_local_job_and_follows_its_logs(home, tmp_path, monkeypatch):
    import dtrain
    from dtrain.spec_sagemaker import SageMakerOptions
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SCRIPT)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.bin").write_bytes(b"x")
    for k in [k for k in __import__("os").environ if k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_"))]:
        monkeypatch.delenv(k)
    client = dtrain.Client(home=home, backend="sagemaker")
    spec = dtrain.JobSpec(name="sdk", command=("python", "train.py", "--epochs", "2"), backend="sagemaker",
                          sagemaker=SageMakerOptions(local=True, source_dir=str(tmp_path / "code"),
                                                     channels=(f"training=file://{tmp_path / 'data'}",)))
    client.submit(spec)
    lines = [ln.text for ln in client.logs("sdk", follow=True)]  # returns once the job has ended
    assert "hps {'epochs': '2'} args ['--epochs', '2']" in lines and "data ['a.bin']" in lines
    info = client.wait("sdk", timeout=60)
    assert info.status.value == "Succeeded" and info.spec == spec
    assert [e.status for e in info.events] == ["Created", "Starting", "Downloading", "Training", "Uploading",
                                               "Completed"]
    out = client.artifacts("sdk", to=tmp_path / "out")
    assert (out / "model.txt").read_text() == "algo-1"
    assert [j.name for j in client.list()] == ["sdk"]
    with pytest.raises(dtrain.DtrainError, match="exists"):
        client.artifacts("sdk", to=tmp_path / "out")


def test_failed_local_job_says_which_host_and_why(home, tmp_path):
    import dtrain
    from dtrain.spec_sagemaker import SageMakerOptions
    (tmp_path / "train.py").write_text("import sys\nprint('bad input file', file=sys.stderr)\nsys.exit(3)\n")
    client = dtrain.Client(home=home, backend="sagemaker")
    client.submit(dtrain.JobSpec(name="boom", command=("python", "train.py"), backend="sagemaker",
                                 sagemaker=SageMakerOptions(local=True, source_dir=str(tmp_path))))
    info = client.wait("boom", timeout=60)
    assert info.status.value == "Failed"
    assert info.message.startswith('AlgorithmError: ExecuteUserScriptError: ExitCode 3 ErrorMessage "bad input file"')
    assert info.message.endswith(", exit code: 1")  # SageMaker's words: the toolkit's container exits 1
    assert info.events[-1].message == "Training job failed: host algo-1 exited with code 3"


def test_local_backend_artifacts_copy_the_model_folder(dt: Dtrain, tmp_path):
    code = "import os, pathlib; d = pathlib.Path(os.environ['DTRAIN_MODEL_DIR']); d.mkdir(); (d / 'w.bin').write_text('7')"
    dt("submit", "loc", "--", "python", "-c", code)
    assert dt.wait_for("loc", {"Succeeded", "Failed"})["status"] == "Succeeded"
    dt("artifacts", "loc", "--to", str(tmp_path / "m"))
    assert (tmp_path / "m" / "w.bin").read_text() == "7"
    r = dt("artifacts", "loc", "--to", str(tmp_path / "m"), check=False)
    assert r.returncode == 2 and "pick a new --to folder" in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("launcher, hosts", [
    ("mpi", ["algo-1"] * 4),  # mpirun starts every rank from algo-1; the other host waits
    ("torchrun", ["algo-1", "algo-1", "algo-2", "algo-2"]),  # torchrun on each host, 2 processes per host
])
def test_local_distributed_job_starts_its_ranks_where_the_toolkit_would(home, tmp_path, launcher, hosts):
    """4 processes on 2 instances: the request says 2 per host, and the toolkit's launch starts them so."""
    import shutil as sh

    import dtrain
    from dtrain.spec_sagemaker import SageMakerOptions
    if launcher == "mpi" and not sh.which("mpirun"):
        pytest.skip("OpenMPI is not installed (make setup installs it)")
    (tmp_path / "train.py").write_text(
        "import os, sys\nrank = os.environ.get('RANK') or os.environ['OMPI_COMM_WORLD_RANK']\n"
        "size = os.environ.get('WORLD_SIZE') or os.environ['OMPI_COMM_WORLD_SIZE']\n"
        "sys.stdout.write('rank %s of %s on %s\\n' % (rank, size, os.environ['SM_CURRENT_HOST']))\n"
        # the toolkit's mpirun exports no MASTER_ADDR: dtrain's training code takes the first host
        "from dtrain.training.dist import detect_runtime\n"
        "sys.stdout.write('rank %s meets at %s\\n' % (rank, detect_runtime()['master_addr']))\n")
    client = dtrain.Client(home=home, backend="sagemaker")
    client.submit(dtrain.JobSpec(name=launcher, command=("python", "train.py"), processes=4, launcher=launcher,
                                 backend="sagemaker",
                                 sagemaker=SageMakerOptions(local=True, instance_count=2, source_dir=str(tmp_path))))
    info = client.wait(launcher, timeout=120)
    assert info.status.value == "Succeeded", info.message
    assert [(p.rank, p.node) for p in info.processes] == [(0, "algo-1"), (1, "algo-1"), (2, "algo-2"), (3, "algo-2")]
    text = "\n".join(ln.text for ln in client.logs(launcher))
    for rank, host in enumerate(hosts):
        assert f"rank {rank} of 4 on {host}" in text and f"rank {rank} meets at algo-1" in text
    if launcher == "mpi":
        assert [ln.text for ln in client.logs(launcher, rank=1)] == ["algo-2: MPI worker host, ranks run from algo-1"]
