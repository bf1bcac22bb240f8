"""A SageMaker job read back: DescribeTrainingJob -> JobInfo with the spec stored beside its code,
and the job list from ListTrainingJobs pages (SageMakerBackend's mixin)."""

from __future__ import annotations

import io
import json
from typing import Any

from dtrain.backends.base import JobInfo, Listed, Notice
from dtrain.backends.sagemaker import render, status
from dtrain.backends.sagemaker.clients import Clients, aws_call, read_body
from dtrain.backends.sagemaker.contract import decode
from dtrain.backends.sagemaker.facts import ENDED, plain, settled
from dtrain.errors import BackendError, NotFoundError, NotSupportedError, SetupError, SpecError
from dtrain.names import check_name
from dtrain.spec import JobSpec

MAX_LIST = 1000  # jobs `list` reads from SageMaker (newest first)
MAX_SPEC_BYTES = 1 << 20  # a stored job spec is a few KiB (a job file is at most 1 MiB)


class ForeignJobError(NotSupportedError):
    """A training job another tool started, whose name or tags no dtrain job could have."""


class JobReading:
    """SageMakerBackend's `_describe`, `_info` (a description -> JobInfo), `_get`, `_list`, `_list_of` and `_names`."""

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
            except (BackendError, SetupError) as err:  # AWS's only: the local listing raises neither
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
        return Listed(jobs, [*jobs.notices, Notice(code="jobs-region", message=(
            f"SageMaker holds no job submitted from here in region {region}, the region read (set by "
            f"'dtrain config sagemaker --region'); jobs were seen in {', '.join(seen)}: "
            f"'dtrain config sagemaker --region {seen[0]}'"))])

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
