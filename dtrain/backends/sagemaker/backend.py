"""SageMakerBackend: a dtrain job as a SageMaker training job.

Our words -> SageMaker's: a job is a training job; a process is one of `processes per instance`
on one of InstanceCount instances (hosts algo-1..N); a volume is an input channel (S3 prefix or
EFS/FSx file system); the job's model folder is /opt/ml/model -> model.tar.gz in S3; `delete` is
StopTrainingJob; logs are CloudWatch streams, one per host. The clients (sagemaker, s3, logs) are
injected through the constructor; without them boto3 (imported lazily) makes them from its
standard credential chain. Jobs with `--local` run on this machine through the same code, on
clients that `local.py` provides (the SageMaker contract without Docker or AWS). What stays true
of a job (the spec stored at submit, an ended job's description) is kept under the dtrain home
(facts.py), so `list` describes only jobs that changed and reads each spec once.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from dtrain.backends.base import Backend, JobInfo, Listed, Notice
from dtrain.backends.sagemaker import logs as cwlogs
from dtrain.backends.sagemaker.clients import Clients, aws_call, aws_clients, read_body, service_clients
from dtrain.backends.sagemaker import render
from dtrain.backends.sagemaker.archive import check_generated, pack_source, unpack
from dtrain.backends.sagemaker.checks import SubmitChecks
from dtrain.backends.sagemaker.config import LOCAL_BUCKET, SageMakerConfig
from dtrain.backends.sagemaker.facts import JobFacts
from dtrain.backends.sagemaker.joblogs import JobLogs
from dtrain.backends.sagemaker.reading import (MAX_LIST, MAX_SPEC_BYTES, ForeignJobError,  # noqa: F401  (re-exported)
                                              JobReading)
from dtrain.backends.sagemaker.validate import check_request
from dtrain.backends.targets import new_folder
from dtrain.errors import (BackendError, ConflictError, NotFoundError, NotSupportedError, QuotaError, SetupError,
                           SpecError)
from dtrain.spec import JobSpec

AWS_WAIT_POLL = 5.0  # seconds between DescribeTrainingJob calls of `dtrain wait`


def _as_if_on_aws(req: dict) -> dict:
    """A --local request with each file:///PATH channel named as the s3:// URI it stands for."""
    channels = []
    for ch in req.get("InputDataConfig") or []:
        s3 = ch["DataSource"].get("S3DataSource")
        if s3 and s3["S3Uri"].startswith("file://"):
            uri = f"s3://{LOCAL_BUCKET}/" + s3["S3Uri"][len("file://"):].lstrip("/")
            ch = {**ch, "DataSource": {"S3DataSource": {**s3, "S3Uri": uri}}}
        channels.append(ch)
    return {**req, "InputDataConfig": channels} if channels else req


