"""A DistributedSampler that can start an epoch part-way, where an interrupted run stopped."""

from __future__ import annotations

import hashlib

from torch.utils.data import DistributedSampler


class ResumableSampler(DistributedSampler):
    """The same per-epoch order as DistributedSampler; `set_epoch(e, start=k)` skips this rank's first k samples.

    The order depends only on (seed, epoch), so a resumed run that skips the samples of the steps
    it already took sees exactly the batches an uninterrupted run would have seen next.
    """

    start = 0  # samples of this rank's epoch order to skip

    def __init__(self, *args, item_seeds: bool = False, **kwargs) -> None:
        """`item_seeds`: yield (index, seed) pairs instead of indices, the seed a function of
        (the sampler's seed, epoch, index) only (item_seed): a dataset that draws a sample's random
        augmentation from it draws the same whichever loader worker loads the sample, how many
        workers there are, and whether the run was resumed (a worker's own generator is seeded
        when the worker starts, which a resume moves)."""
        super().__init__(*args, **kwargs)
        self.item_seeds = item_seeds

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        super().set_epoch(epoch)
        self.start = start

    def __iter__(self):
        order = list(super().__iter__())[self.start:]
        if self.item_seeds:
            return iter([(i, item_seed(self.seed, self.epoch, i)) for i in order])
        return iter(order)

    def __len__(self) -> int:
        return self.num_samples - self.start


def item_seed(seed: int, epoch: int, index: int) -> int:
    """A 63-bit seed for sample `index` in `epoch` of a run seeded `seed` (independent of anything else)."""
    digest = hashlib.blake2b(f"{seed}/{epoch}/{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1
