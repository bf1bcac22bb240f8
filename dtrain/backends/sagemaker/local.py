"""`--local`: SageMaker's API on this machine, so a --local job goes through the same backend code.

Three small services under $DTRAIN_HOME/sagemaker-local/ answer the calls the backend makes:
  LocalSageMaker  create/describe/list/stop training jobs; a job is a folder (request.json,
                  state.json) and one detached runner process (runner.py) that plays the hosts
  LocalS3         s3://BUCKET/KEY is the file s3/BUCKET/KEY (code, spec, checkpoints, model.tar.gz)
  LocalLogs       CloudWatch's log streams `JOB/algo-N-<created>`, read from logs/algo-N.log
A CheckpointConfig's LocalPath is checked here as at every door (contract.local_path_problem), and against
this machine (mount_problem); private_dirs gives the runner's sandbox its mount points off the real disk.
Refusals raise LocalAWSError, shaped like botocore's ClientError (`.response["Error"]["Code"]`),
so the backend's one error mapping serves both.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from dtrain.errors import ConflictError
from dtrain.procs import Ident, signal_process, spawn_detached
from dtrain.replace import replace_file, replacing
from dtrain.backends.sagemaker.clients import Clients
from dtrain.backends.sagemaker import checkpoint_lock, contract
from dtrain.backends.sagemaker.contract import job_arn

ROOT = "sagemaker-local"
MAX_LOCAL_HOSTS = 16  # each host is a process tree with its own copy of the code on this one machine


class LocalAWSError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.response = {"Error": {"Code": code, "Message": message}}


class CheckpointsTaken(LocalAWSError, ConflictError):
    """CreateTrainingJob's refusal of a job whose checkpoint folder a running --local job took after submit's
    check: submit's own line (the job that holds it and the fix), which aws_call passes on as it is; it was
    'SageMaker CreateTrainingJob: ValidationException: LINE; fix the value SageMaker names above'."""

    def __init__(self, line: str):
        super().__init__("ValidationException", line)
        self.args = (line,)


def local_clients(home: str | os.PathLike) -> Clients:
    root = Path(home) / ROOT
    return Clients(LocalSageMaker(root), LocalS3(root / "s3"), LocalLogs(root))


def _now() -> float:
    return time.time()


def _dt(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, tz=timezone.utc)


def write_json(path: Path, data) -> None:
    replace_file(path, json.dumps(data, indent=1))


@contextmanager
def locked_state(job_dir: Path):
    """Read-modify-write of state.json under a lock: the runner and `stop` both write it."""
    with open(job_dir / "state.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = json.loads((job_dir / "state.json").read_text())
        yield state
        write_json(job_dir / "state.json", state)


def transition(state: dict, secondary: str, message: str, *, primary: str = "InProgress") -> None:
    now = _now()
    if state["transitions"] and state["transitions"][-1].get("EndTime") is None:
        state["transitions"][-1]["EndTime"] = now
    state["transitions"].append({"Status": secondary, "StartTime": now, "StatusMessage": message})
    state.update(TrainingJobStatus=primary, SecondaryStatus=secondary, LastModifiedTime=now)
    if primary != "InProgress" and primary != "Stopping":
        state["transitions"][-1]["EndTime"] = now


def existing_above(path: str) -> str:
    """The nearest folder at or above `path` that exists on this machine."""
    while not os.path.isdir(path):
        path = os.path.dirname(path)
    return path


def mount_problem(path: str, root: Path) -> str | None:
    """Why the --local sandbox cannot show the checkpoints at `path` (a checked LocalPath), or None. A folder in
    /opt/ml is made in the host's own; one elsewhere is mounted over where it exists, else in a private copy of
    the nearest folder above it that does (private_dirs), which cannot be / itself; and it must not hide
    what the hosts run from (the local SageMaker's folder `root`, this Python)."""
    if path.startswith(contract.OPT_ML + "/"):
        return None
    for what, place in (("the local SageMaker's folder", os.path.abspath(root)), ("dtrain's Python", sys.prefix)):
        if place == path or place.startswith(path.rstrip("/") + "/"):
            return (f"CheckpointConfig LocalPath {path!r} holds {what} ({place}), which the hosts run from: "
                    f"{contract.LOCAL_PATH_FIX}")
    if existing_above(path) != "/" or os.path.isdir(path):
        return None
    return (f"CheckpointConfig LocalPath {path!r}: --local makes it in a folder above it that exists on this "
            f"machine, and only / does: {contract.LOCAL_PATH_FIX}")


def private_dirs(paths: list[str]) -> list[str]:
    """Mount points for `paths` (/opt/ml, a checkpoint LocalPath elsewhere) without making them on this machine's
    disk, as bubblewrap would where one is missing: the namespace gets a private copy (a tmpfs) of the nearest
    folder above it that exists, holding the real one's entries, bound back, and the path. Where only / exists
    above (no /opt), a bare copy of the top folder, which bubblewrap makes (create_training_job refuses such a
    LocalPath)."""
    tops: dict[str, list[str]] = {}
    for path in paths:
        if not os.path.isdir(path):
            tops.setdefault(existing_above(path), []).append(path)
    argv: list[str] = []
    for top in sorted(tops, key=lambda t: t.count("/")):  # an outer copy first: an inner one is made in it
        if top == "/":
            argv += [arg for path in tops[top] for arg in ("--tmpfs", "/" + path.split("/")[1], "--dir", path)]
            continue
        argv += ["--tmpfs", top]
        for name in sorted(os.listdir(top)):
            path = os.path.join(top, name)
            argv += ["--symlink", os.readlink(path), path] if os.path.islink(path) else ["--bind", path, path]
        for path in tops[top]:
            argv += ["--dir", path]
    return argv


def uri_folder(uri: str, s3: LocalS3) -> Path:
    """Where a file:// or s3:// URI's data is on this machine; no link a job left is followed in the S3 folder."""
    if uri.startswith("s3://"):
        bucket, _, key = uri[len("s3://"):].partition("/")
        return s3.path(bucket, key, prefix=True)
    return Path(contract.local_path(uri, str(s3.root)))


class LocalSageMaker:
    def __init__(self, root: Path):
        self.root = root
        self.jobs = root / "jobs"

    def job_dir(self, name: str) -> Path:
        return self.jobs / name

    def has_job(self, name: str) -> bool:
        return (self.job_dir(name) / "state.json").is_file()

    def names(self) -> list[str]:
        """The jobs' names, from their folders alone (list_training_jobs describes each)."""
        return [p.name for p in self.jobs.iterdir() if (p / "state.json").is_file()] if self.jobs.is_dir() else []

    def create_training_job(self, **req) -> dict:
        name = req["TrainingJobName"]
        d = self.job_dir(name)
        if self.has_job(name):
            raise LocalAWSError("ResourceInUse", f"Training job names must be unique: {name} exists")
        if req.get("CheckpointConfig"):  # where the container sees its checkpoints, as SageMaker takes it
            why = contract.local_path_problem(req["CheckpointConfig"].get("LocalPath") or contract.CHECKPOINT_DEFAULT)
            if why or (why := mount_problem(contract.checkpoint_path(req), self.root)):
                raise LocalAWSError("ValidationException", why)
        if why := self.checkpoints_in_use(req):  # submit asked already (SubmitChecks); a job may have started since
            raise CheckpointsTaken(why)
        if int(req["ResourceConfig"]["InstanceCount"]) > MAX_LOCAL_HOSTS:
            raise LocalAWSError("ResourceLimitExceeded", f"--local runs at most {MAX_LOCAL_HOSTS} hosts on this "
                                                         f"machine, not {req['ResourceConfig']['InstanceCount']}")
        (d / "logs").mkdir(parents=True, exist_ok=True)
        write_json(d / "request.json", req)
        state = {"TrainingJobStatus": "InProgress", "SecondaryStatus": "Starting", "CreationTime": _now(),
                 "transitions": [{"Status": "Starting", "StartTime": _now(),
                                  "StatusMessage": "Preparing the instances for training"}]}
        write_json(d / "state.json", state)
        pid = spawn_detached([sys.executable, "-m", "dtrain.backends.sagemaker.runner", str(self.root), name],
                              log=d / "runner.log", cwd=str(d))
        with locked_state(d) as st:
            st.update(runner=Ident.of(pid).to_record())  # a pid means nothing without its start time
        return {"TrainingJobArn": self._arn(name)}

    def checkpoints_in_use(self, req: dict) -> str | None:
        """The one-line refusal of a job whose checkpoint folder a running --local job holds (checkpoint_lock:
        that folder, one holding it or one within it), else None. Its runner asks again as it takes the lock."""
        uri = (req.get("CheckpointConfig") or {}).get("S3Uri")
        try:
            folder = uri_folder(uri, LocalS3(self.root / "s3")) if uri else None
        except (LocalAWSError, ValueError):
            return None  # a URI the runner refuses, in its words
        return None if folder is None else checkpoint_lock.in_use(folder, self.root / "s3", uri)

    def _arn(self, name: str) -> str:
        return job_arn(name)

    def _reconcile(self, name: str) -> dict:
        d = self.job_dir(name)
        with locked_state(d) as st:
            runner = Ident.from_record(st.get("runner") or {})
            if st["TrainingJobStatus"] in ("InProgress", "Stopping") and runner and not runner.alive():
                st["FailureReason"] = f"the local runner (pid {runner.pid}) is gone: killed, or the machine restarted"
                transition(st, "Failed", st["FailureReason"], primary="Failed")
                st["TrainingEndTime"] = _now()
            return dict(st)

    def describe_training_job(self, TrainingJobName: str) -> dict:  # noqa: N803 (boto3's names)
        if not self.has_job(TrainingJobName):
            raise LocalAWSError("ValidationException", f"Requested resource not found: {TrainingJobName}")
        st = self._reconcile(TrainingJobName)
        req = json.loads((self.job_dir(TrainingJobName) / "request.json").read_text())
        out = {k: v for k, v in req.items() if k != "Tags"}
        out.update({k: st[k] for k in ("TrainingJobStatus", "SecondaryStatus") if k in st})
        modified = st.get("LastModifiedTime") or st["transitions"][-1]["StartTime"]  # a job older than the field
        out.update(TrainingJobArn=self._arn(TrainingJobName), CreationTime=_dt(st["CreationTime"]),
                   LastModifiedTime=_dt(modified),
                   TrainingStartTime=_dt(st.get("TrainingStartTime")), TrainingEndTime=_dt(st.get("TrainingEndTime")),
                   SecondaryStatusTransitions=[{**t, "StartTime": _dt(t["StartTime"]), "EndTime": _dt(t.get("EndTime"))}
                                               for t in st["transitions"]])
        for key in ("FailureReason", "TrainingTimeInSeconds", "BillableTimeInSeconds"):
            if key in st:
                out[key] = st[key]
        # Always named, as SageMaker does (a required member of the response): the object exists once
        # the runner has uploaded it, after success, a stop or MaxRuntimeExceeded.
        out["ModelArtifacts"] = {"S3ModelArtifacts": req["OutputDataConfig"]["S3OutputPath"].rstrip("/")
                                 + f"/{TrainingJobName}/output/model.tar.gz"}
        return {k: v for k, v in out.items() if v is not None}

    def list_training_jobs(self, **kw) -> dict:
        rows = [self.describe_training_job(TrainingJobName=n) for n in self.names()]
        rows.sort(key=lambda r: r["CreationTime"], reverse=kw.get("SortOrder") != "Ascending")
        keys = ("TrainingJobName", "TrainingJobArn", "CreationTime", "TrainingEndTime", "LastModifiedTime",
                "TrainingJobStatus", "SecondaryStatus")  # botocore's TrainingJobSummary
        return {"TrainingJobSummaries": [{k: r[k] for k in keys if k in r} for r in rows]}

    def stop_training_job(self, TrainingJobName: str) -> dict:  # noqa: N803
        d = self.job_dir(TrainingJobName)
        if not self.has_job(TrainingJobName):
            raise LocalAWSError("ValidationException", f"Requested resource not found: {TrainingJobName}")
        with locked_state(d) as st:
            if st["TrainingJobStatus"] != "InProgress":
                raise LocalAWSError("ValidationException", f"The job is {st['TrainingJobStatus']}, not InProgress")
            transition(st, "Stopping", "Stopping the training job", primary="Stopping")
            runner = Ident.from_record(st.get("runner") or {})
        signal_process(runner, signal.SIGTERM)  # the runner stops its hosts and records Stopped
        return {}

    def delete_training_job(self, TrainingJobName: str) -> dict:  # noqa: N803
        """As SageMaker: an ended job only; its folder goes (its "S3" objects stay, as in S3)."""
        d = self.job_dir(TrainingJobName)
        if not self.has_job(TrainingJobName):
            raise LocalAWSError("ValidationException", f"Requested resource not found: {TrainingJobName}")
        st = self._reconcile(TrainingJobName)
        if st["TrainingJobStatus"] in ("InProgress", "Stopping"):
            raise LocalAWSError("ValidationException", f"The job is {st['TrainingJobStatus']}: only a Completed, "
                                                       f"Failed or Stopped job can be deleted")
        os.unlink(d / "state.json")  # the job is gone from here on (has_job), whatever rmtree meets
        shutil.rmtree(d, ignore_errors=True)  # links in it are removed, never followed
        return {}


class LocalS3:
    def __init__(self, root: Path):
        self.root = root

    def path(self, bucket: str, key: str, *, prefix: bool = False) -> Path:
        """The file of s3://BUCKET/KEY (`prefix`: the folder of a prefix, the bucket's for an empty one).
        A job's /opt/ml/checkpoints is a folder of this store (its checkpoint URI may be any prefix, its
        own output's or another job's): a link one leaves on the way is refused, never followed."""
        parts = [p for p in key.split("/") if p]
        if not bucket or "/" in bucket or bucket.startswith(".") or any(p in (".", "..") for p in parts) or \
                not (parts or prefix):
            raise LocalAWSError("InvalidArgument", f"refusing the key s3://{bucket}/{key}")
        path = self.root
        for part in (bucket, *parts):
            path = path / part
            if path.is_symlink():
                raise LocalAWSError("InvalidArgument", f"refusing s3://{bucket}/{key}: {path} is a link (a job's, left "
                                                       f"in its checkpoint folder), which the local S3 never follows")
        return path

    def put_object(self, *, Bucket: str, Key: str, Body, **_kw) -> dict:  # noqa: N803
        path = self.path(Bucket, Key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with replacing(path, "wb") as f:
            if isinstance(Body, (bytes, bytearray)):
                f.write(Body)
            else:
                shutil.copyfileobj(Body, f)
        return {}

    def get_object(self, *, Bucket: str, Key: str) -> dict:  # noqa: N803
        path = self.path(Bucket, Key)
        if not path.is_file():
            raise LocalAWSError("NoSuchKey", f"s3://{Bucket}/{Key} does not exist")
        body = open(path, "rb")
        return {"Body": body, "ContentLength": os.fstat(body.fileno()).st_size}


class LocalLogs:
    """Each line of logs/algo-N.log is '<unix ms>\\t<text>'; a token is 'f/<byte offset>'."""

    def __init__(self, root: Path):
        self.jobs = root / "jobs"

    def describe_log_streams(self, *, logGroupName: str, logStreamNamePrefix: str, **_kw) -> dict:  # noqa: N803
        job = logStreamNamePrefix.rstrip("/")
        d = self.jobs / job
        if not (d / "state.json").is_file():
            return {"logStreams": []}
        created = int(json.loads((d / "state.json").read_text())["CreationTime"])
        files = sorted((d / "logs").glob("algo-*.log"), key=lambda p: int(p.stem.split("-")[1]))
        return {"logStreams": [{"logStreamName": f"{job}/{p.stem}-{created}"} for p in files]}

    def get_log_events(self, *, logGroupName: str, logStreamName: str, startFromHead: bool = True,  # noqa: N803
                       nextToken: str | None = None, startTime: int | None = None, **_kw) -> dict:
        job, _, stream = logStreamName.partition("/")
        host = stream.rsplit("-", 1)[0]
        path = self.jobs / job / "logs" / f"{host}.log"
        offset = int(nextToken[2:]) if nextToken else 0
        events = []
        with open(path, "rb") as f:
            f.seek(offset)
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # a line still being written: read it next time
                offset += len(raw)
                stamp, _, text = raw.decode(errors="replace").rstrip("\n").partition("\t")
                if startTime is None or int(stamp) >= startTime:
                    events.append({"timestamp": int(stamp), "message": text})
                if len(events) >= 10_000:
                    break
        return {"events": events, "nextForwardToken": f"f/{offset}"}
