"""Rank 0's checks of what a run writes, and the one all-reduce after which every rank stops on its refusal.

Under torchrun only rank 0 checks that the output folders take files, that no link was planted at a file it
appends to, and takes the lock that makes it the one training writing them. A refusal only rank 0 raised left
the other ranks waiting in their first collective until the timeout, saying nothing useful. Rank0Checks runs
those checks on rank 0 and keeps the first refusal as one number (what rank 0 found, at which of the run's
places, and the errno), and stop_together all-reduces it: rank 0 raises its own error, every other rank one
line naming what rank 0 found there. One process: no collective.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from dtrain.errors import ConflictError, DtrainError, SpecError
from dtrain.training import DistInfo, max_over_ranks
from dtrain.training.metrics import MIRROR_FIX, MetricsWriter, open_append
from dtrain.training.resume import checkpoint_config_local_path, on_sagemaker
from dtrain.workloads.inputs import hold, hold_folder, lock_failed, write_fix

# What rank 0 found (the all-reduced number's low bits).
HELD, LINK, UNWRITABLE, FAILED, UNLOCKED = 1, 2, 3, 4, 5  # UNLOCKED: a lock failed other than as HELD
_FOUND_BITS, _PLACE_BITS = 3, 8


@dataclass(frozen=True)
class Place:
    """A file or folder the run writes, as every rank names it, and the fix a refusal there names
    ('give this run another --out-dir'). A lock's place is the file locked: its folder is the one held; or, with
    folder_lock, the folder itself, locked with no file made in it (lock_place; on NFS, folder_lock_file). `flag`:
    how a refusal names the folder held where it takes no file ('--model-dir', "--metrics-file's folder")."""

    path: Path
    fix: str
    folder_lock: bool = False
    flag: str = ""
    advice: str = ""  # what a file here that cannot be written asks before the fix (write_fix's, unless given)

    @property
    def held(self) -> Path:
        """The folder a lock at this place marks as written by one training."""
        return self.path if self.folder_lock else self.path.parent


LOCK_FILE = ".training.lock"  # the file rank 0 locks in a folder of the run's that no file of its own marks
OPT_ML = Path("/opt/ml")
SAGEMAKER_UPLOADS = ("SM_MODEL_DIR", "SM_OUTPUT_DIR", "SM_OUTPUT_DATA_DIR", "SM_OUTPUT_INTERMEDIATE_DIR")


def _within(folder: str | os.PathLike, root: str | os.PathLike) -> bool:
    here, top = os.path.realpath(folder), os.path.realpath(root)
    return here == top or here.startswith(top.rstrip(os.sep) + os.sep)


def locks_the_folder(folder: Path, env: dict[str, str] | None = None) -> bool:
    """Whether rank 0 locks `folder` itself rather than a LOCK_FILE in it. A file would reach S3 from a folder
    SageMaker syncs or uploads: its checkpoint folder (/opt/ml/checkpoints, or whatever LocalPath CheckpointConfig
    gives, synced while the job runs), /opt/ml/model (model.tar.gz) and /opt/ml/output (output.tar.gz), and what
    the toolkit's SM_MODEL_DIR and SM_OUTPUT_*DIR name. A SageMaker training container is alone on its host, so
    in one every folder is locked as itself, but for the input channels (/opt/ml/input/data): a file-system
    channel (EFS, FSx) may be shared by other jobs' hosts, which see only a lock file, and SageMaker uploads
    nothing from it. Elsewhere (plain torchrun, dtrain's jobs on a shared volume, NFS): a LOCK_FILE."""
    if sagemaker_uploads(folder, env):
        return True
    return on_sagemaker(env) and not _within(folder, OPT_ML / "input" / "data")


LOCAL_ARN = "arn:aws:sagemaker:local:"  # the TRAINING_JOB_ARN of dtrain's --local SageMaker jobs (contract.job_arn)


def own_folder_fix(folder: Path, what: str) -> str | None:
    """The fix a refusal at `folder` names where rank 0 locks the folder itself in a SageMaker container (None
    elsewhere: the caller names its flag). The container is alone on its host, so the other training is one this
    job started: 'give this run another --checkpoint-s3-uri' sent the user to a setting that changes nothing
    there. Only a --local job's checkpoint folder (its CheckpointConfig's LocalPath, /opt/ml/checkpoints by
    default) is the folder of its checkpoint URI on this machine, which every local job given that URI shares:
    there another --checkpoint-s3-uri is the fix."""
    if not on_sagemaker() or not locks_the_folder(folder):
        return None
    shared = checkpoint_local_path() or OPT_ML / "checkpoints"
    if os.environ.get("TRAINING_JOB_ARN", "").startswith(LOCAL_ARN) and _within(folder, shared):
        return "give this run another --checkpoint-s3-uri (local jobs given one share its folder)"
    return f"start one training per SageMaker job (each job's {what} is its own: the other training is one this job started)"


SAGEMAKER_SYNCED = ("model", "output", "checkpoints")  # the folders of /opt/ml that SageMaker uploads or syncs
CHECKPOINT_CONFIG = Path("input/config/checkpointconfig.json")  # under OPT_ML: the job's CheckpointConfig


def checkpoint_local_path() -> Path | None:
    """The LocalPath of the job's CheckpointConfig, which SageMaker writes into the container
    (/opt/ml/input/config/checkpointconfig.json) and syncs to S3 while the job runs; None without one."""
    return checkpoint_config_local_path(OPT_ML / CHECKPOINT_CONFIG)


def sagemaker_uploads(folder: str | os.PathLike, env: dict[str, str] | None = None) -> bool:
    """Whether SageMaker puts what `folder` holds in S3: it lies within what the toolkit's SM_MODEL_DIR and
    SM_OUTPUT_*DIR name, or, in a SageMaker container, within /opt/ml/model, /opt/ml/output, /opt/ml/checkpoints
    or the LocalPath the job's CheckpointConfig gives (checkpoint_local_path: one of the user's own, /mnt/ckpt)."""
    env = os.environ if env is None else env
    if any(env.get(name, "").strip() and _within(folder, env[name].strip()) for name in SAGEMAKER_UPLOADS):
        return True
    if not on_sagemaker(env):
        return False
    if any(_within(folder, OPT_ML / name) for name in SAGEMAKER_SYNCED):
        return True
    local = checkpoint_local_path()
    return local is not None and _within(folder, local)


def folder_lock_file(folder: Path) -> Path:
    """The file rank 0 locks for a folder_lock place where the file system takes no flock on a folder (NFS:
    hold_folder's EBADF; NFS locks a regular file through NLM or NFSv4). A folder SageMaker uploads or syncs gets no
    file: it is beside it, named after it, in the nearest folder above that SageMaker uploads nothing from
    (/opt/ml/.checkpoints.training.lock, /opt/ml/.output-data.training.lock, /mnt/.ckpt.training.lock for a
    CheckpointConfig's LocalPath /mnt/ckpt, whose LOCK_FILE SageMaker synced to S3); another folder, a LOCK_FILE
    in it."""
    if not sagemaker_uploads(folder):
        return folder / LOCK_FILE
    here = Path(os.path.realpath(folder))
    above = here.parent
    while above != above.parent and sagemaker_uploads(above):
        above = above.parent
    return above / f".{'-'.join(here.relative_to(above).parts)}{LOCK_FILE}"


def lock_place(folder: Path, fix: str, flag: str = "") -> Place:
    """Where rank 0 locks `folder` (locks_the_folder): the folder itself, or a LOCK_FILE in it."""
    if locks_the_folder(folder):
        return Place(folder, fix, folder_lock=True, flag=flag)
    return Place(folder / LOCK_FILE, fix, flag=flag)


def encode(found: int, place: int, err: int = 0) -> int:
    return found | place << _FOUND_BITS | err << (_FOUND_BITS + _PLACE_BITS)


def decode(code: int) -> tuple[int, int, int]:
    """(found, place, errno) of encode's number."""
    return (code & (1 << _FOUND_BITS) - 1, code >> _FOUND_BITS & (1 << _PLACE_BITS) - 1,
            code >> (_FOUND_BITS + _PLACE_BITS))


def found_in(e: BaseException, declared: int) -> tuple[int, int]:
    """(what rank 0 found, errno or 0) for the error a check raised: a lock another process holds (ConflictError),
    a symbolic link (ELOOP: open_append's O_NOFOLLOW), a file or folder that takes no write (any other OSError,
    also one a check turned into its own line, as can_write does), else what the check declares it finds."""
    if isinstance(e, ConflictError):
        return HELD, 0
    cause = e if isinstance(e, OSError) else e.__context__  # can_write's SpecError is raised in its except
    err = cause.errno if isinstance(cause, OSError) and isinstance(cause.errno, int) else 0
    if err == errno.ELOOP:
        return LINK, 0
    if isinstance(e, OSError):
        return UNWRITABLE, err
    if isinstance(e, DtrainError):
        return declared, err
    return FAILED, 0


def refusal(code: int, places: Sequence[Place], rank: int) -> DtrainError:
    """The line of a rank that stops because rank 0 found what `code` says."""
    found, index, err = decode(code)
    place = places[index]
    stops = f"so rank {rank} stops too"
    if found == HELD:
        return ConflictError(f"rank 0 found another training writing {place.held}, {stops}: wait for it to "
                             f"end, or {place.fix}")
    if found == LINK:  # at a folder lock's place, a link at the file locked for it instead (folder_lock_file)
        at = folder_lock_file(place.path) if place.folder_lock else place.path
        return SpecError(f"rank 0 found a symbolic link at {at}, {stops}: remove the link, or {place.fix}")
    if found == UNWRITABLE:
        why = f" ({os.strerror(err)})" if err else ""
        return SpecError(f"rank 0 found that {place.path} cannot be written{why}, {stops}: "
                         f"{write_fix(err, place.fix, place.advice)}")
    if found == UNLOCKED:
        why = f" ({os.strerror(err)})" if err else ""
        return SpecError(f"rank 0 could not lock {place.held}{why}, {stops}: try again, or {place.fix}")
    return SpecError(f"rank 0 stopped on an error at {place.path} (rank 0's own line names it), {stops}")


def opened(place: Place, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args), which opens place.path to write (the metrics file's MetricsWriter, lanes' train.log). An OSError
    of it (an I/O error of a network disk, a full or read-only disk, a file another user owns) is one line naming
    the file and place.fix, as the other ranks' refusal (UNWRITABLE) names them: it was the OSError itself on
    rank 0, one line only for some errnos (inputs.one_line_errors) and a traceback for EIO. An I/O error asks to
    try again (inputs.write_fix): a network disk's passes, and another folder was no fix for it. Raised inside
    the except: found_in reads its errno there."""
    try:
        return fn(*args)
    except OSError as e:
        raise cannot_write(place, e) from None


def cannot_write(place: Place, e: OSError) -> SpecError:
    """The line of rank 0 whose open of a file at `place` failed with `e`: the file and the fix."""
    path = e.filename if e.filename else place.path
    return SpecError(f"{path} cannot be written ({e.strerror or e}): {write_fix(e.errno, place.fix, place.advice)}")


METRICS_MIRROR = "DTRAIN_METRICS_FILE"  # the platform's copy of the metrics, which MetricsWriter writes too


def metrics_mirror(own: Path) -> Place | None:
    """The platform's copy of the run's metrics as a Place, where MetricsWriter writes one apart from `own`; None
    without it (plain torchrun). dtrain's local backend names it in DTRAIN_METRICS_FILE: metrics.jsonl in the job's
    folder, HOME/jobs/NAME of the home the job was submitted under, which the dashboard reads. It is no file of the
    run's: another --metrics-file or --out-dir changes nothing there, the job's folder and its home do."""
    mirror = os.environ.get(METRICS_MIRROR)
    if not mirror or Path(mirror).resolve() == own.resolve():
        return None
    path = Path(mirror)
    return Place(path, MIRROR_FIX,
                 advice=f"free space or fix permissions in {path.parent} (the job's folder, which holds dtrain's "
                        f"copy of the metrics)")


def hold_file(path: Path, fix: str, folder: Path | None = None):
    """`path` opened, never through a link, and held (inputs.hold) as the lock of its folder (or of `folder`:
    folder_lock_file): the file to close when the run ends. A link there is refused as one (found_in reads its
    ELOOP); an open that fails otherwise (an I/O error of a network disk, a lock file another user left that this
    one cannot open) is inputs.lock_failed's line, as a lock that failed is: it was the OSError itself, a
    traceback on rank 0."""
    folder = path.parent if folder is None else folder
    try:
        file = open_append(path, fix=f"training locks a file of its own there; remove the link or {fix}")
    except OSError as e:
        raise lock_failed(folder, e, fix) from None
    hold(file, path, fix, folder)
    return file


class Rank0Checks:
    """Checks only rank 0 makes, then one all-reduce every rank calls (stop_together)."""

    def __init__(self, info: DistInfo, places: Sequence[Place]) -> None:
        if len(places) > 1 << _PLACE_BITS:
            raise ValueError(f"{len(places)} places: at most {1 << _PLACE_BITS}")
        self.info, self.places = info, list(places)
        self.error: BaseException | None = None
        self.code = 0

    def check(self, place: int, declared: int, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) on rank 0, before any refusal; None on the other ranks and after one. An error it raises is
        kept for stop_together, with what it found at `place` (found_in; `declared` for a DtrainError that is no
        lock, link nor errno of its own)."""
        if not self.info.is_main or self.error is not None:
            return None
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - every rank must reach the all-reduce; rank 0 raises it there
            what, err = found_in(e, declared)
            self.error, self.code = e, encode(what, place, err)
            return None

    def open_metrics(self, place: int, path: Path):
        """Rank 0's MetricsWriter for `path`, at places[place], opened (check's rules). It opens the platform's copy
        too (metrics_mirror): an open of that copy that fails is its own line, naming it and the fix there, kept
        at a place of its own, which every other rank names. Rank 0 named the copy with the fix of the run's own
        file (another --metrics-file or --out-dir, which changed nothing), and the other ranks the run's file."""
        mirror = metrics_mirror(path)
        if mirror is None:
            return self.check(place, UNWRITABLE, opened, self.places[place], MetricsWriter, path)
        at = len(self.places)
        if at >= 1 << _PLACE_BITS:
            raise ValueError(f"{at + 1} places: at most {1 << _PLACE_BITS}")
        self.places.append(mirror)

        def both() -> MetricsWriter:
            try:
                return MetricsWriter(path)
            except OSError as e:
                if e.filename is None or Path(e.filename) != mirror.path:
                    raise
                raise cannot_write(mirror, e) from None

        before = self.error
        metrics = self.check(place, UNWRITABLE, opened, self.places[place], both)
        cause = self.error.__context__ if self.error is not before and self.error is not None else None
        if isinstance(cause, OSError) and cause.filename is not None and Path(cause.filename) == mirror.path:
            found, _, err = decode(self.code)
            self.code = encode(found, at, err)
        return metrics

    def lock(self, place: int):
        """Rank 0's lock at places[place] (a lock_place): the folder held (hold_folder; where its file system takes
        no flock on a folder, NFS, its folder_lock_file held instead), or its LOCK_FILE opened, never through a
        link, and held (hold_file); what to close when the run ends, or None (check's rules)."""
        where = self.places[place]
        if where.folder_lock:
            instead = partial(hold_file, folder_lock_file(where.path), where.fix, where.path)
            return self.check(place, UNLOCKED, hold_folder, where.path, where.fix, instead)
        return self.check(place, UNLOCKED, hold_file, where.path, where.fix)

    def stop_together(self) -> None:
        """The one all-reduce: rank 0 raises its own error, every other rank the refusal naming what rank 0 found."""
        code = max_over_ranks(self.code, self.info.device)
        if self.error is not None:
            raise self.error
        if code:
            raise refusal(code, self.places, self.info.rank)
