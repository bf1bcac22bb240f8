"""A real torch.distributed job: all-reduce of (rank + 1), checked against n(n+1)/2, then printed."""

import os
import sys

import torch
import torch.distributed as dist

for key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK"):
    assert key in os.environ, f"{key} missing from the environment contract"
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
expected = world * (world + 1) / 2
print(f"rank {rank}/{world} local_rank {os.environ['LOCAL_RANK']} cuda_visible "
      f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r} allreduce {t.item():g} expected {expected:g}",
      flush=True)
dist.destroy_process_group()
sys.exit(0 if t.item() == expected else 3)
