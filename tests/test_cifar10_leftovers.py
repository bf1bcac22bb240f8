"""The CIFAR10 workload on each platform's own terms: where the model goes under dtrain, SageMaker's
hyperparameters as its training toolkit passes them (None is ''), its failure file, a container
started without the toolkit (/opt/ml/checkpoints restored on a spot restart, several hosts named
only in resourceconfig.json), and the local SageMaker contract's arguments."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import DTRAIN, Dtrain
from test_cifar10 import LAUNCH_PREFIXES, REPO, TRAIN, _env, _free_port

from dtrain.backends.sagemaker import contract
from dtrain.errors import ConflictError, SpecError
from dtrain.workloads.cifar10.data import write_synthetic
from dtrain.workloads.cifar10.model import Net
from dtrain.workloads.cifar10.train import CHECKPOINT_LOCK, parse_args, train

SMALL = ["--max-steps", "2", "--batch-size", "4", "--log-interval", "0"]


def _clean_env(monkeypatch) -> None:
    """No launcher, SageMaker or dtrain job variables of the test runner reach the parser."""
    for k in list(os.environ):
        if k.startswith((*LAUNCH_PREFIXES, "DTRAIN_MODEL_DIR", "DTRAIN_CHECKPOINT_DIR", "DTRAIN_METRICS_FILE")):
            monkeypatch.delenv(k)


# ---------------------------------------------------------------- the model folder under dtrain


@pytest.mark.slow
def test_a_dtrain_job_without_model_dir_saves_where_artifacts_looks(dt: Dtrain, tmp_path):
    """The same command as under plain torchrun, without --model-dir: `dtrain artifacts` finds the model."""
    write_synthetic(tmp_path / "data", fmt="binary", n_train=20, n_test=4, seed=0)
    dt("submit", "cifar", "--cpu", "1", "--", "python", "-m", "dtrain.workloads.cifar10", "train",
       "--data-dir", "data", *SMALL, cwd=str(tmp_path))
    info = dt.wait_for("cifar", {"Succeeded", "Failed"}, timeout=180)
    assert info["status"] == "Succeeded", dt("logs", "cifar").stdout
    dt("artifacts", "cifar", "--to", str(tmp_path / "got"))
    Net().load_state_dict(torch.load(tmp_path / "got" / "model.pth", weights_only=True))
    assert not (tmp_path / "model").exists()  # not the plain-torchrun fallback in the working folder


def test_model_dir_defaults_follow_the_platform(monkeypatch, tmp_path):
    _clean_env(monkeypatch)
    base = ["--data-dir", str(tmp_path)]
    assert parse_args(base).model_dir == "model"  # plain torchrun
    monkeypatch.setenv("DTRAIN_MODEL_DIR", "/jobs/x/model")  # a dtrain job (local backend)
    assert parse_args(base).model_dir == "/jobs/x/model"
    assert parse_args(base + ["--model-dir", "mine"]).model_dir == "mine"  # the command line wins
    assert parse_args(base + ["--model-dir", ""]).model_dir == "/jobs/x/model"  # '' is the default
    monkeypatch.setenv("SM_MODEL_DIR", "/opt/ml/model")  # SageMaker
    assert parse_args(base).model_dir == "/opt/ml/model"


# ---------------------------------------------------------------- SageMaker's hyperparameters


def test_null_or_blank_hyperparameters_mean_the_default(monkeypatch, tmp_path):
    """The SDK sends a hyperparameter set to None as JSON null; the toolkit passes it as `--name ''`."""
    _clean_env(monkeypatch)
    base = ["--data-dir", str(tmp_path)]
    monkeypatch.setenv("SM_HPS", json.dumps({"epochs": None, "resume": None, "max-steps": None, "device": ""}))
    cfg = parse_args(base)
    assert (cfg.epochs, cfg.resume, cfg.max_steps, cfg.device) == (2, True, 0, None)  # resume stays on
    cfg = parse_args(base + ["--epochs", "", "--max-steps", "", "--resume", "", "--lr", " "])
    assert (cfg.epochs, cfg.max_steps, cfg.resume, cfg.lr) == (2, 0, True, 0.001)
    monkeypatch.setenv("SM_OUTPUT_DATA_DIR", "/opt/ml/output/data")
    assert parse_args(base + ["--metrics-file", ""]).metrics_file == "/opt/ml/output/data/metrics.jsonl"


def test_null_values_in_hyperparameters_json_mean_the_default(monkeypatch, tmp_path):
    import dtrain.workloads.cifar10.train as train_mod

    _clean_env(monkeypatch)
    path = tmp_path / "hyperparameters.json"
    monkeypatch.setattr(train_mod, "HYPERPARAMETERS_FILE", path)
    path.write_text(json.dumps({"epochs": "null", "resume": "null", "batch-size": '"8"', "max_steps": ""}))
    cfg = parse_args(["--data-dir", str(tmp_path)])
    assert (cfg.epochs, cfg.resume, cfg.batch_size, cfg.max_steps) == (2, True, 8, 0)


def test_the_local_contract_passes_hyperparameters_as_the_toolkit_does():
    """sagemaker-training's mapping.to_cmd_args and to_env_vars: names sorted, -k for one letter,
    str() of the value (None -> '', False -> 'False'), an object as k=v pairs; SM_HP_<NAME> as named."""
    hps = {"lr": "0.05", "k": "1", "resume": "false", "max-steps": "null", "obj": '{"b": 2, "a": 1}',
           "name": '"abc"', "sagemaker_program": '"train.py"'}
    req = {"HyperParameters": hps, "ResourceConfig": {"InstanceCount": 2, "InstanceType": "ml.m5.xlarge"}}
    assert contract.user_args(req) == ["-k", "1", "--lr", "0.05", "--max-steps", "", "--name", "abc",
                                       "--obj", "a=1,b=2", "--resume", "False"]
    env = contract.environment(req, "algo-2", num_cpus=1)
    assert (env["SM_HP_MAX-STEPS"], env["SM_HP_RESUME"], env["SM_HP_OBJ"]) == ("", "false", '{"a":1,"b":2}')
    assert json.loads(env["SM_USER_ARGS"]) == contract.user_args(req)
    assert json.loads(env["SM_HPS"])["max-steps"] is None


# ---------------------------------------------------------------- the failure file


@pytest.mark.slow
def test_an_error_on_sagemaker_is_written_to_the_failure_file(tmp_path):
    out = tmp_path / "output"
    out.mkdir()
    env = _env(SM_OUTPUT_DIR=str(out))
    for command in (TRAIN, [DTRAIN, "cifar10", "train"]):  # python -m, and the dtrain CLI's own verb
        r = subprocess.run(command + ["--data-dir", str(tmp_path), "--epochs", "0"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and r.stderr.endswith("error: --epochs 0 is out of range: give 1 to 10000, e.g. --epochs 1\n")
        assert (out / "failure").read_text() == "--epochs 0 is out of range: give 1 to 10000, e.g. --epochs 1\n"
        (out / "failure").unlink()
    r = subprocess.run(TRAIN + ["--epochs"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2  # a usage error too
    assert (out / "failure").read_text() == ("dtrain cifar10 train: error: argument --epochs: expected one "
                                             "argument\n")
    # a failure already there (another rank's, the first) stays; a link is never written through
    r = subprocess.run(TRAIN + ["--epochs", "0"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert (out / "failure").read_text().endswith("argument --epochs: expected one argument\n")
    (out / "failure").unlink()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (out / "failure").symlink_to(victim)
    r = subprocess.run(TRAIN + ["--epochs", "0"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and victim.read_text() == "precious\n"


def test_no_failure_file_is_written_off_sagemaker(tmp_path):
    r = subprocess.run(TRAIN + ["--data-dir", str(tmp_path), "--epochs", "0"], cwd=tmp_path, env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_local_sagemaker_job_fails_with_the_workloads_own_line(home, tmp_path):
    """Under torchrun the last line a host logs is torchrun's row of '='; the FailureReason must be
    the workload's own error, as the failure file gives it to SageMaker."""
    write_synthetic(tmp_path / "data", fmt="binary", n_train=20, n_test=4, seed=0)
    d = Dtrain(home, env=_env())
    d("config", "backend", "sagemaker")
    (tmp_path / "code").mkdir()  # the workload comes from dtrain's environment; the checkout may hold demo-out/
    d("submit-dist", "bad", "--local", "--processes", "2", "--channel", f"training=file://{tmp_path / 'data'}",
      "--source-dir", str(tmp_path / "code"), "-e", "OMP_NUM_THREADS=1", "--", "python", "-m",
      "dtrain.workloads.cifar10", "train", "--epochs", "0", cwd=str(REPO))
    info = d.wait_for("bad", {"Succeeded", "Failed"}, timeout=120)
    assert info["status"] == "Failed"
    # SageMaker's words (the host is named in the Failed event: either may fail first, both run the same command)
    assert info["message"] == "AlgorithmError: --epochs 0 is out of range: give 1 to 10000, e.g. --epochs 1, exit code: 1", \
        info["message"]
    assert re.fullmatch(r"Training job failed: host algo-[12] exited with code 1", info["events"][-1]["message"])


