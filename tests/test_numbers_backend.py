"""Numbers a user types, past the spec's own checks.

1. A backend's refusal, made once the spec is built, showed the plain number: `--processes 1E3` was
   "asks for 1000 processes" (local), "--processes 1000 would take ..." (SageMaker), `--gpu 5e0` was
   "--gpu 5 per process" (Kubernetes). The spec keeps what was typed for them (JobSpec.typed); what it
   stores stays plain.
2. A job file's `processes: 2.0` was refused where the flag takes `--processes 2.0`; the rule (2.0 is 2,
   2.5 and 2.0000000000000001 are not) is numbers.whole, the flags' own, for YAML, JSON and HTTP alike.
3. A JSON body's number lost its text before the spec's cross-field checks ("--processes 1000 needs a
   launcher" for a body's 1e3).
4. A launcher's RANK/WORLD_SIZE that int() took ('1_0', '٣') or quoted in full (thousands of digits).
"""

from __future__ import annotations

import httpx
import pytest

from dtrain import Client
from dtrain.errors import QuotaError, SpecError
from dtrain.numbers import whole_number
from dtrain.spec import JobSpec, yaml_mapping

TYPED = dict(name="x", command=("true",), launcher="torchrun")


# 1. a backend's refusal names the number as typed


def test_the_local_backend_names_the_processes_as_typed_and_stores_nothing(tmp_path):
    client = Client(home=tmp_path)
    spec = JobSpec(**TYPED, processes=whole_number("1E3"))
    with pytest.raises(QuotaError, match=r"^job 'x' asks for 1E3 processes but this machine can run at most"):
        client.submit(spec)  # Client.submit fills in project and backend (JobSpec.replace): the text is kept
    assert list(client.list()) == []


def test_the_spec_stores_the_plain_number():
    spec = JobSpec(**TYPED, processes=whole_number("1E1"), gpu=whole_number("1.0"), cpu=whole_number("2e0"))
    assert spec.to_dict()["processes"] == 10 and type(spec.to_dict()["processes"]) is int
    assert type(spec.gpu) is int and type(spec.cpu) is int
    assert spec == JobSpec(**TYPED, processes=10, gpu=1, cpu=2)
    assert (spec.typed("processes").text, spec.typed("gpu").text) == ("1E1", "1.0")
    assert spec.replace(project="p").typed("processes").text == "1E1"
    assert type(spec.replace(processes=4).typed("processes")) is int  # a changed one is as changed
    assert type(JobSpec.from_stored(spec.to_dict()).typed("processes")) is int


def test_sagemaker_names_the_processes_and_gpu_as_typed():
    from dtrain.backends.sagemaker import render
    from dtrain.backends.sagemaker.config import SageMakerConfig

    cfg = SageMakerConfig(role="arn:aws:iam::123456789012:role/R", bucket="my-bucket", region="eu-west-1")
    spec = JobSpec(**TYPED, backend="sagemaker", processes=whole_number("1001e0"), sagemaker={})
    with pytest.raises(SpecError, match=r"^--processes 1001e0 would take 1001 instances, more than 1000"):
        render.training_job_request(spec, cfg)
    spec = JobSpec(**TYPED, backend="sagemaker", gpu=whole_number("1."), sagemaker={})
    with pytest.raises(SpecError, match=r"and the job asks for --gpu 1\.: pick a GPU type"):
        render.training_job_request(spec, cfg)


def test_kubernetes_names_the_gpu_as_typed():
    from dtrain.backends.kubernetes import KubernetesConfig
    from dtrain.backends.kubernetes.render import packing

    spec = JobSpec(**TYPED, processes=2, gpu=whole_number("5e0"))
    with pytest.raises(SpecError, match=r"^--gpu 5e0 per process is more than a node's 4 GPUs"):
        packing(spec, KubernetesConfig(gpus_per_node=4))


# 2. a job file's whole numbers follow the flags' rule


def _job_file(text: str) -> JobSpec:
    return JobSpec.from_dict(yaml_mapping(text.encode(), "job.yaml", "name: x"), door="cli")  # as dtrain submit -f


@pytest.mark.parametrize("form", ["yaml", "json"])
def test_a_job_files_whole_float_is_the_count(form):
    text = ("name: x\ncommand: ['true']\nlauncher: torchrun\nprocesses: 2.0\ngpu: 0.0\nmax_restarts: 1.0\n"
            if form == "yaml" else
            '{"name": "x", "command": ["true"], "launcher": "torchrun", "processes": 2.0, "max_restarts": 1.0}')
    spec = _job_file(text)
    assert (spec.processes, spec.max_restarts) == (2, 1) and type(spec.processes) is int
    assert type(spec.to_dict()["max_restarts"]) is int


