"""CIFAR10 workload: both file formats, and the same training under four launchers.

Every launcher runs the same command (2 processes x batch 16, same seed) and must
finish with bit-identical weights; one process with batch 32 must match them to
float tolerance (DDP averages gradients, so 2 x b is 1 x 2b).
"""

from __future__ import annotations

import json
import os
import pickle
import pickletools
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dtrain.errors import DataError, SpecError
from dtrain.workloads.cifar10 import main as cifar_main
from dtrain.workloads.cifar10.data import load_split, make_synthetic, read_binary_batch, read_python_batch, write_synthetic
from dtrain.workloads.cifar10.model import Net
from dtrain.workloads.cifar10.train import parse_args

REPO = Path(__file__).resolve().parents[1]
SEED = 3
STEPS = 12
PER_RANK_BATCH = 16
TRAIN_ARGS = ["--lr", "0.05", "--momentum", "0.9", "--seed", str(SEED), "--max-steps", str(STEPS), "--log-interval", "0"]
LAUNCH_PREFIXES = ("RANK", "WORLD_SIZE", "LOCAL_", "GROUP_", "OMPI_", "PMI_", "SM_", "PET_", "MASTER_", "TORCHELASTIC")


# ---------------------------------------------------------------- data formats


def test_python_format_matches_the_official_layout(tmp_path):
    folder = write_synthetic(tmp_path, fmt="python", n_train=50, n_test=20, seed=1)
    assert folder.name == "cifar-10-batches-py"
    with open(folder / "data_batch_2", "rb") as f:
        batch = pickle.load(f, encoding="bytes")  # how every CIFAR10 loader opens it
    assert set(batch) == {b"data", b"labels", b"batch_label", b"filenames"}
    assert batch[b"data"].shape == (10, 3072) and batch[b"data"].dtype == np.uint8
    assert isinstance(batch[b"labels"], list) and len(batch[b"labels"]) == 10
    # Plane order: pixel (c, y, x) lives at c*1024 + y*32 + x.
    images, _ = make_synthetic(50, seed=1)
    img = images[10]  # the first image of batch 2
    assert batch[b"data"][0, 1024 + 5 * 32 + 7] == img[1, 5, 7]
    assert batch[b"data"][0, 2048 + 31 * 32 + 0] == img[2, 31, 0]


def test_binary_format_matches_the_official_layout(tmp_path):
    folder = write_synthetic(tmp_path, fmt="binary", n_train=50, n_test=20, seed=1)
    raw = (folder / "test_batch.bin").read_bytes()
    assert len(raw) == 20 * 3073
    images, labels = make_synthetic(20, seed=1 + 1_000_003)
    assert raw[3073] == labels[1]  # label byte first
    assert raw[3073 + 1 + 2 * 1024 + 3 * 32 + 4] == images[1, 2, 3, 4]
    assert (folder / "batches.meta.txt").read_text().split()[0] == "airplane"


def test_both_formats_round_trip_to_the_same_arrays(tmp_path):
    write_synthetic(tmp_path / "py", fmt="python", n_train=103, n_test=17, seed=5)
    write_synthetic(tmp_path / "bin", fmt="binary", n_train=103, n_test=17, seed=5)
    x_ref, y_ref = make_synthetic(103, seed=5)
    for root in (tmp_path / "py", tmp_path / "bin", tmp_path / "bin" / "cifar-10-batches-bin"):
        x, y = load_split(root, "train")
        assert x.shape == (103, 3, 32, 32) and x.dtype == np.uint8 and y.dtype == np.int64
        np.testing.assert_array_equal(x, x_ref)
        np.testing.assert_array_equal(y, y_ref)
    xp, yp = load_split(tmp_path / "py", "test")
    xb, yb = load_split(tmp_path / "bin", "test")
    np.testing.assert_array_equal(xp, xb)
    np.testing.assert_array_equal(yp, yb)
    assert len(yp) == 17


def test_synthetic_classes_differ_and_seeds_repeat():
    x, y = make_synthetic(400, seed=0)
    assert set(np.unique(y)) == set(range(10))
    means = np.stack([x[y == c].astype(float).mean(0) for c in range(10)])
    gaps = [np.abs(means[a] - means[b]).mean() for a in range(10) for b in range(a + 1, 10)]
    assert min(gaps) > 5  # every pair of classes looks different on average
    np.testing.assert_array_equal(make_synthetic(30, seed=9)[0], make_synthetic(30, seed=9)[0])
    assert not np.array_equal(make_synthetic(30, seed=9)[0], make_synthetic(30, seed=10)[0])


def test_truncated_binary_batch(tmp_path):
    folder = write_synthetic(tmp_path, fmt="binary", n_train=10, n_test=2, seed=0)
    path = folder / "data_batch_1.bin"
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(DataError, match="data_batch_1.bin is 6141 bytes.*3073-byte"):
        load_split(tmp_path, "train")


def test_binary_label_out_of_range(tmp_path):
    folder = write_synthetic(tmp_path, fmt="binary", n_train=10, n_test=2, seed=0)
    raw = bytearray((folder / "test_batch.bin").read_bytes())
    raw[3073] = 12
    (folder / "test_batch.bin").write_bytes(bytes(raw))
    with pytest.raises(DataError, match="label 12 is outside 0..9"):
        read_binary_batch(folder / "test_batch.bin")


