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
import io
import json
import logging
import os
import shutil
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from dtrain.backends.base import Backend, JobInfo, JobStatus, Listed, LogLine, Notice
from dtrain.backends.sagemaker import logs as cwlogs
from dtrain.backends.sagemaker.clients import Clients, aws_call, aws_clients, read_body
from dtrain.backends.sagemaker import render, status
from dtrain.backends.sagemaker.archive import check_generated, pack_source, unpack
from dtrain.backends.sagemaker.config import LOCAL_BUCKET, SageMakerConfig
from dtrain.backends.sagemaker.contract import decode, local_path
from dtrain.backends.sagemaker.facts import ENDED, JobFacts, plain, settled
from dtrain.backends.sagemaker.validate import check_request
from dtrain.backends.targets import new_folder
from dtrain.errors import (BackendError, ConflictError, EnvironmentError_, NotFoundError, NotSupportedError, QuotaError,
                           SpecError)
from dtrain.names import check_name
from dtrain.spec import JobSpec

MAX_LIST = 1000  # jobs `list` reads from SageMaker (newest first)
MAX_SPEC_BYTES = 1 << 20  # a stored job spec is a few KiB (a job file is at most 1 MiB)
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


def _s3_channels(req: dict) -> list[tuple[str, str]]:
    """(channel name, s3:// URI) of each S3Prefix channel of a request (a manifest file is not a prefix)."""
    out = []
    for ch in req.get("InputDataConfig") or []:
        s3 = ch["DataSource"].get("S3DataSource")
        if s3 and s3.get("S3DataType") == "S3Prefix":
            out.append((ch["ChannelName"], s3["S3Uri"]))
    return out


class ForeignJobError(NotSupportedError):
    """A training job another tool started, whose name or tags no dtrain job could have."""


