"""Submit's read-only checks, which the dry run makes too: the name free, the buckets there, each
channel's data in place, a job a failed create made all the same (SageMakerBackend's mixin)."""

from __future__ import annotations

import os
from typing import Callable

from dtrain.backends.sagemaker import filesystems, render
from dtrain.backends.sagemaker.clients import Clients, aws_call
from dtrain.backends.sagemaker.contract import local_path
from dtrain.errors import BackendError, ConflictError, NotFoundError, SetupError, SpecError
from dtrain.spec import JobSpec


def _s3_channels(req: dict) -> list[tuple[str, str]]:
    """(channel name, s3:// URI) of each S3Prefix channel of a request (a manifest file is not a prefix)."""
    out = []
    for ch in req.get("InputDataConfig") or []:
        s3 = ch["DataSource"].get("S3DataSource")
        if s3 and s3.get("S3DataType") == "S3Prefix":
            out.append((ch["ChannelName"], s3["S3Uri"]))
    return out


_UNCHECKED = {"efs": "EFS channels' file systems are", "fsx": "FSx channels' file systems are",
              "ec2": "file-system channels' security groups are"}


class SubmitChecks:
    """SageMakerBackend's `_submit_checks` (submit's and the dry run's), `_check_inputs` and the checks they make."""

    def _submit_checks(self, spec: JobSpec, req: dict, bucket: str, *,
                       dry: bool = False) -> list[tuple[str, Callable[[], None]]]:
        """Submit's read-only checks, each (what it checks, the check), in submit's order, so that a dry run
        names the ones it could not make. `dry`: the code's bucket is looked up (submit's upload finds it
        missing before anything is made) and a channel listing AWS refuses is raised, for the dry run to name."""
        name = spec.name
        if spec.sagemaker is not None and spec.sagemaker.local:
            free = [(f"job name {name!r} free", lambda: self._check_free(self.local, name))] \
                if self.home is not None or self._local is not None else []
            return [*free, ("channels on this machine", lambda: self._check_local_channels(req)),
                    ("checkpoint URI free", lambda: self._check_local_checkpoints(req))]

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
        checks += [(f"channel {ch}={uri} holds objects", lambda ch=ch, uri=uri: self._check_channel(
            aws(), ch, uri, dry=dry)) for ch, uri in _s3_channels(req)]
        # EFS and FSx are asked by the dry run too (describe calls only): it refuses what submit would; the
        # channels on one file system together, so that a warning of it is said once
        checks += [(f"{filesystems.named(chs)}: file system {chs[0].fs_id} reachable", lambda chs=chs: self._check_fs(
            chs, req, dry=dry)) for chs in filesystems.by_file_system(filesystems.file_system_channels(req))]
        return checks

    def _check_fs(self, chs: list[filesystems.FileSystemChannel], req: dict, *, dry: bool = False) -> None:
        """The file system of the EFS or FSx channels `chs` (one file system) exists, and the job's subnets and
        security groups reach it (filesystems.py, secgroups.py); where AWS could not be asked, one warning and the
        job goes on. Each warning is said once, naming the channels that give it. `dry`: the dry run's quick
        clients."""
        vpc, fs = req.get("VpcConfig") or {}, chs[0]
        service = "efs" if fs.kind == "EFS" else "fsx"
        try:
            client, ec2 = self._fs_client(service, quick=dry), self._fs_client("ec2", quick=dry)
        except (BackendError, SetupError) as err:  # boto3 could not make it (a service it does not know)
            filesystems.warn(f"{filesystems.named(chs)}: file system {fs.fs_id} could not be checked ({err})")
            return
        groups = vpc.get("SecurityGroupIds") or []
        missing = service if client is None else "ec2" if ec2 is None and groups else None
        if missing is not None and missing not in self._skipped:  # clients injected without it: said once
            self._skipped.add(missing)
            filesystems.warn(f"the clients given to SageMakerBackend have no {missing} client, so "
                             f"{_UNCHECKED[missing]} not checked before CreateTrainingJob: give Clients(..., "
                             f"{missing}=...) to have them checked (said once)")
        for line in filesystems.check_channels(client, chs, vpc.get("Subnets") or [], self.config.region, dry=dry,
                                               ec2=ec2, groups=groups):
            filesystems.warn(line)

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

    def _check_local_checkpoints(self, req: dict) -> None:
        """No running --local job holds the checkpoint folder (its URI's, one holding it or one within it): refused
        here in one line, where the job's runner would fail it as it starts."""
        if self.home is not None or self._local is not None:
            if why := self.local.sagemaker.checkpoints_in_use(req):
                raise ConflictError(why)

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