@pytest.mark.parametrize(
    "payload, match",
    [
        (b"this is not a pickle", "not a CIFAR10 python batch"),
        (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8)}), r"no b'data'/b'labels'"),
        (pickle.dumps([1, 2, 3]), r"no b'data'/b'labels'"),
        (pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}), r"expected uint8 \[N, 3072\]"),
        (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}), "1 labels for 2 images"),
        (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 10]}), "label 10 is outside"),
        (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": ["a", "b"]}), "not a list of integers"),
    ],
)
def test_malformed_python_batch(tmp_path, payload, match):
    path = tmp_path / "data_batch_1"
    path.write_bytes(payload)
    with pytest.raises(DataError, match=match):
        read_python_batch(path)


class _Evil:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def test_pickle_with_foreign_code_is_refused_not_run(tmp_path):
    target = tmp_path / "pwned"
    (tmp_path / "data_batch_1").write_bytes(pickle.dumps({b"data": _Evil(str(target)), b"labels": []}))
    with pytest.raises(DataError, match=r"mkdir is not allowed"):
        read_python_batch(tmp_path / "data_batch_1")
    assert not target.exists()


def _numpy1_spelling(blob: bytes) -> bytes:
    """The same pickle as numpy 1 writes it (numpy.core.* where numpy 2 writes numpy._core.*).
    Protocol 4+ strings carry their length and sit in length-prefixed frames: each opcode is copied,
    module names re-encoded, frames left out (they are optional)."""
    ops = list(pickletools.genops(blob))
    out = bytearray()
    for (op, arg, pos), (_, _, end) in zip(ops, [*ops[1:], (None, None, len(blob))]):
        if op.name == "FRAME":
            continue
        if op.name == "SHORT_BINUNICODE" and arg.startswith("numpy._core"):
            name = arg.replace("numpy._core", "numpy.core").encode()
            out += op.code.encode("latin-1") + bytes([len(name)]) + name
        else:
            out += blob[pos:end]
    return bytes(out).replace(b"numpy._core", b"numpy.core")  # protocol 2: GLOBAL's text lines


@pytest.mark.parametrize("protocol", [2, 4, 5])
@pytest.mark.parametrize("spelling", [lambda blob: blob, _numpy1_spelling], ids=["numpy2", "numpy1"])
def test_batches_resaved_with_any_protocol_or_numpy_scalar_labels_read(tmp_path, protocol, spelling):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, (6, 3072), dtype=np.uint8)
    labels = [np.int64(k) for k in (0, 9, 3, 3, 1, 7)]  # numpy scalars, as labels.tolist() would not give
    blob = pickle.dumps({b"data": data, b"labels": labels, b"batch_label": b"x"}, protocol=protocol)
    globals_ = {b"_frombuffer"} if protocol == 5 else {b"_reconstruct"}
    assert all(g in blob for g in globals_ | {b"scalar"})  # the globals this test is about are in the file
    path = tmp_path / "data_batch_1"
    path.write_bytes(spelling(blob))
    assert (b"numpy.core." in path.read_bytes()) == (spelling is _numpy1_spelling)
    images, got = read_python_batch(path)
    assert got.tolist() == [0, 9, 3, 3, 1, 7] and np.array_equal(images.reshape(6, 3072), data)
    assert pickle.loads(path.read_bytes())[b"labels"] == labels  # what torchvision's pickle.load reads


def test_only_numpys_array_and_scalar_globals_are_let_through(tmp_path):
    path = tmp_path / "data_batch_1"
    for module, name in (("numpy._core.numeric", "fromstring"), ("numpy.core.multiarray", "frombuffer"),
                         ("numpy", "load"), ("builtins", "eval")):
        path.write_bytes(b"\x80\x02c" + f"{module}\n{name}\n".encode() + b"N\x85R.")
        with pytest.raises(DataError, match=f"global {module}.{name} is not allowed"):
            read_python_batch(path)


