"""Pure mapping from DescribeTrainingJob to dtrain's JobInfo.

    TrainingJobStatus  SecondaryStatus                                      dtrain status
    InProgress         Starting, Pending, LaunchingMLInstances,             Pending
                       PreparingTrainingStack, Interrupted (spot: waiting
                       for capacity again)
    InProgress         Downloading, DownloadingTrainingImage, Training,      Running
                       Uploading, Restarting, ...
    Stopping           any                                                  Running ("stopping"), every
    InProgress         Stopping (the stop taken, the primary not yet moved)  host Terminating: `list` and
                                                                            `describe` say Stopping
    Completed          Completed                                            Succeeded (the Completed step's message)
    Failed             Failed                                               Failed (FailureReason)
    Stopped            MaxRuntimeExceeded, MaxWaitTimeExceeded              Failed (raise the limit)
    Stopped            Stopped                                              Deleted
    Deleting           any                                                  Deleted ("deleting")
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from dtrain.backends.base import Event, JobInfo, JobStatus, ProcessInfo
from dtrain.backends.sagemaker.contract import MAX_REASON, decode
from dtrain.names import cut
from dtrain.spec import JobSpec

WAITING = {"Starting", "Pending", "LaunchingMLInstances", "PreparingTrainingStack", "Interrupted"}
LIMITS = {"MaxRuntimeExceeded": "it ran past --max-runtime; raise --max-runtime or checkpoint and resubmit",
          "MaxWaitTimeExceeded": "spot capacity did not come within --max-wait; raise --max-wait or drop --spot"}


def seconds(value: Any) -> float | None:
    """boto3 gives datetimes; a JSON dump gives numbers or ISO strings."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, (int, float)):
        return float(value)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def job_uid(desc: dict) -> str | None:
    """JobInfo.uid of a training job: its TrainingJobArn, which is built from the name alone (a name freed by
    `delete --purge` and submitted again has the same ARN), with its CreationTime in UTC, to the millisecond
    SageMaker keeps, which tells the runs apart. Just the ARN where the answer lacks the time."""
    arn, created = desc.get("TrainingJobArn"), seconds(desc.get("CreationTime"))
    if arn is None or created is None:
        return arn
    when = datetime.fromtimestamp(round(created * 1000) / 1000, timezone.utc)
    return f"{arn}@{when.isoformat(timespec='milliseconds').replace('+00:00', 'Z')}"


def one_line(text: Any) -> str:
    """A reason as the CLI shows it: the toolkit's FailureReason spans lines ('AlgorithmError:
    ExecuteUserScriptError:\\nExitCode 1\\nErrorMessage ...'), and a table row or `wait` line cannot."""
    return cut(text or "", MAX_REASON)


# An ended job's final secondary statuses, per primary status (botocore's SecondaryStatusTransition: "Completed -
# The training job has completed", "Failed - ... the FailureReason", "Stopped: MaxRuntimeExceeded, Stopped").
FINAL = {"Completed": {"Completed"}, "Failed": {"Failed"},
         "Stopped": {"Stopped", "MaxRuntimeExceeded", "MaxWaitTimeExceeded"}}


def final_message(desc: dict) -> str:
    """An ended job's message: that of its last transition into a final step of its primary status ("Training
    job completed"), or none. The last transition may be an earlier step's (moto records one Starting step
    only, and a transition list is not promised whole): "Succeeded (Preparing the instances for training)"
    would read as a job that never trained."""
    final = FINAL.get(desc.get("TrainingJobStatus"), set())
    steps = [t for t in desc.get("SecondaryStatusTransitions") or [] if t.get("Status") in final]
    return one_line(steps[-1].get("StatusMessage", "")) if steps else ""


def job_status(desc: dict) -> tuple[JobStatus, str]:
    primary, secondary = desc.get("TrainingJobStatus"), desc.get("SecondaryStatus", "")
    last = one_line((desc.get("SecondaryStatusTransitions") or [{}])[-1].get("StatusMessage", ""))
    if primary == "Completed":
        return JobStatus.SUCCEEDED, final_message(desc)
    if primary == "Failed":
        return JobStatus.FAILED, one_line(desc.get("FailureReason")) or final_message(desc) or "failed"
    if primary == "Stopped":
        if secondary in LIMITS:
            return JobStatus.FAILED, f"{secondary}: {LIMITS[secondary]}"
        return JobStatus.DELETED, "stopped"
    if primary == "Stopping" or secondary == "Stopping":
        return JobStatus.RUNNING, "stopping"
    if primary == "Deleting":  # DeleteTrainingJob: the job and its records are going away
        return JobStatus.DELETED, "deleting"
    if secondary in WAITING:
        return JobStatus.PENDING, f"{secondary}: {last}" if last else secondary
    return JobStatus.RUNNING, f"{secondary}: {last}" if last else secondary


