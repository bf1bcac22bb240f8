"""Graceful stops: SIGTERM ends the current step, writes a checkpoint, and leaves.

`dtrain delete`, a spot interruption, a Kubernetes eviction and SageMaker's StopTrainingJob all
send SIGTERM first and SIGKILL after a grace period (local backend: GRACE_S = 30 s; Kubernetes:
terminationGracePeriodSeconds, 30 s by default; SageMaker: 120 s). The handler only sets a flag;
the training loop asks `should_stop()` after each optimizer step, and all ranks agree (a MAX
all-reduce of the flags), so every rank stops after the same step and the checkpoint rank 0
writes is the state every rank had. A stop costs at most one step plus one checkpoint write.

Data loader workers got the same SIGTERM: torchrun signals each rank's whole process group, the
local backend every process of a rank's session, and a terminal's Ctrl-C the foreground group;
torch's handler in a worker dies of a SIGTERM its own training process did not send. The training
process then raised "DataLoader worker (pid N) is killed by signal: Terminated" (from torch's
SIGCHLD handler, mid-step) and left without a checkpoint. `worker_init_fn=leave_stop_to_parent`
makes a worker ignore SIGINT and every SIGTERM but its training process's (`terminate()`, which
ends it as before): the rank finishes its step, checkpoints and ends its workers itself, and
SIGKILL still ends them all. Ignoring SIGTERM outright hung every normal interpreter exit instead,
as multiprocessing terminates its daemonic children and then waits for them.
"""

from __future__ import annotations

import os
import signal
import threading

import torch
import torch.distributed as dist

from dtrain.training.dist import multi_rank

STOPPED_EXIT_CODE = 128 + signal.SIGTERM  # what a shell reports for SIGTERM: the platform may restart it


class GracefulStop:
    """Turns SIGTERM (and SIGINT) into a flag the training loop polls; a context manager.

    Two flags: `signalled`, this rank's own, which only the handler sets (and never clears), and
    `requested`, what the ranks agreed at the last `should_stop`, which the loop reads. The handler
    runs between two bytecodes, so it may run right after an all-reduce returns and before its
    result is stored: when it set the flag that result overwrote, that rank's signal was lost and
    it trained on until SIGKILL. And a rank that read its own flag at a loop's head left the loop
    while the others went on to the next collective."""

    def __init__(self, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> None:
        self.signals, self.signalled, self.requested, self._old = signals, False, False, {}

    def __enter__(self) -> "GracefulStop":
        for sig in self.signals:
            self._old[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    def _on_signal(self, _sig, _frame) -> None:
        self.signalled = True

    def should_stop(self) -> bool:
        """True on every rank once any rank was asked to stop (a collective: call it on all ranks);
        a signal that comes during the all-reduce counts at the next call, on every rank."""
        if multi_rank():
            flag = torch.tensor([1.0 if self.signalled else 0.0])
            if dist.get_backend() == "nccl":
                flag = flag.cuda()
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            self.requested = self.requested or bool(flag.item())
        else:
            self.requested = self.signalled
        return self.requested


def leave_stop_to_parent(_worker_id: int = 0) -> None:
    """A DataLoader worker_init_fn: only the worker's own training process stops it (see the module doc).

    SIGTERM is blocked in the worker and taken by a thread with sigwaitinfo, which says who sent
    it: the parent (the loader's `terminate()`), or anyone once the parent is gone, ends the worker
    as torch's handler does (exit 0); a signal to the whole group or session is dropped."""
    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # threads started later inherit the mask

    def take_sigterm() -> None:
        while True:
            sender = signal.sigwaitinfo({signal.SIGTERM}).si_pid
            if sender == parent or os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=take_sigterm, name="sigterm", daemon=True).start()