def test_missing_data_is_explained(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_split(tmp_path / "nope", "train")
    with pytest.raises(DataError, match="no CIFAR10 batches.*synth --out"):
        load_split(tmp_path, "train")
    folder = write_synthetic(tmp_path, fmt="python", n_train=10, n_test=2, seed=0)
    (folder / "test_batch").unlink()
    with pytest.raises(DataError, match="test_batch is missing"):
        load_split(tmp_path, "test")
    with pytest.raises(SpecError, match="split 'val'"):
        load_split(tmp_path, "val")


def test_synth_cli(tmp_path, capsys):
    assert cifar_main(["synth", "--out", str(tmp_path), "--format", "binary", "--n-train", "25", "--n-test", "5"]) == 0
    assert "wrote 25 train" in capsys.readouterr().out
    assert len(load_split(tmp_path, "train")[1]) == 25
    with pytest.raises(SpecError, match="unknown cifar10 command 'fit'"):
        cifar_main(["fit"])


# ---------------------------------------------------------------- arguments


def _no_launcher_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith(LAUNCH_PREFIXES):
            monkeypatch.delenv(k)


def test_sagemaker_defaults_and_hyperparameters(monkeypatch):
    _no_launcher_env(monkeypatch)
    monkeypatch.setenv("SM_CHANNEL_TRAINING", "/opt/ml/input/data/training")
    monkeypatch.setenv("SM_MODEL_DIR", "/opt/ml/model")
    monkeypatch.setenv("SM_HPS", json.dumps({"batch-size": 64, "lr": "0.05", "epochs": 3, "other": 1}))
    monkeypatch.setenv("SM_OUTPUT_DATA_DIR", "/opt/ml/output/data")
    cfg = parse_args([])
    assert (cfg.data_dir, cfg.model_dir) == ("/opt/ml/input/data/training", "/opt/ml/model")
    assert cfg.metrics_file == "/opt/ml/output/data/metrics.jsonl"  # output.tar.gz, not model.tar.gz
    assert parse_args(["--metrics-file", "/tmp/m.jsonl"]).metrics_file == "/tmp/m.jsonl"
    assert (cfg.batch_size, cfg.lr, cfg.epochs) == (64, 0.05, 3)
    cfg = parse_args(["--batch_size", "8", "--epochs", "1"])  # as SageMaker passes them on the command line
    assert (cfg.batch_size, cfg.epochs, cfg.lr) == (8, 1, 0.05)


def test_argument_errors(monkeypatch, tmp_path):
    _no_launcher_env(monkeypatch)
    with pytest.raises(SpecError, match="--data-dir"):
        parse_args([])
    with pytest.raises(SpecError, match="--batch-size 0 is out of range: give 1 to 65536"):
        parse_args(["--data-dir", str(tmp_path), "--batch-size", "0"])
    with pytest.raises(SpecError, match="--lr -1 is out of range"):
        parse_args(["--data-dir", str(tmp_path), "--lr", "-1"])
    monkeypatch.setenv("SM_HPS", "{oops")
    with pytest.raises(SpecError, match="SM_HPS"):
        parse_args(["--data-dir", str(tmp_path)])


@pytest.mark.parametrize("argv, message", [
    (["--lr", "nan"], "--lr nan is out of range: give a number above 0 and at most 10, e.g. 0.001"),
    (["--lr", "inf"], "--lr inf is out of range"),
    (["--lr", "1e300"], "--lr 1e300 is out of range"),
    (["--momentum", "1"], "--momentum 1 is out of range: give 0 to 0.999"),
    (["--momentum", "nan"], "--momentum nan is out of range"),
    (["--batch-size", "65537"], "--batch-size 65537 is out of range: give 1 to 65536"),
    (["--epochs", "10001"], "--epochs 10001 is out of range: give 1 to 10000"),
    (["--max-steps", "99999999999999999999"], "--max-steps 99999999999999999999 is out of range: give 0 to 10000000"),
    (["--num-workers", "100000"], "--num-workers 100000 is out of range: give 0 to 64"),
    (["--log-interval", "-1"], "--log-interval -1 is out of range: give 0 to 10000000"),
    (["--checkpoint-every", "10000001"], "--checkpoint-every 10000001 is out of range: give 0 to 10000000"),
    (["--keep-checkpoints", "1001"], "--keep-checkpoints 1001 is out of range: give 1 to 1000"),
    (["--seed", "-1"], "--seed -1 is out of range: give 0 to 4294967295"),
])
def test_every_number_is_bounded(monkeypatch, tmp_path, argv, message):
    _no_launcher_env(monkeypatch)
    with pytest.raises(SpecError, match=f"^{message}"):
        parse_args(["--data-dir", str(tmp_path), *argv])


def test_the_largest_numbers_in_range_are_accepted(monkeypatch, tmp_path):
    _no_launcher_env(monkeypatch)
    cfg = parse_args(["--data-dir", str(tmp_path), "--batch-size", "65536", "--epochs", "10000", "--lr", "10",
                      "--max-steps", "10000000", "--num-workers", "64", "--keep-checkpoints", "1000",
                      "--seed", str(2**32 - 1), "--momentum", "0"])
    assert (cfg.batch_size, cfg.epochs, cfg.lr, cfg.max_steps, cfg.num_workers) == (65_536, 10_000, 10.0, 10**7, 64)


@pytest.mark.parametrize("hps, message", [({"epochs": 2.5}, "--epochs 2.5 is not a whole number"),
                                          ({"batch-size": True}, "--batch-size True is not a whole number"),
                                          ({"lr": "nan"}, "--lr nan is out of range"),
                                          ({"lr": [1]}, r"--lr \[1\] is not a number")])
def test_sagemaker_hyperparameters_are_checked_like_flags(monkeypatch, tmp_path, hps, message):
    _no_launcher_env(monkeypatch)
    monkeypatch.setenv("SM_HPS", json.dumps(hps))
    with pytest.raises(SpecError, match=f"^{message}"):
        parse_args(["--data-dir", str(tmp_path)])


def test_synth_bounds_its_numbers_and_out(tmp_path):
    with pytest.raises(SpecError, match="^--n-train 99999999 is out of range: give 5 to 1000000, e.g. --n-train 1000000$"):
        cifar_main(["synth", "--out", str(tmp_path), "--n-train", "99999999"])
    with pytest.raises(SpecError, match="^--seed -1 is out of range: give 0 to 4294967295, e.g. --seed 0$"):
        cifar_main(["synth", "--out", str(tmp_path), "--seed", "-1"])
    (tmp_path / "afile").write_text("x")
    with pytest.raises(SpecError, match=f"^--out {tmp_path / 'afile'} is a file, not a folder"):
        cifar_main(["synth", "--out", str(tmp_path / "afile"), "--n-train", "5", "--n-test", "1"])


def test_module_entry_point_prints_one_line_errors(tmp_path):
    r = subprocess.run([sys.executable, "-m", "dtrain.workloads.cifar10", "train", "--data-dir", str(tmp_path / "x")],
                       cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"error: --data-dir {tmp_path / 'x'} does not exist: give the folder "
                                             "holding the CIFAR10 data (python -m dtrain.workloads.cifar10 synth "
                                             f"--out {tmp_path / 'x'} makes synthetic data there)"]
    assert list(tmp_path.iterdir()) == []  # not even the default ./model folder


def test_a_hint_names_the_command_of_the_door_it_came_through(tmp_path, monkeypatch, capsys):
    """`dtrain cifar10 train` names `dtrain cifar10 synth` (and `download`), a verb the CLI has; the same
    code under a plain torchrun (`python -m`, no CLI) names the module's command, as before."""
    from dtrain.cli.main import WORKLOADS, main as dtrain_main

    _no_launcher_env(monkeypatch)
    monkeypatch.chdir(tmp_path)
    missing, damaged = tmp_path / "x", tmp_path / "d"
    damaged.mkdir()
    (damaged / "cifar-10-python.tar.gz").write_bytes(b"not a tar")
    assert dtrain_main(["cifar10", "train", "--data-dir", str(missing)]) == 2
    assert capsys.readouterr().err == (f"dtrain: error: --data-dir {missing} does not exist: give the folder holding "
                                       f"the CIFAR10 data (dtrain cifar10 synth --out {missing} makes synthetic data "
                                       "there)\n")
    assert dtrain_main(["cifar10", "train", "--data-dir", str(damaged)]) == 2
    assert f"unpack it with: dtrain cifar10 download --out {damaged} --url {damaged}/" in capsys.readouterr().err
    assert {("cifar10", "synth"), ("cifar10", "download")} <= set(WORKLOADS)  # the verbs named exist
    with pytest.raises(DataError, match=f"python -m dtrain.workloads.cifar10 synth --out {missing} makes"):
        cifar_main(["train", "--data-dir", str(missing)])  # the module's door, after the CLI's: nothing stays set
    with pytest.raises(DataError, match="unpack it with: python -m dtrain.workloads.cifar10 download --out"):
        cifar_main(["train", "--data-dir", str(damaged)])
    assert not missing.exists()


@pytest.mark.slow
def test_epochs_times_steps_per_epoch_is_bounded(tmp_path):
    """--epochs 10000 and --batch-size 1 are each in range; over 1500 images they plan 15 000 000 steps."""
    write_synthetic(tmp_path / "data", fmt="binary", n_train=1500, n_test=10, seed=1)
    r = subprocess.run(TRAIN + ["--data-dir", str(tmp_path / "data"), "--model-dir", str(tmp_path / "m"),
                                "--batch-size", "1", "--epochs", "10000"],
                       cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.strip().splitlines() == [
        "error: --epochs 10000 x 1500 steps per epoch plans 15000000 steps, more than the 10000000 one run may: "
        "give --epochs 6666 or fewer, or a larger batch"]
    assert not (tmp_path / "m" / "model.pth").exists()


# ---------------------------------------------------------------- real training runs


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH_PREFIXES)}
    # One thread per process: fair on a small machine, and the same arithmetic under every launcher.
    return {**env, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **extra}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _check(procs: list[subprocess.Popen]) -> str:
    """Wait for all processes; return rank 0's stdout (the one with the FINAL line)."""
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=240))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, f"exit {p.returncode}\n{out}\n{err[-3000:]}"
    finals = [out for out, _ in outs if "FINAL" in out]
    assert len(finals) == 1, outs
    return finals[0]


