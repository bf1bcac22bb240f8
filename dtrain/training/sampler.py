"""A DistributedSampler that can start an epoch part-way, where an interrupted run stopped."""

from __future__ import annotations

from torch.utils.data import DistributedSampler


class ResumableSampler(DistributedSampler):
    """The same per-epoch order as DistributedSampler; `set_epoch(e, start=k)` skips this rank's first k samples.

    The order depends only on (seed, epoch), so a resumed run that skips the samples of the steps
    it already took sees exactly the batches an uninterrupted run would have seen next.
    """

    start = 0  # samples of this rank's epoch order to skip

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        super().set_epoch(epoch)
        self.start = start

    def __iter__(self):
        return iter(list(super().__iter__())[self.start:])

    def __len__(self) -> int:
        return self.num_samples - self.start
