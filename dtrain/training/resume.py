"""Resume by default: one checkpoint facility for every workload.

A `Checkpointer` owns one folder of `ckpt-<step>.pt` files. `save` writes model, optimizer,
scheduler, every random generator and the caller's extra state (the data position is the step
itself: both workloads derive the epoch, the sampler offset and the per-step seeds from it)
atomically, then keeps the newest `keep`. `resume` loads the newest file that loads, skipping a
torn one or one another program wrote with a note and renaming it to `<name>.damaged` (so it no
longer counts among the kept; CheckpointMismatch for another model's or optimizer's; DataError for
one of a newer FORMAT, left in place), and prints
the line the platform records as "resumed from step".

Where the folder is: `--checkpoint-dir`, else $DTRAIN_CHECKPOINT_DIR, else on SageMaker the LocalPath of
the training job's CheckpointConfig (checkpointconfig.json's; /opt/ml/checkpoints by default), which SageMaker
syncs to S3 and restores on a spot restart, else the workload's output folder.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from dtrain.errors import DataError, DtrainError, SpecError
from dtrain.markers import RESUMED
from dtrain.training.checkpoint import CKPT_RE, checkpoint_path, load_checkpoint, save_atomic
from dtrain.training.dist import DistInfo

CHECKPOINT_DIR_ENV = "DTRAIN_CHECKPOINT_DIR"
SAGEMAKER_CHECKPOINT_DIR = "/opt/ml/checkpoints"  # CheckpointConfig.LocalPath when the request gives none
SAGEMAKER_CHECKPOINT_CONFIG = Path("/opt/ml/input/config/checkpointconfig.json")  # {"LocalPath": ..., "S3Uri": ...}
MAX_CHECKPOINT_CONFIG_BYTES = 1 << 16  # a CheckpointConfig is two short strings
FORMAT = 1  # bumped when the layout of a checkpoint changes


def checkpoint_dir(default: str | os.PathLike, env: Mapping[str, str] | None = None) -> Path:
    """The folder checkpoints go to when the command line does not say (see the module doc)."""
    env = os.environ if env is None else env
    if env.get(CHECKPOINT_DIR_ENV, "").strip():
        return Path(env[CHECKPOINT_DIR_ENV].strip())
    if env.get("SM_CURRENT_HOST") or env.get("SM_TRAINING_ENV"):
        return sagemaker_checkpoint_dir()
    return Path(default)


def checkpoint_config_local_path(config: Path | None = None) -> Path | None:
    """The LocalPath a SageMaker training job's CheckpointConfig gives, from the checkpointconfig.json SageMaker
    writes into its container; None where the file is absent, unreadable or names no absolute path."""
    try:
        with open(SAGEMAKER_CHECKPOINT_CONFIG if config is None else config, encoding="utf-8") as f:
            data = json.loads(f.read(MAX_CHECKPOINT_CONFIG_BYTES))
    except (OSError, ValueError):
        return None
    local = data.get("LocalPath") if isinstance(data, dict) else None
    return Path(local) if isinstance(local, str) and os.path.isabs(local) else None


def sagemaker_checkpoint_dir(config: Path | None = None) -> Path:
    """Where a SageMaker job's checkpoints are synced from: its CheckpointConfig's LocalPath, else
    /opt/ml/checkpoints."""
    return checkpoint_config_local_path(config) or Path(SAGEMAKER_CHECKPOINT_DIR)


SAGEMAKER_RESOURCE_CONFIG = Path("/opt/ml/input/config/resourceconfig.json")  # in every SageMaker training container


def on_sagemaker(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs in a SageMaker training job: the toolkit's variables, else the
    resource config SageMaker writes into every training container."""
    env = os.environ if env is None else env
    return bool(env.get("SM_CURRENT_HOST") or env.get("SM_TRAINING_ENV")) or SAGEMAKER_RESOURCE_CONFIG.is_file()