def _popen(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


TRAIN = [sys.executable, "-m", "dtrain.workloads.cifar10", "train"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cifar")
    write_synthetic(root, fmt="python", n_train=1000, n_test=200, seed=SEED)
    return root


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(model_dir / "model.pth", weights_only=True)


def _runtime(stdout: str) -> str:
    return re.search(r"runtime=(\w+)", stdout).group(1)


def run_single(data_dir: Path, out: Path) -> str:
    cmd = TRAIN + ["--data-dir", str(data_dir), "--model-dir", str(out), "--batch-size", str(2 * PER_RANK_BATCH)]
    return _check([_popen(cmd + TRAIN_ARGS, _env())])


def run_torchrun(data_dir: Path, out: Path) -> str:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_free_port()),
           "-m", "dtrain.workloads.cifar10", "train", "--data-dir", str(data_dir), "--model-dir", str(out),
           "--batch-size", str(PER_RANK_BATCH)]
    return _check([_popen(cmd + TRAIN_ARGS, _env())])


def run_mpirun(data_dir: Path, out: Path) -> str:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun (openmpi-bin) is not installed")
    cmd = [mpirun, "-np", "2", "--allow-run-as-root", "--oversubscribe", "-x", "MASTER_ADDR=127.0.0.1",
           "-x", f"MASTER_PORT={_free_port()}", "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS",
           *TRAIN, "--data-dir", str(data_dir), "--model-dir", str(out), "--batch-size", str(PER_RANK_BATCH)]
    return _check([_popen(cmd + TRAIN_ARGS, _env())])


