"""What each pipeline step does, as plain functions over dtrain's `Client` (no kfp here).

The KFP components (components.py) are thin wrappers around these, so a step behaves the same in
a KFP pod, under `kfp.local`, or called from Python, on whichever backend its parameter names:
the local backend, Kubernetes (a PyTorchJob) or SageMaker (a training job).

The `*_spec` functions are pure: parameters in, a JobSpec (as a dict, the form a KFP step passes
on) out. `dtrain pipeline run` calls them before starting a pipeline, so a bad parameter stops it
with one line instead of failing a step halfway through.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, NoReturn

from dtrain.backends.base import JobInfo, JobStatus
from dtrain.client import Client
from dtrain.errors import ConflictError, DtrainError, JobFailedError, NotFoundError, SpecError
from dtrain.names import cut
from dtrain.spec import MAX_PROCESSES, JobSpec, NewVolume, VolumeMount, check_image, check_name, shown
from dtrain.spec_sagemaker import (INSTANCE_RE, REGION_RE, ROLE_RE, S3_BUCKET_RE, URI_SCHEMES, Channel,
                                   SageMakerOptions, gpu_type)

RUNTIMES = ("local", "kubernetes", "sagemaker")  # training_runtime values, one pipeline branch each
DIST_BACKENDS = ("gloo", "nccl")  # torch.distributed process-group backends the reference offers
LAST_LINES = 20  # log lines quoted when a job fails: enough for a traceback's tail
DATA_MOUNT = "/mnt"  # where a pipeline's volume appears inside its jobs
SM_CHANNEL = "training"  # the SageMaker channel the data arrives on ($SM_CHANNEL_TRAINING)
SM_DATA_DIR = f"/opt/ml/input/data/{SM_CHANNEL}"  # where SageMaker puts that channel's files
Echo = Callable[[str], None]
_CKPT_RE = re.compile(r"^ckpt-(\d+)\.pt\Z")  # dtrain.training.checkpoint's, without importing torch here


@dataclass(frozen=True, kw_only=True)
class StepResult:
    """What a job-running step reports: the outputs of the KFP `train` and `prepare` components."""

    job: str  # job name
    status: str  # the job's final status (Succeeded; a failed job raises instead)
    model: str  # where its result is: a snapshot name, VOLUME:/path, or an S3 model URI


# ---------------------------------------------------------------- checks (one rule each)


def check_runtime(value: str) -> str:
    """The reference's first step: training_runtime must name one of the pipeline's branches."""
    if value not in RUNTIMES:
        raise SpecError(f"invalid training_runtime {shown(value)}: use one of {', '.join(RUNTIMES)}")
    return value


VOLUME_RUNTIMES = ("local", "kubernetes")  # the backends with volumes and snapshots (not SageMaker)


def check_volume_backend(value: str) -> str:
    """A pipeline whose steps make volumes and snapshots runs where there are some."""
    if value not in VOLUME_RUNTIMES:
        extra = " (its steps make volumes and snapshots, which SageMaker does not have)" if value == "sagemaker" else ""
        raise SpecError(f"invalid backend {shown(value)}: use {' or '.join(VOLUME_RUNTIMES)}{extra}")
    return value


def _check_count(value, name: str, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise SpecError(f"invalid {name} {shown(value)}: use a whole number from {minimum} to {maximum}")
    return value


def _check_fraction(value, name: str, *, low_open: bool) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value > 1 or value < 0 or (low_open and value == 0):
        kind = "0 < value <= 1" if low_open else "0 <= value <= 1"
        raise SpecError(f"invalid {name} {shown(value)}: use a number with {kind}")
    return float(value)


# ---------------------------------------------------------------- job specs (pure)


def _wire(spec: JobSpec) -> dict:
    """The spec as a KFP struct: JSON values only, unset fields left out (a struct holds no null);
    the project too, so each job goes to the default project of the home it is submitted from.
    Of the SageMaker options only those that differ from their defaults (no nulls there either)."""
    out = {k: v for k, v in spec.to_dict().items() if v is not None and k != "project"}
    if "sagemaker" in out:
        default = SageMakerOptions().to_dict()
        out["sagemaker"] = {k: v for k, v in out["sagemaker"].items() if v != default[k]}
    return out


def _unwire(spec: dict) -> dict:
    """Undo the struct's one change: KFP carries every number as a double (protobuf Value)."""
    out = _ints(spec, _INT_FIELDS)
    if isinstance(out.get("sagemaker"), dict):
        out["sagemaker"] = _ints(out["sagemaker"], _SM_INT_FIELDS)
    return out