def start_over_words(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(how to start over, where to give a run its own checkpoints) in the words of where it runs: a
    SageMaker job's command is not the user's to edit (its flags are hyperparameters, its checkpoint
    folder is the one SageMaker restores from CheckpointConfig's S3 URI)."""
    if on_sagemaker(env):
        return "the hyperparameter resume=false (--hp resume=false)", "another --checkpoint-s3-uri"
    return "--no-resume", "another --checkpoint-dir"


def start_over(env: Mapping[str, str] | None = None) -> str:
    """'--no-resume, or another --checkpoint-dir', or its SageMaker words (start_over_words)."""
    return ", or ".join(start_over_words(env))


def rng_state() -> dict[str, Any]:
    """Every generator a training step may draw from, in a form torch.load(weights_only) accepts."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss)}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Put back what rng_state() saved. The states are CPU byte tensors wherever torch.load put them:
    resume loads onto the training device (map_location), and torch refuses a CUDA tensor as a
    generator's state ("RNG state must be a torch.ByteTensor"), as numpy does for its keys."""
    torch.set_rng_state(state["torch"].cpu())
    random.setstate(_tuples(state["python"]))
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.cpu().numpy().astype(np.uint32), pos, has_gauss, gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def _tuples(x: Any) -> Any:
    # torch.save keeps tuples, but be lenient with lists from other writers: random.setstate needs tuples.
    return tuple(_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x


class CheckpointMismatch(DataError):
    """The newest checkpoint was written by another model (other keys or shapes) or optimizer."""

    def __init__(self, path: Path, fault: str):
        super().__init__(f"checkpoint {path} does not fit this model ({fault})")
        self.path, self.fault = path, fault


_KEYS = ("step", "model", "optimizer", "scheduler", "rng", "extra")  # what a FORMAT checkpoint holds


def _newer_format(state: Any) -> int | None:
    """The format of a checkpoint a later Checkpointer wrote (a dict with a model and a higher format)."""
    fmt = state.get("format") if isinstance(state, dict) and "model" in state else None
    return fmt if isinstance(fmt, int) and not isinstance(fmt, bool) and fmt > FORMAT else None


def first_fault(e: BaseException) -> str:
    """The first concrete line of a load error ("size mismatch for w: ...", not the heading
    "Error(s) in loading state_dict for Net:" that torch puts before it)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()] or [type(e).__name__]
    return (lines[1] if len(lines) > 1 and lines[0].endswith(":") else lines[0])[:300]


@dataclass(frozen=True, kw_only=True)
class Resumed:
    step: int  # optimizer steps already taken; training continues with step + 1
    path: Path  # the checkpoint it came from
    extra: dict[str, Any]  # what the workload passed to save(extra=...)


def refuse_another_data_position(resumed: Resumed, plan: Mapping[str, Any], forms: tuple[tuple[str, str], ...],
                                 *, samples: str, fix: str) -> None:
    """SpecError when the checkpoint's run placed its steps in the data otherwise (data_position_changes)."""
    if moved := data_position_changes(resumed.extra, plan, forms):
        raise SpecError(f"checkpoint {resumed.path} was written by a run with {', '.join(moved)}: step "
                        f"{resumed.step} would start elsewhere in the data ({samples} seen twice or skipped); {fix}")


def data_position_changes(saved: Mapping[str, Any], plan: Mapping[str, Any],
                          forms: tuple[tuple[str, Any], ...]) -> list[str]:
    """'2 processes (this run: 1)' for each of `forms`' keys the checkpoint's run had otherwise (a form: a
    format string, or a function of the value).

    A step maps to a place in the data through what `forms` names (processes, batch, seed, the
    data's size): a resume with any of them changed would see samples twice or skip some. A key
    the checkpoint does not hold (one written before it was recorded) is not compared."""
    return [f"{form(saved[key]) if callable(form) else form.format(saved[key])} (this run: {plan[key]})"
            for key, form in forms if key in saved and key in plan and saved[key] != plan[key]]


class Checkpointer:
    """Save every `every` steps (0: only when asked), keep the newest `keep`, resume from the newest valid."""

    def __init__(self, folder: str | os.PathLike, *, every: int, keep: int = 3, enabled: bool = True,
                 log: Callable[[str], None] = print) -> None:
        if every < 0 or keep < 1:
            raise DataError(f"checkpoint every={every} keep={keep}: use every >= 0 and keep >= 1")
        self.folder, self.every, self.keep, self.enabled, self.log = Path(folder), every, keep, enabled, log

    def due(self, step: int) -> bool:
        return self.every > 0 and step > 0 and step % self.every == 0

    def save(self, step: int, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any = None,
             extra: Mapping[str, Any] | None = None) -> Path | None:
        """Write ckpt-<step>.pt atomically (on the enabled rank only) and drop all but the newest `keep`."""
        if not self.enabled:
            return None
        state = {"format": FORMAT, "step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "scheduler": scheduler.state_dict() if scheduler is not None else None, "rng": rng_state(),
                 "extra": dict(extra or {})}
        path = checkpoint_path(self.folder, step)
        save_atomic(state, path)
        self._prune()
        return path

    def _prune(self) -> None:
        done = sorted((int(m.group(1)), p) for p in self.folder.iterdir() if (m := CKPT_RE.match(p.name)))
        for _step, path in done[:-self.keep]:
            path.unlink(missing_ok=True)
        for tmp in self.folder.glob(".ckpt-*.tmp"):  # left by a save that was killed; only this rank writes here
            tmp.unlink(missing_ok=True)

    def _set_aside(self, path: Path) -> str:
        """Rename a checkpoint that does not load to <name>.damaged(.N), on the rank that saves.

        Left in place it would count among the `keep` newest (pruning good ones in its stead) and
        be tried again by every restart. Renamed, nothing is lost; returns the note for the log."""
        if not self.enabled:
            return ""
        for n in range(100):
            aside = path.with_name(f"{path.name}.damaged" + (f".{n}" if n else ""))
            if aside.exists() or aside.is_symlink():
                continue
            try:
                path.rename(aside)
            except OSError as e:
                return f" (not set aside: {e.strerror or e})"
            return f"; set aside as {aside.name}"
        return " (not set aside: 100 set-aside copies exist already)"

    def candidates(self) -> list[Path]:
        """Complete checkpoint files, newest first."""
        if not self.folder.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.folder.iterdir() if (m := CKPT_RE.match(p.name)) and p.is_file()]
        return [p for _s, p in sorted(found, reverse=True)]

    def resume(self, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any = None,
               map_location: str | torch.device = "cpu",
               accept: Callable[[Resumed], None] | None = None) -> Resumed | None:
        """Load the newest checkpoint that loads into model/optimizer/scheduler/RNG; None when there is none.

        `accept` sees it before the "resumed from step" line the platform records and may refuse it
        by raising (a checkpoint of another run the workload cannot continue)."""
        for path in self.candidates():
            try:
                state = load_checkpoint(path, map_location=map_location)
                if (newer := _newer_format(state)) is not None:
                    # A later version's checkpoint: skipping it (and setting it aside) would quietly
                    # train from an older one, or from scratch, over that version's progress.
                    newer_error = DataError(
                        f"checkpoint {path} is of format {newer}, newer than this version of the training code "
                        f"reads ({FORMAT}): resume it with the version that wrote it, or start over: {start_over()}")
                    break
                if not isinstance(state, dict) or state.get("format") != FORMAT or "model" not in state:
                    raise DataError(f"checkpoint {path} was not written by dtrain.training.Checkpointer")
                if missing := [key for key in _KEYS if key not in state]:  # our format, cut down by hand
                    raise DataError(f"checkpoint {path} lacks {', '.join(missing)}")
                if isinstance(state["step"], bool) or not isinstance(state["step"], int) or state["step"] < 0:
                    raise DataError(f"checkpoint {path} has step {state['step']!r}, not a count of steps")
            except DataError as err:
                self.log(f"skipping checkpoint {path.name}: {err}{self._set_aside(path)}")
                continue
            try:
                model.load_state_dict(state["model"])
                optimizer.load_state_dict(state["optimizer"])
                if scheduler is not None and state["scheduler"] is not None:
                    scheduler.load_state_dict(state["scheduler"])
                set_rng_state(state["rng"])
            except (RuntimeError, ValueError, KeyError, TypeError) as e:
                # Another model's checkpoint: not skipped for an older one (it would be the same
                # model's too), and not started afresh over it (the run's saves would prune it).
                raise CheckpointMismatch(path, first_fault(e)) from None
            resumed = Resumed(step=int(state["step"]), path=path, extra=state["extra"])
            if accept is not None:
                accept(resumed)
            print(RESUMED.format(step=resumed.step, path=path), flush=True)
            return resumed
        else:
            return None
        raise newer_error


def resume_on_every_rank(ckpt: Checkpointer, info: DistInfo, *, model: torch.nn.Module,
                         optimizer: torch.optim.Optimizer, accept: Callable[[Resumed], None] | None = None,
                         mismatch: Callable[[CheckpointMismatch], str]) -> Resumed | None:
    """`ckpt.resume` on every rank (`mismatch` words a CheckpointMismatch for the workload), then make
    sure all ranks go on from the same step, or all stop.

    A rank that saw no checkpoint (a node-local checkpoint folder, a sync that had not finished)
    would otherwise run more steps than the others, and one that refused its checkpoint would leave
    the others waiting in their first all-reduce until the timeout. Each rank raises its own
    one-line error (DtrainError)."""
    resumed, error = None, None
    try:
        resumed = ckpt.resume(model=model, optimizer=optimizer, map_location=info.device, accept=accept)
    except CheckpointMismatch as e:  # another model's keys or shapes, another optimizer
        error = SpecError(mismatch(e))
    except DtrainError as e:
        error = e
    if info.distributed and dist.is_initialized():  # every rank takes part, refused or not
        step = resumed.step if resumed else 0
        span = torch.tensor([step, -step, int(error is not None)], dtype=torch.int64, device=info.device)
        dist.all_reduce(span, op=dist.ReduceOp.MAX)
        high, low = int(span[0]), -int(span[1])
        if error is None and int(span[2]):
            error = SpecError(f"another rank refused its checkpoint (its log says why), so rank {info.rank} stops "
                              f"too: fix that, or start over ({start_over_words()[0]})")
        elif error is None and high != low:
            error = SpecError(f"ranks resumed from different steps ({low} to {high}; rank {info.rank}: {step}): "
                              f"every rank must see the same checkpoint folder ({ckpt.folder}), on storage they "
                              f"share, or start over ({start_over_words()[0]})")
    if error is not None:
        raise error
    return resumed