# ---------------------------------------------------------------- SageMaker without the training toolkit


def _opt_ml(monkeypatch, tmp_path: Path, *, hosts: list[str] | None = None, current: str = "algo-1") -> Path:
    """A copy of /opt/ml as SageMaker lays it out, with the workload pointed at it."""
    import dtrain.workloads.cifar10.train as train_mod

    opt_ml = tmp_path / "opt" / "ml"
    for sub in ("input/config", "input/data/training", "model", "checkpoints"):
        (opt_ml / sub).mkdir(parents=True, exist_ok=True)
    if hosts is not None:
        config = {"current_host": current, "hosts": hosts, "network_interface_name": "eth0"}
        (opt_ml / "input/config/resourceconfig.json").write_text(json.dumps(config))
    for name, sub in (("HYPERPARAMETERS_FILE", "input/config/hyperparameters.json"),
                      ("RESOURCE_CONFIG_FILE", "input/config/resourceconfig.json"),
                      ("OPT_ML_TRAINING", "input/data/training"), ("OPT_ML_MODEL", "model"),
                      ("OPT_ML_OUTPUT_DATA", "output/data"), ("OPT_ML_CHECKPOINTS", "checkpoints")):
        monkeypatch.setattr(train_mod, name, opt_ml / sub, raising=False)  # the old code lacks some
    return opt_ml