def run_sagemaker(data_dir: Path, out: Path) -> str:
    """Two 'hosts' as SageMaker starts them: same script, hyperparameters as arguments, SM_* env."""
    hosts, port = ["algo-1", "algo-2"], _free_port()
    hps = {"batch-size": PER_RANK_BATCH, "lr": 0.05, "seed": SEED, "max-steps": STEPS}
    procs = []
    for host in hosts:
        env = _env(SM_HOSTS=json.dumps(hosts), SM_CURRENT_HOST=host, SM_NUM_GPUS="0",
                   SM_MODEL_DIR=str(out if host == "algo-1" else out.with_name(out.name + "-algo-2")),
                   SM_CHANNEL_TRAINING=str(data_dir), SM_HPS=json.dumps(hps),
                   # /opt/ml/checkpoints is this machine's own folder here, not the job's
                   DTRAIN_CHECKPOINT_DIR=str(out.with_name(out.name + "-checkpoints")),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))  # instead of resolving 'algo-1'
        args = [f"--{k}={v}" for k, v in hps.items()] + ["--momentum", "0.9", "--log-interval", "0"]
        procs.append(_popen(TRAIN + args, env))
    return _check(procs)


def run_pytorchjob(data_dir: Path, out: Path) -> str:
    """A master pod and one worker pod with the env the Kubeflow training operator injects."""
    port, procs = _free_port(), []
    for rank in (0, 1):
        env = _env(PYTHONUNBUFFERED="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),  # really 'job-master-0'
                   PET_MASTER_ADDR="127.0.0.1", PET_MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank),
                   PET_NPROC_PER_NODE="1", PET_NODE_RANK=str(rank), PET_NNODES="2")
        cmd = TRAIN + ["--data-dir", str(data_dir), "--model-dir", str(out), "--batch-size", str(PER_RANK_BATCH)]
        procs.append(_popen(cmd + TRAIN_ARGS, env))
    return _check(procs)


@pytest.fixture(scope="module")
def reference(data_dir, tmp_path_factory) -> tuple[dict[str, torch.Tensor], str, Path]:
    out = tmp_path_factory.mktemp("torchrun")
    stdout = run_torchrun(data_dir, out)
    return _weights(out), stdout, out


@pytest.mark.slow
def test_torchrun_trains_and_logs(reference):
    weights, stdout, out = reference
    assert _runtime(stdout) == "torchrun"
    assert re.search(r"FINAL test_accuracy=0\.\d{4} test_loss=\S+ steps=12 world_size=2 global_batch=32", stdout)
    torch.manual_seed(SEED)
    initial = Net().state_dict()
    assert not all(torch.allclose(weights[k], initial[k]) for k in initial), "training changed nothing"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert [r["step"] for r in steps] == list(range(1, STEPS + 1))
    for r in steps:
        assert r["allreduce_time"] > 0 and r["step_time"] > 0 and r["images_per_s"] > 0 and r["lr"] == 0.05
    assert 0 <= rows[-1]["test_accuracy"] <= 1


@pytest.mark.slow
@pytest.mark.parametrize("launcher, runtime", [(run_mpirun, "mpi"), (run_sagemaker, "sagemaker"),
                                               (run_pytorchjob, "pytorchjob")])
def test_every_launcher_gives_identical_weights(launcher, runtime, reference, data_dir, tmp_path):
    weights, _, _ = reference
    stdout = launcher(data_dir, tmp_path / "model")
    assert _runtime(stdout) == runtime
    got = _weights(tmp_path / "model")
    assert got.keys() == weights.keys()
    for k in weights:
        assert torch.equal(got[k], weights[k]), f"{runtime}: {k} differs from torchrun's"


@pytest.mark.slow
def test_two_ranks_equal_one_rank_with_double_batch(reference, data_dir, tmp_path):
    weights, _, _ = reference
    stdout = run_single(data_dir, tmp_path)
    assert _runtime(stdout) == "single"
    got = _weights(tmp_path)
    for k in weights:
        torch.testing.assert_close(got[k], weights[k], rtol=1e-4, atol=1e-5)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["allreduce_time"] is None


@pytest.mark.slow
def test_short_cpu_run_learns_well_above_chance(tmp_path):
    write_synthetic(tmp_path / "data", fmt="binary", n_train=1500, n_test=300, seed=11)
    cmd = TRAIN + ["--data-dir", str(tmp_path / "data"), "--model-dir", str(tmp_path / "m"), "--batch-size", "32",
                   "--epochs", "2", "--lr", "0.02", "--seed", "0", "--log-interval", "0"]
    stdout = _check([_popen(cmd, _env())])
    accuracy = float(re.search(r"FINAL test_accuracy=([0-9.]+)", stdout).group(1))
    assert accuracy > 0.5, stdout


# ---------------------------------------------------------------- official format details, bad input