class SageMakerBackend(SubmitChecks, JobReading, JobLogs, Backend):
    """Clients, submitting, the dry run, stop and purge, projects, nodes and artifacts are here; the
    mixins hold the rest: checks.py (submit's read-only checks), reading.py (a job's description ->
    JobInfo, the job list), joblogs.py (a job's logs, `-f`, --previous)."""

    name = "sagemaker"
    keeps_projects = False  # a job's project is its dtrain:project tag (_list_projects says so)

    def __init__(self, config: SageMakerConfig, *, clients: Clients | None = None, local: Clients | None = None,
                 session: Any = None, home: str | os.PathLike | None = None, cwd: str | None = None,
                 pace: cwlogs.Pace = cwlogs.Pace(), sleep: Callable[[float], None] = time.sleep,
                 command: Callable[[str], str] | None = None):
        """`command(words)`: the `dtrain WORDS` a hint names for a job of this backend, so that it
        works as printed (the Client's adds `--backend sagemaker` where SageMaker is not the default)."""
        self._command = command
        self.config = config
        self._aws, self._local, self._session = clients, local, session
        self._made_aws = False  # self._aws made here (not injected): EFS's and FSx's clients are made too
        self._fs_clients: dict[tuple[str, bool], Any] = {}  # EFS's and FSx's (quick or not), made when first asked
        self._skipped: set[str] = set()  # the clients injected without efs, fsx or ec2 whose check was said skipped
        self._quick: Clients | None = None  # made for a dry run (quick_aws)
        self.home = Path(home) if home else None
        self.cwd = cwd
        self.pace, self._sleep = pace, sleep  # how `logs -f` polls; injected by tests
        self.facts = JobFacts(self.home)

    def cmd(self, words: str) -> str:
        """`dtrain WORDS` as a hint names it (see `command`)."""
        return self._command(words) if self._command is not None else f"dtrain {words}"

    # ---- which clients serve a job ------------------------------------------------------
    @property
    def aws(self) -> Clients:
        if self._aws is None:
            self._aws = aws_clients(self.config, self._session)
            self._made_aws = True
        return self._aws

    def _fs_client(self, service: str, *, quick: bool = False) -> Any:
        """The `efs`, `fsx` or `ec2` client: the injected clients' (None where they have none: not asked), else
        boto3's, made when a job first reads a file system; `quick`: the dry run's (see quick_aws)."""
        if self._aws is not None and not self._made_aws:
            return getattr(self._aws, service)
        if (service, quick) not in self._fs_clients:
            self._fs_clients[service, quick] = service_clients(self.config, self._session, (service,), quick=quick)[0]
        return self._fs_clients[service, quick]

    @property
    def quick_aws(self) -> Clients:
        """The clients of a dry run's read-only checks: a short connect timeout and no retry, so an
        endpoint that does not answer is one warning at once; injected clients are used as given."""
        if self._aws is not None:
            return self._aws
        if self._quick is None:
            self._quick = aws_clients(self.config, self._session, quick=True)
        return self._quick

    @property
    def local(self) -> Clients:
        if self._local is None:
            if self.home is None:
                raise SpecError("--local SageMaker jobs need a dtrain home; use dtrain.Client()")
            from dtrain.backends.sagemaker.local import local_clients
            self._local = local_clients(self.home)
        return self._local

    def _has_local(self, name: str) -> bool:
        if self._local is None and self.home is None:
            return False
        return self.local.sagemaker.has_job(name)

    def _aws_configured(self) -> bool:
        return self._aws is not None or bool(self.config.role and self.config.bucket)

    def _wait_poll(self, name: str) -> float:
        """`dtrain wait` asks AWS for the status every AWS_WAIT_POLL seconds (DescribeTrainingJob is
        throttled, and a status lasts tens of seconds); a --local job's status is a file read."""
        return super()._wait_poll(name) if self._has_local(name) else AWS_WAIT_POLL

    def _clients_for(self, name: str) -> Clients:
        if self._has_local(name):
            return self.local
        if not self._aws_configured():
            raise NotFoundError(f"SageMaker job {name!r} not found among --local jobs (and AWS is not configured: "
                                f"dtrain config sagemaker --role ARN --bucket NAME); see the names with {self.cmd('list')}")
        return self.aws

    def _config_for(self, spec: JobSpec) -> SageMakerConfig:
        if spec.sagemaker is not None and spec.sagemaker.local:
            return self.config.for_local()
        self.config.require_aws()
        return self.config

    # ---- dry run ------------------------------------------------------------------------
    def _plan(self, spec: JobSpec) -> tuple[dict, render.UploadPlan]:
        """The CreateTrainingJob request, checked against botocore's model, and the uploads. A --local
        request is checked too (what SageMaker would refuse, --local refuses: a 3000-character
        hyperparameter, 101 variables), with its file:// channels read as s3:// ones, whose pattern
        they rightly fail; without boto3, which --local does not need, it goes unchecked."""
        cfg = self._config_for(spec)
        req = render.training_job_request(spec, cfg)
        if not (spec.sagemaker and spec.sagemaker.local):
            check_request("sagemaker", "CreateTrainingJob", req)
        elif importlib.util.find_spec("botocore") is not None:
            check_request("sagemaker", "CreateTrainingJob", _as_if_on_aws(req))
        plan = render.upload_plan(spec, cfg, cwd=self.cwd or os.getcwd())
        if not os.path.isdir(plan.source_dir):
            raise SpecError(f"source folder {plan.source_dir} does not exist: run from your code's folder or pass "
                            f"--source-dir")
        script = render.script_of(spec.command)
        if script is not None and not os.path.isfile(os.path.join(plan.source_dir, script)):
            raise SpecError(f"{script} is not in the code folder {plan.source_dir} (the job runs it from there, as "
                            f"/opt/ml/code/{script}): run from the folder that holds it, or pass --source-dir")
        check_generated(plan.source_dir, {render.ENTRY: plan.entry} if plan.entry else {})
        if spec.launcher == "torchrun" and os.path.lexists(os.path.join(plan.source_dir, "setup.py")):
            # The toolkit runs a code folder holding setup.py as a Python package, and its torchrun launch
            # refuses one ("Python packages are not supported for torch_distributed"): the job would fail.
            raise SpecError(f"{os.path.join(plan.source_dir, 'setup.py')}: SageMaker's training toolkit runs a code "
                            f"folder holding setup.py as a Python package, which its torchrun launch refuses; "
                            f"point --source-dir at a folder without setup.py")
        return req, plan

    def _render(self, spec: JobSpec) -> list[dict]:
        """What submit would send, for `--dry-run`: the PutObject requests (without bodies) and CreateTrainingJob,
        after submit's read-only checks (GET-like calls only, as `kubectl apply --dry-run=server` asks the
        server): what submit would refuse (a name taken, a channel empty or its bucket missing, the code's
        bucket missing, a --local job's folder missing) is refused in its words. What AWS does not answer (no
        credentials, no network) or refuses these credentials is one warning naming each check not made, and
        the requests are returned all the same. The translation stays render's, pure."""
        req, plan = self._plan(spec)  # a bad spec: no call
        checks = self._submit_checks(spec, req, plan.bucket, dry=True)
        unchecked: list[str] = []
        reason: Exception | None = None
        for i, (what, check) in enumerate(checks):
            try:
                check()
            except (SpecError, ConflictError, NotFoundError):
                raise  # what submit would refuse, in its words
            except (BackendError, SetupError) as err:  # an AWS refusal (AccessDenied): the rest goes on;
                unchecked.append(what)  # no answer at all (no credentials, no network, no boto3): nothing more is asked
                reason = reason or err
                if getattr(err, "code", None) is None:
                    unchecked += [w for w, _ in checks[i + 1:]]
                    break
        if unchecked:
            logging.getLogger(__name__).warning(
                "dtrain: warning: dry run not checked on AWS: %s (%s); the requests are shown all the same, and "
                "submit checks them", ", ".join(unchecked), reason)
        return [{"S3.PutObject": p} for p in plan.requests()] + [{"SageMaker.CreateTrainingJob": req}]

    # ---- hooks --------------------------------------------------------------------------
    def _submit(self, spec: JobSpec) -> JobInfo:
        req, plan = self._plan(spec)
        clients = self.local if spec.sagemaker is not None and spec.sagemaker.local else self.aws
        for _, check in self._submit_checks(spec, req, plan.bucket):  # before the upload, which would overwrite
            check()                                                  # the code of a job of that name
        with tempfile.TemporaryFile() as archive:
            extra = {render.ENTRY: plan.entry} if plan.entry else {}
            pack_source(plan.source_dir, extra, archive)
            archive.seek(0)
            aws_call("S3 upload of the code", clients.s3.put_object, Bucket=plan.bucket, Key=plan.source_key,
                     Body=archive, ContentType="application/gzip")
        aws_call("S3 upload of the job spec", clients.s3.put_object, Bucket=plan.bucket, Key=plan.spec_key,
                 Body=json.dumps(spec.to_dict()).encode(), ContentType="application/json")
        try:
            aws_call("SageMaker CreateTrainingJob", clients.sagemaker.create_training_job, **req)
        except BackendError:
            desc = self._made_anyway(clients, req)
            if desc is None:
                raise
            return self._info(clients, spec.name, desc)
        return self._info(clients, spec.name)

    def _suspend(self, name: str) -> JobInfo:
        raise self._not_supported("suspending a job", f"SageMaker has no such call: '{self.cmd(f'delete {name}')}' stops "
                                  f"it (StopTrainingJob; its checkpoints stay at its checkpoint S3 URI), and a new "
                                  f"job with the same --checkpoint-s3-uri goes on from them")

    def _resume(self, name: str) -> JobInfo:
        raise self._not_supported("resuming a job", "SageMaker jobs are never suspended")

    def _delete(self, name: str) -> JobInfo:
        clients = self._clients_for(name)
        desc = self._describe(clients, name)
        if desc.get("TrainingJobStatus") == "InProgress":
            try:
                aws_call("SageMaker StopTrainingJob", clients.sagemaker.stop_training_job, TrainingJobName=name)
            except BackendError:  # refused because the job ended since DescribeTrainingJob: nothing to stop
                desc = self._describe(clients, name)
                if desc.get("TrainingJobStatus") == "InProgress":
                    raise
                return self._info(clients, name, desc)
        return self._info(clients, name)

    def _purge(self, name: str) -> None:
        """Forget an ended job: DeleteTrainingJob, which SageMaker allows for a Completed, Failed or Stopped
        job only (its name may then be used again); what it left in S3 (code, checkpoints, model.tar.gz)
        stays. A job that is still stopping is named, not reported forgotten while `list` shows it."""
        clients = self._clients_for(name)
        state = self._describe(clients, name).get("TrainingJobStatus")
        if state == "Deleting":
            return
        if state in ("InProgress", "Stopping"):
            raise ConflictError(f"job {name!r} is {'stopping' if state == 'Stopping' else 'running'}, and SageMaker "
                                f"deletes only an ended job: run '{self.cmd(f'delete {name} --purge')}' again once "
                                f"'{self.cmd(f'wait {name}')}' returns")
        aws_call(f"SageMaker DeleteTrainingJob of {name!r}", clients.sagemaker.delete_training_job,
                 TrainingJobName=name)

    # ---- projects: a SageMaker job's project is its dtrain:project tag, set at submit ----------------
    def _create_project(self, name: str, *, gpu_quota: int | None, no_gpu_quota: bool) -> None:
        """Refused in a SageMaker user's words: nothing is made, and `submit -p NAME` needs nothing made
        (the generic 'use --backend local' read as if -p did not work on SageMaker)."""
        quota = "; a GPU quota is not dtrain's there: AWS's service quotas cap the instances" \
            if gpu_quota is not None else ""
        raise NotSupportedError(
            f"SageMaker has no projects to create: a job's project is its dtrain:project tag, which "
            f"'{self.cmd(f'submit JOB -p {name} -- COMMAND')}' sets with nothing created first, and "
            f"'{self.cmd(f'list -p {name}')}' lists its jobs{quota}")

    def _has_project(self, name: str) -> bool:
        return False  # nothing is kept to exist: `project create` is answered by _create_project

    def _list_projects(self) -> list:
        raise NotSupportedError(f"SageMaker keeps no projects: a job's project is its dtrain:project tag, set by "
                                f"submit -p; '{self.cmd('list -A')}' shows each job's project")

    def _delete_project(self, name: str):
        raise NotSupportedError(f"SageMaker keeps no projects, so there is none to delete: a job's project is only "
                                f"its dtrain:project tag, set by submit -p ('{self.cmd(f'list -p {name}')}' lists "
                                f"its jobs)")

    def _nodes(self) -> Listed:
        """None: SageMaker has no standing nodes (instances exist while a job runs). Said, so that an
        empty table is not read as a cluster with no machines, or one dtrain could not read."""
        return Listed([], [Notice(code="no-nodes", message=(
            f"SageMaker has no standing nodes: each job gets its own instances while it runs (--instance-type, "
            f"{self.config.instance_type} as configured); '{self.cmd('list')}' shows the jobs and their types"))])

    # ---- artifacts ----------------------------------------------------------------------
    def _artifacts(self, name: str, *, to: Path) -> Path:
        """Download the job's model.tar.gz and unpack it (safely) into the new folder `to`."""
        return self._download(name, "model_artifacts", "model.tar.gz", to=to)

    def _output_data(self, name: str, *, to: Path) -> Path:
        """Download the job's output.tar.gz ($SM_OUTPUT_DATA_DIR, beside model.tar.gz) and unpack it into `to`."""
        return self._download(name, "output_data", "output.tar.gz", to=to)

    def _download(self, name: str, key_of: str, archive: str, *, to: Path) -> Path:
        """The archive that the job's description names in extra[key_of], unpacked into the new folder `to`."""
        clients = self._clients_for(name)
        info = self._info(clients, name)
        uri = info.extra.get(key_of)
        status = info.status.value
        what = "model artifacts" if archive == "model.tar.gz" else "output data"
        if not uri and not info.status.terminal:
            raise NotFoundError(f"job {name!r} has no {what} yet ({status}); wait for it to finish")
        if not uri:
            raise NotFoundError(f"job {name!r} ended {status} without {what}; see {self.cmd(f'describe job {name}')}")
        bucket, _, key = uri[5:].partition("/")
        to = new_folder(to)  # before the download, which may be gigabytes
        try:
            got = aws_call(f"S3 download of {archive}", clients.s3.get_object, Bucket=bucket, Key=key)
        except NotFoundError:  # SageMaker names the URI before it uploads there, and a job may end before
            raise NotFoundError(f"job {name!r} is {status} and {uri} does not exist: SageMaker uploads "
                                f"{'/opt/ml/model' if archive == 'model.tar.gz' else '/opt/ml/output/data'} when "
                                f"the job ends; see {self.cmd(f'describe job {name}')}") from None
        body, size = got["Body"], got.get("ContentLength")
        size = size if isinstance(size, int) else None
        # Beside the target, on its file system: $TMPDIR is often a RAM-backed tmpfs, smaller than a model
        with body, tempfile.NamedTemporaryFile(prefix=f".{to.name}.", suffix=".tar.gz", dir=to.parent) as tmp:
            free = shutil.disk_usage(to.parent).free
            if size is not None and size > free:  # said before a download that would fill the disk
                raise QuotaError(f"{uri} is {size} bytes and {to.parent} has {free} bytes free: free space there "
                                 f"or pick a --to folder on a larger disk")
            read_body(f"S3 download of {uri}", body, tmp, total=size)
            tmp.flush()
            return unpack(tmp.name, to)

    # ---- storage: SageMaker keeps data in S3/EFS, not in dtrain volumes ------------------
    def _no_storage(self, *_a, **_k):
        raise self._not_supported("volumes and snapshots", "data lives in S3 or EFS: submit with "
                                  "--channel NAME=s3://BUCKET/PREFIX")

    _create_volume = _list_volumes = _get_volume = _delete_volume = _list_storage_classes = _no_storage
    _create_snapshot = _list_snapshots = _get_snapshot = _restore_snapshot = _delete_snapshot = _no_storage
