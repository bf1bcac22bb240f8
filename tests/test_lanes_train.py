"""SCNN training: DDP step == 1-process step, exact resume, env/flag precedence, tiny recipe learns.

The DDP test runs this file under `python -m torch.distributed.run --nproc-per-node 2` (gloo):
see `ddp_worker` at the bottom.
"""

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from PIL import Image

from dtrain.errors import SpecError
from dtrain.training import read_metrics, setup_distributed
from dtrain.training.heap import glibc
from dtrain.workloads.lanes import __main__ as lanes_cli
from dtrain.workloads.lanes import synth, train
from dtrain.workloads.lanes.metric import evaluate
from dtrain.workloads.lanes.model import SCNN, SCNNConfig
from dtrain.workloads.lanes.predict import (
    OVERLAY_SIZE,
    load_model,
    predict_labels,
    split_labels,
)
from dtrain.workloads.lanes.recipes import tiny
from dtrain.workloads.lanes.tusimple import LaneLabel, read_labels

REPO = Path(__file__).resolve().parents[1]
DDP_CFG = SCNNConfig(width=0.125, input_size=(64, 48), dropout=0.0)  # dropout off: ranks draw different masks


@pytest.fixture(scope="module")
def lanes_data(tmp_path_factory) -> Path:
    """Synthetic TuSimple set: 400 training frames, 16 validation, 100 held-out test frames."""
    root = tmp_path_factory.mktemp("tusimple")
    synth.generate(root, frames_per_file={"label_data_0313.json": 360, "label_data_0601.json": 40,
                                          "label_data_0531.json": 16}, seed=7, test_frames=100)
    return root


@pytest.fixture(scope="module")
def small_lanes_data(tmp_path_factory) -> Path:
    """The same kind of set, cut to what the fast tests read (a 6-step run at batch 2 reads 12
    training frames, all in the first epoch either way; the predictions read 6-7 test frames):
    40 training frames, 16 validation, 8 test. Generating the full set above took 7-33 s."""
    root = tmp_path_factory.mktemp("tusimple-small")
    synth.generate(root, frames_per_file={"label_data_0313.json": 30, "label_data_0601.json": 10,
                                          "label_data_0531.json": 16}, seed=7, test_frames=8)
    return root


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run_training(argv: list[str], env: dict[str, str] | None = None) -> dict:
    """train.main in this process, as one process with no launcher around it."""
    cfg = train.parse_config(argv, env or {})
    return train.train(cfg, setup_distributed(env={}))


# ------------------------------------------------------------------ configuration


def test_flags_win_over_environment_and_environment_over_recipe():
    env = {"BATCH_SIZE": "3", "USE_WORKERS": "true", "NUM_WORKERS": "4", "USE_VAL": "1", "VAL_BATCH_SIZE": "5",
           "ENABLE_SNAPSHOT": "yes", "PVC_NAME": "lanes-pvc", "DATA_DIR": "/data/x", "OUTPUT_DIR": "/out/y"}
    cfg = train.parse_config(["--recipe", "tiny"], env)
    assert (cfg.recipe.batch_size, cfg.num_workers, cfg.use_val, cfg.val_batch_size) == (3, 4, True, 5)
    assert (cfg.enable_snapshot, cfg.pvc_name, cfg.data_dir, cfg.out_dir) == (True, "lanes-pvc", "/data/x", "/out/y")
    cfg = train.parse_config(["--recipe", "tiny", "--batch-size", "6", "--num-workers", "1", "--no-use-val",
                              "--val-batch-size", "2", "--no-enable-snapshot", "--pvc-name", "other",
                              "--data-dir", "/d", "--out-dir", "/o"], env)
    assert (cfg.recipe.batch_size, cfg.num_workers, cfg.use_val, cfg.val_batch_size) == (6, 1, False, 2)
    assert (cfg.enable_snapshot, cfg.pvc_name, cfg.data_dir, cfg.out_dir) == (False, "other", "/d", "/o")
    assert train.parse_config(["--no-use-workers"], env).num_workers == 0  # USE_WORKERS off beats NUM_WORKERS
    assert train.parse_config([], {**env, "USE_WORKERS": "false"}).num_workers == 0
    assert train.parse_config(["--use-workers"], {**env, "USE_WORKERS": "false"}).num_workers == 4
    bare = train.parse_config([], {})
    assert (bare.recipe, bare.num_workers, bare.use_val, bare.data_dir) == (tiny(), 0, False, "/mnt/tusimple")
    assert bare.recipe.keep_heap and not train.parse_config(["--no-keep-heap"], {}).recipe.keep_heap