@pytest.mark.parametrize("value", ["2.5", "2.0000000000000001", "4096.0000000000001", "4097.0", ".nan"])
def test_a_job_files_fraction_or_out_of_range_is_refused_as_the_flag_is(value):
    with pytest.raises(SpecError, match=r"^invalid --processes \S+: use a whole number from 1 to 4096") as refused:
        _job_file(f"name: x\ncommand: ['true']\nlauncher: torchrun\nprocesses: {value}\n")
    with pytest.raises(SpecError) as flag:  # the flag's refusal, word for word
        JobSpec(**TYPED, processes=whole_number(value.replace(".nan", "nan")))
    assert str(refused.value).replace(".nan", "nan") == str(flag.value.in_words("cli"))


def test_a_job_files_sagemaker_counts_follow_the_rule():
    spec = _job_file("name: x\ncommand: ['true']\nbackend: sagemaker\n"
                     "sagemaker: {spot: true, max_runtime: 3600.0, max_wait: 7200.0}\n")
    assert (spec.sagemaker.max_runtime, spec.sagemaker.max_wait) == (3600, 7200)
    assert type(spec.sagemaker.to_dict()["max_wait"]) is int
    with pytest.raises(SpecError, match=r"^invalid --instance-count 1\.5: use a whole number from 1 to"):
        _job_file("name: x\ncommand: ['true']\nbackend: sagemaker\nsagemaker: {instance_count: 1.5}\n")


# 3. a JSON body's numbers reach the spec's checks as sent


@pytest.fixture
def http(tmp_path):
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from server_util import local_api

    with local_api(tmp_path) as client:
        yield client


def _post(http, body: str) -> httpx.Response:
    return http.post("/api/v1/jobs", content='{"name": "j", "command": ["true"], ' + body + "}",
                     headers={"content-type": "application/json"})


@pytest.mark.parametrize("body, says", [
    ('"processes": 1e3', "--processes 1e3 needs a launcher"),
    ('"processes": 1000.0', "--processes 1000.0 needs a launcher"),
    ('"processes": 1E3, "launcher": "torchrun"', "job 'j' asks for 1E3 processes but this machine"),
    ('"processes": 2.0000000000000001, "launcher": "torchrun"', "invalid --processes 2.0000000000000001: use a whole"),
    ('"sagemaker": {"spot": true, "max_runtime": 7200, "max_wait": 36e2}', "--max-wait 36e2 is below --max-runtime"),
])
def test_a_body_number_is_refused_as_sent(http, body, says):
    r = _post(http, body)
    assert r.status_code in (409, 422), r.text
    assert says in r.json()["error"], r.text
    assert http.get("/api/v1/jobs").json() == []


def test_a_body_whole_float_is_stored_plain(http):
    r = _post(http, '"processes": 2e0, "launcher": "torchrun", "cpu": 1e0, "max_restarts": 1.0')
    assert r.status_code == 201, r.text
    spec = r.json()["spec"]
    assert (spec["processes"], spec["cpu"], spec["max_restarts"]) == (2, 1, 1)
    assert type(spec["processes"]) is int and type(spec["cpu"]) is int


# 4. a launcher's rank variables


@pytest.mark.parametrize("env, says", [
    ({"RANK": "1_0", "WORLD_SIZE": "20", "LOCAL_RANK": "0"}, "RANK='1_0' is not an integer in digits"),
    ({"RANK": "\u0663", "WORLD_SIZE": "4", "LOCAL_RANK": "0"}, "RANK='\u0663' is not an integer in digits"),
    ({"RANK": "0", "WORLD_SIZE": "9" * 5000}, "WORLD_SIZE='9999"),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1.0"}, "OMPI_COMM_WORLD_SIZE='1.0' is not an integer"),
    ({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_PORT": "2950O", "TORCHELASTIC_RUN_ID": "none"},
     "(e.g. MASTER_PORT=29500)"),  # torchrun's one process (without its id: dtrain's plain launch, no rendezvous)
])
def test_a_malformed_launcher_variable_is_one_short_line_naming_it(env, says):
    pytest.importorskip("torch")
    from dtrain.training.dist import detect_runtime

    with pytest.raises(SpecError) as refused:
        detect_runtime(env)
    said = str(refused.value)
    assert says in said and "\n" not in said and len(said) < 200, said


def test_what_torchrun_and_mpirun_set_is_read():
    pytest.importorskip("torch")
    from dtrain.training.dist import detect_runtime

    torchrun = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "h",
                "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "none"}
    assert detect_runtime(torchrun)["rank"] == 3
    mpi = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}
    assert (detect_runtime(mpi)["rank"], detect_runtime(mpi)["local_world_size"]) == (1, 2)


def test_the_readers_rank_skips_a_digit_int_does_not_read(monkeypatch):
    from dtrain.workloads.lanes.tusimple import launcher_rank

    monkeypatch.setenv("RANK", "\u00b2")  # a digit to str.isdigit, not to int()
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert launcher_rank() == 1
