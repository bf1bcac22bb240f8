"""dtrain.training: launcher detection, process-group setup, atomic checkpoints, metrics."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from dtrain.errors import DataError, SpecError, StorageError
from dtrain.training import (
    MetricsWriter,
    checkpoint_path,
    detect_runtime,
    latest_checkpoint,
    load_checkpoint,
    read_metrics,
    save_atomic,
    setup_distributed,
    teardown,
)

REPO = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------- detect_runtime: every launcher

TORCHRUN_CHILD = {  # what torchrun --nnodes 2 --nproc-per-node 2 gives the second process of node 1
    "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
    "MASTER_ADDR": "node0", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "none",
}


def test_no_launcher_is_a_single_process():
    info = detect_runtime({"PATH": "/usr/bin", "HOME": "/root"})
    assert info["runtime"] == "single"
    assert (info["rank"], info["world_size"], info["local_rank"]) == (0, 1, 0)
    assert info["master_addr"] is None


def test_torchrun():
    info = detect_runtime(TORCHRUN_CHILD)
    assert info["runtime"] == "torchrun"
    assert (info["rank"], info["world_size"], info["local_rank"], info["local_world_size"]) == (3, 4, 1, 2)
    assert (info["master_addr"], info["master_port"]) == ("node0", 29500)


def _pytorchjob_pod(index: int, replicas: int, nproc: str = "1") -> dict[str, str]:
    """The env the Kubeflow training operator (v1) injects: master pod is rank 0, worker-i is i+1."""
    world = replicas * (int(nproc) if nproc.isdigit() else 1)
    return {
        "PYTHONUNBUFFERED": "0", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456",
        "PET_MASTER_ADDR": "job-master-0", "PET_MASTER_PORT": "23456",
        "WORLD_SIZE": str(world), "RANK": str(index), "PET_NPROC_PER_NODE": nproc,
        "PET_NODE_RANK": str(index), "PET_NNODES": str(replicas),
    }


def test_pytorchjob_pod_running_the_script_directly():
    info = detect_runtime(_pytorchjob_pod(2, 3))
    assert info["runtime"] == "pytorchjob"
    assert (info["rank"], info["world_size"], info["local_rank"], info["local_world_size"]) == (2, 3, 0, 1)
    assert (info["master_addr"], info["master_port"]) == ("job-master-0", 23456)


def test_pytorchjob_pod_running_torchrun():
    # torchrun inside the pod overwrites RANK/WORLD_SIZE with global values; PET_* stay.
    env = {**_pytorchjob_pod(1, 2, nproc="2"), **TORCHRUN_CHILD}
    info = detect_runtime(env)
    assert info["runtime"] == "pytorchjob"
    assert (info["rank"], info["world_size"], info["local_rank"]) == (3, 4, 1)


def test_pytorchjob_multi_process_pod_without_torchrun_is_refused():
    with pytest.raises(SpecError, match="PET_NPROC_PER_NODE=2.*torchrun"):
        detect_runtime(_pytorchjob_pod(0, 2, nproc="2"))


def test_openmpi():
    env = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400"}
    info = detect_runtime(env)
    assert info["runtime"] == "mpi"
    assert (info["rank"], info["world_size"], info["local_rank"], info["local_world_size"]) == (5, 8, 1, 4)
    assert (info["master_addr"], info["master_port"]) == ("10.0.0.1", 29400)


def test_mpi_without_master_address_says_how_to_export_it():
    env = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "MASTER_PORT": "29400"}
    with pytest.raises(SpecError, match=r"MASTER_ADDR.*mpirun -x|-x MASTER_ADDR"):
        detect_runtime(env)


def test_mpi_on_sagemaker_takes_the_first_host_and_the_toolkits_port():
    """SageMaker's toolkit exports the SM_* variables to every rank of its mpirun, but not
    MASTER_ADDR/MASTER_PORT (set where it runs, on the first host, as algo-1 and 7777)."""
    env = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "SM_HOSTS": '["algo-1","algo-2"]',
           "SM_CURRENT_HOST": "algo-2"}
    info = detect_runtime(env)
    assert (info["runtime"], info["rank"], info["master_addr"], info["master_port"]) == ("mpi", 3, "algo-1", 7777)
    mine = detect_runtime({**env, "MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "29400"})  # what is exported wins
    assert (mine["master_addr"], mine["master_port"]) == ("10.0.0.9", 29400)
    with pytest.raises(SpecError, match="MASTER_ADDR/MASTER_PORT are not both set"):
        detect_runtime({**env, "SM_HOSTS": "not json"})


def test_single_rank_mpi_needs_no_master():
    info = detect_runtime({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"})
    assert (info["runtime"], info["world_size"]) == ("mpi", 1)


def test_pmi_launcher():
    env = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2",
           "MASTER_ADDR": "h", "MASTER_PORT": "1234"}
    info = detect_runtime(env)
    assert (info["runtime"], info["rank"], info["world_size"], info["local_rank"]) == ("pmi", 1, 2, 1)


def test_pmi_without_local_rank_leaves_it_unknown():
    info = detect_runtime({"PMI_RANK": "0", "PMI_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"})
    assert info["local_rank"] is None


def test_torchrun_under_mpirun_uses_torchrun_ranks():
    env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", **TORCHRUN_CHILD}
    info = detect_runtime(env)
    assert (info["runtime"], info["rank"], info["world_size"]) == ("torchrun", 3, 4)


SM_ENV = {
    "SM_HOSTS": '["algo-1","algo-2","algo-3"]', "SM_CURRENT_HOST": "algo-2", "SM_NUM_GPUS": "4",
    "SM_MODEL_DIR": "/opt/ml/model", "SM_CHANNEL_TRAINING": "/opt/ml/input/data/training",
}


def test_sagemaker_one_process_per_host():
    info = detect_runtime(SM_ENV)
    assert info["runtime"] == "sagemaker"
    assert (info["rank"], info["world_size"], info["local_rank"]) == (1, 3, 0)
    assert (info["master_addr"], info["master_port"]) == ("algo-1", 29500)
    assert info["hosts"] == ["algo-1", "algo-2", "algo-3"] and info["num_gpus"] == 4


def test_sagemaker_master_address_override():
    info = detect_runtime({**SM_ENV, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "40000"})
    assert (info["master_addr"], info["master_port"]) == ("127.0.0.1", 40000)


@pytest.mark.parametrize(
    "env, match",
    [
        ({"RANK": "0"}, "WORLD_SIZE missing"),
        ({"WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "RANK missing"),
        ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "rank 2 is outside 0..1"),
        ({"RANK": "-1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "RANK=-1 must be >= 0"),
        ({"RANK": "one", "WORLD_SIZE": "2"}, "RANK='one' is not an integer"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0 must be >= 1"),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2",
          "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "local rank 2 is outside 0..1"),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "http"}, "MASTER_PORT='http'"),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "70000"}, "not a TCP port"),
        ({"RANK": "1", "WORLD_SIZE": "2"}, "MASTER_ADDR/MASTER_PORT are not both set"),
        ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
         "rank 3 is outside"),
        ({"OMPI_COMM_WORLD_RANK": "0"}, "OMPI_COMM_WORLD_SIZE missing"),
        ({"PMI_SIZE": "x", "PMI_RANK": "0"}, "PMI_SIZE='x'"),
        ({**SM_ENV, "SM_CURRENT_HOST": "algo-9"}, "SM_CURRENT_HOST='algo-9' is not in SM_HOSTS"),
        ({**SM_ENV, "SM_HOSTS": "algo-1,algo-2"}, "SM_HOSTS=.* is not JSON"),
        ({**SM_ENV, "SM_HOSTS": "[]"}, "non-empty JSON list"),
        ({"SM_HOSTS": '["algo-1"]'}, "SM_CURRENT_HOST missing"),
        ({**SM_ENV, "SM_NUM_GPUS": "four"}, "SM_NUM_GPUS='four'"),
    ],
)
def test_wrong_or_partial_environments_are_refused(env, match):
    with pytest.raises(SpecError, match=match):
        detect_runtime(env)


def test_detect_runtime_reads_os_environ_by_default(monkeypatch):
    for k in list(os.environ):
        if k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "OMPI_", "PMI_", "SM_", "PET_", "TORCHELASTIC", "MASTER_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(SpecError, match="WORLD_SIZE"):
        detect_runtime()


# ---------------------------------------------------------------- setup_distributed


def test_setup_single_process_has_no_group():
    info = setup_distributed(env={}, device="cpu")
    assert (info.rank, info.world_size, info.backend, info.runtime) == (0, 1, None, "single")
    assert info.is_main and not info.distributed
    assert info.device == torch.device("cpu")
    teardown()
    teardown()


def test_setup_rejects_unknown_backend():
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    with pytest.raises(SpecError, match="backend 'tcp'"):
        setup_distributed("tcp", env=env, device="cpu")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WORKER = textwrap.dedent(
    """
    import json, torch
    from dtrain.training import setup_distributed, teardown, barrier, all_reduce_mean, all_reduce_sum
    info = setup_distributed(device="cpu", timeout_s=60)
    mean = all_reduce_mean(torch.tensor([info.rank + 1.0]))
    total = all_reduce_sum(torch.tensor([10.0 ** info.rank]))
    barrier()
    teardown()
    teardown()
    print(json.dumps({"rank": info.rank, "world": info.world_size, "backend": info.backend,
                      "runtime": info.runtime, "distributed": info.distributed,
                      "mean": mean.item(), "sum": total.item()}))
    """
)


def _two_ranks(script: str) -> list[dict]:
    """Run `script` as ranks 0 and 1 of a gloo group (torchrun's variables, set by hand); the
    last stdout line of each, as JSON, in rank order."""
    port = _free_port()
    launch_vars = ("RANK", "WORLD_SIZE", "LOCAL_", "OMPI_", "PMI_", "SM_", "PET_", "MASTER_", "TORCHELASTIC")
    base = {k: v for k, v in os.environ.items() if not k.startswith(launch_vars)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            env={**base, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "RANK": str(r), "WORLD_SIZE": "2",
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    return sorted((json.loads(out.strip().splitlines()[-1]) for out, _ in outs), key=lambda r: r["rank"])


def test_two_real_processes_reduce_over_gloo():
    results = _two_ranks(WORKER)
    assert [r["rank"] for r in results] == [0, 1]
    for r in results:
        assert (r["world"], r["backend"], r["runtime"], r["distributed"]) == (2, "gloo", "torchrun", True)
        assert r["mean"] == pytest.approx(1.5)
        assert r["sum"] == pytest.approx(11.0)


BUFFERS_WORKER = textwrap.dedent(
    """
    import json, torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from dtrain.training import setup_distributed, teardown, broadcast_buffers
    info = setup_distributed(device="cpu", timeout_s=60)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                torch.nn.Linear(64, 2))
    ddp, opt = DDP(model), torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):  # each rank its own batches
        g = torch.Generator().manual_seed(100 * info.rank + step)
        opt.zero_grad()
        ddp(torch.randn(4, 3, 6, 6, generator=g) * (1 + info.rank)).square().mean().backward()
        opt.step()
    state = lambda: {k: v.tolist() for k, v in model.state_dict().items()}
    before = state()
    broadcast_buffers(model)
    print(json.dumps({"rank": info.rank, "before": before, "after": state()}))
    teardown()
    """
)


@pytest.mark.slow
def test_broadcast_buffers_gives_every_rank_rank_0s_running_statistics():
    """After a DDP step each rank's BatchNorm statistics are its own (DDP broadcasts rank 0's
    before the forward, which then updates them from the rank's batch); validation must predict
    with the saved model's, rank 0's, on every rank."""
    r0, r1 = _two_ranks(BUFFERS_WORKER)
    params = [k for k in r0["before"] if not k.startswith("1.running_") and k != "1.num_batches_tracked"]
    assert {k: r1["before"][k] for k in params} == {k: r0["before"][k] for k in params}  # DDP: same weights
    assert r1["before"]["1.running_mean"] != r0["before"]["1.running_mean"]  # but each rank's own statistics
    assert r1["after"] == r0["after"] == r0["before"]  # until the broadcast gives every rank rank 0's


# ---------------------------------------------------------------- checkpoints


def test_save_atomic_round_trip_and_overwrite(tmp_path):
    path = tmp_path / "deep" / "ckpt-1.pt"
    save_atomic({"w": torch.arange(4.0), "step": 1}, path)
    save_atomic({"w": torch.ones(2), "step": 2}, path)
    state = load_checkpoint(path)
    assert state["step"] == 2 and torch.equal(state["w"], torch.ones(2))
    assert [p.name for p in path.parent.iterdir()] == ["ckpt-1.pt"]


def test_failed_save_keeps_the_old_checkpoint_and_leaves_no_temp(tmp_path, monkeypatch):
    path = checkpoint_path(tmp_path, 7)
    save_atomic({"step": 7}, path)

    def dies_midway(obj, f, *a, **k):
        f.write(b"half a checkpoint")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", dies_midway)
    with pytest.raises(StorageError, match="No space left"):
        save_atomic({"step": 8}, path)
    monkeypatch.undo()
    assert load_checkpoint(path) == {"step": 7}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-7.pt"]


def test_interrupted_save_is_cleaned_up(tmp_path, monkeypatch):
    def interrupted(obj, f, *a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_atomic({}, tmp_path / "ckpt-1.pt")
    assert list(tmp_path.iterdir()) == []


def test_latest_checkpoint_orders_by_step_and_ignores_partial_files(tmp_path):
    assert latest_checkpoint(tmp_path / "absent") is None
    assert latest_checkpoint(tmp_path) is None
    for step in (2, 9, 10):
        save_atomic({"step": step}, checkpoint_path(tmp_path, step))
    (tmp_path / ".ckpt-11.pt.abc123.tmp").write_bytes(b"partial")  # a save killed mid-way
    (tmp_path / "ckpt-12.pt.tmp").write_bytes(b"partial")
    (tmp_path / "ckpt-x.pt").write_bytes(b"junk")
    (tmp_path / "ckpt-99.pt").mkdir()
    assert latest_checkpoint(tmp_path) == tmp_path / "ckpt-10.pt"


def test_damaged_checkpoint_is_a_data_error(tmp_path):
    bad = tmp_path / "ckpt-1.pt"
    bad.write_bytes(b"\x00not a torch file")
    with pytest.raises(DataError, match="ckpt-1.pt cannot be loaded") as got:
        load_checkpoint(bad)
    assert "\n" not in str(got.value) and str(got.value).endswith("use another checkpoint")
    torch.save({"model": Path("x")}, tmp_path / "ckpt-3.pt")  # an object weights_only refuses: torch's long advice
    with pytest.raises(DataError, match="ckpt-3.pt cannot be loaded") as got:
        load_checkpoint(tmp_path / "ckpt-3.pt")
    assert "\n" not in str(got.value)
    with pytest.raises(DataError, match="does not exist"):
        load_checkpoint(tmp_path / "ckpt-2.pt")


# ---------------------------------------------------------------- metrics


def test_metrics_writer_appends_json_lines(tmp_path):
    path = tmp_path / "run" / "metrics.jsonl"
    with MetricsWriter(path) as m:
        m.log(step=1, loss=torch.tensor(2.5), lr=0.1)
        m.log(step=2, loss=float("nan"), path=Path("/x"))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["loss"] == 2.5 and rows[0]["lr"] == 0.1
    assert rows[1]["loss"] is None and rows[1]["path"] == "/x"
    assert all(isinstance(r["time"], float) and r["time"] > 1e9 for r in rows)


def test_disabled_metrics_writer_writes_nothing(tmp_path):
    with MetricsWriter(tmp_path / "m.jsonl", enabled=False) as m:
        m.log(step=1)
    assert not (tmp_path / "m.jsonl").exists()


def test_metrics_writer_refuses_unserialisable_values_and_closed_use(tmp_path):
    m = MetricsWriter(tmp_path / "m.jsonl")
    with pytest.raises(SpecError, match="object"):
        m.log(step=1, model=object())
    m.close()
    m.close()
    with pytest.raises(SpecError, match="closed"):
        m.log(step=2)


def test_metrics_writer_never_appends_through_a_link(tmp_path, monkeypatch):
    victim = tmp_path / "victim.txt"
    victim.write_text("kept\n")
    (tmp_path / "metrics.jsonl").symlink_to(victim)
    with pytest.raises(SpecError, match="metrics.jsonl is a symbolic link: remove it"):
        MetricsWriter(tmp_path / "metrics.jsonl")
    mirror = tmp_path / "mirror.jsonl"
    mirror.symlink_to(victim)  # the platform's copy, named by DTRAIN_METRICS_FILE
    monkeypatch.setenv("DTRAIN_METRICS_FILE", str(mirror))
    with pytest.raises(SpecError, match="mirror.jsonl is a symbolic link"):
        MetricsWriter(tmp_path / "own.jsonl")
    assert victim.read_text() == "kept\n"


def test_read_metrics_skips_a_torn_last_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
    assert [r["step"] for r in read_metrics(path)] == [1, 2]


def test_a_one_process_local_job_is_single_not_torchrun():
    """dtrain's one-process launch (`dtrain submit`, launcher none) runs the command under plain
    `python` (rankrun, no torchrun) and gives it RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 so a torchrun script
    runs unchanged: cifar10 logged 'runtime=torchrun world_size=1' of a run torchrun never started."""
    from dtrain.backends.local.launch import job_env
    from dtrain.backends.local.rankrun import contract_env
    from dtrain.spec import JobSpec

    env = contract_env(job_env(JobSpec(name="one", command=["python", "train.py"]), devices=[[]], master_port=1,
                               attempt=0, available=[]))
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("0", "1", "0")  # still there for the script
    assert detect_runtime(env)["runtime"] == "single"
    # `mpirun -np 1` (its rank's OMPI_* become the same variables) is mpi; torchrun and a Kubeflow pod stay theirs
    assert detect_runtime(contract_env({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}))["runtime"] == "mpi"
    one = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "h",
           "MASTER_PORT": "1"}
    assert detect_runtime({**one, "TORCHELASTIC_RUN_ID": "none"})["runtime"] == "torchrun"
    assert detect_runtime({**one, "PET_NNODES": "1"})["runtime"] == "pytorchjob"


def test_a_local_submit_mpi_jobs_ranks_are_mpi_not_torchrun():
    """A `dtrain submit-mpi` job's ranks are started by mpirun, and dtrain's rank wrapper gives each the
    PyTorchJob variables (RANK, LOCAL_RANK, ...) from OpenMPI's: cifar10 logged 'runtime=torchrun' of a job the
    user submitted as MPI, which no torchrun started. The rank and local rank are still OpenMPI's."""
    from dtrain.backends.local.launch import job_env
    from dtrain.backends.local.rankrun import contract_env
    from dtrain.spec import JobSpec

    spec = JobSpec(name="mpi", command=["python", "train.py"], launcher="mpi", processes=2)
    env = job_env(spec, devices=[[], []], master_port=1, attempt=0, available=[])
    mpirun = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
              "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    env = contract_env({**env, **mpirun})
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("1", "2", "1")  # still there for the script
    info = detect_runtime(env)
    assert (info["runtime"], info["rank"], info["world_size"], info["local_rank"]) == ("mpi", 1, 2, 1)
    # torchrun under mpirun, and variables of a launcher that are not OpenMPI's, stay torchrun's
    assert detect_runtime({**env, "TORCHELASTIC_RUN_ID": "x"})["runtime"] == "torchrun"
    assert detect_runtime({**env, "RANK": "0"})["runtime"] == "torchrun"
