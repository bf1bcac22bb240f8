"""Named training setups for SCNN: `tiny` (CI on a CPU), `demo` (minutes on 2 CPU processes), `paper`.

A recipe fixes everything that decides the result (model width and input size, batch, steps,
learning rate); the command line and the platform's environment variables may override the
batch, the steps and the learning rate, never silently anything else.
"""

import dataclasses
import functools
from dataclasses import dataclass

import torch

from dtrain.errors import SpecError
from dtrain.workloads.inputs import MAX_BATCH, MAX_LR, MAX_STEPS, MAX_WORKERS
from dtrain.workloads.lanes.model import SCNNConfig

# Lowest and highest value of each whole-number setting (steps, batches, intervals, counts).
LIMITS: dict[str, tuple[int, int]] = {
    "batch_size": (1, MAX_BATCH),
    "max_steps": (1, MAX_STEPS),
    "warmup_steps": (0, MAX_STEPS),
    "num_workers": (0, MAX_WORKERS),
    "val_every": (0, MAX_STEPS),
    "val_batch_size": (1, MAX_BATCH),
    "log_every": (1, MAX_STEPS),
    "ckpt_every": (1, MAX_STEPS),
    "keep_ckpts": (1, 1000),
}


@dataclass(frozen=True, kw_only=True)
class Recipe:
    name: str  # what --recipe selects
    model: SCNNConfig  # width, input size (W, H), message passing implementation
    batch_size: int  # images per process per step (BATCH_SIZE)
    max_steps: int  # optimizer steps of the schedule unless --max-steps or --epochs says otherwise
    lr: float  # peak learning rate of SGD
    momentum: float = 0.9  # SGD momentum
    weight_decay: float = 1e-4  # SGD weight decay (L2)
    poly_power: float = 0.9  # lr = peak * (1 - step / max_steps) ** poly_power after warm-up
    warmup_steps: int = 0  # linear warm-up from 0, keeps from-scratch BN nets from diverging early
    bg_weight: float = 0.4  # cross-entropy weight of the background class (lanes weigh 1.0)
    exist_weight: float = 0.1  # weight of the lane-existence BCE against the segmentation loss
    augment: bool = True  # random flip and photometric jitter on training frames
    num_workers: int = 0  # data loader processes per training process when USE_WORKERS is on
    val_every: int = 0  # steps between validations when USE_VAL is on (0: only after the last step)
    val_batch_size: int = 8  # frames per validation batch (VAL_BATCH_SIZE)
    log_every: int = 10  # steps between progress lines on stdout and train.log
    ckpt_every: int = 100  # steps between checkpoints (and always after the last step)
    keep_ckpts: int = 3  # checkpoints kept in the output folder, newest first
    threshold: float = 0.3  # lane probability a pixel needs to become a lane point when decoding
    # Speed knobs: each changes how the step runs, not what it computes (within the tolerance
    # tests/test_lanes_fast.py checks against eager float32); defaults follow bench/lanes_train.py.
    # On this CPU (paper step, batch 2, 512x288) in float32 neither channels-last nor compile
    # measured faster (9.02 and 9.27 s of CPU time per step against 9.25 for eager); bfloat16 on
    # its AMX-BF16 units did, 4.4-5.3x with channels-last on top of it, and 2.1-2.3x on an AMD CPU's
    # AVX512-BF16 instructions (benchmarks.md, "SCNN step").
    channels_last: bool | None = None  # NHWC convolutions; None: on CUDA, and wherever a step runs in bf16
    compile: bool = False  # torch.compile the backbone and neck (message passing stays eager)
    # On CUDA: capture the model's training forward and backward once as CUDA graphs
    # (torch.cuda.make_graphed_callables) and replay them every step. The message passing's ~200
    # dependent row convolutions cost one kernel launch each (and Python around it) when eager:
    # on an H200 the paper step ran 2.25x eager float32 with graphs against 1.65x without, the
    # demo step 3.7x against 0.85x (benchmarks.md, "GPU figures"). None: on for one process; under
    # DDP only when asked (--cuda-graphs), as no run with more than one GPU has measured it yet.
    cuda_graphs: bool | None = None
    bf16: bool = True  # bfloat16 autocast on CUDA
    # bfloat16 autocast on a CPU; None: when the CPU has bf16 instructions oneDNN uses (AMX-BF16 or
    # AVX512-BF16, cpu_bf16_isa); on other CPUs the step stays float32 (bf16 there was not measured)
    cpu_bf16: bool | None = False
    # Keep the memory a step frees mapped for the next step (glibc's mmap and trim thresholds,
    # dtrain.training.heap): on a CPU the step otherwise faults its working set in again every
    # time; 1.18x per demo step and 1.31x per paper step here (benchmarks.md, "Freed memory kept").
    keep_heap: bool = True

    def autocast(self, device) -> bool:
        """Whether a step on `device` runs under bfloat16 autocast (weights and optimizer stay float32)."""
        kind = torch.device(device).type
        if kind == "cuda":
            return self.bf16
        if kind == "cpu" and self.cpu_bf16 is not None:
            return self.cpu_bf16
        return native_bf16(device)

    def precision(self, device) -> str:
        """How a step on `device` computes, for the training log (precision_name)."""
        return precision_name(device, self.autocast(device))

    def with_bf16(self, on: bool) -> "Recipe":
        """The same recipe with bfloat16 autocast on (or off) on whichever device runs it."""
        return dataclasses.replace(self, bf16=on, cpu_bf16=on)

    def graphs(self, device) -> bool:
        """Whether a step on `device` replays CUDA graphs (not for message_passing "none": nothing to gain)."""
        return (self.cuda_graphs is not False and torch.device(device).type == "cuda"
                and self.model.message_passing != "none")

    def nhwc(self, device) -> bool:
        """Whether a step on `device` runs channels-last."""
        if self.channels_last is not None:
            return self.channels_last
        return torch.device(device).type == "cuda" or self.autocast(device)

    def __post_init__(self) -> None:
        for field, (low, high) in LIMITS.items():
            if not low <= getattr(self, field) <= high:
                raise SpecError(f"recipe {self.name}: {field}={getattr(self, field)} is out of range: "
                                f"give {low} to {high}")
        if not 0 < self.lr <= MAX_LR:  # also refuses NaN and infinity
            raise SpecError(f"recipe {self.name}: lr={self.lr} is out of range: give a number above 0 and at most "
                            f"{MAX_LR:g}, e.g. 0.01")

    @property
    def input_size(self) -> tuple[int, int]:
        return self.model.input_size