def test_a_spot_restart_without_the_toolkit_resumes_from_opt_ml_checkpoints(monkeypatch, tmp_path, capsys):
    """SageMaker restores CheckpointConfig's S3 prefix into /opt/ml/checkpoints; /opt/ml/model starts empty."""
    import shutil

    _clean_env(monkeypatch)
    opt_ml = _opt_ml(monkeypatch, tmp_path, hosts=["algo-1"])
    write_synthetic(opt_ml / "input/data/training", fmt="binary", n_train=40, n_test=4, seed=0)
    cfg = parse_args(["--max-steps", "2", "--batch-size", "4", "--log-interval", "0", "--checkpoint-every", "1"])
    assert cfg.checkpoint_dir == str(opt_ml / "checkpoints")
    train(cfg)
    assert (opt_ml / "checkpoints" / "ckpt-2.pt").is_file()
    assert not list((opt_ml / "model").glob("ckpt-*"))  # model.tar.gz holds the model, not checkpoints
    shutil.rmtree(opt_ml / "model")  # the spot restart: a new instance, the checkpoints restored
    (opt_ml / "model").mkdir()
    capsys.readouterr()
    train(parse_args(["--max-steps", "4", "--batch-size", "4", "--log-interval", "0"]))
    assert "resumed from step 2" in capsys.readouterr().out
    assert (opt_ml / "model" / "model.pth").is_file()


def test_a_stray_opt_ml_checkpoints_outside_sagemaker_is_not_used(monkeypatch, tmp_path):
    _clean_env(monkeypatch)
    _opt_ml(monkeypatch, tmp_path)  # no resourceconfig.json: not a SageMaker container
    assert parse_args(["--data-dir", str(tmp_path)]).checkpoint_dir is None
    monkeypatch.setenv("DTRAIN_CHECKPOINT_DIR", str(tmp_path / "mine"))
    _opt_ml(monkeypatch, tmp_path / "b", hosts=["algo-1"])
    assert parse_args(["--data-dir", str(tmp_path)]).checkpoint_dir is None  # the variable decides, later


_HOST = """
import sys
from pathlib import Path
import dtrain.workloads.cifar10.train as t
t.RESOURCE_CONFIG_FILE = Path(sys.argv[1])
from dtrain.training import exit_process
from dtrain.workloads.inputs import one_line_errors
exit_process(one_line_errors(t.main, sys.argv[2:]))
"""


