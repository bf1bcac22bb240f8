"""The names a pipeline run takes, checked on its backend before its first step (steps.py
re-exports every name here): what a run makes, mounts and submits (Plan), check_plan's one line when
one is taken or refused, the free names a run picks for itself (fill_free), and what an interrupted
or failed run says it left (going_on, left_behind).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, NoReturn

from dtrain.backends.base import JobStatus
from dtrain.client import Client
from dtrain.errors import ConflictError, DtrainError, NotFoundError, SpecError, said_as
from dtrain.pipelines.step_specs import in_pipeline_words, job_spec, new_run_id
from dtrain.spec import VolumeMount

_CKPT_RE = re.compile(r"^ckpt-(\d+)\.pt\Z")  # dtrain.training.checkpoint's, without importing torch here


# ---------------------------------------------------------------- names a run takes (checked first)


@dataclass(frozen=True)
class Named:
    """A job, volume or snapshot a pipeline run makes or mounts, under a name one parameter sets."""

    kind: str  # job, volume or snapshot
    name: str
    param: str  # the pipeline parameter that changes the name


@dataclass(frozen=True)
class Fresh:
    """A folder in a volume where a run's job checkpoints: checkpoints an earlier run of that job
    name left there would be resumed, and the new run's parameters (lr, epochs) silently ignored."""

    volume: str
    path: str  # inside the volume, e.g. models/cifar10-hybrid
    param: str  # the pipeline parameter that changes the folder


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What a run will make on its dtrain backend (every name must be free), the volumes its
    jobs mount (each must exist) and the jobs it submits (each must pass the backend's dry run:
    its configuration, its image, its request). `dtrain pipeline run` checks it before the first
    step starts; a compiled pipeline on a KFP server has no such moment, and there each step's own
    submit or create refuses, as it does here for a name taken while the run goes on."""

    backend: str
    makes: tuple[Named, ...]
    mounts: tuple[Named, ...] = ()
    jobs: tuple[dict, ...] = ()  # JobSpec dicts, as the steps pass them to `train`
    fresh: tuple[Fresh, ...] = ()  # folders that must hold no checkpoints (checked where readable: locally)
    sagemaker: Mapping[str, str] | None = None  # SageMaker settings the steps give their client (sagemaker_settings)
    notices: tuple[str, ...] = ()  # parameters given that this run does not read, said before it starts


def check_plan(pipeline: str, plan: Plan, *, client: Client) -> None:
    """One line naming what is taken (or missing) and the fix, before anything runs."""
    dtrain = client.dtrain_for(plan.backend)
    made = {thing.name for thing in plan.makes if thing.kind == "volume"}
    for spec in plan.jobs:  # first: what the backend refuses needs no call to it (nor credentials)
        job = job_spec(spec, backend=plan.backend, client=client)
        try:
            # a volume an earlier step makes (the data job's) is not there yet: its mount (and its snapshot on
            # success) is left out of the dry run, which looks up the volumes a job names (it is checked free
            # with plan.makes below)
            client.render(job.replace(
                volumes=[v for v in job.volumes if not (isinstance(v, VolumeMount) and v.volume in made)],
                snapshot_on_success=None if job.snapshot_on_success in made else job.snapshot_on_success))
        except DtrainError as err:  # the step's submit would refuse it the same way, steps later
            if isinstance(err, (NotFoundError, ConflictError)):  # a local dry run looks up names and volumes:
                _check_names(pipeline, plan, dtrain, client)     # said with the parameters that change them
            kind, text = said_as(err, "cli")  # the flags' words, which in_pipeline_words names as parameters
            said = in_pipeline_words(text)
            raise kind(f"pipeline {pipeline!r} cannot submit job {job.name!r} to the {plan.backend} backend"
                            f"{_IMAGE_FIX if '--image' in said else ''}: {said}") from None
    _check_names(pipeline, plan, dtrain, client)
    for spec in plan.jobs:  # after the names: what the service holds, asked of it (SageMaker: each S3 channel)
        job = job_spec(spec, backend=plan.backend, client=client)
        try:
            client.check_inputs(job)
        except SpecError as err:  # the train step's submit would refuse it, after the earlier steps ran
            raise SpecError(f"pipeline {pipeline!r} cannot submit job {job.name!r} to the {plan.backend} backend: "
                            f"{in_pipeline_words(str(err))}") from None
    for folder in plan.fresh:
        _refuse_checkpoints(pipeline, folder, client)


FILL_TRIES = 8  # ids tried for a run's own names before check_plan refuses the last (a broken id source)


def fill_free(params: dict, *, fill: Callable[[dict, Callable[[], str]], dict], plan: Callable[[dict], Plan],
              client: Client, new_id: Callable[[], str] = new_run_id) -> dict:
    """PARAMS with the names a run makes for itself filled in by FILL (of NEW_ID's ids), each free on CLIENT's
    backend: an id whose names are taken (a run before it met the same one) is passed over for the next, so an
    id source that repeats (a seeded one) still gives a free name. Names given, and what FILL makes without an
    id, are left to check_plan, which refuses them when taken."""
    for _ in range(FILL_TRIES):
        used: list[str] = []

        def counted() -> str:
            used.append(new_id())
            return used[-1]

        filled = fill(params, counted)
        if not used:
            return filled
        ours = {key for key, value in filled.items() if value != params.get(key)}
        made = plan(filled)
        try:
            if all(_taken(client, made.backend, thing) is None for thing in made.makes if thing.param in ours) and \
                    all(not _checkpoints(folder, client) for folder in made.fresh if folder.param in ours):
                return filled
        except DtrainError:  # the backend cannot be asked (SageMaker not configured): check_plan says why
            return filled
    return filled


def _check_names(pipeline: str, plan: Plan, dtrain: str, client: Client) -> None:
    """Every name the run makes is free and each volume its jobs mount exists, or one line naming
    them all and the parameters that change them."""
    taken = [(thing, status) for thing in plan.makes if (status := _taken(client, plan.backend, thing)) is not None]
    if taken:
        _refuse_taken(pipeline, plan.backend, taken, dtrain, plan.fresh)
    for need in plan.mounts:
        try:
            client.get_volume(need.name)
        except NotFoundError:
            raise NotFoundError(f"pipeline {pipeline!r} mounts volume {need.name!r} ({need.param}), which the "
                                f"{plan.backend} backend does not have: create it ('{dtrain}volume create "
                                f"{need.name}') or pass --param {need.param}=NAME") from None


_IMAGE_FIX = " (a pipeline's --image for its jobs is --param job_image)"


def going_on(pipeline: str, plan: Plan, *, client: Client) -> str:
    """What an interrupted run says: its jobs that go on (a job runs apart from the step that
    submitted it, as a PyTorchJob outlives a KFP run's pod) and how to stop them."""
    going = []
    for thing in plan.makes:
        if thing.kind == "job":
            try:
                info = client.get(thing.name)
            except NotFoundError:
                continue
            if not info.status.terminal:
                going.append(info)
    if not going:
        return f"pipeline {pipeline!r} interrupted; none of its jobs is left running"
    names = " ".join(info.name for info in going)
    shown_ = ", ".join(f"{info.name!r} ({info.status})" for info in going)
    one = len(going) == 1
    return (f"pipeline {pipeline!r} interrupted; its job{'' if one else 's'} {shown_} "
            f"{'goes' if one else 'go'} on on the {plan.backend} backend: stop {'it' if one else 'them'} with "
            f"'{client.dtrain_for(plan.backend)}delete {names}' before running the pipeline again")


def left_behind(plan: Plan, *, client: Client) -> str:
    """The volumes and snapshots a failed run made (check_plan found their names free before it began) and the
    commands that remove them, for the run's last line; '' when it made none. A run with the defaults makes
    new ones, so a failed lane-detection run's data volume was left for good without a word."""
    left = []
    for thing in plan.makes:
        if thing.kind == "job":  # its log says why the run failed; `dtrain list` shows it
            continue
        try:
            (client.get_volume if thing.kind == "volume" else client.get_snapshot)(thing.name)
        except NotFoundError:
            continue
        left.append(thing)
    if not left:
        return ""
    dtrain = client.dtrain_for(plan.backend)
    removals = "; ".join(f"{dtrain}{t.kind} delete {t.name}"
                         for t in sorted(left, key=lambda t: t.kind != "snapshot"))  # a snapshot before its volume
    return (f"it left {', '.join(f'{t.kind} {t.name!r}' for t in left)}: remove "
            f"{'it' if len(left) == 1 else 'them'} with '{removals}' once you no longer need "
            f"{'it' if len(left) == 1 else 'them'}")


def _refuse_taken(pipeline: str, backend: str, taken: list[tuple[Named, str]], dtrain: str,
                  fresh: tuple[Fresh, ...] = ()) -> NoReturn:
    shown_ = ", ".join(f"{t.kind} {t.name!r}" + (f" ({status})" if status else "") for t, status in taken)
    params = " or ".join(f"--param {p}=NEW" for p in dict.fromkeys(t.param for t, _ in taken))
    if backend == "sagemaker":  # a name is free again only once DeleteTrainingJob has removed the ended job
        jobs = " ".join(t.name for t, _ in taken if t.kind == "job")
        raise ConflictError(f"pipeline {pipeline!r} would submit {shown_}, a name SageMaker already has: "
                            f"pass {params}, or free it once ended with '{dtrain}delete {jobs} --purge' "
                            f"(DeleteTrainingJob)")
    jobs = " ".join(t.name for t, _ in taken if t.kind == "job")
    removals = ([f"{dtrain}delete {jobs}"] if jobs else []) + \
        [f"{dtrain}{t.kind} delete {t.name}" for t, _ in taken if t.kind != "job"]
    # Deleting the job leaves its checkpoints, which a new job of that name resumes: a new name is the fix.
    kept = [f for f in fresh if any(t.kind == "job" and t.param == f.param for t, _ in taken)]
    if kept:
        where = ", ".join(f"{f.volume}:/{f.path}" for f in kept)
        raise ConflictError(f"pipeline {pipeline!r} would make {shown_}, which the {backend} backend already "
                            f"has: pass {params}, or remove {'it' if len(taken) == 1 else 'them'} with "
                            f"'{'; '.join(removals)}' and the checkpoints in {where}, which a new job of that "
                            f"name would resume")
    raise ConflictError(f"pipeline {pipeline!r} would make {shown_}, which the {backend} backend already "
                        f"has: remove {'it' if len(taken) == 1 else 'them'} with '{'; '.join(removals)}' or pass "
                        f"{params}")  # quoted as left_behind and every message quotes a command


def _refuse_checkpoints(pipeline: str, folder: Fresh, client: Client) -> None:
    """Refuse a run whose job would resume an earlier run's checkpoints. Only a volume with a
    folder on this machine (the local backend) can be read here; a PVC is not read."""
    found = _checkpoints(folder, client)
    if found:
        held = Path(client.get_volume(folder.volume).extra["path"]) / folder.path
        raise ConflictError(f"pipeline {pipeline!r} would resume its job from the checkpoints an earlier run left in "
                            f"{folder.volume}:/{folder.path} ({len(found)}, the newest {found[-1]}) and ignore this "
                            f"run's parameters: pass --param {folder.param}=NEW, or remove {held} to use that "
                            f"name again")


def _checkpoints(folder: Fresh, client: Client) -> list[str]:
    """The checkpoint files in FOLDER, oldest first; none where it cannot be read here (a PVC, no volume)."""
    try:
        root = client.get_volume(folder.volume).extra.get("path")
    except NotFoundError:  # check_plan names a missing volume (plan.mounts)
        return []
    if not root:
        return []
    held = Path(root) / folder.path
    try:
        found = [p.name for p in held.iterdir() if _CKPT_RE.match(p.name)] if held.is_dir() else []
    except OSError:  # unreadable here: the job itself will say what it finds
        return []
    return sorted(found, key=lambda n: int(n[5:-3]))


def _taken(client: Client, backend: str, thing: Named) -> str | None:
    """None when `thing`'s name is free; else what is there ('' or the job's status)."""
    try:
        if thing.kind == "job":
            status = client.get(thing.name).status
            # a Deleted local job is replaced by a new one of its name; elsewhere it is still there
            # (a Kubernetes object being deleted, a stopped SageMaker job) and the name is taken
            return None if status is JobStatus.DELETED and backend == "local" else str(status)
        (client.get_volume if thing.kind == "volume" else client.get_snapshot)(thing.name)
        return ""
    except NotFoundError:
        return None
