"""Where a SageMaker job's results go and how they come back: `--output-path` (S3OutputPath) through
the four doors, `artifacts --output-data` (output.tar.gz), and the pipeline's --param hint."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from dtrain.backends.sagemaker import render
from dtrain.backends.sagemaker.config import SageMakerConfig
from dtrain.backends.sagemaker.validate import check_request
from dtrain.errors import NotSupportedError, SpecError, Worded
from dtrain.spec import JobSpec
from dtrain.spec_sagemaker import MAX_S3_URI, SageMakerOptions

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
CFG = SageMakerConfig(role=ROLE, bucket="dtrain-test", region="us-east-1")


def spec(name: str = "outp", **sm) -> JobSpec:
    return JobSpec(name=name, command=("python", "train.py"), backend="sagemaker", sagemaker=SageMakerOptions(**sm))


# ---------------------------------------------------------------- --output-path
def test_output_path_is_the_requests_s3_output_path_and_passes_botocore():
    req = render.training_job_request(spec(output_path="s3://other-bucket/models"), CFG)
    assert req["OutputDataConfig"] == {"S3OutputPath": "s3://other-bucket/models"}
    check_request("sagemaker", "CreateTrainingJob", req)
    default = render.training_job_request(spec(), CFG)["OutputDataConfig"]["S3OutputPath"]
    assert default == "s3://dtrain-test/dtrain"  # bucket/prefix when not given


@pytest.mark.parametrize("bad, words", [
    ("https://other-bucket/models", "use s3://BUCKET/PREFIX"),
    ("s3://", "use s3://BUCKET/PREFIX"),
    ("s3://b/models", "bucket name"),
    ("s3://Other_Bucket/models", "bucket name"),
    ("s3://other-bucket/a b", "use s3://BUCKET/PREFIX"),
    (42, "use s3://BUCKET/PREFIX"),
    ("s3://other-bucket/" + "m" * MAX_S3_URI, f"at most {MAX_S3_URI}"),
])
def test_a_bad_output_path_is_one_line_naming_the_flag(bad, words):
    with pytest.raises(Worded, match="^invalid output_path") as e:  # the SDK's field
        SageMakerOptions(output_path=bad)
    assert words in str(e.value) and "\n" not in str(e.value)
    assert str(e.value.in_words("cli")).startswith("invalid --output-path")  # the CLI's flag


def test_output_path_through_the_job_file_the_sdk_and_http_mapping():
    opts = SageMakerOptions.from_dict({"output_path": "s3://other-bucket/models"})  # YAML `sagemaker:`, HTTP body
    assert opts.output_path == "s3://other-bucket/models"
    assert SageMakerOptions.from_dict(opts.to_dict()) == opts  # stored with the job and read back


def test_output_path_flag_reaches_the_dry_run(dt, tmp_path):
    r = dt("submit-dist", "outp", "--backend", "sagemaker", "--local", "--output-path", "s3://other-bucket/models",
           "--dry-run", "--", "python", "-c", "print(1)", cwd=tmp_path)
    assert '"S3OutputPath": "s3://other-bucket/models"' in r.stdout
    r = dt("submit", "outp", "--backend", "sagemaker", "--output-path", "file:///tmp/x", "--dry-run",
           "--", "python", "-c", "print(1)", cwd=tmp_path, check=False)
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and "invalid --output-path" in r.stderr


# ---------------------------------------------------------------- artifacts, model and output data (moto)
def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture(scope="module")
def moto_clients():
    boto3 = pytest.importorskip("boto3")
    from moto.server import ThreadedMotoServer

    from dtrain.backends.sagemaker.backend import Clients
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    s = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1")
    clients = Clients(*(s.client(n, endpoint_url=f"http://{host}:{port}") for n in ("sagemaker", "s3", "logs")))
    for bucket in (CFG.bucket, "other-bucket"):
        clients.s3.create_bucket(Bucket=bucket)
    yield clients
    server.stop()


@pytest.mark.slow
def test_artifacts_fetch_the_model_and_the_output_data_from_the_output_path(moto_clients, tmp_path):
    from dtrain.backends.sagemaker.backend import SageMakerBackend
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    be = SageMakerBackend(CFG, clients=moto_clients, cwd=str(tmp_path / "code"))
    info = be.submit(spec("moved", output_path="s3://other-bucket/models"))
    assert info.extra["model_artifacts"] == "s3://other-bucket/models/moved/output/model.tar.gz"
    assert info.extra["output_data"] == "s3://other-bucket/models/moved/output/output.tar.gz"
    put = moto_clients.s3.put_object
    put(Bucket="other-bucket", Key="models/moved/output/model.tar.gz", Body=_tar({"model.pth": b"weights"}))
    put(Bucket="other-bucket", Key="models/moved/output/output.tar.gz",
        Body=_tar({"metrics.jsonl": json.dumps({"step": 1}).encode()}))
    model = be.artifacts("moved", to=tmp_path / "model")
    assert [p.name for p in model.iterdir()] == ["model.pth"]
    data = be.artifacts("moved", to=tmp_path / "data", output_data=True)
    assert [p.name for p in data.iterdir()] == ["metrics.jsonl"]
    assert not moto_clients.s3.list_objects_v2(Bucket=CFG.bucket, Prefix="dtrain/moved/output/").get("KeyCount")


def test_output_data_on_the_local_backend_is_refused_in_one_line(home, tmp_path):
    from dtrain.client import Client
    with pytest.raises(NotSupportedError, match="drop --output-data"):
        Client(home=home).artifacts("nope", to=tmp_path / "m", output_data=True)
    with pytest.raises(SpecError, match="output_data"):
        Client(home=home).artifacts("nope", to=tmp_path / "m", output_data="yes")
    assert not (tmp_path / "m").exists()


# ---------------------------------------------------------------- pipeline --param: did you mean
@pytest.mark.slow  # loading the pipeline imports KFP: about 3 s
def test_an_unknown_pipeline_param_suggests_the_nearest():
    from dtrain.pipelines.runner import check_params, load, parse_params
    pipeline = load("hybrid-cifar10")
    # learning_rate abbreviates to lr; at difflib's default cutoff it met training_runtime
    for key, near in (("learning_rate", "lr"), ("epoch", "epochs"), ("batchsize", "batch_size"), ("xyzzy", None)):
        for call in (lambda: parse_params(pipeline, [f"{key}=1"]), lambda: check_params(pipeline, {key: 1})):
            with pytest.raises(SpecError) as e:
                call()
            said = str(e.value)
            assert (f"did you mean '{near}'?" in said) if near else "did you mean" not in said
            assert "lr, " in said  # the valid keys are still listed
