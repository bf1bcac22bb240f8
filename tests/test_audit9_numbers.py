"""Numbers and sizes a user gives, as the real services bound them (audit 9)."""

from __future__ import annotations

import json

import pytest

from conftest import Dtrain, usage_line
from dtrain.backends.sagemaker.render import channel
from dtrain.errors import SpecError
from dtrain.spec import JobSpec
from dtrain.spec_sagemaker import MAX_DIRECTORY_PATH, Channel, parse_channel

FS = "fs-0123456789abcdef0"


def _directory(uri: str) -> str:
    return channel(parse_channel(f"d={uri}"), local=False)["DataSource"]["FileSystemDataSource"]["DirectoryPath"]


@pytest.mark.parametrize("typed, same_as", [
    (f"efs://{FS}/data//cifar", f"efs://{FS}/data/cifar"),
    (f"efs://{FS}/./data/./cifar/", f"efs://{FS}/data/cifar"),
    (f"efs://{FS}//", f"efs://{FS}"),
    (f"fsx://{FS}//abcdefgh//cifar", f"fsx://{FS}/abcdefgh/cifar"),
])
def test_a_file_system_path_is_sent_as_a_mount_reads_it(typed, same_as):
    """A mount reads 'a//b' and 'a/./b' as 'a/b': the channel and its DirectoryPath say so."""
    assert parse_channel(f"d={typed}") == parse_channel(f"d={same_as}")
    assert _directory(typed) == _directory(same_as)
    assert "//" not in _directory(typed) and "/./" not in _directory(typed) + "/"


@pytest.mark.parametrize("uri, says", [
    (f"efs://{FS}/data/../other", "'..' is not resolved"),
    (f"fsx://{FS}/abcdefgh/../elsewhere", "'..' is not resolved"),  # stepped out of the mount name
    (f"efs://{FS}/a\nb", "control character"),
    (f"efs://{FS}/" + "a" * MAX_DIRECTORY_PATH, f"at most {MAX_DIRECTORY_PATH}"),
])
def test_a_file_system_path_sagemaker_would_refuse_is_refused_in_one_line(uri, says):
    with pytest.raises(SpecError) as e:
        parse_channel(f"d={uri}")
    assert says in str(e.value) and "\n" not in str(e.value)
    assert f"e.g. {uri[:6]}{FS}/" in str(e.value)  # names a path that would do


def test_the_longest_directory_path_is_taken():
    uri = f"efs://{FS}/" + "a" * (MAX_DIRECTORY_PATH - 1)
    assert len(_directory(uri)) == MAX_DIRECTORY_PATH


def test_a_stored_channel_is_read_as_it_was_sent():
    spec = JobSpec(name="x", command=["true"], backend="sagemaker", sagemaker={"channels": [f"d=efs://{FS}/a"]})
    data = spec.to_dict()
    data["sagemaker"]["channels"] = [f"d=efs://{FS}/a/../b"]  # a record made before the rule
    assert JobSpec.from_stored(data).sagemaker.channels[0].uri == f"efs://{FS}/a/../b"
    assert Channel(name="d", uri=f"efs://{FS}/a").uri == f"efs://{FS}/a"


def test_the_cli_refuses_dot_dot_and_sends_a_normal_path(tmp_path):
    dt = Dtrain(tmp_path / "home")
    r = dt("submit", "x", "--backend", "sagemaker", "--channel", f"d=fsx://{FS}/abcdefgh/../x", "--", "true",
           check=False)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "'..'" in r.stderr, r.stderr
    dt("config", "sagemaker", "--role", "arn:aws:iam::123456789012:role/R", "--bucket", "my-bucket",
       "--subnets", "subnet-0abc1234", "--security-groups", "sg-0abc1234")
    out = dt("submit", "x", "--backend", "sagemaker", "--channel", f"d=efs://{FS}//data/./cifar/", "--dry-run",
             "--", "true", cwd=str(tmp_path)).stdout
    assert '"DirectoryPath": "/data/cifar"' in out, out