@pytest.mark.slow
def test_hosts_named_only_in_the_resource_config_train_as_one_job(tmp_path):
    """Without the toolkit SageMaker starts the script once per host and sets no variable: the
    hosts must still form one process group, not each train alone."""
    write_synthetic(tmp_path / "data", fmt="binary", n_train=40, n_test=4, seed=0)
    port, procs = _free_port(), []
    for host in ("algo-1", "algo-2"):
        config = tmp_path / f"{host}.json"
        config.write_text(json.dumps({"current_host": host, "hosts": ["algo-1", "algo-2"]}))
        env = _env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))  # instead of resolving algo-1
        args = ["--data-dir", "data", "--model-dir", f"m-{host}", *SMALL]
        procs.append(subprocess.Popen([sys.executable, "-c", _HOST, str(config), *args], cwd=tmp_path, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        outs = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "runtime=sagemaker world_size=2" in outs[0][0] and "FINAL" in outs[0][0]
    assert "FINAL" not in outs[1][0] and not (tmp_path / "m-algo-2" / "model.pth").exists()  # rank 0 alone saves


@pytest.mark.parametrize("text", ["{oops", json.dumps({"hosts": ["algo-1", "algo-2"], "current_host": "algo-9"}),
                                  json.dumps({"hosts": "algo-1", "current_host": "algo-1"})])
def test_a_malformed_resource_config_is_one_line(monkeypatch, tmp_path, text):
    from dtrain.workloads.cifar10.train import _launch_env

    _clean_env(monkeypatch)
    opt_ml = _opt_ml(monkeypatch, tmp_path, hosts=[])
    (opt_ml / "input/config/resourceconfig.json").write_text(text)
    with pytest.raises(SpecError, match=r"resourceconfig\.json (cannot be read as JSON|must name the job's hosts)"):
        _launch_env()


# ---------------------------------------------------------------- model.tar.gz


@pytest.mark.parametrize("where", ["middle", "crc"])
def test_a_damaged_model_archive_is_refused_not_unpacked_wrong(tmp_path, where):
    """gzip's CRC sits at the end of the stream, past what tarfile reads: a model.tar.gz damaged in
    its data (or its CRC) used to unpack to wrong weights without a word."""
    import io
    import tarfile

    from dtrain.backends.sagemaker.archive import unpack
    from dtrain.errors import DataError

    data = os.urandom(300_000)  # stored, not deflated: damage to it breaks nothing but the CRC
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("model.pth")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    good = buf.getvalue()
    (tmp_path / "good.tar.gz").write_bytes(good)
    assert (unpack(tmp_path / "good.tar.gz", tmp_path / "ok") / "model.pth").read_bytes() == data
    bad = bytearray(good)
    for i in (range(len(bad) // 2, len(bad) // 2 + 64) if where == "middle" else [len(bad) - 6]):
        bad[i] ^= 0xFF
    (tmp_path / "bad.tar.gz").write_bytes(bytes(bad))
    with pytest.raises(DataError, match=r"^refusing .*bad\.tar\.gz: CRC check failed .*the archive is damaged"):
        unpack(tmp_path / "bad.tar.gz", tmp_path / "to")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tar.gz", "good.tar.gz", "ok"]  # nothing left behind


# ---------------------------------------------------------------- one training writes a --model-dir


HOLD = """
import fcntl, sys
f = open(sys.argv[1], "a")
fcntl.lockf(f.fileno(), fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def _holding(path: Path) -> subprocess.Popen:
    """A first run, as its lock shows it: another process holding `path` until its stdin closes."""
    first = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    assert first.stdout.readline() == "held\n"
    return first


def test_a_second_training_on_one_model_dir_is_refused_and_writes_nothing(monkeypatch, tmp_path):
    """Two jobs on one volume, one --model-dir: both trained, metrics.jsonl holding both runs' lines (interleaved)
    and each replacing the other's checkpoints and model.pth. The lock dies with the first run's process: a
    rerun (a restarted job) trains."""
    from dtrain.errors import ConflictError

    _clean_env(monkeypatch)
    write_synthetic(tmp_path / "data", fmt="binary", n_train=20, n_test=4, seed=0)
    out = tmp_path / "model"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    argv = ["--data-dir", str(tmp_path / "data"), "--model-dir", str(out), "--device", "cpu", *SMALL]
    first = _holding(out / "metrics.jsonl")
    try:
        with pytest.raises(ConflictError, match=f"another training is writing {re.escape(str(out))} "
                                                r"\(it holds metrics.jsonl\): .*another --model-dir"):
            train(parse_args(argv))
        assert sorted(p.name for p in out.iterdir()) == ["metrics.jsonl"]
        assert (out / "metrics.jsonl").read_text() == '{"step": 1}\n'
    finally:
        first.communicate("")
    assert train(parse_args(argv))["steps"] == 2  # the first run ended: this one trains
    assert (out / "model.pth").is_file()


def test_the_lock_is_on_the_metrics_file_and_adds_nothing_to_sagemakers_model(monkeypatch, tmp_path):
    """SageMaker's /opt/ml/model is the job's own and becomes model.tar.gz: the lock adds no file there (it is
    on the metrics file, in output/data), and a --metrics-file held by another run names that flag."""
    from dtrain.errors import ConflictError

    _clean_env(monkeypatch)
    write_synthetic(tmp_path / "data", fmt="binary", n_train=20, n_test=4, seed=0)
    model, output = tmp_path / "opt_ml" / "model", tmp_path / "opt_ml" / "output" / "data"
    monkeypatch.setenv("SM_MODEL_DIR", str(model))
    monkeypatch.setenv("SM_OUTPUT_DATA_DIR", str(output))
    argv = ["--data-dir", str(tmp_path / "data"), "--device", "cpu", "--checkpoint-dir", str(tmp_path / "ckpt"), *SMALL]
    assert train(parse_args(argv))["steps"] == 2
    assert sorted(p.name for p in model.iterdir()) == ["model.pth"]
    shared = tmp_path / "shared.jsonl"
    first = _holding(shared)
    try:
        with pytest.raises(ConflictError, match=r"another --metrics-file"):
            train(parse_args([*argv, "--no-resume", "--metrics-file", str(shared)]))
    finally:
        first.communicate("")


@pytest.mark.parametrize("own", ["--model-dir", "--checkpoint-dir"])
def test_a_run_with_its_own_metrics_file_on_a_shared_model_dir_is_refused(monkeypatch, tmp_path, own):
    """Two runs on one --model-dir, each given its own --metrics-file: each locked its own file, so neither was
    refused, and they shared the folder's checkpoints and model.pth. The checkpoint folder, where it is not the
    metrics file's, has a lock of its own; the refusal names the folder and the flag that gives this run another."""
    from dtrain.workloads.cifar10.train import CHECKPOINT_LOCK

    _clean_env(monkeypatch)
    write_synthetic(tmp_path / "data", fmt="binary", n_train=20, n_test=4, seed=0)
    out, ckpt = tmp_path / "model", tmp_path / "ckpt"
    shared = out if own == "--model-dir" else ckpt
    shared.mkdir()
    argv = ["--data-dir", str(tmp_path / "data"), "--model-dir", str(out), "--device", "cpu", *SMALL,
            *(["--checkpoint-dir", str(ckpt)] if own == "--checkpoint-dir" else [])]
    first = _holding(shared / CHECKPOINT_LOCK)  # the first run, given --metrics-file a.jsonl
    try:
        refusal = (f"another training is writing {shared} (it holds {CHECKPOINT_LOCK}): wait for it to end, "
                   f"or give this run another {own}")
        with pytest.raises(ConflictError, match=f"^{re.escape(refusal)}$"):
            train(parse_args([*argv, "--metrics-file", str(tmp_path / "b.jsonl")]))
        assert sorted(p.name for p in shared.iterdir()) == [CHECKPOINT_LOCK]
    finally:
        first.communicate("")
    assert train(parse_args([*argv, "--metrics-file", str(tmp_path / "b.jsonl")]))["steps"] == 2
    assert (out / "model.pth").is_file() and (shared / "ckpt-2.pt").is_file()


def test_runs_sharing_only_a_model_dir_are_refused(monkeypatch, tmp_path):
    """Two runs on one --model-dir, each with its own --metrics-file and --checkpoint-dir: neither was refused,
    and both wrote model.pth, the last to end replacing the other's whole. The model folder, where it is neither
    the metrics file's nor the checkpoints', has a lock of its own."""
    _clean_env(monkeypatch)
    write_synthetic(tmp_path / "data", fmt="binary", n_train=20, n_test=4, seed=0)
    out = tmp_path / "model"
    out.mkdir()
    argv = ["--data-dir", str(tmp_path / "data"), "--model-dir", str(out), "--device", "cpu", *SMALL,
            "--metrics-file", str(tmp_path / "b.jsonl"), "--checkpoint-dir", str(tmp_path / "ckpt-b")]
    # the first run, given --metrics-file a.jsonl --checkpoint-dir ckpt-a
    refused = _refused_while(_holding(out / CHECKPOINT_LOCK), argv)
    assert refused == (f"another training is writing {out} (it holds {CHECKPOINT_LOCK}): wait for it to end, "
                            "or give this run another --model-dir")
    assert sorted(p.name for p in out.iterdir()) == [CHECKPOINT_LOCK]
    assert train(parse_args(argv))["steps"] == 2
    assert sorted(p.name for p in out.iterdir()) == [CHECKPOINT_LOCK, "model.pth"]


def test_no_checkpoint_lock_where_the_metrics_file_is_the_lock(monkeypatch, tmp_path):
    """A plain run's model folder (metrics, checkpoints and model in one folder) gets no file of the lock's."""
    _clean_env(monkeypatch)
    write_synthetic(tmp_path / "data", fmt="binary", n_train=20, n_test=4, seed=0)
    out = tmp_path / "model"
    train(parse_args(["--data-dir", str(tmp_path / "data"), "--model-dir", str(out), "--device", "cpu", *SMALL]))
    assert sorted(p.name for p in out.iterdir()) == ["ckpt-2.pt", "metrics.jsonl", "model.pth"]


@pytest.mark.slow
@pytest.mark.parametrize("flag, held", [("--model-dir", "model/metrics.jsonl"),
                                        ("--metrics-file", "shared/m.jsonl"),
                                        ("--model-dir", "model/.training.lock")])
def test_every_rank_stops_when_rank_0_finds_the_model_dir_held(tmp_path, flag, held):
    """Under torchrun only rank 0 takes the lock: the others stop with it, each with its line, instead of
    waiting in their first collective until the timeout; every rank names the folder and the flag rank 0
    names (the others said --model-dir to a run given its own --metrics-file)."""
    write_synthetic(tmp_path / "data", fmt="binary", n_train=20, n_test=4, seed=0)
    out, held = tmp_path / "model", tmp_path / held
    out.mkdir()
    held.parent.mkdir(exist_ok=True)
    first = _holding(held)
    try:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
               str(_free_port()), "-m", "dtrain.workloads.cifar10", "train", "--data-dir", str(tmp_path / "data"),
               "--model-dir", str(out), "--device", "cpu", *SMALL]
        if held.name == "m.jsonl":
            cmd += ["--metrics-file", str(held), "--checkpoint-dir", str(held.parent)]
        elif held.name == ".training.lock":  # a run with its own metrics file on a --model-dir another run writes
            cmd += ["--metrics-file", str(tmp_path / "own.jsonl")]
        proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=240)
    finally:
        first.communicate("")
    ranks = sorted(line for line in proc.stderr.splitlines() if line.startswith("error: "))  # torchrun adds its own
    assert proc.returncode != 0 and len(ranks) == 2, proc.stderr[-3000:]
    assert ranks[0].startswith(f"error: another training is writing {held.parent} (it holds {held.name})")
    assert ranks[1].startswith(f"error: rank 0 found another training writing {held.parent}, so rank 1 stops too")
    assert all(line.endswith(f"give this run another {flag}") for line in ranks), ranks
    assert sorted(p.name for p in held.parent.iterdir()) == [held.name] and held.read_text() == ""


@pytest.mark.slow
@pytest.mark.parametrize("found", ["link", "unwritable"])
def test_every_rank_stops_with_the_line_of_what_rank_0_found(tmp_path, found):
    """Rank 0's refusals other than another training's lock: a link planted at the checkpoint folder's lock file
    made the other ranks say 'rank 0 found another training writing ...'; a checkpoint folder that takes no file
    (/proc here; a read-only volume alike) raised on rank 0 before the all-reduce, and the others waited in their
    first collective. Every rank now stops with one line naming what rank 0 found."""
    write_synthetic(tmp_path / "data", fmt="binary", n_train=20, n_test=4, seed=0)
    out = tmp_path / "model"
    out.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
           str(_free_port()), "-m", "dtrain.workloads.cifar10", "train", "--data-dir", str(tmp_path / "data"),
           "--model-dir", str(out), "--device", "cpu", *SMALL, "--metrics-file", str(tmp_path / "own.jsonl")]
    if found == "link":
        (out / ".training.lock").symlink_to(tmp_path / "elsewhere")
        rank0 = f"error: {out / '.training.lock'} is a symbolic link: training locks a file of its own there"
        rank1 = (f"error: rank 0 found a symbolic link at {out / '.training.lock'}, so rank 1 stops too: remove the "
                 "link, or give this run another --model-dir")
    else:
        cmd += ["--checkpoint-dir", "/proc"]
        rank0 = "error: --checkpoint-dir /proc cannot be written (No such file or directory)"
        rank1 = ("error: rank 0 found that /proc cannot be written (No such file or directory), so rank 1 stops "
                 "too: use a folder you can write to, with free space, or give this run another --checkpoint-dir")
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=240)
    ranks = sorted(line for line in proc.stderr.splitlines() if line.startswith("error: "))  # torchrun adds its own
    assert proc.returncode != 0 and len(ranks) == 2, proc.stderr[-3000:]
    assert ranks[0].startswith(rank0) and ranks[1] == rank1, ranks
    assert not (tmp_path / "elsewhere").exists()


