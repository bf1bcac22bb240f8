"""The checkpoint facility: atomic saves, keep K, resume from the newest valid file, graceful stop."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from dtrain.errors import DataError
from dtrain.markers import resumed_step
from dtrain.training import CheckpointMismatch, Checkpointer, GracefulStop, checkpoint_dir

REPO = Path(__file__).resolve().parents[1]


def _model_opt(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()  # momentum buffers exist, so the optimizer state is not empty
    return model, opt


def test_save_keeps_the_newest_k_and_resume_restores_everything(tmp_path, capsys):
    model, opt = _model_opt()
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    ckpt = Checkpointer(tmp_path, every=5, keep=2)
    for step in (5, 10, 15):
        sched.step()
        ckpt.save(step, model=model, optimizer=opt, scheduler=sched, extra={"epoch": step // 10})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-10.pt", "ckpt-15.pt"]
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    expected = (random.random(), np.random.rand(), torch.rand(1))
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    ckpt.save(20, model=model, optimizer=opt, scheduler=sched)

    fresh, fresh_opt = _model_opt(seed=9)
    fresh_sched = torch.optim.lr_scheduler.StepLR(fresh_opt, step_size=2)
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    got = Checkpointer(tmp_path, every=5).resume(model=fresh, optimizer=fresh_opt, scheduler=fresh_sched)
    assert got.step == 20 and got.path.name == "ckpt-20.pt"
    assert resumed_step(capsys.readouterr().out.strip().splitlines()[-1]) == 20
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values()):
        assert torch.equal(a, b)
    assert fresh_opt.state_dict()["state"][0]["momentum_buffer"].equal(opt.state_dict()["state"][0]["momentum_buffer"])
    assert fresh_sched.state_dict() == sched.state_dict()
    assert (random.random(), np.random.rand()) == expected[:2] and torch.equal(torch.rand(1), expected[2])


def test_another_models_checkpoint_is_one_named_error_and_is_kept(tmp_path):
    model, opt = _model_opt()
    Checkpointer(tmp_path, every=5).save(5, model=model, optimizer=opt)
    other = torch.nn.Linear(4, 5)  # the same keys, other shapes
    with pytest.raises(CheckpointMismatch) as got:
        Checkpointer(tmp_path, every=5).resume(model=other, optimizer=torch.optim.SGD(other.parameters(), lr=0.1))
    assert got.value.path == tmp_path / "ckpt-5.pt" and got.value.fault.startswith("size mismatch for weight")
    assert "\n" not in str(got.value) and str(got.value).startswith(f"checkpoint {tmp_path / 'ckpt-5.pt'} does not fit")
    assert (tmp_path / "ckpt-5.pt").is_file()


def test_a_torn_newest_file_is_skipped(tmp_path, capsys):
    model, opt = _model_opt()
    ckpt = Checkpointer(tmp_path, every=5)
    ckpt.save(5, model=model, optimizer=opt)
    good = (tmp_path / "ckpt-5.pt").read_bytes()
    (tmp_path / "ckpt-10.pt").write_bytes(good[: len(good) // 2])  # a copy cut short
    (tmp_path / "ckpt-15.pt").write_bytes(b"")  # an empty file
    torch.save({"weights": torch.zeros(1)}, tmp_path / "ckpt-20.pt")  # someone else's file
    (tmp_path / ".ckpt-25.pt.x.tmp").write_bytes(good)  # a save that was killed: never considered
    got = Checkpointer(tmp_path, every=5).resume(model=_model_opt(3)[0], optimizer=_model_opt(3)[1])
    assert got.step == 5
    out = capsys.readouterr().out
    assert out.count("skipping checkpoint") == 3 and "ckpt-20.pt" in out and "ckpt-10.pt" in out
    # Set aside, not deleted: they no longer count among the kept, and a restart does not retry them.
    assert out.count("set aside as") == 3 and "set aside as ckpt-10.pt.damaged" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".ckpt-25.pt.x.tmp", "ckpt-10.pt.damaged", "ckpt-15.pt.damaged", "ckpt-20.pt.damaged", "ckpt-5.pt"]
    assert (tmp_path / "ckpt-10.pt.damaged").read_bytes() == good[: len(good) // 2]


def test_a_damaged_checkpoint_does_not_push_good_ones_out(tmp_path, capsys):
    model, opt = _model_opt()
    ckpt = Checkpointer(tmp_path, every=5, keep=2)
    for step in (5, 10, 15):
        ckpt.save(step, model=model, optimizer=opt)
    (tmp_path / "ckpt-15.pt").write_bytes(b"torn")  # the newest is damaged: the run goes on from 10
    resumed = Checkpointer(tmp_path, every=5, keep=2).resume(model=model, optimizer=opt)
    assert resumed.step == 10
    ckpt.save(15, model=model, optimizer=opt)  # a new ckpt-15; the old damaged one is still there
    ckpt.save(20, model=model, optimizer=opt)
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.pt")) == ["ckpt-15.pt", "ckpt-20.pt"]
    assert (tmp_path / "ckpt-15.pt.damaged").read_bytes() == b"torn"
    (tmp_path / "ckpt-20.pt").write_bytes(b"torn again")  # a second damaged file of a step set aside before
    (tmp_path / "ckpt-15.pt").write_bytes(b"torn again")
    assert Checkpointer(tmp_path, every=5).resume(model=model, optimizer=opt) is None
    assert (tmp_path / "ckpt-15.pt.damaged").read_bytes() == b"torn"  # nothing overwritten
    assert (tmp_path / "ckpt-15.pt.damaged.1").read_bytes() == b"torn again"


def test_a_rank_that_does_not_save_leaves_damaged_files_alone(tmp_path, capsys):
    (tmp_path / "ckpt-5.pt").write_bytes(b"torn")
    model, opt = _model_opt()
    assert Checkpointer(tmp_path, every=5, enabled=False).resume(model=model, optimizer=opt) is None
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt-5.pt"]
    assert "set aside" not in capsys.readouterr().out


def test_nothing_to_resume_from(tmp_path):
    model, opt = _model_opt()
    assert Checkpointer(tmp_path / "absent", every=5).resume(model=model, optimizer=opt) is None
    assert not Checkpointer(tmp_path, every=0).due(10) and Checkpointer(tmp_path, every=5).due(10)


def test_disabled_rank_writes_nothing(tmp_path):
    model, opt = _model_opt()
    assert Checkpointer(tmp_path, every=1, enabled=False).save(1, model=model, optimizer=opt) is None
    assert list(tmp_path.iterdir()) == []


def test_checkpoint_folder_comes_from_the_environment():
    assert checkpoint_dir("/out", env={}) == Path("/out")
    assert checkpoint_dir("/out", env={"DTRAIN_CHECKPOINT_DIR": "/ck"}) == Path("/ck")
    assert checkpoint_dir("/out", env={"SM_CURRENT_HOST": "algo-1"}) == Path("/opt/ml/checkpoints")
    assert checkpoint_dir("/out", env={"SM_CURRENT_HOST": "algo-1", "DTRAIN_CHECKPOINT_DIR": "/ck"}) == Path("/ck")


def test_sigterm_sets_the_flag_and_restores_the_old_handler():
    old = signal.getsignal(signal.SIGTERM)
    with GracefulStop() as stop:
        assert not stop.should_stop()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.should_stop()
    assert signal.getsignal(signal.SIGTERM) is old


@pytest.mark.slow
def test_cifar10_sigterm_checkpoints_the_step_it_stopped_at_and_resumes_exactly(tmp_path):
    """One process: SIGTERM mid-run -> exit 143 with ckpt-<last logged step>.pt; the rerun ends with the
    same weights as a run that was never stopped."""
    from dtrain.training import read_metrics
    from dtrain.workloads.cifar10.data import write_synthetic

    data = tmp_path / "data"
    write_synthetic(data, fmt="python", n_train=600, n_test=20, seed=3)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-m", "dtrain.workloads.cifar10", "train", "--data-dir", str(data), "--epochs", "3",
            "--batch-size", "2", "--checkpoint-every", "1000", "--log-interval", "0"]
    subprocess.run([*args, "--model-dir", str(tmp_path / "straight")], env=env, check=True, timeout=300)
    split = tmp_path / "split"
    proc = subprocess.Popen([*args, "--model-dir", str(split)], env=env)
    metrics = split / "metrics.jsonl"
    while proc.poll() is None and not (metrics.exists() and len(metrics.read_text().splitlines()) >= 20):
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 143
    stopped = max(m["step"] for m in read_metrics(metrics))
    assert [p.name for p in split.glob("ckpt-*.pt")] == [f"ckpt-{stopped}.pt"] and not (split / "model.pth").exists()
    subprocess.run([*args, "--model-dir", str(split)], env=env, check=True, timeout=300)
    a, b = torch.load(tmp_path / "straight" / "model.pth"), torch.load(split / "model.pth")
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_cifar10_sigterm_to_the_process_group_checkpoints_with_loader_workers(tmp_path):
    """torchrun (and the local backend, and Ctrl-C) signal a rank's whole group, its loader workers
    too: a worker killed by that SIGTERM made the training raise 'DataLoader worker (pid N) is killed
    by signal: Terminated' mid-step, with no checkpoint, so the rerun began again at step 0."""
    import contextlib

    from dtrain.training import read_metrics
    from dtrain.workloads.cifar10.data import write_synthetic

    data = tmp_path / "data"
    write_synthetic(data, fmt="python", n_train=600, n_test=20, seed=3)
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "dtrain.workloads.cifar10", "train", "--data-dir", str(data),
                             "--epochs", "50", "--batch-size", "2", "--num-workers", "2", "--checkpoint-every", "1000",
                             "--log-interval", "0", "--model-dir", str(out)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # a group of its own, as torchrun starts each rank
    try:
        metrics = out / "metrics.jsonl"
        while proc.poll() is None and not (metrics.exists() and len(metrics.read_text().splitlines()) >= 5):
            time.sleep(0.02)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        _out, err = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # a worker left behind
    assert proc.returncode == 143 and "Traceback" not in err, err
    stopped = max(m["step"] for m in read_metrics(metrics))
    assert [p.name for p in out.glob("ckpt-*.pt")] == [f"ckpt-{stopped}.pt"]