def _ints(data: dict, fields: tuple[str, ...]) -> dict:
    return {k: int(v) if isinstance(v, float) and k in fields and v.is_integer() else v for k, v in data.items()}


_INT_FIELDS = ("processes", "gpu", "max_restarts")  # JobSpec's whole-number fields
_SM_INT_FIELDS = ("instance_count", "max_runtime", "max_wait", "volume_size")  # SageMakerOptions' ones


def sagemaker_data_channel(data_uri: str) -> Channel:
    """The hybrid pipeline's `data_uri` as the job's `training` channel; SageMaker needs one."""
    if not data_uri:
        raise SpecError("training_runtime=sagemaker needs the CIFAR10 data in S3: add "
                        "--param data_uri=s3://BUCKET/PREFIX (the CIFAR10 batches or the folder holding them)")
    try:
        return Channel(name=SM_CHANNEL, uri=data_uri)
    except SpecError as err:  # the channel's reason (a bucket name S3 refuses, say), in the pipeline's words
        why = str(err).partition(f"={shown(data_uri)}: ")[2]
        if not why or not data_uri.startswith(URI_SCHEMES):  # no scheme SageMaker reads: the ones this pipeline takes
            why = "use s3://BUCKET/PREFIX (or file:///PATH with sagemaker --local)"
        raise SpecError(f"invalid data_uri {shown(data_uri)}: {why}") from None


# The SageMaker settings a pipeline takes as parameters (its name -> SageMakerConfig's field, the
# pattern, an example), as the SageMaker Components for KFP take `role` and `region`: a step pod has
# no config.yaml. Empty: config.yaml's setting where there is one, else (the region) $AWS_REGION,
# $AWS_DEFAULT_REGION, us-east-1.
SM_PARAMS = {
    "sagemaker_role_arn": ("role", ROLE_RE, "an IAM role ARN such as arn:aws:iam::123456789012:role/SageMakerRole"),
    "sagemaker_bucket": ("bucket", S3_BUCKET_RE, "an S3 bucket's name such as my-training-bucket"),
    "sagemaker_region": ("region", REGION_RE, "an AWS region such as us-east-1"),
    "sagemaker_instance_type": ("instance_type", INSTANCE_RE, "a SageMaker instance type such as ml.m5.xlarge "
                                "(ml.g5.xlarge for a GPU)"),
}


def sagemaker_settings(**params: str) -> dict[str, str]:
    """The SageMaker settings given as pipeline parameters (pure): {SageMakerConfig field: value}
    for each non-empty one, each checked, for `Client(sagemaker=...)`."""
    out = {}
    for name, value in params.items():
        field_, pattern, example = SM_PARAMS[name]
        if value == "":
            continue
        if not isinstance(value, str) or not pattern.match(value):
            fix = (" (the bucket's name alone, without s3://)" if name == "sagemaker_bucket"
                   and isinstance(value, str) and "/" in value else "")
            raise SpecError(f"invalid {name} {shown(value)}: use {example}{fix}, or leave it empty for "
                            f"config.yaml's setting")
        out[field_] = value
    return out


def check_sagemaker_gpu(backend: str, instance_type: str) -> None:
    """nccl on SageMaker needs a GPU instance type (one GPU per process there)."""
    if backend == "nccl" and instance_type and not gpu_type(instance_type):
        raise SpecError(f"invalid backend 'nccl' with sagemaker_instance_type={instance_type}: it has no GPUs, and "
                        f"nccl needs one per process: pick a GPU type (ml.g5.xlarge) or use --param backend=gloo")


# A run's own names (an empty job_name or job_prefix) end in 16 hex digits, 64 bits: two runs meeting the same
# one is never seen in practice (at 8, 32 bits, 9,300 runs had a 1% chance that two met). cifar10-<16> and
# lanes-<16> leave room in every name made after them (pvc-<prefix>-data-0 is 33 of MAX_NAME's 53, well within a
# Kubernetes label's 63 and a SageMaker job name's 63).
RUN_ID_HEX = 16