RESTARTS = {"Interrupted", "Restarting"}  # a host's container starts again after these (spot, a retry)


def attempt_start(desc: dict) -> float | None:
    """When the job's current attempt began: the start of its last Interrupted (a spot interruption) or
    Restarting (a retry) transition, after which every host's container starts again, under a new
    CloudWatch stream; None for a job in its first attempt."""
    times = [seconds(t.get("StartTime")) for t in desc.get("SecondaryStatusTransitions") or []
             if t.get("Status") in RESTARTS]
    return max((t for t in times if t is not None), default=None)


def events(desc: dict) -> tuple[Event, ...]:
    out = [Event(time=seconds(desc.get("CreationTime")) or 0.0, status="Created", message="CreateTrainingJob")]
    for t in desc.get("SecondaryStatusTransitions") or []:
        out.append(Event(time=seconds(t.get("StartTime")) or 0.0, status=t.get("Status", ""),
                         message=one_line(t.get("StatusMessage", ""))))
    return tuple(out)


def cost(desc: dict) -> dict[str, Any]:
    """Billable vs training seconds; with spot, the saving in percent (1 - billable / training)."""
    billable, training = desc.get("BillableTimeInSeconds"), desc.get("TrainingTimeInSeconds")
    out: dict[str, Any] = {"billable_seconds": billable, "training_seconds": training}
    if desc.get("EnableManagedSpotTraining") and billable is not None and training:
        out["spot_saving_percent"] = round(100.0 * (1 - billable / training), 1)
    return out


def spec_from_description(desc: dict) -> JobSpec:
    """A stand-in spec for a job that dtrain did not start (no stored spec): what the request says."""
    hps = desc.get("HyperParameters") or {}
    program = decode(hps.get("sagemaker_program", '"unknown"'))
    count = int((desc.get("ResourceConfig") or {}).get("InstanceCount") or 1)
    launcher = ("torchrun" if "sagemaker_torch_distributed_enabled" in hps else
                "mpi" if "sagemaker_mpi_enabled" in hps else ("torchrun" if count > 1 else "none"))
    tags = {t["Key"]: t["Value"] for t in desc.get("Tags") or [] if "Key" in t}
    return JobSpec(name=desc["TrainingJobName"], command=("python", str(program)), processes=count,
                   launcher=launcher, backend="sagemaker", project=tags.get("dtrain:project", "default"))


def job_info(desc: dict, spec: JobSpec, *, per_host: int = 1) -> JobInfo:
    status, message = job_status(desc)
    res = desc.get("ResourceConfig") or {}
    count = int(res.get("InstanceCount") or 1)
    host_state = {JobStatus.PENDING: "Pending", JobStatus.RUNNING: "Running", JobStatus.SUCCEEDED: "Succeeded",
                  JobStatus.FAILED: "Failed", JobStatus.DELETED: "Stopped"}[status]
    if status == JobStatus.RUNNING and message == "stopping":
        host_state = "Terminating"  # StopTrainingJob sent, the programs not ended yet: as a pod being deleted
    procs = tuple(ProcessInfo(rank=h * per_host + r, status=host_state, node=f"algo-{h + 1}")
                  for h in range(count) for r in range(per_host))
    extra = {"arn": desc.get("TrainingJobArn"), "secondary_status": desc.get("SecondaryStatus"),
             "instance_type": res.get("InstanceType"), "instance_count": count,
             "model_artifacts": (desc.get("ModelArtifacts") or {}).get("S3ModelArtifacts"),
             "spot": bool(desc.get("EnableManagedSpotTraining")), **cost(desc)}
    if (extra["model_artifacts"] or "").endswith("/model.tar.gz"):
        # SageMaker packs /opt/ml/output/data ($SM_OUTPUT_DATA_DIR: the CIFAR10 workload's metrics) beside the model
        extra["output_data"] = extra["model_artifacts"][:-len("model.tar.gz")] + "output.tar.gz"
    if desc.get("FailureReason"):
        extra["failure_reason"] = desc["FailureReason"]
    running = len(procs) if status == JobStatus.RUNNING else 0
    return JobInfo(name=desc["TrainingJobName"], spec=spec, status=status, backend="sagemaker",
                   created=seconds(desc.get("CreationTime")) or 0.0, uid=job_uid(desc), started=seconds(desc.get("TrainingStartTime")),
                   finished=seconds(desc.get("TrainingEndTime")), node=res.get("InstanceType"),
                   gpus_allocated=spec.gpus_requested if running else 0, processes_running=running,
                   processes_pending=len(procs) if status == JobStatus.PENDING else 0, processes=procs,
                   events=events(desc), message=message, extra=extra)