def _torchvision_style_load(path: Path) -> tuple[np.ndarray, list]:
    """How torchvision's CIFAR10 reads a batch: encoding latin1, str keys, vstack + reshape."""
    with open(path, "rb") as f:
        entry = pickle.load(f, encoding="latin1")
    return np.vstack([entry["data"]]).reshape(-1, 3, 32, 32), list(entry["labels"])


def test_synthetic_batches_are_python2_pickles_every_loader_reads(tmp_path):
    import pickletools

    folder = write_synthetic(tmp_path, fmt="python", n_train=20, n_test=6, seed=2)
    x_ref, y_ref = make_synthetic(6, seed=2 + 1_000_003)
    x, y = _torchvision_style_load(folder / "test_batch")  # str keys under latin1, as in the official files
    np.testing.assert_array_equal(x, x_ref)
    assert y == list(y_ref)
    with open(folder / "test_batch", "rb") as f:
        assert set(pickle.load(f, encoding="bytes")) == {b"data", b"labels", b"batch_label", b"filenames"}
    with open(folder / "batches.meta", "rb") as f:
        assert pickle.load(f, encoding="latin1")["label_names"][0] == "airplane"
    ops = list(pickletools.genops((folder / "data_batch_1").read_bytes()))
    globals_ = {arg for op, arg, _ in ops if op.name == "GLOBAL"}
    assert globals_ == {"numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype"}  # no _codecs.encode
    assert ops[0][0].name == "PROTO" and ops[0][1] == 2


def _save(path: Path, obj, protocol: int = 2) -> Path:
    path.write_bytes(pickle.dumps(obj, protocol=protocol))
    return path


def test_reader_takes_what_torchvision_takes(tmp_path):
    images = np.arange(2 * 3072, dtype=np.uint32).astype(np.uint8).reshape(2, 3072)
    variants = {
        "str keys (a batch pickled again by Python 3)": {"data": images, "labels": [3, 9]},
        "labels as an array": {b"data": images, b"labels": np.array([3, 9], dtype=np.uint8)},
        "data already (N, 3, 32, 32)": {b"data": images.reshape(2, 3, 32, 32), b"labels": [3, 9]},
    }
    for name, batch in variants.items():
        x, y = read_python_batch(_save(tmp_path / "b", batch, protocol=4))
        np.testing.assert_array_equal(x, images.reshape(2, 3, 32, 32), err_msg=name)
        assert y.tolist() == [3, 9] and y.dtype == np.int64, name


@pytest.mark.parametrize("batch, match", [
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 2**70]}, r"not a list of integers 0\.\.9"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0.0, 1.7]}, r"not a list of integers 0\.\.9"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [[0], [1]]}, r"not a list of integers 0\.\.9"),
    ({b"data": np.zeros((0, 3072), np.uint8), b"labels": []}, "holds no images"),
    ({b"data": np.zeros((2, 32, 32, 3), np.uint8), b"labels": [0, 1]}, r"uint8\[2, 32, 32, 3\], expected uint8 \[N, 3072\]"),
    ({b"data": [[0] * 3072], b"labels": [0]}, "b'data' is a list"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"fine_labels": [0, 1], b"coarse_labels": [0, 1]}, "CIFAR-100"),
    ({1: 2, b"x": 3}, r"no b'data'/b'labels'"),
])
def test_more_malformed_python_batches_are_one_data_error(tmp_path, batch, match):
    with pytest.raises(DataError, match=match):
        read_python_batch(_save(tmp_path / "data_batch_1", batch, protocol=4))


def test_damaged_pickles_never_escape_as_other_errors(tmp_path):
    """A guard: every truncation of a real batch is one DataError (never EOFError, KeyError, ...)."""
    folder = write_synthetic(tmp_path, fmt="python", n_train=5, n_test=3, seed=0)
    good = (folder / "test_batch").read_bytes()
    cases = [good[:n] for n in range(0, len(good), 97)]
    cases += [b"\x80\x02h\x07.", b"\x80\x02cnumpy\ndtype\nU\x04u999K\x00K\x01\x87R."]  # a memo never put; a bad dtype
    for i, raw in enumerate(cases):
        path = tmp_path / f"case{i}"
        path.write_bytes(raw)
        try:
            read_python_batch(path)
        except DataError:
            pass


def test_a_gap_in_the_numbered_batches_is_named(tmp_path):
    folder = write_synthetic(tmp_path, fmt="python", n_train=50, n_test=5, seed=0)
    (folder / "data_batch_3").unlink()
    with pytest.raises(DataError, match="data_batch_3 is missing"):
        load_split(tmp_path, "train")
    (folder / "data_batch_4").rename(folder / "data_batch_3")
    (folder / "data_batch_5").rename(folder / "data_batch_4")
    (folder / "data_batch_01").write_bytes((folder / "data_batch_1").read_bytes())  # not a batch name: ignored
    assert len(load_split(tmp_path, "train")[1]) == 40  # data_batch_1..4, each read once


