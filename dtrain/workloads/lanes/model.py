"""SCNN lane detector (Pan et al., "Spatial As Deep: Spatial CNN for Traffic Scene Understanding", AAAI 2018).

    image (B, 3, H, W)
      -> VGG16-BN features, pool4/pool5 removed, conv5 dilated x2        (B, 512w, H/8, W/8)
      -> 3x3 conv dilation 4 to 1024w, 1x1 conv to 128w                  (B, 128w, H/8, W/8)
      -> message passing down, up, right, left (kernel 9)                (B, 128w, H/8, W/8)
      -> seg head: dropout, 1x1 conv to 1+lanes, bilinear x8             (B, 1+L, H, W)
      -> exist head: softmax, avg-pool 2, fc 128, fc lanes               (B, L)

`w` is SCNNConfig.width. The message passing runs one small convolution per row and per
column (about 200 at 512x288), each depending on the previous one; `Sweep` computes a whole
direction in one autograd node and batches the weight gradient into one convolution, which is
what makes it fast. `naive_message_passing` is the direct slice-by-slice transcription, kept as
the reference for tests and benchmarks.
"""

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from dtrain.errors import DataError, SpecError

# torchvision's vgg16_bn layout: channels per conv, "M" for a 2x2 max-pool.
_VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")
_POOL4, _POOL5 = 33, 43  # indices of the pools SCNN drops, in the features Sequential
_CONV5 = (34, 37, 40)  # indices of the conv5 layers SCNN dilates


@dataclass(frozen=True, kw_only=True)
class SCNNConfig:
    width: float = 1.0  # channel multiplier for every conv (1.0 = published VGG16 widths)
    input_size: tuple[int, int] = (512, 288)  # (W, H) of the input; the existence fc depends on it
    num_lanes: int = 5  # lane slots; segmentation classes = num_lanes + 1 (background)
    mp_kernel: int = 9  # message passing kernel width
    dropout: float = 0.1  # Dropout2d before the segmentation conv
    exist_hidden: int = 128  # hidden units of the lane existence fc
    message_passing: str = "fast"  # "fast" (Sweep), "naive" (slice by slice) or "none"
    mp_init: str = "torch"  # message passing weights: "torch" (PyTorch's default) or "scnn" (the authors' code)

    def __post_init__(self) -> None:
        w, h = self.input_size
        if w % 16 or h % 16 or w <= 0 or h <= 0:
            raise SpecError(f"input_size {self.input_size}: width and height must be positive multiples of 16, e.g. (512, 288)")
        if not 0 < self.width <= 4:
            raise SpecError(f"width {self.width}: use a channel multiplier in (0, 4], e.g. 1.0 or 0.25")
        if self.message_passing not in ("fast", "naive", "none"):
            raise SpecError(f"message_passing {self.message_passing!r}: use 'fast', 'naive' or 'none'")
        if self.mp_init not in ("torch", "scnn"):
            raise SpecError(f"mp_init {self.mp_init!r}: use 'torch' (PyTorch's default) or 'scnn' (the authors' init)")
        if self.mp_kernel % 2 == 0:
            raise SpecError(f"mp_kernel {self.mp_kernel}: use an odd kernel width, e.g. 9")

    def channels(self, c: int) -> int:
        return max(8, round(c * self.width))


