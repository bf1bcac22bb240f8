"""Numbers and sizes a user gives, as the real services bound them (audit 9)."""

from __future__ import annotations

import json

import pytest

from conftest import Dtrain
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
    ("1k", "that is 1000 bytes", "4Gi"),
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
