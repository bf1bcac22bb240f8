"""Share of SCNN training step time spent in message passing, naive vs fast implementation.

    nice -n 10 .venv/bin/python bench/scnn_message_passing.py --width 0.125 --batch 4 --size 512x288

Times forward+backward of the whole model and of the message passing module alone on the
(B, 128w, H/8, W/8) map it sees, for both implementations, and prints one JSON line per case.
"""

import json
import time

import torch

import ab  # the bounds check (bench/ is this script's folder, first on sys.path)
from dtrain.errors import SpecError
from dtrain.workloads.lanes.model import SCNN, MessagePassing, SCNNConfig


def _time(fn, repeats: int) -> float:
    """Best of `repeats` runs: the machine is shared, and the minimum is the least disturbed."""
    fn()  # warm-up: allocator, oneDNN primitive caches
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _step(model: torch.nn.Module, img: torch.Tensor):
    def run() -> None:
        seg, exist = model(img)
        (seg.float().mean() + exist.float().mean()).backward()
    return run


def measure(width: float, batch: int, size: tuple[int, int], repeats: int) -> list[dict]:
    rows = []
    w, h = size
    img = torch.randn(batch, 3, h, w)
    for impl in ("naive", "fast"):
        torch.manual_seed(0)
        cfg = SCNNConfig(width=width, input_size=size, message_passing=impl)
        model = SCNN(cfg)
        feat = torch.randn(batch, cfg.channels(128), h // 8, w // 8, requires_grad=True)
        mp = MessagePassing(cfg.channels(128), cfg.mp_kernel, impl)
        mp.load_state_dict(model.message_passing.state_dict())
        step_s = _time(_step(model, img), repeats)
        mp_s = _time(lambda mp=mp, feat=feat: mp(feat).sum().backward(), repeats)
        rows.append({"width": width, "batch": batch, "size": f"{w}x{h}", "impl": impl, "threads": torch.get_num_threads(),
                     "step_s": round(step_s, 4), "mp_s": round(mp_s, 4), "mp_share": round(mp_s / step_s, 3)})
    rows[1]["mp_speedup"] = round(rows[0]["mp_s"] / rows[1]["mp_s"], 2)
    rows[1]["step_speedup"] = round(rows[0]["step_s"] / rows[1]["step_s"], 2)
    return rows


def main() -> None:
    parser = ab.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=float, nargs="+", default=[0.125])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--size", default="512x288", help="WxH")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    size = ab.size(parser, args.size)
    ab.bounded(parser, ("--batch", args.batch, 1, 256), ("--repeats", args.repeats, 1, 1000))
    for width in args.width:
        try:
            SCNNConfig(width=width, input_size=size)
        except SpecError as err:
            parser.error(f"--width {width} --size {args.size}: {err}")
    for width in args.width:
        for row in measure(width, args.batch, size, args.repeats):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