@pytest.mark.parametrize("env, argv", [({"USE_VAL": "maybe"}, []), ({"BATCH_SIZE": "two"}, []),
                                       ({}, ["--batch-size", "0"]), ({}, ["--lr", "-1"]), ({}, ["--epochs", "0"])])
def test_bad_settings_raise_spec_errors(env, argv):
    with pytest.raises(SpecError):
        train.parse_config(argv, env)


@pytest.mark.parametrize("env, argv, message", [
    ({}, ["--num-workers", "100000", "--use-workers"], "--num-workers 100000 is out of range: give 0 to 64"),
    ({"NUM_WORKERS": "100000", "USE_WORKERS": "true"}, [], "NUM_WORKERS=100000 is out of range: give 0 to 64"),
    ({"BATCH_SIZE": "0"}, [], "BATCH_SIZE=0 is out of range: give 1 to 65536"),
    ({"VAL_BATCH_SIZE": "65537"}, [], "VAL_BATCH_SIZE=65537 is out of range: give 1 to 65536"),
    ({}, ["--max-steps", "99999999999999999999"], "--max-steps 99999999999999999999 is out of range: give 1 to 10000000"),
    ({}, ["--max-steps", "0"], "--max-steps 0 is out of range: give 1 to 10000000"),
    ({}, ["--batch-size", "65537"], "--batch-size 65537 is out of range: give 1 to 65536"),
    ({}, ["--val-batch-size", "0"], "--val-batch-size 0 is out of range: give 1 to 65536"),
    ({}, ["--epochs", "10001"], "--epochs 10001 is out of range: give 1 to 10000"),
    ({}, ["--stop-after", "10000001"], "--stop-after 10000001 is out of range: give 1 to 10000000"),
    ({}, ["--checkpoint-every", "0"], "--checkpoint-every 0 is out of range: give 1 to 10000000"),
    ({}, ["--seed", "-1"], "--seed -1 is out of range: give 0 to 4294967295"),
    ({}, ["--seed", str(2**32)], "--seed 4294967296 is out of range: give 0 to 4294967295"),
    ({}, ["--lr", "1e300"], r"--lr 1e300 is out of range: give a number above 0 and at most 10, e.g. 0.05"),
    ({}, ["--lr", "nan"], "--lr nan is out of range: give a number above 0 and at most 10"),
    ({}, ["--lr", "inf"], "--lr inf is out of range"),
    ({}, ["--lr", "0"], "--lr 0 is out of range"),
])
def test_every_number_is_bounded_and_named(env, argv, message):
    with pytest.raises(SpecError, match=f"^{message}"):
        train.parse_config(argv, env)


def test_the_largest_numbers_in_range_are_accepted():
    cfg = train.parse_config(["--recipe", "paper", "--max-steps", "10000000", "--batch-size", "65536", "--lr", "10",
                              "--num-workers", "64", "--epochs", "10000", "--stop-after", "10000000",
                              "--checkpoint-every", "10000000", "--val-batch-size", "65536", "--seed", str(2**32 - 1)],
                             {})
    assert (cfg.recipe.max_steps, cfg.recipe.batch_size, cfg.recipe.lr, cfg.num_workers) == (10_000_000, 65_536, 10.0, 64)
    assert (cfg.epochs, cfg.stop_after, cfg.recipe.ckpt_every, cfg.val_batch_size, cfg.seed) == (
        10_000, 10_000_000, 10_000_000, 65_536, 2**32 - 1)