@pytest.mark.parametrize("typed, says, fix", [
    ("4", "a number without a unit is bytes (4 bytes)", "4Gi"),
    ("512", "a number without a unit is bytes (512 bytes)", "512Gi"),
    ("500m", "'m' is milli (1 byte)", "500Mi or 500M"),
    ("1k", "that is 1000 bytes", "8Gi"),
])
def test_memory_under_the_floor_names_the_unit_to_write(typed, says, fix):
    """--memory 4 is 4 bytes to Kubernetes and to the local cgroup: a missing unit, named as such."""
    with pytest.raises(SpecError) as e:
        JobSpec(name="x", command=["true"], memory=typed)
    line = str(e.value)
    assert says in line and "from 4Mi to 1Ei" in line and fix in line and "\n" not in line
    assert JobSpec(name="x", command=["true"], memory=fix.split()[0]).memory == fix.split()[0]


def test_the_cli_says_the_same_about_memory(tmp_path):
    r = Dtrain(tmp_path / "home")("submit", "x", "--memory", "4", "--dry-run", "--", "true", check=False)
    assert r.returncode == 2 and "without a unit is bytes" in r.stderr and r.stderr.count("\n") == 1, r.stderr


@pytest.mark.parametrize("typed, says", [("16", "without a unit is bytes"), ("64K", "that is 64000 bytes"),
                                         ("500m", "'m' is milli")])
def test_a_kubernetes_shm_size_under_1mi_is_a_missing_unit(typed, says):
    from dtrain.backends.kubernetes.config import KubernetesConfig
    with pytest.raises(SpecError) as e:
        KubernetesConfig(shm_size=typed)
    assert says in str(e.value) and "shm_size" in str(e.value) and "from 1Mi to 1Ei" in str(e.value)
    assert KubernetesConfig(shm_size="16Gi").shm_size == "16Gi"


# ---------------------------------------------------------------- a refusal quotes the number as typed
# (flag words, what the line starts with, the range it names, its example). A number read otherwise
# than it was typed (1e9 as 1000000000, -0 as 0, 1e400 as inf, 1.5s rounded to 2) was quoted as read.
CLI_REFUSALS = [
    (["submit", "j", "--cpu", "1e9"], "invalid --cpu 1e9: ", "from 0.01 to 1024", "e.g. --cpu 2"),
    (["submit", "j", "--cpu", "-0"], "invalid --cpu -0: ", "from 0.01 to 1024", "e.g. --cpu 2"),
    (["submit", "j", "--cpu", "1e400"], "invalid --cpu 1e400: ", "from 0.01 to 1024", "e.g. --cpu 2"),
    (["submit", "j", "--gpu", "1_000"], "invalid --gpu 1_000: ", "from 0 to 16", "e.g. --gpu 1"),
    (["submit-dist", "j", "--processes", "1e9"], "invalid --processes 1e9: ", "from 1 to 4096", "e.g. --processes 4"),
    (["submit-dist", "j", "--processes", "-0"], "invalid --processes -0: ", "from 1 to 4096", "e.g. --processes 4"),
    (["submit", "j", "--max-restarts", "1e3"], "invalid --max-restarts 1e3: ", "from 0 to 100", "e.g. --max-restarts 3"),
    (["submit", "j", "--memory", "0"], "invalid --memory '0': ", "from 4Mi to 1Ei", "e.g. 8Gi"),
    (["submit", "j", "--memory", "-0"], "invalid --memory '-0': use a quantity", "from 4Mi to 1Ei", "e.g. 8Gi"),
    (["submit", "j", "--memory", "1e400"], "invalid --memory '1e400': ", "from 4Mi to 1Ei", "e.g. 8Gi"),
    (["submit", "j", "--backend", "sagemaker", "--spot", "--max-wait", "1e9"], "invalid --max-wait 1e9: ",
     "from 1 to 2419200", "e.g. --max-wait 172800"),
    (["submit", "j", "--backend", "sagemaker", "--instance-count", "-0"], "invalid --instance-count -0: ",
     "from 1 to 1000", "e.g. --instance-count 2"),
    (["notebook", "nb", "--idle-timeout", "1.5s"], "invalid --idle-timeout '1.5s': ", "from 60 to 2592000",
     "e.g. 3600 (1h)"),
    (["notebook", "nb", "--idle-timeout", "0.5m"], "invalid --idle-timeout '0.5m': ", "from 60 to 2592000",
     "e.g. 3600 (1h)"),
    (["notebook", "nb", "--idle-timeout", "90.5s"], "invalid --idle-timeout '90.5s': ", "from 60 to 2592000",
     "e.g. 3600 (1h)"),  # not rounded to 90 or 91 and taken
    (["notebook", "nb", "--idle-timeout", "1w"], "invalid --idle-timeout '1w': ", "from 60 to 2592000",
     "e.g. 3600 (1h)"),
    (["notebook", "nb", "--idle-timeout", "10"], "invalid --idle-timeout 10 (seconds): ", "from 60 to 2592000",
     "e.g. 3600 (1h)"),  # plain seconds: named as the SDK and the HTTP API name theirs
    (["project", "create", "t", "--gpu-quota", "1e9"], "invalid --gpu-quota 1e9: ", "from 0 to 1000000",
     "e.g. --gpu-quota 8"),
]