def test_synth_never_writes_through_a_link_it_did_not_make(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    for fmt, name in (("python", "cifar-10-batches-py/data_batch_1"), ("binary", "cifar-10-batches-bin/test_batch.bin")):
        link = tmp_path / "out" / name
        link.parent.mkdir(parents=True)
        link.symlink_to(victim)
        write_synthetic(tmp_path / "out", fmt=fmt, n_train=10, n_test=2, seed=0)
        assert victim.read_bytes() == b"precious"
        assert not link.is_symlink() and link.is_file()
    assert len(load_split(tmp_path / "out" / "cifar-10-batches-bin", "test")[1]) == 2


def test_data_dir_that_is_a_file_is_named(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(DataError, match="is a file, not a folder"):
        load_split(tmp_path / "f", "train")


def test_resume_takes_the_values_sagemaker_passes(monkeypatch, tmp_path):
    _no_launcher_env(monkeypatch)
    base = ["--data-dir", str(tmp_path)]
    assert parse_args(base).resume is True
    assert parse_args(base + ["--resume"]).resume is True
    assert parse_args(base + ["--no-resume"]).resume is False
    # the training toolkit passes every hyperparameter as `--key str(value)`: a boolean False is "False"
    assert parse_args(base + ["--resume", "False", "--epochs", "1"]).resume is False
    assert parse_args(base + ["--resume", "true"]).resume is True
    with pytest.raises(SpecError, match="^--resume 'maybe' is not true or false"):
        parse_args(base + ["--resume", "maybe"])
    monkeypatch.setenv("SM_HPS", json.dumps({"resume": False}))
    assert parse_args(base).resume is False


@pytest.mark.parametrize("argv, message", [
    (["--device", "gpu"], "--device 'gpu' is not a device: give cpu or cuda"),
    (["--backend", "foo"], "--backend 'foo' is not a backend: give nccl (GPU) or gloo (CPU)"),
])
def test_device_and_backend_are_checked(monkeypatch, tmp_path, argv, message):
    _no_launcher_env(monkeypatch)
    with pytest.raises(SpecError, match=f"^{re.escape(message)}"):
        parse_args(["--data-dir", str(tmp_path), *argv])
    assert parse_args(["--data-dir", str(tmp_path), "--device", "", "--backend", ""]).device is None  # None from SageMaker


def _train_proc(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(TRAIN + args, cwd=cwd, env=_env(**env), capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_output_paths_are_checked_before_any_work(tmp_path):
    write_synthetic(tmp_path / "data", fmt="binary", n_train=10, n_test=2, seed=0)
    (tmp_path / "afile").write_text("x")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "metrics.jsonl").symlink_to(victim)
    cases = [
        (["--model-dir", "afile"], "--model-dir afile is a file, not a folder"),
        (["--model-dir", "afile/sub"], "--model-dir afile/sub: a part of the path is a file"),
        (["--model-dir", "o", "--checkpoint-dir", "afile"], "--checkpoint-dir afile is a file, not a folder"),
        (["--model-dir", "o", "--metrics-file", "data"], "--metrics-file data is not a regular file"),
        (["--model-dir", "m"], "--metrics-file m/metrics.jsonl is a symbolic link"),
    ]
    for args, message in cases:
        r = _train_proc(["--data-dir", "data", "--max-steps", "1", *args], tmp_path)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.strip().splitlines() == [r.stderr.strip()] and r.stderr.startswith(f"error: {message}"), r.stderr
        assert "cifar10: runtime" not in r.stdout  # stopped before training
    assert victim.read_text() == "precious\n"


@pytest.mark.slow
def test_a_checkpoint_of_another_network_is_one_line(tmp_path):
    from dtrain.training import Checkpointer

    write_synthetic(tmp_path / "data", fmt="binary", n_train=10, n_test=2, seed=0)
    other = torch.nn.Linear(3, 2)
    Checkpointer(tmp_path / "m", every=1).save(5, model=other, optimizer=torch.optim.SGD(other.parameters(), lr=0.1))
    r = _train_proc(["--data-dir", "data", "--model-dir", "m", "--max-steps", "1"], tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]
    assert "does not fit the CIFAR10 network" in r.stderr and "--no-resume" in r.stderr
    assert not (tmp_path / "m" / "model.pth").exists()
    r = _train_proc(["--data-dir", "data", "--model-dir", "m", "--max-steps", "1", "--no-resume"], tmp_path)
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_ranks_that_resume_from_different_steps_stop_instead_of_hanging(tmp_path):
    """A PyTorchJob whose pods each checkpoint to their own (node-local) folder: rank 0 finds a
    checkpoint, rank 1 none. Each rank says so in one line and exits 2."""
    write_synthetic(tmp_path / "data", fmt="binary", n_train=40, n_test=4, seed=0)
    base = ["--data-dir", "data", "--max-steps", "2", "--batch-size", "4", "--log-interval", "0"]
    first = _train_proc(base + ["--model-dir", "m0"], tmp_path)
    assert first.returncode == 0, first.stderr
    # 2 x batch 2: the first run's global batch
    results = _ranks(base + ["--max-steps", "4", "--batch-size", "2"], tmp_path, ["m0", "m1"])
    for rank, (code, _out, err) in enumerate(results):
        assert code == 2, (rank, err)
        assert err.strip().splitlines() == [err.strip()], err
        assert f"ranks resumed from different steps (0 to 2; rank {rank}: {2 if rank == 0 else 0})" in err


def _ranks(args: list[str], cwd: Path, folders: list[str]) -> list[tuple[int, str, str]]:
    """Run one training rank per folder (--model-dir) in one gloo group; (returncode, out, err) each."""
    port, procs = _free_port(), []
    for rank, folder in enumerate(folders):
        env = _env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(len(folders)), RANK=str(rank))
        procs.append(subprocess.Popen(TRAIN + args + ["--model-dir", folder], cwd=cwd, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs, strict=True)]


@pytest.mark.slow
def test_a_resume_that_would_move_in_the_data_is_refused_and_the_same_global_batch_is_not(tmp_path):
    """A step is a place in the data through the global batch, the seed and the images: a resume
    with any of them changed is one line; one on 2 processes x 4 of a 1 x 8 run continues."""
    write_synthetic(tmp_path / "data", fmt="binary", n_train=40, n_test=4, seed=0)
    base = ["--data-dir", "data", "--log-interval", "0", "--checkpoint-every", "1"]
    first = _train_proc(base + ["--model-dir", "m", "--batch-size", "8", "--max-steps", "2"], tmp_path)
    assert first.returncode == 0, first.stderr
    for args, message in [(["--batch-size", "4"], "global batch 8 (this run: 4)"),
                          (["--batch-size", "8", "--seed", "3"], "seed 0 (this run: 3)")]:
        r = _train_proc(base + ["--model-dir", "m", "--max-steps", "4", *args], tmp_path)
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip().splitlines() == [r.stderr.strip()], r.stderr
        assert message in r.stderr and "ckpt-2.pt" in r.stderr and "--no-resume" in r.stderr
    write_synthetic(tmp_path / "data", fmt="binary", n_train=48, n_test=4, seed=0)
    r = _train_proc(base + ["--model-dir", "m", "--batch-size", "8", "--max-steps", "4"], tmp_path)
    assert r.returncode == 2 and "40 training images (this run: 48)" in r.stderr, r.stderr
    assert sorted(p.name for p in (tmp_path / "m").glob("ckpt-*")) == ["ckpt-1.pt", "ckpt-2.pt"]  # nothing lost
    write_synthetic(tmp_path / "data", fmt="binary", n_train=40, n_test=4, seed=0)
    results = _ranks(base + ["--batch-size", "4", "--max-steps", "4"], tmp_path, ["m", "m"])
    for code, out, err in results:
        assert code == 0, err
    assert "resumed from step 2" in results[0][1] or "resumed from step 2" in results[0][2]
    assert "steps=4" in results[0][1]


@pytest.mark.slow
def test_when_one_rank_refuses_its_checkpoint_every_rank_stops(tmp_path):
    """Rank 0 finds a checkpoint of another global batch, rank 1 (its own folder) none: rank 0
    names the checkpoint, rank 1 says another rank refused; neither waits for the other."""
    write_synthetic(tmp_path / "data", fmt="binary", n_train=40, n_test=4, seed=0)
    base = ["--data-dir", "data", "--log-interval", "0"]
    assert _train_proc(base + ["--model-dir", "m0", "--batch-size", "4", "--max-steps", "2"], tmp_path).returncode == 0
    (code0, _o0, err0), (code1, _o1, err1) = _ranks(base + ["--batch-size", "4", "--max-steps", "4"], tmp_path,
                                                    ["m0", "m1"])
    assert (code0, code1) == (2, 2), (err0, err1)
    assert "global batch 4 (this run: 8)" in err0 and err0.strip().splitlines() == [err0.strip()]
    assert "another rank refused its checkpoint" in err1 and err1.strip().splitlines() == [err1.strip()]


def test_sagemaker_layout_without_the_toolkit(monkeypatch, tmp_path):
    """A container SageMaker starts without the training toolkit has no SM_* variables and no
    arguments: the script reads /opt/ml as the toolkit would (here a copy of it in tmp_path)."""
    import dtrain.workloads.cifar10.train as train_mod

    _no_launcher_env(monkeypatch)
    opt_ml = tmp_path / "opt" / "ml"
    (opt_ml / "input" / "config").mkdir(parents=True)
    (opt_ml / "input" / "data" / "training").mkdir(parents=True)
    (opt_ml / "model").mkdir()
    hps = {"batch-size": "64", "lr": "0.05", "resume": "false", "sagemaker_program": '"train.py"', "seed": "7"}
    (opt_ml / "input" / "config" / "hyperparameters.json").write_text(json.dumps(hps))  # values JSON strings
    monkeypatch.setattr(train_mod, "HYPERPARAMETERS_FILE", opt_ml / "input" / "config" / "hyperparameters.json")
    monkeypatch.setattr(train_mod, "OPT_ML_TRAINING", opt_ml / "input" / "data" / "training")
    monkeypatch.setattr(train_mod, "OPT_ML_MODEL", opt_ml / "model")
    cfg = parse_args([])
    assert (cfg.batch_size, cfg.lr, cfg.resume, cfg.seed) == (64, 0.05, False, 7)
    assert (cfg.data_dir, cfg.model_dir) == (str(opt_ml / "input" / "data" / "training"), str(opt_ml / "model"))
    assert parse_args(["--batch-size", "8"]).batch_size == 8  # the command line still wins
    (opt_ml / "input" / "config" / "hyperparameters.json").write_text("[1]")
    with pytest.raises(SpecError, match="must hold a JSON object"):
        parse_args([])
