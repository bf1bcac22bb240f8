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
from dataclasses import dataclass
from typing import Callable

from dtrain.backends.base import JobInfo, JobStatus
from dtrain.client import Client
from dtrain.errors import JobFailedError, SpecError
from dtrain.spec import MAX_PROCESSES, JobSpec, NewVolume, VolumeMount, check_name, shown
from dtrain.spec_sagemaker import Channel, SageMakerOptions

RUNTIMES = ("local", "kubernetes", "sagemaker")  # training_runtime values, one pipeline branch each
DIST_BACKENDS = ("gloo", "nccl")  # torch.distributed process-group backends the reference offers
LAST_LINES = 20  # log lines quoted when a job fails: enough for a traceback's tail
DATA_MOUNT = "/mnt"  # where a pipeline's volume appears inside its jobs
SM_CHANNEL = "training"  # the SageMaker channel the data arrives on ($SM_CHANNEL_TRAINING)
SM_DATA_DIR = f"/opt/ml/input/data/{SM_CHANNEL}"  # where SageMaker puts that channel's files
Echo = Callable[[str], None]


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
    except SpecError:
        raise SpecError(f"invalid data_uri {shown(data_uri)}: use s3://BUCKET/PREFIX (or file:///PATH with "
                        f"sagemaker --local)") from None


def cifar10_spec(*, runtime: str, job_name: str, processes: int, epochs: int, batch_size: int, lr: float,
                 backend: str, data_volume: str, max_steps: int = 0, image: str = "",
                 data_uri: str = "") -> tuple[dict, str]:
    """The reference's CIFAR10 DDP job for one runtime: (JobSpec dict, where the model lands).

    Local and Kubernetes mount `data_volume` at /mnt (CIFAR10 batches at its top) and write the
    model to /mnt/models/<job>; SageMaker gets `data_uri` as its `training` channel, read from
    /opt/ml/input/data/training, and saves to its model folder (SM_MODEL_DIR, which the workload
    reads by itself; SageMaker uploads it as model.tar.gz).
    """
    check_runtime(runtime)
    if backend not in DIST_BACKENDS:
        raise SpecError(f"invalid backend {shown(backend)}: use one of {', '.join(DIST_BACKENDS)} (gloo on CPU)")
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


def lanes_train_spec(*, job_name: str, volume: str, recipe: str = "tiny", processes: int = 2, max_steps: int = 0,
                     batch_size: int = 0, image: str = "") -> dict:
    """SCNN training on the prepared volume, snapshotting it (data + model) when the job succeeds."""
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
    command = ["python", "-m", "dtrain.workloads.lanes", "predict", "--checkpoint",
               f"{DATA_MOUNT}/runs/{train_job}/model.pt", "--data-dir", f"{DATA_MOUNT}/tusimple", "--split", "test",
               "--out", f"{DATA_MOUNT}/eval/{job_name}/pred.json", "--json"]
    return _wire(JobSpec.from_dict({"name": job_name, "command": command, "volumes": [f"{volume}:{DATA_MOUNT}"],
                                     "image": image or None}))


def check_threshold(value) -> float:
    return _check_fraction(value, "threshold", low_open=False)


# ---------------------------------------------------------------- steps (talk to a backend)


def run_job(spec: dict, *, backend: str, client: Client | None = None, timeout: float | None = None,
            echo: Echo = print) -> JobInfo:
    """Submit, follow the logs into this step's log, wait; a job that does not succeed raises
    JobFailedError quoting its last log lines, so the pipeline step fails with the job's reason."""
    client = client or Client(backend=backend)
    job = JobSpec.from_dict({"project": client.default_project, **_unwire(spec), "backend": backend})
    info = client.submit(job)
    echo(f"submitted job {job.name!r} to the {backend} backend ({info.status})")
    for line in client.logs(job.name, follow=True):
        echo(f"[{job.name} rank {line.rank}] {line.text}")
    info = client.wait(job.name, timeout=timeout)
    if info.status is not JobStatus.SUCCEEDED:
        tail = [f"  [rank {ln.rank}] {ln.text}" for ln in client.logs(job.name, tail=LAST_LINES)]
        raise JobFailedError(f"job {job.name!r} ended {info.status}" + (f" ({info.message})" if info.message else "")
                             + f" on the {backend} backend; its last log lines:\n" + "\n".join(tail or ["  (none)"])
                             + f"\nthe whole log: dtrain logs {job.name}"
                             + ("" if backend == "local" else f" (after 'dtrain config backend {backend}')"))
    echo(f"job {job.name!r} {info.status}")
    return info


def model_location(info: JobInfo, fallback: str) -> str:
    """A snapshot taken on success wins; else the backend's model URI (SageMaker); else `fallback`."""
    if info.snapshot:
        return info.snapshot
    uri = info.extra.get("model_artifacts")  # SageMaker's S3ModelArtifacts: s3://.../output/model.tar.gz
    return str(uri) if uri else fallback


def train(spec: dict, *, backend: str, model: str = "", client: Client | None = None,
          timeout: float | None = None, echo: Echo = print) -> StepResult:
    """The `train` component: any JobSpec on any backend, to the end."""
    info = run_job(spec, backend=backend, client=client, timeout=timeout, echo=echo)
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
             echo: Echo = print) -> dict:
    """Run the prediction job and read its metric (the last JSON line of its log)."""
    client = client or Client(backend=backend)
    info = run_job(spec, backend=backend, client=client, timeout=timeout, echo=echo)
    for line in reversed(list(client.logs(info.name))):
        try:
            result = json.loads(line.text)
        except ValueError:
            continue
        if isinstance(result, dict) and {"accuracy", "fp", "fn"} <= set(result):
            return result
    raise JobFailedError(f"job {info.name!r} printed no metric line (JSON with accuracy, fp, fn); "
                         f"check it with: dtrain logs {info.name}")