def tiny() -> Recipe:
    """CPU smoke training for CI: about a minute on 2 cores, clearly better than predicting no lanes."""
    return Recipe(
        name="tiny",
        model=SCNNConfig(width=0.125, input_size=(256, 144), dropout=0.0),
        batch_size=8,
        max_steps=150,
        lr=0.05,
        warmup_steps=10,
        log_every=10,
        ckpt_every=50,
    )


def demo() -> Recipe:
    """Two CPU processes, under 20 minutes, TuSimple accuracy >= 0.90 on synthetic frames."""
    return Recipe(
        name="demo",
        model=SCNNConfig(width=0.125, input_size=(256, 144), dropout=0.1),
        cpu_bf16=None,  # bf16 where the CPU has it: 2.1x per step on AMX, 1.9x on AVX512-BF16; --no-bf16: float32
        batch_size=8,
        max_steps=1500,
        lr=0.05,
        warmup_steps=20,
        val_every=500,
        log_every=25,
        ckpt_every=100,
    )


def paper() -> Recipe:
    """The published setup (Pan et al. 2018): full VGG16 width, SGD 0.01, momentum 0.9, wd 1e-4, poly 0.9.

    The paper trains with batch 12 for 60k iterations (CULane); with N processes the global batch
    is 12 N, so pass BATCH_SIZE=12/N to keep the published global batch.
    """
    return Recipe(
        name="paper",
        model=SCNNConfig(width=1.0, input_size=(512, 288), dropout=0.1, mp_init="scnn"),
        cpu_bf16=None,  # 4.4-5.3x per step on an AMX-BF16 CPU, 2.2x on AVX512-BF16 (benchmarks.md)
        batch_size=12,
        max_steps=60_000,
        lr=0.01,
        num_workers=4,
        val_every=2000,
        log_every=20,
        ckpt_every=1000,
    )


# CPU flags (as /proc/cpuinfo spells them) of the bf16 instructions oneDNN runs convolutions on,
# best first: AMX tiles (Intel Sapphire Rapids on), then AVX512-BF16's dot product (Intel Cooper
# Lake, AMD Zen 4 on). Without either, oneDNN converts bf16 to float32 around float32 kernels.
BF16_ISAS = (("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16"))


def bf16_isa(flags: str) -> str | None:
    """The bf16 instruction set a cpuinfo `flags` line names (e.g. 'AVX512-BF16'), or None."""
    have = set(flags.split())
    return next((name for flag, name in BF16_ISAS if flag in have), None)


def native_bf16(device) -> bool:
    """Whether `device` computes bfloat16 natively: CUDA, or a CPU with bf16 instructions."""
    kind = torch.device(device).type
    return kind == "cuda" or (kind == "cpu" and cpu_bf16_isa() is not None)


def precision_name(device, bf16: bool) -> str:
    """'float32', or 'bf16 autocast' and, on a CPU, which bf16 instructions run it (for logs)."""
    if not bf16:
        return "float32"
    if torch.device(device).type != "cpu":
        return "bf16 autocast"
    return f"bf16 autocast ({cpu_bf16_isa() or 'no bf16 instructions: converted to float32'})"


@functools.cache
def cpu_bf16_isa() -> str | None:
    """The bf16 instruction set of this CPU that oneDNN runs bfloat16 convolutions on, or None."""
    try:
        with open("/proc/cpuinfo") as f:
            line = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return None
    return bf16_isa(line.partition(":")[2])


RECIPES = {"tiny": tiny, "demo": demo, "paper": paper}


def get(name: str) -> Recipe:
    if name not in RECIPES:
        raise SpecError(f"unknown recipe {name!r}: use one of {', '.join(RECIPES)}")
    return RECIPES[name]()