@pytest.mark.slow
def test_epochs_times_steps_per_epoch_is_bounded_before_any_step(lanes_data, tmp_path, monkeypatch):
    """Each flag is in range, but 400 frames at batch 1 make --epochs 10000 plan 4 000 000 steps: over a
    (lowered) limit, the run is refused in one line before a step runs."""
    monkeypatch.setattr("dtrain.workloads.inputs.MAX_STEPS", 1_000_000)
    with pytest.raises(SpecError, match=r"^--epochs 10000 x 400 steps per epoch plans 4000000 steps, more than the "
                                        r"1000000 one run may: give --epochs 2500 or fewer, or a larger batch$"):
        run_training(["--recipe", "tiny", "--data-dir", str(lanes_data), "--out-dir", str(tmp_path / "out"),
                      "--batch-size", "1", "--epochs", "10000"])
    assert not (tmp_path / "out" / "metrics.jsonl").read_text()  # not one step's row


@pytest.mark.parametrize("field, value", [("keep_ckpts", 0), ("keep_ckpts", 1001), ("log_every", 10**8),
                                          ("lr", float("nan")), ("lr", 11.0), ("num_workers", 65)])
def test_recipe_bounds_every_number(field, value):
    with pytest.raises(SpecError, match=f"^recipe tiny: {field}=.* is out of range: give"):
        dataclasses.replace(tiny(), **{field: value})


def test_poly_schedule_warms_up_then_decays_to_zero():
    recipe = tiny()
    lrs = [train.lr_at(recipe, s, 100) for s in range(100)]
    assert lrs[recipe.warmup_steps - 1] == pytest.approx(recipe.lr)
    assert all(a < b for a, b in zip(lrs[: recipe.warmup_steps], lrs[1: recipe.warmup_steps]))
    assert all(a > b for a, b in zip(lrs[recipe.warmup_steps:], lrs[recipe.warmup_steps + 1:]))
    assert 0 < lrs[-1] < 0.05 * recipe.lr


# ------------------------------------------------------------------ data parallel step


def _global_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    w, h = DDP_CFG.input_size
    img = torch.randn(4, 3, h, w, generator=g)
    seg = torch.randint(0, 6, (4, h, w), generator=g)
    exist = torch.randint(0, 2, (4, 5), generator=g).float()
    return img, seg, exist


def _model_and_optimizer() -> tuple[SCNN, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = SCNN(DDP_CFG)
    return model, train.build_optimizer(model, tiny())


def ddp_worker(out: str) -> None:
    """One rank: DDP forward/backward on its half of the global batch, one SGD step; rank 0 saves."""
    info = setup_distributed("gloo")
    model, opt = _model_and_optimizer()
    ddp = train.data_parallel(model, tiny(), info)  # as the training builds it
    assert isinstance(ddp, torch.nn.parallel.DistributedDataParallel)
    half = [t[2 * info.rank: 2 * info.rank + 2] for t in _global_batch()]
    train.forward_backward(ddp, half, tiny(), info.device)
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    opt.step()
    if info.is_main:
        torch.save({"grads": grads, "params": model.state_dict()}, out)
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_process_ddp_step_equals_one_process_step_on_the_global_batch(tmp_path):
    out = tmp_path / "ddp.pt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           __file__, str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ddp = torch.load(out, weights_only=True)

    # One process, the same global batch: the mean of the two per-rank losses (BatchNorm sees
    # each rank's half on its own in DDP, so the reference feeds the same halves).
    model, opt = _model_and_optimizer()
    batch = _global_batch()
    for r in range(2):
        train.forward_backward(model, [t[2 * r: 2 * r + 2] for t in batch], tiny(), torch.device("cpu"), scale=0.5)
    first_half_only = _model_and_optimizer()[0]
    train.forward_backward(first_half_only, [t[:2] for t in batch], tiny(), torch.device("cpu"))
    for name, p in model.named_parameters():
        torch.testing.assert_close(ddp["grads"][name], p.grad, rtol=1e-4, atol=1e-6, msg=name)
    head = "seg_head.1.weight"
    assert not torch.allclose(ddp["grads"][head], dict(first_half_only.named_parameters())[head].grad)
    opt.step()
    for name, value in model.named_parameters():  # BN running stats are per rank in DDP: not compared
        torch.testing.assert_close(ddp["params"][name], value.detach(), rtol=1e-4, atol=1e-6, msg=name)


# ------------------------------------------------------------------ resume


def test_stop_and_resume_continues_the_same_schedule(small_lanes_data, tmp_path):
    common = ["--recipe", "tiny", "--data-dir", str(small_lanes_data), "--max-steps", "6", "--batch-size", "2"]
    straight = tmp_path / "straight"
    run_training([*common, "--out-dir", str(straight)])
    split = tmp_path / "split"
    first = run_training([*common, "--out-dir", str(split), "--stop-after", "3"])
    assert not first["finished"] and not (split / "model.pt").exists() and (split / "ckpt-3.pt").exists()
    second = run_training([*common, "--out-dir", str(split)])
    assert second["finished"] and second["step"] == 6

    a = torch.load(straight / "model.pt", weights_only=True)["model"]
    b = torch.load(split / "model.pt", weights_only=True)["model"]
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-7, msg=name)
    straight_log = [(m["step"], m["lr"], m["loss"]) for m in read_metrics(straight / "metrics.jsonl")]
    split_log = [(m["step"], m["lr"], m["loss"]) for m in read_metrics(split / "metrics.jsonl")]
    assert [s for s, _, _ in split_log] == [1, 2, 3, 4, 5, 6]
    assert [lr for _, lr, _ in split_log] == [lr for _, lr, _ in straight_log]
    assert [loss for *_, loss in split_log] == pytest.approx([loss for *_, loss in straight_log], rel=1e-4)
    assert "resumed from" in (split / "train.log").read_text()
    kept = "on" if glibc() else "off: not glibc"
    assert f"freed memory kept: {kept}" in (straight / "train.log").read_text()

    fresh = run_training([*common, "--out-dir", str(split), "--no-resume", "--stop-after", "1", "--no-keep-heap"])
    assert fresh["step"] == 1  # --no-resume ignores the checkpoints
    recipe_lines = [line for line in (split / "train.log").read_text().splitlines() if " recipe tiny: " in line]
    assert recipe_lines[-1].endswith("freed memory kept: off")