def vgg16_bn_features(cfg: SCNNConfig) -> nn.Sequential:
    """VGG16-BN features with torchvision's module indices, so its state_dict loads as is."""
    layers: list[nn.Module] = []
    c_in = 3
    for v in _VGG16:
        if v == "M":
            layers.append(nn.Identity() if len(layers) in (_POOL4, _POOL5) else nn.MaxPool2d(2, 2))
            continue
        dilation = 2 if len(layers) in _CONV5 else 1
        c_out = cfg.channels(v)
        layers += [nn.Conv2d(c_in, c_out, 3, padding=dilation, dilation=dilation), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
        c_in = c_out
    return nn.Sequential(*layers)


class Sweep(torch.autograd.Function):
    """One message passing direction along dim 0 of x (L, N, C, S): y[i] = x[i] + relu(conv(y[i-1]))."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, reverse: bool) -> torch.Tensor:
        pad = weight.shape[-1] // 2
        y = x.clone()  # (L, N, C, S), rows written in place: no graph, no per-row allocations kept
        steps = range(y.shape[0] - 2, -1, -1) if reverse else range(1, y.shape[0])
        for i in steps:
            prev = i + 1 if reverse else i - 1
            y[i] += F.conv1d(y[prev], weight, padding=pad).clamp_(min=0)
        ctx.save_for_backward(y, weight)
        ctx.reverse = reverse
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y: torch.Tensor):
        y, weight = ctx.saved_tensors
        L, N, C, S = y.shape
        pad = weight.shape[-1] // 2
        src, dst = (slice(1, None), slice(None, -1)) if ctx.reverse else (slice(None, -1), slice(1, None))
        src_rows = y[src].reshape(-1, C, S)  # ((L-1)N, C, S) conv inputs, all known after forward
        # Recompute every pre-activation in one batched conv instead of storing masks per row.
        mask = F.conv1d(src_rows, weight, padding=pad).view(L - 1, N, C, S) > 0
        g = grad_y.contiguous().clone()  # (L, N, C, S); g[i] becomes dL/dy[i] once later rows are done
        steps = range(L - 1) if ctx.reverse else range(L - 1, 0, -1)
        for i in steps:
            prev = i + 1 if ctx.reverse else i - 1
            g[prev] += F.conv_transpose1d(g[i] * mask[i - 1 if not ctx.reverse else i], weight, padding=pad)
        grad_pre = (g[dst] * mask).reshape(-1, C, S)
        grad_w = torch.nn.grad.conv1d_weight(src_rows, weight.shape, grad_pre, padding=pad)
        return g, grad_w, None


class MessagePassing(nn.Module):
    """SCNN's four sequential sweeps; parameters shaped as in the published model (Conv2d 1xk / kx1)."""

    def __init__(self, channels: int, kernel: int, impl: str = "fast", init: str = "torch") -> None:
        super().__init__()
        pad = kernel // 2
        self.down = nn.Conv2d(channels, channels, (1, kernel), padding=(0, pad), bias=False)
        self.up = nn.Conv2d(channels, channels, (1, kernel), padding=(0, pad), bias=False)
        self.right = nn.Conv2d(channels, channels, (kernel, 1), padding=(pad, 0), bias=False)
        self.left = nn.Conv2d(channels, channels, (kernel, 1), padding=(pad, 0), bias=False)
        self.impl = impl
        if init == "scnn":
            # The authors' Torch code (SCNN-gen.lua) draws these from N(0, sqrt(2 / (k C^2 5))):
            # 0.00165 at C=128, k=9, about 10x below PyTorch's default, so the ~200 chained
            # sweeps start close to identity instead of amplifying the map.
            std = (2 / (kernel * channels * channels * 5)) ** 0.5
            for conv in (self.down, self.up, self.right, self.left):
                nn.init.normal_(conv.weight, 0.0, std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.impl == "naive":
            return naive_message_passing(self, x)
        rows = x.permute(2, 0, 1, 3).contiguous()  # (H, B, C, W): one contiguous row per step
        dtype = rows.dtype  # under autocast the map is bf16 while the weights stay float32
        rows = Sweep.apply(rows, self.down.weight.squeeze(2).to(dtype), False)
        rows = Sweep.apply(rows, self.up.weight.squeeze(2).to(dtype), True)
        cols = rows.permute(3, 1, 2, 0).contiguous()  # (W, B, C, H)
        cols = Sweep.apply(cols, self.right.weight.squeeze(3).to(dtype), False)
        cols = Sweep.apply(cols, self.left.weight.squeeze(3).to(dtype), True)
        return cols.permute(1, 2, 3, 0).contiguous()  # (B, C, H, W)


def naive_message_passing(mp: MessagePassing, x: torch.Tensor) -> torch.Tensor:
    """Reference: one Conv2d per 1-pixel slice on the (B, C, H, W) map, as written in the paper."""
    rows = list(x.split(1, dim=2))  # H x (B, C, 1, W)
    for i in range(1, len(rows)):
        rows[i] = rows[i] + F.relu(mp.down(rows[i - 1]))
    for i in range(len(rows) - 2, -1, -1):
        rows[i] = rows[i] + F.relu(mp.up(rows[i + 1]))
    cols = list(torch.cat(rows, dim=2).split(1, dim=3))  # W x (B, C, H, 1)
    for i in range(1, len(cols)):
        cols[i] = cols[i] + F.relu(mp.right(cols[i - 1]))
    for i in range(len(cols) - 2, -1, -1):
        cols[i] = cols[i] + F.relu(mp.left(cols[i + 1]))
    return torch.cat(cols, dim=3)


class SCNN(nn.Module):
    def __init__(self, cfg: SCNNConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c5, c_mid, c_mp = cfg.channels(512), cfg.channels(1024), cfg.channels(128)
        classes = cfg.num_lanes + 1
        self.backbone = vgg16_bn_features(cfg)
        self.neck = nn.Sequential(
            nn.Conv2d(c5, c_mid, 3, padding=4, dilation=4, bias=False), nn.BatchNorm2d(c_mid), nn.ReLU(inplace=True),
            nn.Conv2d(c_mid, c_mp, 1, bias=False), nn.BatchNorm2d(c_mp), nn.ReLU(inplace=True),
        )
        self.message_passing = MessagePassing(c_mp, cfg.mp_kernel, cfg.message_passing, cfg.mp_init)
        self.seg_head = nn.Sequential(nn.Dropout2d(cfg.dropout), nn.Conv2d(c_mp, classes, 1))
        w, h = cfg.input_size
        self.exist_pool = nn.AvgPool2d(2, 2)
        self.exist_head = nn.Sequential(
            nn.Linear(classes * (h // 16) * (w // 16), cfg.exist_hidden), nn.ReLU(inplace=True),
            nn.Linear(cfg.exist_hidden, cfg.num_lanes),
        )

    def forward(self, img: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns segmentation logits (B, 1+L, H, W) and lane existence logits (B, L)."""
        x = self.neck(self.backbone(img))  # (B, 128w, H/8, W/8)
        if self.cfg.message_passing != "none":
            x = self.message_passing(x)  # (B, 128w, H/8, W/8)
        seg = self.seg_head(x)  # (B, 1+L, H/8, W/8)
        exist = self.exist_pool(F.softmax(seg, dim=1)).flatten(1)  # (B, (1+L) * H/16 * W/16)
        exist = self.exist_head(exist)  # (B, L)
        seg = F.interpolate(seg, scale_factor=8, mode="bilinear", align_corners=True)  # (B, 1+L, H, W)
        return seg, exist


@torch.no_grad()
def probabilities(model: nn.Module, img: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inference outputs: per-pixel class probabilities (B, 1+L, H, W) and lane existence (B, L)."""
    seg, exist = model(img)
    return F.softmax(seg.float(), dim=1), torch.sigmoid(exist.float())


def load_backbone_weights(model: SCNN, path: str | Path) -> None:
    """Load a local VGG16-BN features state_dict (torchvision layout, with or without 'features.')."""
    path = Path(path)
    fix = "give VGG16-BN features saved with torch.save(vgg16_bn().features.state_dict(), path)"
    if not path.is_file():
        why = "no such file" if not path.exists() else "a folder, not a file" if path.is_dir() else "not a regular file"
        raise DataError(f"backbone weights {path}: {why}; {fix}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # torch's message runs to several lines and is about pickling, not this file
        raise DataError(f"backbone weights {path}: not a file torch.save wrote; {fix}") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in state.items()):
        raise DataError(f"backbone weights {path}: not a state_dict (names to tensors); {fix}")
    state = {k.removeprefix("features."): v for k, v in state.items() if not k.startswith("classifier.")}
    own = model.backbone.state_dict()
    missing = sorted(set(own) - set(state))
    bad = [k for k in own if k in state and state[k].shape != own[k].shape]
    if missing or bad:
        raise DataError(
            f"backbone weights {path}: {len(missing)} missing and {len(bad)} mis-shaped tensors (first: {(missing + bad)[0]}); "
            f"they must be VGG16-BN features for width {model.cfg.width}")
    model.backbone.load_state_dict({k: state[k] for k in own})