def test_a_save_the_disk_refuses_half_way_is_one_line_and_keeps_the_old_checkpoint(tmp_path):
    """torch.save turns the OSError of a failed write into a RuntimeError ("unexpected pos ..."):
    a full disk made a checkpoint save end with a torch traceback. A file-size limit refuses the
    write as a full disk does (EFBIG instead of ENOSPC)."""
    script = (
        "import resource, sys, torch\n"
        "from dtrain.errors import StorageError\n"
        "from dtrain.training import save_atomic\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))\n"  # Python ignores SIGXFSZ: write gets EFBIG
        "try:\n"
        "    save_atomic({'w': torch.zeros(100000)}, sys.argv[1])\n"
        "except StorageError as e:\n"
        "    print(e)\n"
    )
    target = tmp_path / "ckpt-5.pt"
    target.write_bytes(b"the old checkpoint")
    r = subprocess.run([sys.executable, "-c", script, str(target)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stdout.startswith(f"cannot write checkpoint {target}: File too large; check free space"), r.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt-5.pt"] and target.read_bytes() == b"the old checkpoint"


def test_a_checkpoint_of_a_newer_format_is_refused_in_one_line_and_kept(tmp_path, capsys):
    """A later version's checkpoint was called "not written by dtrain.training.Checkpointer", renamed
    .damaged, and the run went on from an older checkpoint (or from step 0) over its progress."""
    model, opt = _model_opt()
    ckpt = Checkpointer(tmp_path, every=5)
    ckpt.save(5, model=model, optimizer=opt)
    state = torch.load(tmp_path / "ckpt-5.pt", weights_only=True)
    torch.save({**state, "format": 99, "step": 10}, tmp_path / "ckpt-10.pt")
    with pytest.raises(DataError) as got:
        Checkpointer(tmp_path, every=5).resume(model=model, optimizer=opt)
    message = str(got.value)
    assert "\n" not in message and message.startswith(f"checkpoint {tmp_path / 'ckpt-10.pt'} is of format 99, newer")
    assert "--no-resume" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-10.pt", "ckpt-5.pt"]  # nothing set aside
    assert "skipping" not in capsys.readouterr().out


def test_cifar10_a_stop_during_the_last_step_still_checkpoints_it(tmp_path, monkeypatch):
    """A SIGTERM that came during the last step stopped the run (exit 143) without a checkpoint of
    that step: the in-loop save skipped the last step (the end-of-run save would write it) and the
    end-of-run save was skipped for the stop, so the restart went back to the last interval's."""
    from dtrain.workloads.cifar10 import train as cifar_train
    from dtrain.workloads.cifar10.data import write_synthetic

    class StopAtTheLastStep(GracefulStop):
        calls = 0

        def should_stop(self) -> bool:  # as if SIGTERM came during step 3 of 3
            StopAtTheLastStep.calls += 1
            self.signalled = StopAtTheLastStep.calls == 3
            return super().should_stop()

    write_synthetic(tmp_path / "data", fmt="binary", n_train=40, n_test=4, seed=0)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    argv = ["--data-dir", str(tmp_path / "data"), "--model-dir", str(tmp_path / "m"), "--max-steps", "3",
            "--batch-size", "4", "--log-interval", "0", "--device", "cpu"]
    monkeypatch.setattr(cifar_train, "GracefulStop", StopAtTheLastStep)
    assert cifar_train.train(cifar_train.parse_args(argv)) == {"steps": 3, "stopped": True}
    assert [p.name for p in (tmp_path / "m").glob("ckpt-*.pt")] == ["ckpt-3.pt"]
    monkeypatch.setattr(cifar_train, "GracefulStop", GracefulStop)
    assert cifar_train.train(cifar_train.parse_args(argv))["steps"] == 3  # the rerun only evaluates and saves
    assert (tmp_path / "m" / "model.pth").is_file()


def test_cifar10_a_resume_trains_with_this_runs_lr_and_momentum(tmp_path, monkeypatch):
    """The optimizer's saved state brought back the learning rate and momentum of the checkpoint's
    run: --lr and --momentum of the resumed run were ignored without a word."""
    from dtrain.training import read_metrics
    from dtrain.workloads.cifar10 import train as cifar_train
    from dtrain.workloads.cifar10.data import write_synthetic

    write_synthetic(tmp_path / "data", fmt="binary", n_train=40, n_test=4, seed=0)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    base = ["--data-dir", str(tmp_path / "data"), "--model-dir", str(tmp_path / "m"), "--batch-size", "4",
            "--log-interval", "0", "--device", "cpu"]
    cifar_train.train(cifar_train.parse_args([*base, "--max-steps", "2", "--lr", "0.001"]))
    cifar_train.train(cifar_train.parse_args([*base, "--max-steps", "4", "--lr", "0.05", "--momentum", "0.5"]))
    assert [(m["step"], m["lr"]) for m in read_metrics(tmp_path / "m" / "metrics.jsonl") if "lr" in m] == [
        (1, 0.001), (2, 0.001), (3, 0.05), (4, 0.05)]
    saved = torch.load(tmp_path / "m" / "ckpt-4.pt", weights_only=True)["optimizer"]["param_groups"][0]
    assert (saved["lr"], saved["momentum"]) == (0.05, 0.5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_resume_onto_a_cuda_device_restores_the_random_generators(tmp_path):
    """resume_on_every_rank loads onto the rank's device: the saved generator states came back as
    CUDA tensors, which torch.set_rng_state refuses ("RNG state must be a torch.ByteTensor"), so
    every resume on a GPU stopped as "does not fit this model"."""
    model, opt = _model_opt()
    torch.manual_seed(1)
    Checkpointer(tmp_path, every=5).save(5, model=model, optimizer=opt)
    expected = torch.rand(3)  # the first draw after the checkpoint
    torch.manual_seed(7)
    gpu = torch.nn.Linear(4, 3).cuda()
    got = Checkpointer(tmp_path, every=5).resume(model=gpu, optimizer=torch.optim.SGD(gpu.parameters(), lr=0.1,
                                                                                     momentum=0.9),
                                                  map_location=torch.device("cuda", 0))
    assert got.step == 5 and torch.equal(gpu.weight.cpu(), model.weight)
    assert torch.equal(torch.rand(3), expected)  # the generator is the checkpoint's again


@pytest.mark.parametrize("change", [{"drop": "step"}, {"drop": "extra"}, {"step": "ten"}, {"step": -1}])
def test_a_checkpoint_of_our_format_cut_down_by_hand_is_skipped_not_a_key_error(tmp_path, capsys, change):
    """A format-1 file without 'step' (or with a step that is no count) was a KeyError/ValueError
    traceback at resume; it is set aside like any damaged file and the run goes on from the older one."""
    model, opt = _model_opt()
    ckpt = Checkpointer(tmp_path, every=5)
    ckpt.save(5, model=model, optimizer=opt)
    state = torch.load(tmp_path / "ckpt-5.pt", weights_only=True)
    state["step"] = 10
    if "drop" in change:
        del state[change["drop"]]
    else:
        state.update(change)
    torch.save(state, tmp_path / "ckpt-10.pt")
    assert Checkpointer(tmp_path, every=5).resume(model=model, optimizer=opt).step == 5
    assert "skipping checkpoint ckpt-10.pt" in capsys.readouterr().out
    assert (tmp_path / "ckpt-10.pt.damaged").exists()
