"""What each pipeline step does, as plain functions over dtrain's `Client` (no kfp here).

The KFP components (components.py) are thin wrappers around these, so a step behaves the same in
a KFP pod, under `kfp.local`, or called from Python, on whichever backend its parameter names:
the local backend, Kubernetes (a PyTorchJob) or SageMaker (a training job).

The `*_spec` functions are pure: parameters in, a JobSpec (as a dict, the form a KFP step passes
on) out. `dtrain pipeline run` calls them before starting a pipeline, so a bad parameter stops it
with one line instead of failing a step halfway through.

Here: the steps that talk to a backend (submit, follow, wait; snapshot, restore, evaluate). The
checks and pure spec builders are in step_specs.py, the names a run takes (Plan, check_plan) in
step_plan.py; this module re-exports every name of both, so `steps.NAME` is the one door.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from dtrain.backends.base import JobInfo, JobStatus
from dtrain.client import Client
from dtrain.errors import ConflictError, DtrainError, JobFailedError, NotFoundError, SpecError, said_as  # noqa: F401
from dtrain.names import cut
from dtrain.pipelines.step_plan import (_CKPT_RE, FILL_TRIES, Fresh, Named, Plan, _check_names,  # noqa: F401
                                        _checkpoints, _IMAGE_FIX, _refuse_checkpoints, _refuse_taken, _taken,
                                        check_plan, fill_free, going_on, left_behind)  # (re-exported)
from dtrain.pipelines.step_specs import (DATA_MOUNT, DIST_BACKENDS, RUN_ID_HEX, RUNTIMES, SM_CHANNEL,  # noqa: F401
                                         SM_DATA_DIR, SM_PARAMS, VOLUME_RUNTIMES, _check_count, _check_fraction,
                                         _INT_FIELDS, _ints, _SM_INT_FIELDS, _UNCONFIGURED, _unwire, _wire,
                                         cifar10_spec, check_runtime, check_sagemaker_gpu, check_threshold,
                                         check_urls, check_volume_backend, in_pipeline_words, job_spec,
                                         lanes_candidate, lanes_evaluate_spec, lanes_prefix, lanes_prepare_spec,
                                         lanes_train_spec, new_run_id, run_job_name, sagemaker_data_channel,
                                         sagemaker_settings)  # (re-exported)
from dtrain.spec import MAX_PROCESSES, JobSpec, NewVolume, VolumeMount, check_image, check_name, shown  # noqa: F401
from dtrain.spec_sagemaker import (INSTANCE_RE, REGION_RE, ROLE_RE, S3_BUCKET_RE, URI_SCHEMES, Channel,  # noqa: F401
                                   SageMakerOptions, gpu_type)  # (re-exported: hybrid.py and lanes.py take steps.check_name)

LAST_LINES = 20  # log lines quoted when a job fails: enough for a traceback's tail
Echo = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class StepResult:
    """What a job-running step reports: the outputs of the KFP `train` and `prepare` components."""

    job: str  # job name
    status: str  # the job's final status (Succeeded; a failed job raises instead)
    model: str  # where its result is: a snapshot name, VOLUME:/path, or an S3 model URI



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
        kind, text = said_as(err, "cli")  # the flags' words (AWS's refusal of the bucket, a BackendError, names
        said = in_pipeline_words(text)     # a flag too), which in_pipeline_words names as parameters
        if said == text:
            raise
        raise kind(said) from None
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