@pytest.mark.slow
def test_loader_workers_and_a_resume_change_no_frame_s_augmentation(lanes_data, tmp_path):
    """A frame's augmentation is drawn from (seed, epoch, frame) alone: 2 loader workers train the
    same weights as none, and a run resumed with workers the same as one that was not (workers
    used to draw from their own generators, seeded when they start, which a resume moves)."""
    common = ["--recipe", "tiny", "--data-dir", str(lanes_data), "--max-steps", "6", "--batch-size", "2"]
    runs = {}
    for name, extra in [("none", ["--num-workers", "0"]), ("workers", ["--num-workers", "2"])]:
        runs[name] = tmp_path / name
        run_training([*common, *extra, "--out-dir", str(runs[name])])
    split = tmp_path / "split"
    assert not run_training([*common, "--num-workers", "2", "--out-dir", str(split), "--stop-after", "3"])["finished"]
    assert run_training([*common, "--num-workers", "2", "--out-dir", str(split)])["step"] == 6
    weights = {name: torch.load(path / "model.pt", weights_only=True)["model"]
               for name, path in [*runs.items(), ("split", split)]}
    assert tiny().augment
    for name in weights["none"]:
        assert torch.equal(weights["workers"][name], weights["none"][name]), name
        assert torch.equal(weights["split"][name], weights["none"][name]), name


def test_item_seeds_depend_on_seed_epoch_and_frame_only():
    from dtrain.training.sampler import ResumableSampler, item_seed

    data = list(range(10))
    sampler = ResumableSampler(data, num_replicas=2, rank=1, shuffle=True, seed=3, item_seeds=True)
    plain = ResumableSampler(data, num_replicas=2, rank=1, shuffle=True, seed=3)
    sampler.set_epoch(4)
    plain.set_epoch(4)
    pairs = list(sampler)
    assert [i for i, _ in pairs] == list(plain)  # the same order, each frame with its seed
    assert all(s == item_seed(3, 4, i) and 0 <= s < 2**63 for i, s in pairs)
    sampler.set_epoch(4, start=2)
    assert list(sampler) == pairs[2:]  # a resume part-way gets the same seeds for the same frames
    assert len({item_seed(3, e, i) for e in range(20) for i in range(500)}) == 20 * 500
    assert item_seed(3, 4, 1) != item_seed(4, 4, 1)


# ------------------------------------------------------------------ learning


