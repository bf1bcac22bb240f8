"""`--local` installs a requirements.txt as the SageMaker training toolkit does before the script.

`python -m pip install -r requirements.txt` runs in /opt/ml/code, into a Python environment of the
job's that still sees this interpreter's packages (torch, dtrain), and the hosts run with it; a pip
that fails fails the job with InstallRequirementsError. No network: the requirement is a wheel
built here by hand, referenced by its path relative to the code folder, as a user would.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import sysconfig
import zipfile
from pathlib import Path

import pytest

import dtrain
from dtrain.backends.base import JobInfo
from dtrain.spec_sagemaker import SageMakerOptions

WHEEL = "wheels/hello_req-1.0-py3-none-any.whl"
SCRIPT = """import os, sys
import torch
import hello_req
print(hello_req.GREETING, "torch", torch.__version__, "on", os.environ["SM_CURRENT_HOST"], flush=True)
print("python", sys.executable, flush=True)
"""


def build_wheel(path: Path) -> None:
    """A wheel is a zip: the package, and dist-info with METADATA, WHEEL and a RECORD of hashes."""
    files = {"hello_req/__init__.py": "GREETING = 'hello from the wheel'\n",
             "hello_req-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: hello-req\nVersion: 1.0\n",
             "hello_req-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                              "Tag: py3-none-any\n"}
    digest = {n: base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b"=").decode()
              for n, t in files.items()}
    record = "".join(f"{n},sha256={digest[n]},{len(t.encode())}\n" for n, t in files.items())
    files["hello_req-1.0.dist-info/RECORD"] = record + "hello_req-1.0.dist-info/RECORD,,\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)


@pytest.fixture
def code(tmp_path) -> Path:
    """The uploaded code: the script, the wheel, and a requirements.txt naming the wheel by a relative path."""
    d = tmp_path / "code"
    build_wheel(d / WHEEL)
    (d / "train.py").write_text(SCRIPT)
    (d / "requirements.txt").write_text(f"{WHEEL}\n")
    return d


def submit(home: Path, name: str, code: Path, *, network_isolation: bool = False, **spec) -> JobInfo:
    client = dtrain.Client(home=home, backend="sagemaker")
    client.submit(dtrain.JobSpec(name=name, command=("python", "train.py"), backend="sagemaker", **spec,
                                 sagemaker=SageMakerOptions(local=True, source_dir=str(code),
                                                            network_isolation=network_isolation)))
    return client.wait(name, timeout=120)


def logs(home: Path, name: str, rank: int = 0) -> list[str]:
    return [ln.text for ln in dtrain.Client(home=home, backend="sagemaker").logs(name, rank=rank)]


@pytest.mark.slow
def test_every_host_runs_with_the_installed_requirements(home, code):
    """torchrun on two hosts: pip ran once, on algo-1, and both hosts' workers import the wheel and torch."""
    info = submit(home, "dist", code, processes=2, launcher="torchrun")
    assert info.status.value == "Succeeded", (info.message, logs(home, "dist"))
    first, second = logs(home, "dist"), logs(home, "dist", rank=1)
    assert first[0].startswith("requirements.txt: python -m pip install -r requirements.txt"), first
    assert "Successfully installed hello-req-1.0" in first, first
    assert second[0].startswith("requirements.txt: pip installs it on algo-1"), second
    for host, lines in (("algo-1", first), ("algo-2", second)):
        assert any(ln.startswith("hello from the wheel torch ") and ln.endswith(f" on {host}") for ln in lines), lines
    env = home / "sagemaker-local" / "jobs" / "dist" / "venv"
    assert f"python {env / 'bin' / 'python'}" in first  # torchrun's workers run the job's environment
    site = Path(sysconfig.get_path("purelib", "venv", vars={"base": str(env), "platbase": str(env)}))
    assert (site / "hello_req").is_dir() and not (site / "torch").exists()  # torch came from dtrain's Python
    # nothing went into dtrain's own environment
    assert importlib.util.find_spec("hello_req") is None
    assert not list(Path(sysconfig.get_path("purelib")).glob("hello_req*"))


@pytest.mark.slow
def test_pip_runs_without_network_under_network_isolation(home, code):
    """EnableNetworkIsolation: on SageMaker no package index is reachable; here pip runs without a
    network too, so a local wheel installs and anything needing an index fails as it would there."""
    info = submit(home, "offline", code, network_isolation=True)
    assert info.status.value == "Succeeded", (info.message, logs(home, "offline"))
    lines = logs(home, "offline")
    assert lines[0].endswith("(EnableNetworkIsolation: no network)"), lines
    assert any(ln.startswith("hello from the wheel torch ") for ln in lines), lines


def test_a_requirement_that_does_not_install_fails_the_job(home, code):
    """pip's exit code fails the job as the toolkit's InstallRequirementsError does; the script never runs."""
    (code / "requirements.txt").write_text("wheels/nope-1.0-py3-none-any.whl\n")
    info = submit(home, "broken", code)
    assert info.status.value == "Failed"
    # SageMaker's FailureReason: the toolkit's failure file (InstallRequirementsError, pip's stderr from its
    # first ERROR: line), then the exit code; `describe` shows it on one line, --json keeps its lines
    assert "\n" not in info.message and info.message.startswith(
        'AlgorithmError: InstallRequirementsError: ExitCode 1 ErrorMessage "ERROR: '), info.message
    assert info.message.endswith(' -m pip install -r requirements.txt", exit code: 1'), info.message
    assert not any(ln.startswith("hello from the wheel") for ln in logs(home, "broken"))
    failure = home / "sagemaker-local" / "jobs" / "broken" / "hosts" / "algo-1" / "output" / "failure"
    assert failure.read_text().startswith('InstallRequirementsError:\nExitCode 1\nErrorMessage "ERROR: ')
    assert info.extra["failure_reason"] == f"AlgorithmError: {failure.read_text()}, exit code: 1"


