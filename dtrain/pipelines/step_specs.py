"""The checks and pure job specs of the pipeline steps (steps.py re-exports every name here).

Parameters in, a JobSpec (as a dict, the form a KFP step passes on) out, and the names a run makes
for itself (run ids). `dtrain pipeline run` calls them before starting a pipeline, so a bad
parameter stops it with one line instead of failing a step halfway through. No kfp, no backend.
"""

from __future__ import annotations

import math
import os
import re
from typing import TYPE_CHECKING, Callable

from dtrain.errors import SpecError, Worded
from dtrain.pipelines.run_records import BackendRefused
from dtrain.spec import MAX_PROCESSES, JobSpec, NewVolume, VolumeMount, check_image, check_name, shown
from dtrain.spec_sagemaker import (INSTANCE_RE, REGION_RE, ROLE_RE, S3_BUCKET_RE, URI_SCHEMES, Channel,
                                   SageMakerOptions, gpu_type)

if TYPE_CHECKING:
    from dtrain.client import Client

RUNTIMES = ("local", "kubernetes", "sagemaker")  # training_runtime values, one pipeline branch each
DIST_BACKENDS = ("gloo", "nccl")  # torch.distributed process-group backends the reference offers
DATA_MOUNT = "/mnt"  # where a pipeline's volume appears inside its jobs
SM_CHANNEL = "training"  # the SageMaker channel the data arrives on ($SM_CHANNEL_TRAINING)
SM_DATA_DIR = f"/opt/ml/input/data/{SM_CHANNEL}"  # where SageMaker puts that channel's files


# ---------------------------------------------------------------- checks (one rule each)


def check_runtime(value: str) -> str:
    """The reference's first step: training_runtime must name one of the pipeline's branches."""
    if value not in RUNTIMES:
        raise BackendRefused(f"invalid training_runtime {shown(value)}: use one of {', '.join(RUNTIMES)}",
                             value=value)
    return value


VOLUME_RUNTIMES = ("local", "kubernetes")  # the backends with volumes and snapshots (not SageMaker)


def check_volume_backend(value: str) -> str:
    """A pipeline whose steps make volumes and snapshots runs where there are some."""
    if value not in VOLUME_RUNTIMES:
        extra = " (its steps make volumes and snapshots, which SageMaker does not have)" if value == "sagemaker" else ""
        raise BackendRefused(f"invalid backend {shown(value)}: use {' or '.join(VOLUME_RUNTIMES)}{extra}", value=value)
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
        why = str(err.in_words("cli") if isinstance(err, Worded) else err).partition(f"={shown(data_uri)}: ")[2]
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


def job_spec(spec: dict, *, backend: str, client: Client) -> JobSpec:
    """A step's JobSpec dict as the job submitted to `backend`, in the client's default project."""
    return JobSpec.from_dict({"project": client.default_project, **_unwire(spec), "backend": backend})



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
    # ... and what EFS or FSx says of its file system (filesystems.py) names the parameters too
    if re.match(rf"channel {SM_CHANNEL}: (EFS|FSx for Lustre) file system ", said):
        said = "--param data_uri: " + said[len(f"channel {SM_CHANNEL}: "):]
        said = said.replace("(dtrain config sagemaker --region REGION)", "(--param sagemaker_region=REGION)")
        said = said.replace(f"pass --channel {SM_CHANNEL}=", "pass --param data_uri=")
        said = said.replace("an EFS one (efs://FS-ID/PATH)", "an EFS one (--param data_uri=efs://FS-ID/PATH)")
    found = _UNCONFIGURED.match(said)
    if found:
        names = found.group(1).replace("--role", "sagemaker_role_arn").replace("--bucket", "sagemaker_bucket")
        said = (f"SageMaker is not configured ({names} missing): pass --param "
                f"sagemaker_role_arn=arn:aws:iam::ACCOUNT:role/ROLE --param sagemaker_bucket=BUCKET (on a KFP "
                f"server: the run's arguments), or save them here with '{found.group(2)}'")
    return said