def test_the_first_calls_set_up_is_no_frames_run_time(small_lanes_data):
    """The official metric scores a frame whose run_time is over 200 ms as wrong, so a one-time
    set-up in the first forward (here 250 ms a frame) must not be timed as the first batch's."""
    model = SCNN(SCNNConfig(width=0.125, input_size=(64, 48)))
    forward, calls = model.forward, []

    def slow_first_call(img):
        calls.append(len(img))
        if len(calls) == 1:
            time.sleep(0.25 * len(img))
        return forward(img)

    model.forward = slow_first_call
    gts = split_labels(small_lanes_data, "test")[:6]
    preds = predict_labels(model, small_lanes_data, gts, batch_size=4)
    assert all(0 < p.run_time < 200 for p in preds), [p.run_time for p in preds]
    assert calls == [4, 4, 2, 2]  # one untimed pass per batch shape (4, then the last partial 2), each batch once
    assert [p.raw_file for p in preds] == [g.raw_file for g in gts]


def test_a_new_batch_shapes_set_up_is_no_frames_run_time(small_lanes_data):
    """The last, partial batch has a shape the first pass did not set up (oneDNN picks kernels per
    shape): its one-time set-up (here 250 ms a frame) was timed as its frames' run_time, and the
    official metric scored them as misses, on every split whose size is not a multiple of the batch."""
    model = SCNN(SCNNConfig(width=0.125, input_size=(64, 48)))
    forward, shapes = model.forward, set()

    def slow_first_call_per_shape(img):
        if tuple(img.shape) not in shapes:
            shapes.add(tuple(img.shape))
            time.sleep(0.25 * len(img))
        return forward(img)

    model.forward = slow_first_call_per_shape
    gts = split_labels(small_lanes_data, "test")[:7]
    preds = predict_labels(model, small_lanes_data, gts, batch_size=4)
    assert len(preds) == 7 and all(0 < p.run_time < 200 for p in preds), [p.run_time for p in preds]


@pytest.mark.slow  # ~50 s of training on two cores: an end-to-end run, in the slow set CI runs
def test_tiny_recipe_beats_predicting_no_lanes_on_held_out_frames(lanes_data, tmp_path):
    out = tmp_path / "tiny"
    summary = run_training(["--recipe", "tiny", "--data-dir", str(lanes_data), "--out-dir", str(out), "--use-val"])
    assert summary["finished"] and (out / "model.pt").exists() and (out / "run.json").exists()
    losses = [m["loss"] for m in read_metrics(out / "metrics.jsonl") if "loss" in m]
    assert sum(losses[-10:]) < 0.5 * sum(losses[:10])

    gts = split_labels(lanes_data, "test")
    preds = predict_labels(load_model(out / "model.pt"), lanes_data, gts, batch_size=16)
    trained = evaluate(preds, gts)
    nothing = evaluate([LaneLabel(raw_file=g.raw_file, h_samples=g.h_samples, lanes=()) for g in gts], gts)
    print(f"held-out accuracy: tiny {trained['accuracy']:.3f} (fp {trained['fp']:.3f} fn {trained['fn']:.3f}), "
          f"no lanes {nothing['accuracy']:.3f}")
    assert trained["accuracy"] > nothing["accuracy"] + 0.3
    assert trained["fn"] < 0.9 * nothing["fn"]

    # the command line: prediction file, overlays, metric (through python -m dtrain.workloads.lanes)
    pred, overlays = tmp_path / "pred.json", tmp_path / "overlays"
    assert lanes_cli.main(["predict", "--checkpoint", str(out / "model.pt"), "--data-dir", str(lanes_data),
                           "--split", "test", "--out", str(pred), "--limit", "5", "--overlays", str(overlays),
                           "--max-overlays", "2"]) == 0
    lines = read_labels(pred, max_lanes=None)
    assert [p.raw_file for p in lines] == [g.raw_file for g in gts[:5]]
    assert all(p.run_time > 0 and all(len(lane) == len(p.h_samples) for lane in p.lanes) for p in lines)
    assert [p.lanes for p in lines] == [p.lanes for p in preds[:5]]
    pngs = sorted(overlays.glob("*.png"))
    assert len(pngs) == 2 and Image.open(pngs[0]).size == OVERLAY_SIZE
    assert lanes_cli.main(["no-such-command"]) == 2


if __name__ == "__main__":
    ddp_worker(sys.argv[1])