def test_without_requirements_no_environment_is_made(home, code):
    (code / "requirements.txt").unlink()
    (code / "train.py").write_text("import sys\nprint('python', sys.executable)\n")
    info = submit(home, "plain", code)
    assert info.status.value == "Succeeded", info.message
    assert not (home / "sagemaker-local" / "jobs" / "plain" / "venv").exists()
    assert not any(ln.startswith("requirements.txt") for ln in logs(home, "plain"))


PACKAGE_SCRIPT = """import importlib.metadata, sys
import greet, hello_req
print("entry", __spec__.name if __spec__ else None, "greet", importlib.metadata.version("greet"),
      "from", greet.__file__, flush=True)
print(hello_req.GREETING, flush=True)
"""
# pip's build isolation would fetch setuptools from an index; here the job's own setuptools builds it
NO_ISOLATION = {"PIP_NO_BUILD_ISOLATION": "0"}


@pytest.fixture
def package(code) -> Path:
    """Code with a setup.py: to the toolkit a Python package. Its module lives under src/, so that only
    an installed copy can be imported (/opt/ml/code itself is on the path)."""
    (code / "setup.py").write_text("from setuptools import setup\n"
                                   "setup(name='greet', version='2.5', packages=['greet'], package_dir={'': 'src'})\n")
    (code / "src" / "greet").mkdir(parents=True)
    (code / "src" / "greet" / "__init__.py").write_text("")
    (code / "train.py").write_text(PACKAGE_SCRIPT)
    return code


@pytest.mark.slow
def test_code_with_a_setup_py_is_installed_and_run_as_a_module(home, package):
    """As the toolkit: `pip install . -r requirements.txt` in /opt/ml/code, then `python -m train`."""
    info = submit(home, "pkg", package, env=NO_ISOLATION)
    assert info.status.value == "Succeeded", (info.message, logs(home, "pkg"))
    lines = logs(home, "pkg")
    assert lines[0].startswith("setup.py: python -m pip install . -r requirements.txt into the job's"), lines
    env = home / "sagemaker-local" / "jobs" / "pkg" / "venv"
    site = Path(sysconfig.get_path("purelib", "venv", vars={"base": str(env), "platbase": str(env)}))
    assert f"entry train greet 2.5 from {site / 'greet' / '__init__.py'}" in lines, lines
    assert "hello from the wheel" in lines, lines
    assert importlib.util.find_spec("greet") is None  # not in dtrain's own environment


def test_a_package_that_does_not_install_fails_the_job_with_install_module_error(home, package):
    (package / "setup.py").write_text("raise SystemExit('this setup.py is broken')\n")
    info = submit(home, "badpkg", package, env=NO_ISOLATION)
    assert info.status.value == "Failed"
    assert "\n" not in info.message and info.message.startswith(
        "AlgorithmError: InstallModuleError: ExitCode 1 ErrorMessage "), info.message
    assert info.message.endswith(' -m pip install . -r requirements.txt", exit code: 1'), info.message
    assert not any(ln.startswith("entry ") for ln in logs(home, "badpkg"))
    failure = home / "sagemaker-local" / "jobs" / "badpkg" / "hosts" / "algo-1" / "output" / "failure"
    assert failure.read_text().startswith("InstallModuleError:\nExitCode 1\nErrorMessage ")


def test_the_launch_of_a_package_is_the_toolkits():
    """contract.launch, pure: a package's entry point runs as a module, under MPI too; under
    torch_distributed the toolkit refuses a package (dtrain refuses such a submit before: test_sagemaker_leftovers2)."""
    from dtrain.backends.sagemaker import contract
    req = {"HyperParameters": {"sagemaker_program": '"train.py"'},
           "ResourceConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.xlarge"}}
    assert contract.launch(req, "algo-1", master_port=1, python="py", package=True).argv == ["py", "-m", "train"]
    assert contract.launch(req, "algo-1", master_port=1, python="py").argv == ["py", "train.py"]
    mpi = {**req, "HyperParameters": {**req["HyperParameters"], "sagemaker_mpi_enabled": "true"}}
    assert contract.launch(mpi, "algo-1", master_port=1, python="py", package=True).argv[-3:] == ["py", "-m", "train"]
    dist = {**req, "HyperParameters": {**req["HyperParameters"], "sagemaker_torch_distributed_enabled": "true"}}
    with pytest.raises(contract.ClientError, match="^Python packages are not supported for torch_distributed. "
                                                   "Please use a python script as the entry-point$"):
        contract.launch(dist, "algo-1", master_port=1, python="py", package=True)
    assert contract.install_command(["train.py", "setup.py"]) == ("InstallModuleError", ["-m", "pip", "install", "."])
    assert contract.install_command(["train.py", "requirements.txt"]) == (
        "InstallRequirementsError", ["-m", "pip", "install", "-r", "requirements.txt"])
    assert contract.install_command(["train.py"]) is None