def test_a_rank_stopped_by_rank_0_names_what_rank_0_found(monkeypatch, tmp_path):
    """The other ranks' line from rank 0's number, the all-reduce faked (the torchrun test above runs the real
    one): a link at the lock file is a link, not another training."""
    from dtrain.training import DistInfo
    from dtrain.workloads import rank0
    from dtrain.workloads.cifar10.outputs import CHECKPOINT_LOCK, _one_training_writes

    _clean_env(monkeypatch)
    out = tmp_path / "model"
    out.mkdir()
    (out / CHECKPOINT_LOCK).symlink_to(tmp_path / "elsewhere")
    cfg = parse_args(["--data-dir", str(tmp_path), "--model-dir", str(out), "--metrics-file",
                      str(tmp_path / "own.jsonl"), "--checkpoint-dir", str(out)])
    reduced = []
    monkeypatch.setattr(rank0, "max_over_ranks", lambda value, device: reduced.append(value) or max(reduced))
    main = DistInfo(rank=0, local_rank=0, world_size=2, local_world_size=2, device=torch.device("cpu"), backend="gloo",
                    runtime="torchrun")
    with pytest.raises(SpecError, match="is a symbolic link: training locks a file of its own there"):
        _one_training_writes(cfg, main)
    with pytest.raises(SpecError) as e:
        _one_training_writes(cfg, dataclasses.replace(main, rank=1, local_rank=1))
    assert str(e.value) == (f"rank 0 found a symbolic link at {out / CHECKPOINT_LOCK}, so rank 1 stops too: remove "
                            "the link, or give this run another --model-dir")
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("where", ["lock file", "sagemaker folder"])
def test_a_lock_that_fails_oddly_is_one_line_on_every_rank(monkeypatch, tmp_path, where):
    """An OSError other than another training's hold from taking the lock (an I/O error of a network disk), after
    rank 0's checks passed: a traceback on rank 0 (hold raised it as it came). Rank 0 now names the folder and
    the error in one line, and every other rank stops with its own line naming them."""
    import errno
    import fcntl

    from dtrain.training import DistInfo
    from dtrain.workloads import rank0
    from dtrain.workloads.cifar10.outputs import _one_training_writes, check_outputs

    if where == "lock file":
        _clean_env(monkeypatch)
        folder = tmp_path / "model"
        folder.mkdir()
        argv = ["--data-dir", str(tmp_path), "--model-dir", str(folder), "--metrics-file", str(tmp_path / "own.jsonl")]
        fix = "give this run another --model-dir"
    else:
        folder = _in_sagemaker_container(monkeypatch, tmp_path) / "checkpoints"
        argv = ["--metrics-file", str(tmp_path / "own.jsonl"), "--model-dir", str(tmp_path / "model")]
        (tmp_path / "model").mkdir()
        fix = ("start one training per SageMaker job (each job's checkpoint folder is its own: the other training is "
               "one this job started)")

    def io_error(fd, op):
        raise OSError(errno.EIO, "Input/output error")

    def lockf(fd, op):  # the metrics file's lock takes; the folder's fails
        if os.readlink(f"/proc/self/fd/{fd}") == str(tmp_path / "own.jsonl"):
            return real_lockf(fd, op)
        io_error(fd, op)

    real_lockf = fcntl.lockf
    monkeypatch.setattr(fcntl, "flock", io_error)
    monkeypatch.setattr(fcntl, "lockf", lockf)
    cfg = parse_args(argv)
    cfg = dataclasses.replace(cfg, checkpoint_dir=str(check_outputs(cfg)))
    reduced = []
    monkeypatch.setattr(rank0, "max_over_ranks", lambda value, device: reduced.append(value) or max(reduced))
    main = DistInfo(rank=0, local_rank=0, world_size=2, local_world_size=2, device=torch.device("cpu"), backend="gloo",
                    runtime="torchrun")
    with pytest.raises(SpecError) as e:
        _one_training_writes(cfg, main)
    assert str(e.value) == (f"cannot lock {folder} to make this run the one training writing it (Input/output "
                            f"error): try again, or {fix}")
    with pytest.raises(SpecError) as e:
        _one_training_writes(cfg, dataclasses.replace(main, rank=1, local_rank=1))
    assert str(e.value) == f"rank 0 could not lock {folder} (Input/output error), so rank 1 stops too: try again, or {fix}"


