"""Audit 9 (sizes): size and number inputs as a new Run:AI / Kubernetes / SageMaker user types them."""

from __future__ import annotations

import random
import re
import subprocess

import pytest

from dtrain.errors import SpecError
from dtrain.names import MIN_VOLUME, parse_size, parse_volume_size
from dtrain.spec import JobSpec, NewVolume
from tests.conftest import DTRAIN


def _dtrain(home, *args):
    return subprocess.run([DTRAIN, *args], env={"DTRAIN_HOME": str(home), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("size, fix", [("1.5", "1.5Gi"), ("100", "100Gi"), ("+100", "100Gi"), ("500m", "500Mi"),
                                       ("1Ki", "100Gi"), ("1e3", "100Gi")])
@pytest.mark.parametrize("backend", ["local", "kubernetes"])
def test_a_volume_size_without_its_unit_is_refused_naming_the_unit(tmp_path, size, fix, backend):
    """'--size 1.5' made a 2-byte volume (a 1.5-byte PVC request on Kubernetes): a plain number is
    bytes and 'm' milli to Kubernetes, never what a user means by a volume; both backends refuse it."""
    done = _dtrain(tmp_path / "home", "volume", "create", "v", "--size", size, "--backend", backend, "--dry-run")
    assert done.returncode == 2 and done.stdout == "", done
    line = done.stderr.strip()
    assert "\n" not in line and f"invalid volume size '{size}'" in line and "from 1Mi to 1Ei" in line, line
    assert fix in line, line
    job = _dtrain(tmp_path / "home", "submit", "j", "--pvc", f"local:{size}:/mnt", "--backend", backend, "--dry-run",
                  "--", "true")
    assert job.returncode == 2 and "from 1Mi to 1Ei" in job.stderr, job


def test_the_smallest_volume_is_one_mebibyte_and_agrees_on_both_backends(tmp_path):
    for backend in ("local", "kubernetes"):
        done = _dtrain(tmp_path / "home", "volume", "create", "v", "--size", "1Mi", "--backend", backend, "--dry-run")
        assert done.returncode == 0, done
    assert "storage: 1Mi" in done.stdout
    assert parse_volume_size("1Mi") == MIN_VOLUME and parse_volume_size("1048576") == MIN_VOLUME
    with pytest.raises(SpecError, match="'1048575': a number without a unit is bytes"):
        parse_volume_size("1048575")


def test_a_stored_job_with_a_small_new_volume_stays_readable():
    """A job submitted before the 1Mi rule (--pvc local:100:/mnt) is still listed and described."""
    stored = JobSpec(name="old", command=["true"], volumes=["local:1Gi:/mnt"]).to_dict()
    stored["volumes"] = ["local:100:/mnt"]
    with pytest.raises(SpecError, match="a number without a unit"):
        JobSpec.from_dict(stored)
    volume = JobSpec.from_stored(stored).volumes[0]
    assert isinstance(volume, NewVolume) and volume.to_flag() == "local:100:/mnt"


def test_every_volume_size_the_api_schema_allows_is_one_the_server_takes_sampled():
    """Random members of the schema's grammar around the 1Mi bound: whatever the pattern allows, the server takes."""
    from dtrain.server.wire import _DIGITS, VOLUME_SIZE

    allowed, rng = re.compile(VOLUME_SIZE), random.Random(9)
    for _ in range(20000):
        suffix = rng.choice(list(_DIGITS))
        whole = str(rng.choice([rng.randint(1, 2000), rng.randint(1, 10**7), rng.randint(10**6, 1100000)]))
        fraction = f".{rng.randint(0, 99)}" if rng.random() < 0.3 else ""
        text = whole + fraction + suffix
        if allowed.match(text):
            assert parse_volume_size(text) >= MIN_VOLUME, text
        elif not fraction and len(whole) <= _DIGITS[suffix] + 1:  # a whole number the server takes is allowed
            assert parse_size(text) < MIN_VOLUME, text


@pytest.mark.parametrize("flag, value", [("--epochs", "-1"), ("--lr", "nan"), ("--batch-size", "0"),
                                         ("--device", "gpu")])
def test_a_workload_names_a_bad_value_before_the_missing_data(tmp_path, flag, value):
    """`dtrain cifar10 train --epochs -1` said 'no CIFAR10 data': argparse names a bad value first."""
    from dtrain.workloads.cifar10.train import parse_args

    with pytest.raises(SpecError, match=f"^{flag} "):
        parse_args([flag, value])
    with pytest.raises(SpecError, match="no CIFAR10 data"):
        parse_args([flag, {"--epochs": "1", "--lr": "0.01", "--batch-size": "2", "--device": "cpu"}[flag]])