def new_run_id() -> str:
    """RUN_ID_HEX random hex digits from the OS (never Python's `random`, which a program may have seeded)."""
    return os.urandom(RUN_ID_HEX // 2).hex()


def run_job_name(prefix: str, run_id: str = "", *, new_id: Callable[[], str] = new_run_id) -> str:
    """PREFIX-ID, a job name of this pipeline run's own, so that a pipeline run again with its default parameters
    names a new job: ID is the run id's first RUN_ID_HEX letters and digits where it has that many (a KFP server's
    UUID), else NEW_ID's: kfp.local's id is at most 8 digits from Python's global `random` (a seeded program
    repeats it), and outside a run the placeholder is not filled in."""
    suffix = "" if "{{$" in run_id else re.sub(r"[^a-z0-9]", "", run_id.lower())[:RUN_ID_HEX]
    return f"{prefix}-{suffix if len(suffix) == RUN_ID_HEX else new_id()}"


def lanes_prefix(job_prefix: str, run_id: str = "", *, new_id: Callable[[], str] = new_run_id) -> str:
    """The lane-detection run's job_prefix: as given, else lanes-<the run's id> (run_job_name), a new one per run."""
    return job_prefix or run_job_name("lanes", run_id, new_id=new_id)


def lanes_candidate(candidate_volume: str, prefix: str) -> str:
    """The volume an accurate enough lane model is restored into: as given, else PREFIX-candidate (the run's)."""
    return candidate_volume or f"{prefix}-candidate"


def cifar10_spec(*, runtime: str, job_name: str, processes: int, epochs: int, batch_size: int, lr: float,
                 backend: str, data_volume: str, max_steps: int = 0, image: str = "",
                 data_uri: str = "", run_id: str = "") -> tuple[dict, str]:
    """The reference's CIFAR10 DDP job for one runtime: (JobSpec dict, where the model lands).

    Local and Kubernetes mount `data_volume` at /mnt (CIFAR10 batches at its top) and write the
    model to /mnt/models/<job>; SageMaker gets `data_uri` as its `training` channel, read from
    /opt/ml/input/data/training, and saves to its model folder (SM_MODEL_DIR, which the workload
    reads by itself; SageMaker uploads it as model.tar.gz). An empty `job_name`: cifar10-<run_id's>
    (run_job_name), a new name per run.
    """
    check_runtime(runtime)
    job_name = job_name or run_job_name("cifar10", run_id)
    check_name(job_name, "job")  # JobSpec's own word for an empty one is `dtrain submit NAME`, no pipeline's
    check_image(image, "job_image")
    if backend not in DIST_BACKENDS:
        raise SpecError(f"invalid backend {shown(backend)}: use one of {', '.join(DIST_BACKENDS)} (gloo on CPU)")
    if backend == "nccl" and runtime != "sagemaker":  # nccl needs a GPU per rank; this job asks for none
        raise SpecError(f"invalid backend 'nccl' with training_runtime={runtime}: the pipeline's job gets no GPUs "
                        f"there (it has no GPU parameter), and nccl needs one per process: use --param backend=gloo")
    _check_count(processes, "processes", 1, MAX_PROCESSES)
    _check_count(epochs, "epochs", 1, 10_000)
    _check_count(batch_size, "batch_size", 1, 65_536)
    _check_count(max_steps, "max_steps", 0, 10_000_000)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or not 0 < lr <= 10:
        raise SpecError(f"invalid lr {shown(lr)}: use a learning rate with 0 < lr <= 10, e.g. 0.001")
    command = ["python", "-m", "dtrain.workloads.cifar10", "train", "--epochs", str(epochs), "--batch-size",
               str(batch_size), "--lr", repr(float(lr)), "--backend", backend, "--max-steps", str(max_steps),
               "--log-interval", "10"]
    volumes: list[str] = []
    model = "the job's S3 model artifact (model.tar.gz)"
    sagemaker = None
    if runtime == "sagemaker":
        command += ["--data-dir", SM_DATA_DIR]
        sagemaker = {"channels": [sagemaker_data_channel(data_uri).to_flag()]}
    else:
        check_name(data_volume, "volume")
        out = f"{DATA_MOUNT}/models/{job_name}"
        command += ["--data-dir", DATA_MOUNT, "--model-dir", out]
        volumes = [VolumeMount(volume=data_volume, mount_path=DATA_MOUNT).to_flag()]
        model = f"{data_volume}:/models/{job_name}/model.pth"
    spec = JobSpec.from_dict({"name": job_name, "command": command, "processes": processes, "launcher": "torchrun",
                              "volumes": volumes, "backend": runtime, "image": image or None,
                              "sagemaker": sagemaker})
    return _wire(spec), model


def lanes_prepare_spec(*, job_name: str, urls: str, sha256: str = "", storage_class: str = "local",
                       size: str = "10Gi", image: str = "") -> tuple[dict, str]:
    """The TuSimple data job on a new volume: (JobSpec dict, the volume's name)."""
    check_image(image, "job_image")
    url_list = [u for u in (x.strip() for x in urls.split(",")) if u]
    sums = [s.strip() or "-" for s in sha256.split(",")] if sha256.strip() else []
    if not url_list:
        raise SpecError("invalid urls '': give the TuSimple archives as a comma-separated list of URLs or paths")
    if sums and len(sums) != len(url_list):
        raise SpecError(f"{len(sums)} sha256 values for {len(url_list)} urls: give one per url ('-' to skip one)")
    volume = NewVolume(storage_class=storage_class, size=size, mount_path=DATA_MOUNT)
    command = ["python", "-m", "dtrain.workloads.lanes", "prepare", "--url", *url_list,
               *(["--sha256", *sums] if sums else []), "--out", f"{DATA_MOUNT}/tusimple"]
    spec = JobSpec.from_dict({"name": job_name, "command": command, "volumes": [volume.to_flag()],
                              "image": image or None})
    ((name, _new),) = spec.new_volumes()  # the name the backend gives it (pvc-<job>-0)
    return _wire(spec), name


def check_urls(urls: str, *, here: bool) -> None:
    """Each of the data job's URLs in a scheme it reads; with HERE (the local backend, whose data job reads a path
    or file:// URL on this machine) each path a file: both refused before any step, where the data job refused
    them after its volume was made (a KFP server's pod reads its own paths, not checked)."""
    from dtrain.workloads.inputs import local_path  # the data job's own reading of a URL

    for url in (u.strip() for u in urls.split(",")):
        try:
            path = local_path(url, "urls") if url else None
        except SpecError as err:  # a scheme the data job does not read
            raise SpecError(f"invalid urls entry {shown(url)}: {err}") from None
        if here and path is not None and not path.is_file():
            raise SpecError(f"invalid urls entry {shown(url)}: no file {path} on this machine, where the local "
                            f"backend's data job reads it: give the TuSimple archives as paths here (e.g. "
                            f"$PWD/tusimple/train_set.tar.gz) or http(s):// URLs")


def lanes_train_spec(*, job_name: str, volume: str, recipe: str = "tiny", processes: int = 2, max_steps: int = 0,
                     batch_size: int = 0, image: str = "") -> dict:
    """SCNN training on the prepared volume, snapshotting it (data + model) when the job succeeds."""
    check_image(image, "job_image")
    _check_count(processes, "processes", 1, MAX_PROCESSES)
    _check_count(max_steps, "max_steps", 0, 10_000_000)
    _check_count(batch_size, "batch_size", 0, 65_536)
    if recipe not in ("tiny", "demo", "paper"):
        raise SpecError(f"invalid recipe {shown(recipe)}: use tiny, demo or paper")
    command = ["python", "-m", "dtrain.workloads.lanes", "train", "--recipe", recipe, "--data-dir",
               f"{DATA_MOUNT}/tusimple", "--out-dir", f"{DATA_MOUNT}/runs/{job_name}"]
    command += ["--max-steps", str(max_steps)] if max_steps else []
    command += ["--batch-size", str(batch_size)] if batch_size else []
    return _wire(JobSpec.from_dict({"name": job_name, "command": command, "processes": processes,
                                     "launcher": "torchrun", "cpu": 1, "large_shm": True, "volumes": [f"{volume}:{DATA_MOUNT}"],
                              "snapshot_on_success": volume, "image": image or None}))


def lanes_evaluate_spec(*, job_name: str, volume: str, train_job: str, image: str = "") -> dict:
    """Predict the test split with the trained model; the job's last line is the metric as JSON."""
    check_image(image, "job_image")
    command = ["python", "-m", "dtrain.workloads.lanes", "predict", "--checkpoint",
               f"{DATA_MOUNT}/runs/{train_job}/model.pt", "--data-dir", f"{DATA_MOUNT}/tusimple", "--split", "test",
               "--out", f"{DATA_MOUNT}/eval/{job_name}/pred.json", "--json"]
    return _wire(JobSpec.from_dict({"name": job_name, "command": command, "volumes": [f"{volume}:{DATA_MOUNT}"],
                                     "image": image or None}))


def check_threshold(value) -> float:
    return _check_fraction(value, "threshold", low_open=False)


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
            said = in_pipeline_words(str(err))
            raise type(err)(f"pipeline {pipeline!r} cannot submit job {job.name!r} to the {plan.backend} backend"
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


_UNCONFIGURED = re.compile(r"^SageMaker is not configured \((.+?) missing\): run '(dtrain config sagemaker [^']*)', "
                           r"or submit with (?:--local|sagemaker=\{'local': True\}) to run here")  # the CLI's, the SDK's


def in_pipeline_words(said: str) -> str:
    """A backend's refusal with its flags named as the pipeline's parameters: a step pod has no
    config.yaml, so SageMaker's role and bucket are parameters there."""
    said = re.sub(r"--processes\b", "--param processes", said)
    said = re.sub(r"--backend (nccl|gloo)\b", r"--param backend=\1", said)  # the hybrid pipeline's parameter
    said = re.sub(r"--instance-type (\S+?)\)", r"--param sagemaker_instance_type=\1)", said)
    # AWS's refusals of the bucket (clients.HINTS) name config.yaml's flags; here the run's parameters win
    said = said.replace("set another with dtrain config sagemaker --bucket",
                        "pass another with --param sagemaker_bucket=NAME (or save one with dtrain config sagemaker "
                        "--bucket)")
    said = said.replace("use a bucket there (dtrain config sagemaker --bucket) or the bucket's region (--region)",
                        "use a bucket there (--param sagemaker_bucket=NAME) or the bucket's region "
                        "(--param sagemaker_region=REGION)")
    # the hybrid pipeline's data_uri is the job's training channel: what S3 says of it names the parameter
    if re.match(rf"channel {SM_CHANNEL}=s3://\S+: (no S3 objects under it|the bucket \S+ does not exist)", said):
        said = "--param data_uri=" + said[len(f"channel {SM_CHANNEL}="):].replace(
            "or fix the URI", "or pass another --param data_uri")
    found = _UNCONFIGURED.match(said)
    if found:
        names = found.group(1).replace("--role", "sagemaker_role_arn").replace("--bucket", "sagemaker_bucket")
        said = (f"SageMaker is not configured ({names} missing): pass --param "
                f"sagemaker_role_arn=arn:aws:iam::ACCOUNT:role/ROLE --param sagemaker_bucket=BUCKET (on a KFP "
                f"server: the run's arguments), or save them here with '{found.group(2)}'")
    return said


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
                            f"has: pass {params}, or remove {'it' if len(taken) == 1 else 'them'} "
                            f"({'; '.join(removals)}) and the checkpoints in {where}, which a new job of that "
                            f"name would resume")
    raise ConflictError(f"pipeline {pipeline!r} would make {shown_}, which the {backend} backend already "
                        f"has: remove {'it' if len(taken) == 1 else 'them'} ({'; '.join(removals)}) or pass {params}")


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


# ---------------------------------------------------------------- steps (talk to a backend)


RUN_ID_LABEL = "pipeline/runid"  # KFP's own label on the pods of a run: the run's id
RUN_NAME_LABEL = "pipeline/run-name"  # the run's name (under `dtrain pipeline run`, its outputs folder's name)


def run_labels(run_name: str = "", run_id: str = "") -> dict[str, str]:
    """The labels that tie a job to the pipeline run whose step submitted it (pure): KFP's
    PIPELINE_JOB_ID / PIPELINE_JOB_NAME placeholders as the step got them. A name that is no label
    value (a KFP server's run may be named in any words) is made one; an empty or unresolved
    placeholder (a component called outside a run) gives no label."""
    out = {}
    for key, value in ((RUN_ID_LABEL, run_id), (RUN_NAME_LABEL, run_name)):
        if not isinstance(value, str) or "{{$" in value:
            continue
        value = re.sub(r"[^-A-Za-z0-9_.]+", "-", value)[:63].strip("-_.")
        if value:
            out[key] = value
    return out


def with_labels(spec: dict, labels: Mapping[str, str] | None) -> dict:
    """SPEC (a JobSpec dict) with LABELS added to its own (pure)."""
    if not labels:
        return spec
    return {**spec, "labels": {**(spec.get("labels") or {}), **labels}}


def run_job(spec: dict, *, backend: str, client: Client | None = None, timeout: float | None = None,
            echo: Echo = print, labels: Mapping[str, str] | None = None,
            sagemaker: Mapping[str, str] | None = None) -> JobInfo:
    """Submit, follow the logs into this step's log, wait; a job that does not succeed raises
    JobFailedError quoting its last log lines, so the pipeline step fails with the job's reason.
    A log that cannot be read (a Kubernetes job's pods gone, and its log with them) is said in a
    line; the job's status still decides how the step ends. `sagemaker`: SageMaker settings over
    config.yaml's (sagemaker_settings), for the client made here."""
    client = client or Client(backend=backend, sagemaker=sagemaker)
    job = job_spec(with_labels(spec, labels), backend=backend, client=client)
    restore_tmpdir()  # the job inherits this process's environment
    try:
        info = client.submit(job)
    except DtrainError as err:  # in the pipeline's words: a step pod has no config.yaml and no flags
        said = in_pipeline_words(str(err))  # (AWS's refusal of the bucket, a BackendError, names a flag too)
        if said == str(err):
            raise
        raise type(err)(said) from None
    echo(f"submitted job {job.name!r} to the {backend} backend ({info.status})")
    _follow(client, job.name, echo)
    info = client.wait(job.name, timeout=timeout)
    if info.status is not JobStatus.SUCCEEDED:
        whole = client.command_for(f"logs {job.name}", backend=info.backend, project=info.spec.project)
        raise JobFailedError(f"job {job.name!r} ended {info.status}" + (f" ({info.message})" if info.message else "")
                             + f" on the {backend} backend; " + _last_lines(client, job.name)
                             + f"\nthe whole log: {whole}")
    echo(f"job {job.name!r} {info.status}")
    return info


RESUME_POLL_S = 2.0  # how often a step whose job is suspended asks whether it was resumed


def _follow(client: Client, name: str, echo: Echo) -> None:
    """Echo the job's log as it is written. A suspended job's log stream ends (its processes are
    gone); the step says so, waits for `dtrain resume`, and follows the resumed run from the last
    line's time on (skipping the lines at that time it has shown)."""
    since, shown_at = None, set()
    while True:
        try:
            for line in client.logs(name, follow=True, since=since):
                key = (line.rank, line.text)
                if since is not None and line.time == since and key in shown_at:
                    continue
                if line.time is not None and (since is None or line.time > since):
                    since, shown_at = line.time, set()
                shown_at.add(key)
                echo(f"[{name} rank {line.rank}] {line.text}")
        except DtrainError as err:  # the log is the job's story, its status the verdict: wait for that
            echo(f"[{name}] its log is not available: {_one_line(err)}")
            return
        info = client.get(name)
        if info.status is not JobStatus.SUSPENDED:
            return
        resume = client.command_for(f"resume {name}", backend=info.backend, project=info.spec.project)
        echo(f"[{name}] suspended ({info.message}): this step waits for '{resume}'")
        while info.status is JobStatus.SUSPENDED:
            time.sleep(RESUME_POLL_S)
            info = client.get(name)
        echo(f"[{name}] resumed ({info.status})")


def job_spec(spec: dict, *, backend: str, client: Client) -> JobSpec:
    """A step's JobSpec dict as the job submitted to `backend`, in the client's default project."""
    return JobSpec.from_dict({"project": client.default_project, **_unwire(spec), "backend": backend})


def _last_lines(client: Client, name: str) -> str:
    """The failed job's last log lines, or why there are none to quote (its pods are gone, say)."""
    try:
        tail = [f"  [rank {ln.rank}] {ln.text}" for ln in client.logs(name, tail=LAST_LINES)]
    except DtrainError as err:
        return f"(its log is not available: {_one_line(err)})"
    return "its last log lines:\n" + "\n".join(tail or ["  (none)"])


def _one_line(err: Exception) -> str:
    return cut(err, 1000)  # a backend's reason is one sentence; a foreign one may hold newlines


# `dtrain pipeline run` points the steps' $TMPDIR at a folder of the run's (runner._step_tmpdir) for
# KFP's own `mktemp -d`; it gives the user's value (empty: none was set) in this variable, so that
# the jobs a step starts see the user's $TMPDIR, not a folder of the run they would leave things in.
USER_TMPDIR = "DTRAIN_USER_TMPDIR"


def restore_tmpdir() -> None:
    """Give this step (and the jobs it starts) the user's $TMPDIR back; outside `pipeline run`
    (a KFP pod, a plain call) the variable is absent and nothing changes."""
    user = os.environ.pop(USER_TMPDIR, None)
    if user is None:
        return
    if user:
        os.environ["TMPDIR"] = user
    else:
        os.environ.pop("TMPDIR", None)


def model_location(info: JobInfo, fallback: str) -> str:
    """A snapshot taken on success wins; else the backend's model URI (SageMaker); else `fallback`."""
    if info.snapshot:
        return info.snapshot
    uri = info.extra.get("model_artifacts")  # SageMaker's S3ModelArtifacts: s3://.../output/model.tar.gz
    return str(uri) if uri else fallback


def train(spec: dict, *, backend: str, model: str = "", client: Client | None = None,
          timeout: float | None = None, echo: Echo = print, labels: Mapping[str, str] | None = None,
          sagemaker: Mapping[str, str] | None = None) -> StepResult:
    """The `train` component: any JobSpec on any backend, to the end; LABELS (run_labels) added to the
    job's; SAGEMAKER (sagemaker_settings) over config.yaml's SageMaker settings."""
    info = run_job(spec, backend=backend, client=client, timeout=timeout, echo=echo, labels=labels,
                   sagemaker=sagemaker)
    return StepResult(job=info.name, status=str(info.status), model=model_location(info, model))


def snapshot(volume: str, *, name: str, job: str = "", backend: str = "local",
             client: Client | None = None, echo: Echo = print) -> str:
    """The `snapshot` component: freeze a volume (e.g. the prepared data) under a name."""
    client = client or Client(backend=backend)
    client.create_snapshot(volume, name=name, job=job or None)
    echo(f"snapshot {name!r} of volume {volume!r}")
    return name


def restore(snapshot_name: str, *, to: str, backend: str = "local", client: Client | None = None,
            echo: Echo = print) -> str:
    """Restore a snapshot into a new volume (the lane pipeline's 'candidate')."""
    client = client or Client(backend=backend)
    client.restore_snapshot(snapshot_name, to=to)
    echo(f"restored snapshot {snapshot_name!r} into volume {to!r}")
    return to


def evaluate(spec: dict, *, backend: str, client: Client | None = None, timeout: float | None = None,
             echo: Echo = print, labels: Mapping[str, str] | None = None) -> dict:
    """Run the prediction job and read its metric (the last JSON line of its log)."""
    client = client or Client(backend=backend)
    info = run_job(spec, backend=backend, client=client, timeout=timeout, echo=echo, labels=labels)
    try:
        lines = list(client.logs(info.name))
    except DtrainError as err:
        raise JobFailedError(f"job {info.name!r} {info.status} but its metric line (JSON with accuracy, fp, fn) "
                             f"could not be read: {_one_line(err)}") from None
    for line in reversed(lines):
        try:
            result = json.loads(line.text)
        except ValueError:
            continue
        if isinstance(result, dict) and {"accuracy", "fp", "fn"} <= set(result):
            return result
    raise JobFailedError(f"job {info.name!r} printed no metric line (JSON with accuracy, fp, fn); "
                         f"check it with: dtrain logs {info.name}")