def test_a_sagemaker_jobs_own_output_folder_held_names_no_flag_it_never_gave(monkeypatch, tmp_path):
    """On SageMaker the metrics file's default is in $SM_OUTPUT_DATA_DIR, the job's own folder (output.tar.gz):
    no other job writes it, so a training holding it is one this job started. The refusal said 'give this run
    another --metrics-file', a flag the SageMaker user never gave."""
    from dtrain.workloads.cifar10.outputs import _written_folders

    _clean_env(monkeypatch)
    write_synthetic(tmp_path / "data", fmt="binary", n_train=20, n_test=4, seed=0)
    model, output = tmp_path / "opt_ml" / "model", tmp_path / "opt_ml" / "output" / "data"
    output.mkdir(parents=True)
    monkeypatch.setenv("SM_MODEL_DIR", str(model))
    monkeypatch.setenv("SM_OUTPUT_DATA_DIR", str(output))
    argv = ["--data-dir", str(tmp_path / "data"), "--device", "cpu", "--checkpoint-dir", str(tmp_path / "ckpt"), *SMALL]
    refused = _refused_while(_holding(output / "metrics.jsonl"), argv)
    assert refused == (f"another training is writing {output} (it holds metrics.jsonl): wait for it to end, or "
                            "start one training per SageMaker job (each job's output folder is its own: the other "
                            "training is one this job started)")
    # a metrics file given elsewhere is the job's hyperparameter, not a flag of a command the user does not write
    monkeypatch.setenv("SM_TRAINING_ENV", "{}")
    cfg = parse_args([*argv, "--metrics-file", str(tmp_path / "shared.jsonl")])
    assert _written_folders(cfg)[0].fix == "give this run another hyperparameter metrics-file (--hp metrics-file=PATH)"


