"""A KFP / SageMaker user's audit: the hybrid pipeline's SageMaker branch, the SageMaker backend against
moto's server, and the /opt/ml contract the CIFAR10 workload runs under."""

from __future__ import annotations

import socket

import pytest

from dtrain.errors import BackendError, DtrainError, SpecError
from dtrain.pipelines import steps

boto3 = pytest.importorskip("boto3")
from moto.server import ThreadedMotoServer  # noqa: E402

from dtrain.backends.sagemaker.backend import Clients, SageMakerBackend  # noqa: E402
from dtrain.backends.sagemaker.clients import aws_call  # noqa: E402
from dtrain.backends.sagemaker.config import SageMakerConfig  # noqa: E402
from dtrain.spec import JobSpec  # noqa: E402
from dtrain.spec_sagemaker import SageMakerOptions  # noqa: E402

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
CFG = SageMakerConfig(role=ROLE, bucket="audit12", region="us-east-1")


@pytest.fixture(scope="module")
def clients():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                    region_name="us-east-1")
    c = Clients(*(session.client(n, endpoint_url=f"http://127.0.0.1:{port}") for n in ("sagemaker", "s3", "logs")))
    c.s3.create_bucket(Bucket=CFG.bucket)
    yield c
    server.stop()


@pytest.fixture
def code(tmp_path):
    src = tmp_path / "code"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    return src


def _job(name: str, channel: str) -> JobSpec:
    return JobSpec(name=name, command=("python", "train.py"), backend="sagemaker",
                   sagemaker=SageMakerOptions(channels=(channel,)))


def _names(clients) -> list[str]:
    return [j["TrainingJobName"] for j in clients.sagemaker.list_training_jobs()["TrainingJobSummaries"]]


def _keys(clients, prefix: str) -> list[str]:
    return [o["Key"] for o in clients.s3.list_objects_v2(Bucket=CFG.bucket, Prefix=prefix).get("Contents", [])]


# ---- an S3 channel SageMaker would find empty ------------------------------------------------------------

def test_an_empty_s3_channel_is_refused_before_anything_is_uploaded(clients, code, tmp_path):
    """It was taken: SageMaker starts the instances and fails the job minutes later ("ClientError: No S3
    objects found under S3 URL"), billed; the pipeline's data_uri reached it the same way."""
    be = SageMakerBackend(CFG, clients=clients, home=tmp_path / "home", cwd=str(code))
    with pytest.raises(SpecError) as err:
        be.submit(_job("empty-channel", f"training=s3://{CFG.bucket}/nothing-here"))
    assert str(err.value) == (f"channel training=s3://{CFG.bucket}/nothing-here: no S3 objects under it, and "
                              f"SageMaker would fail the job once its instances started: upload the data first "
                              f"(aws s3 sync DATA s3://{CFG.bucket}/nothing-here) or fix the URI")
    assert "empty-channel" not in _names(clients) and _keys(clients, "dtrain/empty-channel/") == []


def test_a_channel_in_a_bucket_that_does_not_exist_names_the_channel_not_the_code_bucket(clients, code, tmp_path):
    be = SageMakerBackend(CFG, clients=clients, home=tmp_path / "home", cwd=str(code))
    with pytest.raises(SpecError) as err:
        be.submit(_job("no-bucket", "training=s3://no-such-bucket-audit12/cifar10"))
    assert str(err.value).startswith("channel training=s3://no-such-bucket-audit12/cifar10: the bucket "
                                     "no-such-bucket-audit12 does not exist")
    assert "dtrain config sagemaker --bucket" not in str(err.value)  # the code's bucket is fine
    assert "no-bucket" not in _names(clients)


def test_a_channel_with_data_is_submitted(clients, code, tmp_path):
    clients.s3.put_object(Bucket=CFG.bucket, Key="cifar10/cifar-10-batches-py/data_batch_1", Body=b"-")
    be = SageMakerBackend(CFG, clients=clients, home=tmp_path / "home", cwd=str(code))
    be.submit(_job("with-data", f"training=s3://{CFG.bucket}/cifar10"))
    assert "with-data" in _names(clients)


# ---- AWS's refusal of the bucket inside a pipeline step ---------------------------------------------------

class _Refusing:
    """A Client whose submit meets AWS's NoSuchBucket, as the SageMaker backend's code upload does."""

    default_project = "default"

    def __init__(self, code: str):
        self.code = code

    def submit(self, job):
        def put_object(**_kw):
            err = Exception("refused")
            err.response = {"Error": {"Code": self.code, "Message": "The specified bucket does not exist"}}
            raise err
        return aws_call("S3 upload of the code", put_object, Bucket="nobucket", Key="k")


@pytest.mark.parametrize("code, fix", [
    ("NoSuchBucket", "pass another with --param sagemaker_bucket=NAME"),
    ("PermanentRedirect", "use a bucket there (--param sagemaker_bucket=NAME) or the bucket's region "
                          "(--param sagemaker_region=REGION)"),
])
def test_a_step_says_the_bucket_parameter_when_aws_refuses_the_bucket(code, fix):
    """A step pod has no config.yaml: the hint named 'dtrain config sagemaker --bucket' alone, where the
    run's --param sagemaker_bucket is what the user gave (and what wins)."""
    spec, _ = steps.cifar10_spec(runtime="sagemaker", job_name="j", processes=1, epochs=1, batch_size=4, lr=0.1,
                                 backend="gloo", data_volume="cifar10", data_uri="s3://data/cifar10")
    with pytest.raises(BackendError) as err:
        steps.run_job(spec, backend="sagemaker", client=_Refusing(code))
    assert fix in str(err.value), err.value
    assert str(err.value).startswith(f"S3 upload of the code: {code}: The specified bucket does not exist; ")
    assert isinstance(err.value, DtrainError) and "\n" not in str(err.value)