class SageMakerBackend(Backend):
    name = "sagemaker"

    def __init__(self, config: SageMakerConfig, *, clients: Clients | None = None, local: Clients | None = None,
                 session: Any = None, home: str | os.PathLike | None = None, cwd: str | None = None,
                 pace: cwlogs.Pace = cwlogs.Pace(), sleep: Callable[[float], None] = time.sleep,
                 command: Callable[[str], str] | None = None):
        """`command(words)`: the `dtrain WORDS` a hint names for a job of this backend, so that it
        works as printed (the Client's adds `--backend sagemaker` where SageMaker is not the default)."""
        self._command = command
        self.config = config
        self._aws, self._local, self._session = clients, local, session
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
        return self._aws

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
            except (BackendError, EnvironmentError_) as err:  # an AWS refusal (AccessDenied): the rest goes on;
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

    def _submit_checks(self, spec: JobSpec, req: dict, bucket: str, *,
                       dry: bool = False) -> list[tuple[str, Callable[[], None]]]:
        """Submit's read-only checks, each (what it checks, the check), in submit's order, so that a dry run
        names the ones it could not make. `dry`: the code's bucket is looked up (submit's upload finds it
        missing before anything is made) and a channel listing AWS refuses is raised, for the dry run to name."""
        name = spec.name
        if spec.sagemaker is not None and spec.sagemaker.local:
            free = [(f"job name {name!r} free", lambda: self._check_free(self.local, name))] \
                if self.home is not None or self._local is not None else []
            return [*free, ("channels on this machine", lambda: self._check_local_channels(req))]

        def not_local() -> None:
            if self._has_local(name):
                raise ConflictError(f"a --local SageMaker job named {name!r} exists, and describe, logs and delete "
                                    f"would reach it rather than this one: submit under a new name")

        def aws() -> Clients:  # made when a check first asks (no boto3: that check's failure)
            return self.quick_aws if dry else self.aws

        checks = [(f"no --local job named {name!r}", not_local),
                  (f"job name {name!r} free", lambda: self._check_free(aws(), name))]
        if dry:
            checks.append((f"bucket {bucket} exists", lambda: self._check_bucket(aws(), bucket)))
        # --output-path and --checkpoint-s3-uri elsewhere than the code's bucket (checked above, or by the upload)
        for what, flag, uri in (("output path", "--output-path", req["OutputDataConfig"]["S3OutputPath"]),
                                ("checkpoint URI", "--checkpoint-s3-uri",
                                 (req.get("CheckpointConfig") or {}).get("S3Uri", ""))):
            if uri.startswith("s3://") and uri[len("s3://"):].partition("/")[0] != bucket:
                checks.append((f"{what} {uri}'s bucket exists", lambda flag=flag, uri=uri: self._check_flag_bucket(
                    aws(), uri, flag, dry=dry)))
        return checks + [(f"channel {ch}={uri} holds objects", lambda ch=ch, uri=uri: self._check_channel(
            aws(), ch, uri, dry=dry)) for ch, uri in _s3_channels(req)]

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

    def _check_inputs(self, spec: JobSpec) -> None:
        """The channels' data is there: a --local job's folders on this machine, else each S3 prefix."""
        req = render.training_job_request(spec, self._config_for(spec))
        if spec.sagemaker is not None and spec.sagemaker.local:
            self._check_local_channels(req)
            return
        for name, uri in _s3_channels(req):
            self._check_channel(self.aws, name, uri)

    def _check_local_channels(self, req: dict) -> None:
        """Each channel of a --local job is on this machine: a file:///PATH folder, or an s3:// prefix's folder in
        the local S3 ($DTRAIN_HOME/sagemaker-local/s3/BUCKET/PREFIX); EFS and FSx only SageMaker reaches. Else the
        job was taken and failed as it downloaded ("channel training: ... does not exist on this machine")."""
        for ch in req.get("InputDataConfig") or []:
            uri, name = (ch["DataSource"].get("S3DataSource") or {}).get("S3Uri", ""), ch["ChannelName"]
            if not uri:
                raise SpecError(f"channel {name}: --local cannot reach EFS or FSx (only SageMaker's instances in "
                                f"the VPC can): copy the data here and pass --channel {name}=file:///PATH")
            if uri.startswith("file://") and not os.path.exists(path := local_path(uri, "")):
                raise SpecError(f"channel {name}={uri}: the folder {path} does not exist on this machine: put the "
                                f"data there, or pass the folder that holds it (--channel {name}=file:///PATH)")
            if uri.startswith("s3://") and (self.home is not None or self._local is not None):
                bucket, _, key = uri[len("s3://"):].partition("/")
                from dtrain.backends.sagemaker.local import LocalAWSError
                try:
                    path = self.local.s3.path(bucket, key, prefix=True)
                except LocalAWSError as err:  # a key the local S3 refuses: a link a job left, '..'
                    raise SpecError(f"channel {name}={uri}: {err.response['Error']['Message']}") from None
                if not path.exists():
                    raise SpecError(f"channel {name}={uri}: a --local job reads s3:// from the local S3 folder, and "
                                    f"{path} does not exist: put the data there, or pass the folder that holds it "
                                    f"(--channel {name}=file:///PATH)")

    @staticmethod
    def _check_channel(clients: Clients, name: str, uri: str, *, dry: bool = False) -> None:
        """An S3 channel's bucket exists and holds an object under its prefix: else SageMaker takes the job,
        starts its instances and fails it minutes later ("ClientError: No S3 objects found under S3 URL"),
        billed. A refusal for another reason (AccessDenied: the role may read what these credentials may not)
        leaves the verdict to SageMaker; `dry`: it is raised, for the dry run to name the check not made."""
        bucket, _, prefix = uri[len("s3://"):].partition("/")
        try:
            listed = aws_call(f"S3 listing of channel {name}", clients.s3.list_objects_v2, Bucket=bucket,
                              Prefix=prefix, MaxKeys=1)
        except BackendError as err:
            if getattr(err, "code", None) == "NoSuchBucket":
                raise SpecError(f"channel {name}={uri}: the bucket {bucket} does not exist: check the URI "
                                f"(aws s3 ls s3://{bucket}/) or create the bucket and upload the data") from None
            if dry:
                raise
            return
        if not listed.get("KeyCount") and not listed.get("Contents"):
            raise SpecError(f"channel {name}={uri}: no S3 objects under it, and SageMaker would fail the job "
                            f"once its instances started: upload the data first (aws s3 sync DATA {uri}) "
                            f"or fix the URI") from None

    @staticmethod
    def _check_bucket(clients: Clients, bucket: str) -> None:
        """The bucket the code goes to exists: submit's upload would be refused (NoSuchBucket), in these words."""
        try:
            aws_call(f"S3 bucket {bucket} (dtrain config sagemaker --bucket)", clients.s3.list_objects_v2,
                     Bucket=bucket, MaxKeys=1)
        except BackendError as err:
            if getattr(err, "code", None) == "NoSuchBucket":
                raise NotFoundError(str(err)) from None
            raise

    @staticmethod
    def _check_flag_bucket(clients: Clients, uri: str, flag: str, *, dry: bool = False) -> None:
        """The bucket of `flag` (--output-path, --checkpoint-s3-uri) exists: else SageMaker takes the job, trains
        it and fails it as it uploads the model or a checkpoint, billed. Asked as the code's bucket is; a refusal
        for another reason (AccessDenied: the role may write what these credentials may not list) leaves the
        verdict to SageMaker; `dry`: it is raised."""
        bucket = uri[len("s3://"):].partition("/")[0]
        try:
            aws_call(f"S3 bucket {bucket} ({flag})", clients.s3.list_objects_v2, Bucket=bucket, MaxKeys=1)
        except BackendError as err:
            if getattr(err, "code", None) == "NoSuchBucket":
                raise SpecError(f"{flag} {uri}: the bucket {bucket} does not exist: create it (aws s3 mb "
                                f"s3://{bucket}) or pass another {flag}") from None
            if dry:
                raise

    def _made_anyway(self, clients: Clients, req: dict) -> dict | None:
        """The job a failed CreateTrainingJob made all the same: botocore retries a create whose answer
        was lost (a timeout, a 5xx), and the retry finds the name taken (ResourceInUse) by that very
        job. It is ours when it runs our request: the same role and hyperparameters, which name this
        job's code in S3 (the name was free just before, see _check_free)."""
        try:
            desc = self._describe(clients, req["TrainingJobName"])
        except (NotFoundError, BackendError):
            return None
        return desc if all(desc.get(k) == req[k] for k in ("RoleArn", "HyperParameters")) else None

    def _check_free(self, clients: Clients, name: str) -> None:
        try:
            desc = self._describe(clients, name)
        except NotFoundError:
            return
        # DeleteTrainingJob frees a name (see _purge): SageMaker reuses it then, as the estimator's fit() would
        state = desc.get("TrainingJobStatus") or "?"
        # A new name has checkpoints of its own (s3://BUCKET/PREFIX/NEW/checkpoints): a stopped spot job
        # submitted again under one started over, unless told where this one's are
        ckpt = (desc.get("CheckpointConfig") or {}).get("S3Uri")
        goes_on = f"; under a new name, --checkpoint-s3-uri {ckpt} goes on from its checkpoints" if ckpt else ""
        raise ConflictError(f"a SageMaker training job named {name!r} exists ({state}): submit under a new name, or "
                            f"free the name with '{self.cmd(f'delete {name} --purge')}' (DeleteTrainingJob, once it "
                            f"has ended; its S3 objects stay){goes_on}")

    def _describe(self, clients: Clients, name: str) -> dict:
        try:
            return aws_call(f"SageMaker job {name!r}", clients.sagemaker.describe_training_job, TrainingJobName=name)
        except NotFoundError as err:
            if clients is self._local:
                raise
            # A job lives in one region, and dtrain asks the configured one: a job of another region reads
            # as no job at all. The hint lists where the job would be (`dtrain list` alone asked another
            # backend where SageMaker is not the default) and names a region where it was seen.
            seen = self.facts.regions(name) - {self.config.region}
            there = f"; it was seen in {', '.join(sorted(seen))}: dtrain config sagemaker --region " \
                    f"{sorted(seen)[0]}" if seen else ""
            said = str(err).rpartition("; see the names")[0].replace(" not found", f" not found in region "
                                                                      f"{self.config.region}", 1)
            raise NotFoundError(f"{said}{there}; see the names with '{self.cmd('list')}'") from None

    def _info(self, clients: Clients, name: str, desc: dict | None = None) -> JobInfo:
        desc = desc or self._describe(clients, name)
        arn, created = desc.get("TrainingJobArn"), desc.get("CreationTime")
        known = self.facts.get(arn, created)
        spec, stored = self._stored_spec(clients, desc, known.get("spec", ...))
        learned = {"spec": stored} if stored is not ... and stored != known.get("spec", ...) else {}
        kept = plain(desc) if desc.get("TrainingJobStatus") in ENDED else None
        if kept is not None and kept != known.get("desc"):
            learned["desc"] = kept  # what `list` shows of the job until it changes again
        if learned:
            self.facts.put(arn, created, **learned)
        hps = desc.get("HyperParameters") or {}
        per_host = int(decode(hps.get("sagemaker_mpi_num_of_processes_per_host", "0")) or 0) or \
            max(1, spec.processes // int((desc.get("ResourceConfig") or {}).get("InstanceCount") or 1))
        return status.job_info(desc, spec, per_host=per_host)

    def _stored_spec(self, clients: Clients, desc: dict, stored: Any) -> tuple[JobSpec, Any]:
        """The spec dtrain stored beside the code, read from S3 unless `stored` (what was remembered;
        ... for nothing) holds it; a stand-in for jobs started elsewhere. And the stored JSON to
        remember: None for a job without one, ... when S3 refused (asked again next time)."""
        spec = self._spec_of(desc, stored)
        if spec is None and stored is not None:  # not remembered, or remembered damaged: read it
            stored = self._read_spec(clients, desc)
            spec = self._spec_of(desc, stored)
        if spec is not None:
            return spec, stored
        try:
            return status.spec_from_description(desc), stored
        except SpecError as err:  # SageMaker allows names (capitals, 63 characters) and tags dtrain's do not
            raise ForeignJobError(f"SageMaker job {desc['TrainingJobName']!r} was started by another tool and "
                                  f"its name or tags do not fit a job of ours ({err}); see it with aws sagemaker "
                                  f"describe-training-job --training-job-name {desc['TrainingJobName']}") from None

    @staticmethod
    def _spec_of(desc: dict, stored: Any) -> JobSpec | None:
        """The stored spec of this very job, or None."""
        try:
            spec = JobSpec.from_stored(stored) if isinstance(stored, dict) else None
        except ValueError:
            return None
        return spec if spec is not None and spec.name == desc.get("TrainingJobName") else None

    @staticmethod
    def _read_spec(clients: Clients, desc: dict) -> Any:
        """The stored spec's JSON from S3; None for a job without one (dtrain writes it before it
        creates the job, so it never comes later); ... when S3 refused (a bucket this role may not
        read, throttling) or the object does not parse."""
        hps = desc.get("HyperParameters") or {}
        source = decode(hps.get("sagemaker_submit_directory", '""'))
        if not (isinstance(source, str) and source.startswith("s3://") and source.endswith(render.SOURCE_ARCHIVE)):
            return None
        bucket, _, key = source[5:].partition("/")
        key = key.rsplit("/", 2)[0] + "/" + render.SPEC_FILE
        text = io.BytesIO()
        try:
            got = aws_call("S3 read of the job spec", clients.s3.get_object, Bucket=bucket, Key=key)
            with got["Body"] as body:
                if not isinstance(got.get("ContentLength"), int) or got["ContentLength"] > MAX_SPEC_BYTES:
                    return None  # not a spec dtrain wrote: read whole, it could fill the memory
                read_body("S3 read of the job spec", body, text)  # a body cut short is one line, as a refusal
            return json.loads(text.getvalue())
        except NotFoundError:
            return None
        except (BackendError, ValueError):
            return ...

    def _get(self, name: str) -> JobInfo:
        return self._info(self._clients_for(name), name)

    def _list(self) -> Listed:
        """Newest first, from ListTrainingJobs pages: a job is described only when it may be ours (a name
        dtrain could give) and what is remembered of it (an ended job's description) is not current.
        AWS failing (no credentials, no network, an expired session) does not hide the --local jobs: they
        are listed and a notice says why AWS's are not; with no --local job to show, the AWS error is
        the answer (an empty list would read as "no jobs")."""
        out: list[JobInfo] = []
        notices: list[Notice] = []
        local = self.home is not None or self._local is not None
        sources = [self.local] if local else []
        if self._aws_configured():
            sources.append(None)  # AWS: its clients are made here, where a failure can be caught
        for clients in sources:
            try:
                clients = clients or self.aws
                summaries = self._summaries(clients)
            except (BackendError, EnvironmentError_) as err:  # AWS's only: the local listing raises neither
                if not out:
                    raise
                notices.append(Notice(code="jobs-unlisted", message=(
                    f"SageMaker jobs on AWS ({self.config.region}) not listed, only --local ones: {err}")))
                break
            for summary in summaries:
                try:
                    check_name(summary["TrainingJobName"])  # what a stand-in spec would refuse, known undescribed
                    out.append(self._listed(clients, summary))
                except (SpecError, ForeignJobError):
                    continue  # another tool's job in the account: not one `dtrain list` can show
                except NotFoundError:
                    continue  # deleted (DeleteTrainingJob) since ListTrainingJobs named it
            self.facts.keep_only(s.get("TrainingJobArn") for s in summaries)
        return Listed(out, notices)

    def _list_of(self, project: str | None) -> Listed:
        """`_list`, with a notice naming the region it read when AWS's answer there holds no dtrain job:
        SageMaker lists one region's jobs, and an empty list alone read as no jobs at all where they
        run in another region (`--region` changed). Only where dtrain saw jobs in another region, named too."""
        jobs = self._list()
        if not self._aws_configured() or any(n.code == "jobs-unlisted" for n in jobs.notices) \
                or any(not (j.spec.sagemaker and j.spec.sagemaker.local) for j in jobs):
            return jobs
        region = self.config.region
        seen = sorted(self.facts.seen_regions() - {region})
        if not seen:  # an account new to dtrain: "No jobs yet" is the whole truth, no notice at each list
            return jobs
        there = f"; dtrain saw jobs in {', '.join(seen)}: dtrain config sagemaker --region {seen[0]}"
        return Listed(jobs, [*jobs.notices, Notice(code="jobs-region", message=(
            f"no dtrain job on SageMaker in region {region}, the region dtrain asks (dtrain config sagemaker "
            f"--region){there}"))])

    def _names(self, what: str) -> tuple[list[str], list[str]]:
        """The jobs known without asking AWS (ListTrainingJobs, then a DescribeTrainingJob for each job
        not remembered, all throttled): the --local ones and the AWS ones the facts keep."""
        if what != "job":
            return [], []  # no volumes or snapshots: those verbs are refused before any name is read
        local = self.local.sagemaker.names() if self._local is not None or self.home is not None else []
        return sorted({*local, *self.facts.names(self.config.region)}), []

    def _summaries(self, clients: Clients) -> list[dict]:
        kw: dict = {"MaxResults": 100, "SortBy": "CreationTime", "SortOrder": "Descending"}
        out: list[dict] = []
        while len(out) < MAX_LIST:
            page = aws_call("SageMaker ListTrainingJobs", clients.sagemaker.list_training_jobs, **kw)
            out += page.get("TrainingJobSummaries", [])
            if not page.get("NextToken"):
                break
            kw["NextToken"] = page["NextToken"]
        return out[:MAX_LIST]

    def _listed(self, clients: Clients, summary: dict) -> JobInfo:
        name = summary["TrainingJobName"]
        known = self.facts.get(summary.get("TrainingJobArn"), summary.get("CreationTime"))
        desc = known.get("desc")
        if not (isinstance(desc, dict) and settled(desc, summary)):
            desc = self._describe(clients, name)
        return self._info(clients, name, desc)

    def _logs(self, name: str, *, rank: int | None, tail: int | None, since: float | None,
              follow: bool, previous: bool = False) -> Iterator[LogLine | Notice]:
        """Lines as they come, and once a notice naming the hosts whose current container has not started.
        Following reads CloudWatch every pace.first seconds while lines arrive,
        waiting up to twice as long after each read that found none (to pace.most), and asks for the
        job's status (DescribeTrainingJob, throttled by AWS) every pace.status seconds of waiting. Once
        the job has ended, reads continue until one finds nothing new (CloudWatch takes lines late)."""
        clients = self._clients_for(name)
        pace = self.pace if clients is not self._local else cwlogs.Pace(  # --local: files read, no AWS quota
            first=self.pace.first, most=self.pace.first, status=0.0)
        tokens: dict[str, str | None] = {}  # per stream: a host has one per start of its container
        wait, waited, ended = pace.first, pace.status, False  # waited: seconds since the status was asked
        logged = False  # whether any host has a stream yet
        current: dict[int, int] = {}  # per host, when its current attempt's container started (or will)
        attempt: float | None = None  # when the job's current attempt began (after a spot interruption, a retry)
        asked = noted = False  # noted: the hosts not started again have been named
        while True:
            found = cwlogs.streams(clients.logs, name)
            if found and not asked:  # streams older than the attempt are an earlier container's
                desc, asked = self._describe(clients, name), True
                attempt = status.attempt_start(desc)
                if follow and not ended:  # it is also the follower's status ask, not one more
                    ended, waited = status.job_status(desc)[0].terminal, 0.0
            for r, names in found.items():  # -f goes on into starts that come while it follows
                current.setdefault(r, cwlogs.current_start(names, attempt))
            picked = {r: [s for s in names if cwlogs.started(s)[0] >= current[r]]  # as kubectl: the current
                      for r, names in found.items() if rank is None or r == rank}  # container's lines only
            waiting = sorted(r for r, names in picked.items() if not names)
            if waiting and not noted and not previous:  # said at once: -f may wait long
                noted = True
                yield Notice(code="logs-incomplete", message=self._not_started(name, waiting, attempt))
            if previous:  # a host's stream before its current start: its container's previous one (a retry, a spot stop)
                picked = {r: [s for s in names if cwlogs.started(s)[0] < current[r]][-1:]
                          for r, names in found.items() if rank is None or r == rank}
                picked = {r: names for r, names in picked.items() if names}
                if not picked:
                    raise NotFoundError(f"job {name!r} has no previous attempt (previous terminated container not "
                                        f"found): no host{'' if rank is None else f' of rank {rank}'} started its "
                                        f"container more than once; '{self.cmd(f'logs {name}')}' shows its lines")
            logged = logged or bool(found)
            if not found and not follow:
                self._no_lines(clients, name)
            if rank is not None and not picked and not follow and rank not in found:
                hosts = ", ".join(str(r) for r in sorted(found)) or "none yet"
                raise NotFoundError(f"job {name!r} has no host for --rank {rank} (ranks with logs: {hosts})")
            read: list[int] = []  # a mark per line read (before any --tail cut): was there anything new
            hosts = [_marked(cwlogs.host_lines(clients.logs, r, names, since=since, tokens=tokens), read)
                     for r, names in sorted(picked.items())]
            yield from cwlogs.merged(hosts, tail=tail)
            new = bool(read)
            if not follow or ended and not new:
                if follow and not logged:
                    self._no_lines(clients, name)
                return
            tail = None
            if not ended and waited >= pace.status:
                ended, waited = status.job_status(self._describe(clients, name))[0].terminal, 0.0
                if ended:
                    continue  # read once more: lines the job wrote before it ended
            wait = pace.first if new else min(pace.most, wait * 2)
            self._sleep(wait)
            waited += wait

    def _not_started(self, name: str, ranks: list[int], attempt: float | None) -> str:
        """The one line `logs` adds for hosts whose container has not started again since the job's last
        interruption or retry: they have no lines of the current attempt yet."""
        hosts = ", ".join(f"algo-{r + 1} (rank {r})" for r in ranks)
        when = datetime.fromtimestamp(attempt or 0, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return (f"job {name!r} was interrupted or restarted at {when} and the container of {hosts} has not "
                f"started again yet: no lines of the current attempt; '{self.cmd(f'logs {name} --previous')}' shows "
                f"the last attempt's, '{self.cmd(f'logs {name} -f')}' waits for the current one's")

    def _no_lines(self, clients: Clients, name: str) -> None:
        """A job that failed or stopped before any host logged (an image or data that could not be fetched,
        a stop while instances launched) has no streams, and an empty answer would hide why: say it."""
        state, message = status.job_status(self._describe(clients, name))
        if state.terminal and state != JobStatus.SUCCEEDED:
            raise NotFoundError(f"job {name!r} ended {state.value} before any host logged a line"
                                f"{': ' + message if message else ''}; see {self.cmd(f'describe job {name}')}")

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


def _marked(lines: Iterator[LogLine], read: list[int]) -> Iterator[LogLine]:
    """`lines`, marking `read` once the first is taken (a --tail cut may drop it from the output)."""
    for line in lines:
        if not read:
            read.append(1)
        yield line