HOLD_FOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def _holding_folder(folder: Path) -> subprocess.Popen:
    """A first run in a SageMaker container, as its lock shows it: another process holding the folder itself."""
    first = subprocess.Popen([sys.executable, "-c", HOLD_FOLDER, str(folder)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert first.stdout.readline() == "held\n"
    return first

def _refused_while(first: subprocess.Popen, argv: list[str]) -> str:
    """The line of a training refused while `first` (_holding, _holding_folder) holds its lock; `first` then ends."""
    try:
        with pytest.raises(ConflictError) as e:
            train(parse_args(argv))
    finally:
        first.communicate("")
    return str(e.value)



def _in_sagemaker_container(monkeypatch, tmp_path: Path) -> Path:
    """_opt_ml's /opt/ml, which the lock (rank0.OPT_ML) and on_sagemaker (its resource config) see as SageMaker's."""
    import dtrain.training.resume as resume_mod
    from dtrain.workloads import rank0

    _clean_env(monkeypatch)
    opt_ml = _opt_ml(monkeypatch, tmp_path, hosts=["algo-1"])
    monkeypatch.setattr(resume_mod, "SAGEMAKER_RESOURCE_CONFIG", opt_ml / "input/config/resourceconfig.json")
    monkeypatch.setattr(rank0, "OPT_ML", opt_ml, raising=False)  # the old code lacks it
    write_synthetic(opt_ml / "input/data/training", fmt="binary", n_train=20, n_test=4, seed=0)
    return opt_ml


def test_on_sagemaker_the_checkpoint_lock_adds_no_file_to_what_sagemaker_syncs(monkeypatch, tmp_path):
    """SageMaker syncs /opt/ml/checkpoints to the job's S3 checkpoint prefix: the .training.lock rank 0 made there
    landed in S3 beside the checkpoints. A SageMaker container is alone on its host: the folder itself is locked
    (no file), and a second training of the job is still refused while the first holds it."""
    opt_ml = _in_sagemaker_container(monkeypatch, tmp_path)
    argv = ["--device", "cpu", "--metrics-file", str(tmp_path / "own.jsonl"), *SMALL]
    assert parse_args(argv).checkpoint_dir == str(opt_ml / "checkpoints")
    assert train(parse_args(argv))["steps"] == 2
    assert sorted(p.name for p in (opt_ml / "checkpoints").iterdir()) == ["ckpt-2.pt"]
    assert sorted(p.name for p in (opt_ml / "model").iterdir()) == ["model.pth"]  # its lock too is on the folder
    first = _holding_folder(opt_ml / "checkpoints")
    try:
        with pytest.raises(ConflictError, match=f"^another training is writing {re.escape(str(opt_ml))}/checkpoints: "):
            train(parse_args([*argv, "--max-steps", "4"]))
    finally:
        first.communicate("")
    assert sorted(p.name for p in (opt_ml / "checkpoints").iterdir()) == ["ckpt-2.pt"]
    # a folder of a file-system channel (EFS, FSx), which other jobs' hosts may share, keeps its lock file
    shared = opt_ml / "input/data/efs/ckpt"
    shared.mkdir(parents=True)
    assert train(parse_args([*argv, "--checkpoint-dir", str(shared)]))["steps"] == 2
    assert sorted(p.name for p in shared.iterdir()) == [".training.lock", "ckpt-2.pt"]


def test_on_sagemaker_the_checkpoint_lock_names_what_the_user_can_change_there(monkeypatch, tmp_path):
    """The refusal at a held checkpoint folder said 'give this run another --checkpoint-s3-uri' on SageMaker: the
    container is alone on its host, so the other training is one this job started, and another S3 URI changes
    nothing. Only a --local job's /opt/ml/checkpoints is its URI's folder on this machine, shared by the local
    jobs given that URI; a folder given by the hyperparameter checkpoint-dir names that hyperparameter."""
    from dtrain.workloads.cifar10.outputs import _written_folders

    opt_ml = _in_sagemaker_container(monkeypatch, tmp_path)
    argv = ["--device", "cpu", "--metrics-file", str(tmp_path / "own.jsonl"), *SMALL]
    refused = _refused_while(_holding_folder(opt_ml / "checkpoints"), argv)
    assert refused == (f"another training is writing {opt_ml / 'checkpoints'}: wait for it to end, or start one "
                            "training per SageMaker job (each job's checkpoint folder is its own: the other training "
                            "is one this job started)")
    monkeypatch.setenv("TRAINING_JOB_ARN", contract.job_arn("cifar"))  # a --local job's, as its runner sets it
    assert _written_folders(parse_args(argv))[1].fix == ("give this run another --checkpoint-s3-uri (local jobs "
                                                         "given one share its folder)")
    shared = opt_ml / "input/data/efs/ckpt"
    shared.mkdir(parents=True)
    cfg = parse_args([*argv, "--checkpoint-dir", str(shared)])
    assert _written_folders(cfg)[1].fix == "give this run another hyperparameter checkpoint-dir (--hp checkpoint-dir=PATH)"


def test_a_local_jobs_checkpoint_local_path_is_the_folder_its_checkpoint_uri_shares(monkeypatch, tmp_path):
    """A --local job given --checkpoint-local-path /mnt/ckpt sees its checkpoint URI's folder, which every local job
    given that URI shares, there: the refusal there said 'start one training per SageMaker job', as if the folder
    were the job's own, since only /opt/ml/checkpoints was taken for the shared one. Its /opt/ml/checkpoints is
    then the host's own folder."""
    from dtrain.workloads.cifar10.outputs import _written_folders

    opt_ml = _in_sagemaker_container(monkeypatch, tmp_path)
    mine = tmp_path / "mnt" / "ckpt"
    mine.mkdir(parents=True)
    (opt_ml / "input/config/checkpointconfig.json").write_text(json.dumps({"LocalPath": str(mine),
                                                                           "S3Uri": "s3://b/ckpt"}))
    monkeypatch.setenv("TRAINING_JOB_ARN", contract.job_arn("cifar"))  # a --local job's, as its runner sets it
    argv = ["--device", "cpu", "--metrics-file", str(tmp_path / "own.jsonl"), *SMALL]
    assert parse_args(argv).checkpoint_dir == str(mine)
    assert _written_folders(parse_args(argv))[1].fix == ("give this run another --checkpoint-s3-uri (local jobs "
                                                         "given one share its folder)")
    own = parse_args([*argv, "--checkpoint-dir", str(opt_ml / "checkpoints")])
    assert _written_folders(own)[1].fix.startswith("start one training per SageMaker job")


class _Writes:
    """A stderr that keeps each write() apart, as a pipe sees them."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("err", [ConflictError("another training is writing /m"),
                                 OSError(28, "No space left on device", "/m/model.pth")])
def test_a_workloads_error_line_is_one_write_so_ranks_sharing_a_pipe_cannot_join_lines(monkeypatch, err):
    """The ranks of one torchrun share its stderr pipe, which Python leaves unbuffered: print() wrote the
    line and its newline apart, and rank 1's line landed between rank 0's and its newline (CI saw
    '...--model-direrror: rank 0 found...'). Each error line is now one write, newline included."""
    from dtrain.workloads.inputs import one_line_errors

    stderr = _Writes()
    monkeypatch.setattr(sys, "stderr", stderr)

    def failing():
        raise err

    assert one_line_errors(failing) == 2
    assert len(stderr.writes) == 1 and stderr.writes[0].startswith("error: ") and stderr.writes[0].endswith("\n")
    assert stderr.writes[0].count("\n") == 1


def test_a_checkpoint_local_path_of_the_job_is_where_it_checkpoints(monkeypatch, tmp_path):
    """A job whose CheckpointConfig names its own LocalPath (--checkpoint-local-path /mnt/ckpt): SageMaker syncs that
    folder and restores into it, so the workload checkpoints there, found through checkpointconfig.json, with or
    without the toolkit's variables; /opt/ml/checkpoints is not the synced folder then."""
    from dtrain.training import resume

    _clean_env(monkeypatch)
    opt_ml = _opt_ml(monkeypatch, tmp_path, hosts=["algo-1"])
    mine = tmp_path / "mnt" / "ckpt"
    mine.mkdir(parents=True)
    config = opt_ml / "input/config/checkpointconfig.json"
    config.write_text(json.dumps({"LocalPath": str(mine), "S3Uri": "s3://b/ckpt"}))
    assert parse_args(["--data-dir", str(tmp_path)]).checkpoint_dir == str(mine)
    monkeypatch.setattr(resume, "SAGEMAKER_CHECKPOINT_CONFIG", config)
    assert resume.checkpoint_dir("out", {"SM_CURRENT_HOST": "algo-1"}) == mine
    config.write_text(json.dumps({"S3Uri": "s3://b/ckpt"}))  # no LocalPath: SageMaker's default
    assert parse_args(["--data-dir", str(tmp_path)]).checkpoint_dir == str(opt_ml / "checkpoints")
    assert resume.checkpoint_dir("out", {"SM_CURRENT_HOST": "algo-1"}) == Path("/opt/ml/checkpoints")


def test_batch_size_and_num_workers_come_from_the_jobs_environment_as_the_lanes_workload_reads_them(monkeypatch,
                                                                                                  tmp_path):
    """`dtrain submit-dist ... -e BATCH_SIZE=64 -- python -m dtrain.workloads.cifar10.train`, as the lanes demo is
    given its batch (Run:AI's `-e BATCH_SIZE=33`): the variable was ignored and the run trained on 4. A flag and a
    SageMaker hyperparameter win over it; a bad value is the variable's one line."""
    _clean_env(monkeypatch)
    data = ["--data-dir", str(tmp_path)]
    monkeypatch.setenv("BATCH_SIZE", "64")
    monkeypatch.setenv("NUM_WORKERS", "2")
    cfg = parse_args(data)
    assert (cfg.batch_size, cfg.num_workers) == (64, 2)
    assert parse_args([*data, "--batch-size", "8"]).batch_size == 8
    monkeypatch.setenv("SM_HPS", json.dumps({"batch-size": 16}))
    assert parse_args(data).batch_size == 16
    monkeypatch.delenv("SM_HPS")
    monkeypatch.setenv("BATCH_SIZE", "1.5")
    with pytest.raises(SpecError) as refused:
        parse_args(data)
    assert str(refused.value) == "BATCH_SIZE=1.5 is not a whole number: give 1 to 65536, e.g. BATCH_SIZE=2"
