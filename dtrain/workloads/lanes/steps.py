"""SCNN's training step, apart from the run around it: the model as a recipe builds and speeds it up (channels
last, compile, CUDA graphs), the optimizer, the learning rate of a step, the loss, one optimizer step and the
DDP wrapper. The benchmarks (bench/) drive these as `lanes train` does."""

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from dtrain.errors import SetupError
from dtrain.training import DistInfo, all_reduce_mean
from dtrain.workloads.lanes.config import TrainConfig
from dtrain.workloads.lanes.model import SCNN, load_backbone_weights
from dtrain.workloads.lanes.recipes import Recipe


def lr_at(recipe: Recipe, step: int, max_steps: int) -> float:
    """Linear warm-up, then poly decay to 0 at max_steps."""
    if step < recipe.warmup_steps:
        return recipe.lr * (step + 1) / recipe.warmup_steps
    return recipe.lr * (1 - step / max_steps) ** recipe.poly_power


def scnn_loss(seg_logits: torch.Tensor, exist_logits: torch.Tensor, seg: torch.Tensor, exist: torch.Tensor,
              recipe: Recipe) -> torch.Tensor:
    """Class-weighted cross entropy (background 0.4, lanes 1.0) + 0.1 x existence BCE."""
    weight = torch.ones(seg_logits.shape[1], device=seg_logits.device)
    weight[0] = recipe.bg_weight
    ce = F.cross_entropy(seg_logits.float(), seg, weight=weight)
    bce = F.binary_cross_entropy_with_logits(exist_logits.float(), exist)
    return ce + recipe.exist_weight * bce


def forward_backward(model: torch.nn.Module, batch: Sequence[torch.Tensor], recipe: Recipe,
                     device: torch.device, scale: float = 1.0) -> torch.Tensor:
    """Loss of one batch, its gradients accumulated into the parameters (x scale)."""
    img, seg, exist = (t.to(device, non_blocking=True) for t in batch)
    if recipe.nhwc(device):
        img = img.contiguous(memory_format=torch.channels_last)
    # A graphed model was captured with autocast's weight-cast cache off (make_graphed_callables needs it).
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=recipe.autocast(device),
                        cache_enabled=not recipe.graphs(device)):
        seg_logits, exist_logits = model(img)
    loss = scnn_loss(seg_logits, exist_logits, seg, exist, recipe)
    (loss * scale).backward()
    return loss.detach()


def build_model(cfg: TrainConfig, device: torch.device) -> SCNN:
    torch.manual_seed(cfg.seed)  # every rank starts from the same weights (DDP also broadcasts them)
    model = SCNN(cfg.recipe.model)
    if cfg.backbone_weights:
        load_backbone_weights(model, cfg.backbone_weights)
    return speed_up(model.to(device), cfg.recipe, device)


def speed_up(model: SCNN, recipe: Recipe, device: torch.device) -> SCNN:
    """Apply the recipe's speed knobs; the state_dict keys stay those of the plain model."""
    if recipe.nhwc(device):
        model = model.to(memory_format=torch.channels_last)
    if recipe.compile:
        # Module.compile() compiles in place, so checkpoints keep their keys. The message
        # passing stays eager: its ~200 dependent row convolutions would unroll into the graph.
        model.backbone.compile()
        model.neck.compile()
    return model


def capture_graphs(model: SCNN, recipe: Recipe, device: torch.device) -> SCNN:
    """On CUDA with the recipe's cuda_graphs: the model's training-mode forward and backward become
    CUDA graph replays (torch.cuda.make_graphed_callables), in place, so the state_dict keys, the
    parameters and DDP (built after this) are as before. Every training batch has the recipe's
    shape (the loader drops the last partial batch); eval mode (validation) runs the eager forward.
    The capture's warm-up passes would move the batch-norm statistics and the random state: both
    are put back."""
    if not recipe.graphs(device):
        return model
    w, h = recipe.input_size
    sample = torch.randn(recipe.batch_size, 3, h, w, device=device)
    if recipe.nhwc(device):
        sample = sample.contiguous(memory_format=torch.channels_last)
    buffers = [(b, b.clone()) for b in model.buffers()]
    rng = torch.cuda.get_rng_state(device)
    was_training = model.training
    model.train()
    try:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=recipe.autocast(device), cache_enabled=False):
            torch.cuda.make_graphed_callables(model, (sample,), allow_unused_input=True)
    except RuntimeError as e:
        why = " ".join(str(e).split())[:300]
        raise SetupError(f"capturing the training step as CUDA graphs failed ({why}): "
                                "run with --no-cuda-graphs") from None
    with torch.no_grad():
        for live, saved in buffers:
            live.copy_(saved)
    torch.cuda.set_rng_state(rng, device)
    model.train(was_training)
    return model


def build_optimizer(model: torch.nn.Module, recipe: Recipe) -> torch.optim.SGD:
    return torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=recipe.momentum, weight_decay=recipe.weight_decay)


def step_seed(seed: int, rank: int, step: int) -> int:
    """Seed of one step on one rank: dropout replays identically after a resume (augmentation: item_seed)."""
    return (seed * 1_000_003 + rank * 7_919 + step * 104_729) % (2**63 - 1)


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, batch: Sequence[torch.Tensor], lr: float,
               cfg: TrainConfig, device: torch.device) -> float:
    """One optimizer step on this rank's share of the global batch; returns the loss averaged over ranks."""
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss = forward_backward(model, batch, cfg.recipe, device)  # DDP averages the gradients here
    opt.step()
    return all_reduce_mean(loss.clone()).item()


def data_parallel(model: SCNN, recipe: Recipe, info: DistInfo) -> torch.nn.Module:
    """The model as the training steps it: DDP for more than one process, else the model itself."""
    if info.world_size == 1:
        return model
    return DistributedDataParallel(model, device_ids=[info.device] if info.device.type == "cuda" else None,
                                   find_unused_parameters=recipe.model.message_passing == "none")
