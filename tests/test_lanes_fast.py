"""The SCNN speed knobs change how a step runs, not what it learns: the fast path's loss curve
follows plain eager float32 (NCHW, slice-by-slice message passing) within a stated tolerance."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dtrain.workloads.lanes import recipes
from dtrain.workloads.lanes.model import SCNN, MessagePassing, SCNNConfig
from dtrain.workloads.lanes.train import build_optimizer, forward_backward, speed_up

CFG = SCNNConfig(width=0.125, input_size=(128, 64), dropout=0.0)
STEPS = 6
# float32 summation order differs between NCHW and NHWC kernels and between the two message
# passing forms; over 6 SGD steps the losses stay within 1e-3 relative (measured: ~1e-5).
RTOL = 1e-3
# bfloat16 keeps 8 bits of mantissa (~0.4% per rounding); its curve stays within 2% of float32
# (measured: at most 0.44% over the 6 steps, NCHW and NHWC).
BF16_RTOL = 2e-2


# Small convolutions on 2 OpenMP threads crawl when other processes hold the cores (every barrier
# waits for a descheduled thread: 260 s instead of 11 s here); the numerics are the same.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _batches() -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(5)
    w, h = CFG.input_size
    return [(torch.randn(2, 3, h, w, generator=g), torch.randint(0, 6, (2, h, w), generator=g),
             torch.randint(0, 2, (2, 5), generator=g).float()) for _ in range(STEPS)]


def _loss_curve(naive: bool, **knobs) -> list[float]:
    recipe = dataclasses.replace(recipes.tiny(), model=dataclasses.replace(CFG, message_passing="naive" if naive else "fast"),
                                 lr=0.02, warmup_steps=0, **knobs)
    torch.manual_seed(0)
    model = speed_up(SCNN(recipe.model), recipe, torch.device("cpu"))
    opt = build_optimizer(model, recipe)
    losses = []
    for batch in _batches():
        opt.zero_grad(set_to_none=True)
        losses.append(forward_backward(model, batch, recipe, torch.device("cpu")).item())
        opt.step()
    return losses


def _assert_same_curve(fast: list[float], eager: list[float], rtol: float = RTOL) -> None:
    assert eager[-1] < eager[0]  # the run learns something, so a matching curve means something
    for step, (a, b) in enumerate(zip(fast, eager)):
        assert a == pytest.approx(b, rel=rtol), f"step {step}: fast {a} vs eager {b}"


def test_channels_last_and_fast_message_passing_follow_the_eager_float32_curve():
    eager = _loss_curve(naive=True)
    _assert_same_curve(_loss_curve(naive=False, channels_last=True), eager)
    _assert_same_curve(_loss_curve(naive=False, channels_last=False), eager)


@pytest.mark.slow
def test_compiled_backbone_follows_the_eager_float32_curve():
    _assert_same_curve(_loss_curve(naive=False, channels_last=True, compile=True), _loss_curve(naive=True))


@pytest.mark.slow
def test_compile_keeps_checkpoint_keys():
    recipe = dataclasses.replace(recipes.tiny(), model=CFG, compile=True)
    plain = SCNN(CFG).state_dict().keys()
    assert speed_up(SCNN(CFG), recipe, torch.device("cpu")).state_dict().keys() == plain  # no "_orig_mod." prefixes


def _head_dtype(**knobs) -> torch.dtype:
    recipe = dataclasses.replace(recipes.tiny(), model=CFG, **knobs)
    torch.manual_seed(0)
    model = speed_up(SCNN(CFG), recipe, torch.device("cpu"))
    seen = []
    model.seg_head.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    forward_backward(model, _batches()[0], recipe, torch.device("cpu"))
    assert all(p.dtype == torch.float32 for p in model.parameters())  # autocast: weights stay float32
    return seen[0]


def test_cpu_bf16_knob_picks_the_precision_of_a_cpu_step(monkeypatch):
    assert _head_dtype(cpu_bf16=False) == torch.float32
    assert _head_dtype(bf16=True, cpu_bf16=False) == torch.float32  # `bf16` is CUDA's knob
    assert _head_dtype(cpu_bf16=True) == torch.bfloat16
    for isa in ("AMX-BF16", "AVX512-BF16", None):  # None: bf16 where the CPU has bf16 instructions
        monkeypatch.setattr(recipes, "cpu_bf16_isa", lambda isa=isa: isa)
        native = isa is not None
        assert _head_dtype(cpu_bf16=None) == (torch.bfloat16 if native else torch.float32)
        assert recipes.paper().nhwc("cpu") is native and recipes.demo().nhwc("cpu") is native
        assert recipes.tiny().nhwc("cpu") is False and recipes.tiny().autocast("cpu") is False
        assert recipes.paper().nhwc("cuda") is True


def test_bf16_isa_reads_the_cpuinfo_flags_of_amx_and_avx512_bf16():
    zen4 = "fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni"  # AMD EPYC 9004 (Zen 4): no AMX
    sapphire = "fpu avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"
    assert recipes.bf16_isa(zen4) == "AVX512-BF16"
    assert recipes.bf16_isa(sapphire) == "AMX-BF16"  # the faster units win
    assert recipes.bf16_isa("fpu sse2 avx2 avx512f avx512_vnni") is None  # Ice Lake: bf16 would be converted
    assert recipes.bf16_isa("fpu avx512_bf16x") is None and recipes.bf16_isa("") is None  # whole words only


def test_cpu_bf16_follows_the_eager_float32_curve():
    eager = _loss_curve(naive=True)
    for channels_last in (True, False):
        bf16 = _loss_curve(naive=False, cpu_bf16=True, channels_last=channels_last)
        _assert_same_curve(bf16, eager, rtol=BF16_RTOL)
        assert max(abs(a - b) for a, b in zip(bf16, eager)) > 1e-5  # it did run in bf16


def test_train_flag_overrides_the_recipes_precision():
    from dtrain.workloads.lanes.train import parse_config
    paper = parse_config(["--recipe", "paper", "--no-bf16"], {}).recipe
    assert not paper.autocast("cpu") and not paper.autocast("cuda") and not paper.nhwc("cpu")
    demo = parse_config(["--recipe", "demo", "--no-bf16"], {}).recipe
    assert not demo.autocast("cpu") and not demo.autocast("cuda") and not demo.nhwc("cpu")
    tiny = parse_config(["--recipe", "tiny", "--bf16"], {}).recipe
    assert tiny.autocast("cpu") and tiny.autocast("cuda") and tiny.nhwc("cpu")
    assert parse_config(["--recipe", "tiny"], {}).recipe.autocast("cpu") is False


def test_cuda_graphs_knob_is_on_for_one_cuda_process_and_asked_for_under_ddp():
    from dtrain.workloads.lanes.train import for_world, parse_config
    demo = recipes.demo()
    assert demo.graphs("cuda") and not demo.graphs("cpu")  # the recipe's default (None): on, on CUDA only
    assert not dataclasses.replace(demo, cuda_graphs=False).graphs("cuda")
    ablation = dataclasses.replace(demo, model=dataclasses.replace(demo.model, message_passing="none"))
    assert not ablation.graphs("cuda")  # nothing launch-bound left to capture
    assert parse_config(["--recipe", "demo", "--no-cuda-graphs"], {}).recipe.cuda_graphs is False
    cfg = parse_config(["--recipe", "paper"], {})
    assert cfg.recipe.cuda_graphs is None
    assert for_world(cfg, 1).recipe.graphs("cuda")
    assert not for_world(cfg, 2).recipe.graphs("cuda")  # DDP: not measured on more than one GPU
    asked = parse_config(["--recipe", "paper", "--cuda-graphs"], {})
    assert for_world(asked, 4).recipe.graphs("cuda")


def test_capture_graphs_leaves_a_cpu_model_as_it_is():
    from dtrain.workloads.lanes.train import capture_graphs
    model = SCNN(CFG)
    forward = model.forward
    assert capture_graphs(model, recipes.tiny(), torch.device("cpu")) is model
    assert model.forward == forward and "forward" not in vars(model)  # make_graphed_callables not called


def test_scnn_init_matches_the_authors_code():
    torch.manual_seed(0)
    official = MessagePassing(128, 9, init="scnn")
    default = MessagePassing(128, 9)
    expected = (2 / (9 * 128 * 128 * 5)) ** 0.5  # SCNN-gen.lua: normal(0, sqrt(2 / (kw * dim * dim * 5)))
    assert expected == pytest.approx(0.00165, rel=0.01)
    for conv in (official.down, official.up, official.right, official.left):
        assert conv.weight.std().item() == pytest.approx(expected, rel=0.02)
        assert abs(conv.weight.mean().item()) < expected / 10
    assert default.down.weight.std().item() > 8 * expected  # PyTorch's default is ~10x larger
    assert recipes.paper().model.mp_init == "scnn"
    with pytest.raises(Exception, match="mp_init"):
        SCNNConfig(mp_init="xavier")


@pytest.mark.slow
def test_the_step_bench_times_eager_and_fast_side_by_side_and_refuses_bad_numbers():
    import json
    import os
    import subprocess
    import sys

    from conftest import REPO

    script = str(REPO / "bench/lanes_train.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, script, "--recipe", "tiny", "--size", "64x32", "--batch", "4",
                           "--repeats", "2", "--warmup", "1", "--channels-last"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(proc.stdout.splitlines()[-1])
    assert (row["recipe"], row["size"], row["batch"], row["repeats"]) == ("tiny", "64x32", 4, 2)
    assert row["knobs"]["channels_last"] is True
    assert row["eager_step_s"] > 0 and row["fast_step_s"] > 0
    assert row["speedup"] == pytest.approx(row["eager_step_s"] / row["fast_step_s"], abs=0.02)
    for args, message in [(["--size", "64x"], "--size '64x' is not WIDTHxHEIGHT"),
                          (["--size", "72x32"], "multiples of 16"),
                          (["--size", "8192x32"], "--size width 8192 is out of range: give 16 to 4096"),
                          (["--batch", "0"], "--batch 0 is out of range: give 1 to 256"),
                          (["--repeats", "0"], "--repeats 0 is out of range: give 1 to 1000")]:
        bad = subprocess.run([sys.executable, script, "--recipe", "tiny", *args],
                             capture_output=True, text=True, timeout=60, env=env)
        assert bad.returncode == 2 and message in bad.stderr.splitlines()[-1], (args, bad.stderr[-500:])


def test_training_log_names_the_precision_and_the_cpus_bf16_instructions(monkeypatch):
    monkeypatch.setattr(recipes, "cpu_bf16_isa", lambda: "AVX512-BF16")
    assert recipes.demo().precision("cpu") == "bf16 autocast (AVX512-BF16)"
    assert recipes.demo().with_bf16(False).precision("cpu") == "float32"
    assert recipes.paper().precision("cuda") == "bf16 autocast"
    monkeypatch.setattr(recipes, "cpu_bf16_isa", lambda: None)
    assert recipes.demo().precision("cpu") == "float32"
    assert recipes.tiny().with_bf16(True).precision("cpu") == "bf16 autocast (no bf16 instructions: converted to float32)"


def test_predict_runs_in_bf16_where_the_device_computes_it_natively(monkeypatch, tmp_path):
    from dtrain.workloads.lanes import synth
    from dtrain.workloads.lanes.predict import predict_labels, split_labels

    synth.generate(tmp_path, frames_per_file={"label_data_0313.json": 2}, seed=1, test_frames=2)
    labels = split_labels(tmp_path, "test")
    torch.manual_seed(0)
    model = SCNN(CFG)
    seen, layouts = [], []
    model.register_forward_pre_hook(lambda _m, i: layouts.append(not i[0].is_contiguous()))  # channels-last frames
    model.seg_head.register_forward_hook(lambda _m, _i, out: seen.append((out.dtype, layouts[-1])))
    for isa, bf16, want in (("AVX512-BF16", None, True), (None, None, False), (None, True, True),
                            ("AMX-BF16", False, False)):
        monkeypatch.setattr(recipes, "cpu_bf16_isa", lambda isa=isa: isa)
        seen.clear()
        predict_labels(model, tmp_path, labels, batch_size=2, bf16=bf16)
        assert seen and all(s == ((torch.bfloat16, True) if want else (torch.float32, False)) for s in seen), (isa, bf16)
    assert recipes.native_bf16("cuda") and not recipes.native_bf16("meta")
