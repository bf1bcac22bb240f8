"""--cpu and --memory beyond what this machine has are refused on the local backend, as --gpu beyond
its GPUs is, through every door (CLI submit and notebook, SDK, HTTP), in one line naming what it has."""

from __future__ import annotations

import os

import pytest

from conftest import Dtrain, assert_usage_error

CPUS = len(os.sched_getaffinity(0))
MEMORY = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
TOO_MANY = str(CPUS + 1)  # one process, more CPUs than the machine has
TOO_MUCH = f"{MEMORY // 2**30 + 1}Gi"  # more memory than the machine has
HAS_MEMORY = f"but this machine has {MEMORY / 2**30:.1f}Gi"


@pytest.mark.slow
@pytest.mark.parametrize("verb", [["submit", "j"], ["notebook", "j"]])
def test_more_cpu_or_memory_than_the_machine_has_is_refused_and_nothing_stored(dt: Dtrain, verb):
    """`--cpu 64` on a 2-core machine and `--memory 10Ti` on a 23 GiB one were accepted (and ran unbounded)."""
    command = ["--", "true"] if verb[0] == "submit" else []
    cpu = dt(*verb, "--cpu", TOO_MANY, *command, check=False)
    assert_usage_error(cpu, f"job 'j' asks for {TOO_MANY} CPUs per process but this machine has {CPUS}",
                       f"lower --cpu to {CPUS} or less")
    memory = dt(*verb, "--memory", TOO_MUCH, *command, check=False)
    assert_usage_error(memory, f"job 'j' asks for {TOO_MUCH} of memory per process {HAS_MEMORY}", "lower --memory")
    assert dt.json("list", "-A", "--show-deleted") == []


def test_the_sdk_refuses_them_as_the_cli_does_and_keeps_what_fits(tmp_path):
    from dtrain import Client, JobSpec
    from dtrain.errors import QuotaError
    from dtrain.spec import notebook_spec

    client = Client(home=tmp_path)
    with pytest.raises(QuotaError, match=f"asks for {CPUS + 1} CPUs per process but this machine has {CPUS}"):
        client.submit(JobSpec(name="j", command=("true",), cpu=CPUS + 1))
    with pytest.raises(QuotaError, match=f"of memory per process {HAS_MEMORY}"):
        client.notebook("nb", memory=TOO_MUCH)
    with pytest.raises(QuotaError, match="CPUs per process"):
        client.render(notebook_spec("nb", cpu=CPUS + 0.5))  # --dry-run refuses it as submit does
    # one process's figure is its cap: ranks share the cores, as they did (2 x --cpu CPUS)
    client.render(JobSpec(name="two", command=("true",), processes=2, launcher="torchrun", cpu=CPUS))
    assert client.list(show_deleted=True) == []


@pytest.mark.slow
def test_the_http_api_refuses_them_with_the_same_line(home):
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from dtrain import Client
    from server_util import local_api

    with local_api(home) as http:
        job = http.post("/api/v1/jobs", json={"name": "j", "command": ["true"], "cpu": CPUS + 1})
        assert (job.status_code, job.json()["error"]) == (
            409, f"job 'j' asks for {CPUS + 1} CPUs per process but this machine has {CPUS}; lower --cpu to "
                 f"{CPUS} or less")
        nb = http.post("/api/v1/notebooks", json={"name": "nb", "memory": TOO_MUCH})
        assert nb.status_code == 409 and HAS_MEMORY in nb.json()["error"], nb.text
    assert Client(home=home).list(show_deleted=True) == []


def test_the_sdk_is_told_its_own_argument_names(tmp_path, monkeypatch):
    """Client.submit(JobSpec(cpu=64)) was told 'lower --cpu to 2 or less', a flag a Python caller has not got;
    the CLI, a job file and the HTTP API keep --cpu (the tests above and test_cli_job_verbs)."""
    from dtrain import Client, JobSpec
    from dtrain.errors import QuotaError
    from dtrain.spec import notebook_spec

    monkeypatch.delenv("DTRAIN_GPUS", raising=False)
    client = Client(home=tmp_path)
    with pytest.raises(QuotaError) as cpu:
        client.submit(JobSpec(name="j", command=("true",), cpu=CPUS + 1))
    assert str(cpu.value) == (f"job 'j' asks for {CPUS + 1} CPUs per process but this machine has {CPUS}; lower cpu "
                              f"to {CPUS} or less")
    with pytest.raises(QuotaError) as memory:
        client.render(notebook_spec("nb", memory=TOO_MUCH))
    assert str(memory.value).endswith(f"; lower memory, e.g. memory='{MEMORY // 2**31}Gi'"), str(memory.value)
    from dtrain.backends.local import backend

    monkeypatch.setattr(backend, "max_local_processes", lambda: (1, "a test's limit"))
    with pytest.raises(QuotaError) as processes:
        client.submit(JobSpec(name="p", command=("true",), processes=2, launcher="torchrun"))
    assert str(processes.value).endswith("; lower processes"), str(processes.value)
    with pytest.raises(QuotaError) as gpu:
        client.submit(JobSpec(name="g", command=("true",), gpu=1))
    assert "but this machine has no GPU: drop gpu (or give gpu=0) to run on its CPUs" in str(gpu.value)
    assert client.list(show_deleted=True) == []