@pytest.mark.parametrize("words, starts, bounds, example", CLI_REFUSALS)
def test_a_cli_refusal_quotes_the_number_as_typed(tmp_path, words, starts, bounds, example):
    dt = Dtrain(tmp_path / "home")
    line = usage_line(dt(*words, *(["--", "true"] if words[0].startswith("submit") else []), check=False))
    assert line.startswith(starts) and bounds in line and example in line, line
    assert dt.json("list", "-A") == [] and dt.json("notebook", "list", "-A") == []  # nothing stored
    assert [p["name"] for p in dt.json("project", "list")] == ["default"]


def test_an_idle_timeout_that_is_whole_seconds_is_taken_exactly():
    from dtrain.cli.format import parse_duration
    from dtrain.spec import check_idle_timeout

    assert [check_idle_timeout(parse_duration(t), t) for t in ("1.1h", "60.0", "0.25h", "1m")] == [
        3960, 60, 900, 60]


# One field, written otherwise than Python writes it in a job file, given by the SDK and over HTTP:
# the same refusal after the value, the job file's quoting the file's text.
PARITY = [("cpu", "2.0e+3", 2000, "--cpu"), ("gpu", "0x20", 32, "--gpu"),
          ("processes", "1_000_000", 1_000_000, "--processes"), ("max_restarts", "+101", 101, "--max-restarts"),
          ("idle_timeout", "0x10", 16, "--idle-timeout")]


@pytest.mark.parametrize("field, written, value, flag", PARITY)
def test_every_door_refuses_a_number_in_the_same_words(tmp_path, field, written, value, flag):
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from fastapi.testclient import TestClient

    from dtrain import Client
    from dtrain.server.app import create_app
    from dtrain.spec import yaml_mapping

    text = f"name: nb\ncommand: [jupyter-lab]\nnotebook: true\n{field}: {written}\n"
    with pytest.raises(SpecError) as by_file:  # as `dtrain submit -f` reads it
        JobSpec.from_dict(yaml_mapping(text.encode(), "job file", "name: train"), door="cli")
    with pytest.raises(SpecError) as by_sdk:
        JobSpec(name="nb", command=["jupyter-lab"], notebook=True, **{field: value})
    http = TestClient(create_app(lambda: Client(home=tmp_path / "home")), base_url="http://127.0.0.1:8000")
    r = http.post("/api/v1/jobs", json={"name": "nb", "command": ["jupyter-lab"], "notebook": True, field: value})
    assert r.status_code == 422 and http.get("/api/v1/jobs").json() == [], r.text
    assert str(by_file.value).startswith(f"invalid {flag} {written}")
    assert str(by_sdk.value).startswith(f"invalid {field} {value}") and "\n" not in str(by_sdk.value)  # its own name
    words = {str(by_file.value).split(" ", 3)[3], r.json()["error"].split(" ", 3)[3]}  # a job file's, the body's
    assert len(words) == 1, words
