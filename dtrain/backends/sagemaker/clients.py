"""The AWS clients the backend calls, and the one mapping of AWS refusals to dtrain errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from dtrain.backends.sagemaker.config import SageMakerConfig
from dtrain.errors import BackendError, DtrainError, NotFoundError, SetupError, UnavailableError
from dtrain.names import cut

_EXPIRED = "your AWS credentials have expired: refresh them (aws sso login, or new temporary keys) and retry"
_KEYS = "AWS does not know these keys: check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE"
_REGION = ("the bucket is in another region, and SageMaker jobs read and write buckets of their own region: "
           "use a bucket there (dtrain config sagemaker --bucket) or the bucket's region (--region)")
_AWS_SIDE = "AWS failed on its side (botocore already retried): retry in a few minutes"
HINTS = {
    "AccessDenied": "check the role ARN and your credentials (aws sts get-caller-identity) and the bucket policy",
    "AccessDeniedException": "check your credentials (aws sts get-caller-identity) and that the role may be passed",
    "ResourceLimitExceeded": "ask AWS for a higher quota for this instance type, or pick another --instance-type",
    "ValidationException": "fix the value SageMaker names above",
    "ResourceInUse": "training job names are unique for good on SageMaker: submit under a new name",
    "ThrottlingException": "SageMaker is throttling calls: retry in a minute",
    "SlowDown": "S3 is throttling calls: retry in a minute",
    "NoSuchBucket": "create the bucket (aws s3 mb s3://BUCKET) or set another with dtrain config sagemaker --bucket",
    "PermanentRedirect": _REGION, "AuthorizationHeaderMalformed": _REGION,
    "IllegalLocationConstraintException": _REGION,
    "ExpiredToken": _EXPIRED, "ExpiredTokenException": _EXPIRED, "RequestExpired": _EXPIRED,
    "InvalidAccessKeyId": _KEYS, "InvalidClientTokenId": _KEYS, "UnrecognizedClientException": _KEYS,
    "SignatureDoesNotMatch": _KEYS,
    "InternalFailure": _AWS_SIDE, "InternalError": _AWS_SIDE, "InternalServerError": _AWS_SIDE,
    "ServiceUnavailable": _AWS_SIDE,
}
MAX_MESSAGE = 400  # characters of AWS's message repeated: a 5xx from a proxy can be a whole HTML page


@dataclass(frozen=True)
class Clients:
    """The AWS clients the backend calls (boto3's, or the local contract's). `efs`, `fsx` and `ec2` (its
    security groups and subnets) are asked about a job's EFS and FSx channels before it is created; clients
    given without them: those are not asked."""

    sagemaker: Any
    s3: Any
    logs: Any
    efs: Any = None
    fsx: Any = None
    ec2: Any = None


# A dry run's read-only checks: an endpoint that does not answer is said at once, not after botocore's
# 60 s connect timeout and its retries (legacy mode: 5 attempts with backoff, minutes where packets are dropped)
QUICK_CONNECT_TIMEOUT = 5  # seconds; AWS answers a connect within one even across an ocean


def aws_clients(config: SageMakerConfig, session: Any = None, *, quick: bool = False) -> Clients:
    """boto3's clients for `config`'s region; `quick`: a short connect timeout and no retry (a dry run's
    checks, which submit makes again with botocore's patience). `efs` and `fsx` are left out (see service_clients)."""
    return Clients(*service_clients(config, session, ("sagemaker", "s3", "logs"), quick=quick))


def service_clients(config: SageMakerConfig, session: Any, names: tuple[str, ...], *, quick: bool = False) -> list[Any]:
    """boto3's clients of the services `names` for `config`'s region: made when first needed (making one
    loads botocore's model of the service, a noticeable wait), EFS's and FSx's only for a job that reads them."""
    try:
        import boto3  # lazy: the optional 'sagemaker' extra
    except ImportError:
        raise SetupError("the SageMaker backend needs boto3: pip install 'dtrain[sagemaker]'") from None
    try:  # a profile that does not exist, an unreadable ~/.aws/config: botocore raises here
        kw = {}
        if quick:
            from botocore.config import Config
            kw["config"] = Config(connect_timeout=QUICK_CONNECT_TIMEOUT, retries={"max_attempts": 0})
        session = session or boto3.session.Session(region_name=config.region)
        return [session.client(n, region_name=config.region, **kw) for n in names]
    except Exception as err:
        line = _botocore_line("AWS setup", err)
        if line is None and isinstance(err, ValueError):  # AWS_MAX_ATTEMPTS=abc: botocore's int() of it
            line = (f"AWS setup: a setting botocore reads from the environment (AWS_*) or the AWS config file is "
                    f"not valid ({cut(err, MAX_MESSAGE)}); check your AWS configuration (aws configure list)")
        if line is None:
            raise
        raise BackendError(line) from None


def _botocore_line(what: str, err: Exception) -> str | None:
    """One line for botocore's own errors (credentials, configuration, network); None for any other."""
    try:
        from botocore import exceptions as bx
    except ImportError:  # the --local clients raise no botocore errors
        return None
    if isinstance(err, (bx.NoCredentialsError, bx.PartialCredentialsError)):
        return (f"{what}: no AWS credentials found; set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
                f"(they are never stored by dtrain)")
    if isinstance(err, (bx.ConnectionError, bx.HTTPClientError)):  # refused, timed out, closed midway
        return f"{what}: cannot reach AWS ({cut(err, MAX_MESSAGE)}); {_reach_fix()}"
    if isinstance(err, bx.BotoCoreError):
        return (f"{what}: {type(err).__name__}: {cut(err, MAX_MESSAGE)}; check your AWS configuration "
                f"(aws configure list; aws sso login for an SSO profile)")
    return None


def _reach_fix() -> str:
    """What to check when AWS does not answer: an endpoint variable sends every call to its URL instead
    of the region's (a LocalStack or a proxy that is down), so it is named where set."""
    import os
    for var in ("AWS_ENDPOINT_URL_SAGEMAKER", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        if os.environ.get(var):
            return f"check the network, or ${var} ({cut(os.environ[var], 200)}; unset it to call AWS itself)"
    return "check the network and --region"


def aws_call(what: str, fn: Callable, **kw) -> Any:
    """Call AWS; its refusals become one-line BackendErrors that carry the AWS error code (a dtrain error the
    --local contract raises is one line already: as it is)."""
    try:
        return fn(**kw)
    except DtrainError:
        raise
    except Exception as err:  # botocore's exceptions are only importable when boto3 is installed
        response = getattr(err, "response", None)  # botocore's network errors carry response=None
        code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
        if code is None:
            line = _botocore_line(what, err)
            if line is None:
                raise
            if _unanswered(err):  # the network: a poll may ask again (Backend.wait)
                raise UnavailableError(line) from None
            raise BackendError(line) from None
        message = cut(response["Error"].get("Message", ""), MAX_MESSAGE)
        if code in ("NoSuchKey", "404", "ResourceNotFound", "ResourceNotFoundException") or (
                code == "ValidationException" and ("not found" in message.lower() or "could not find" in message.lower())):
            raise NotFoundError(f"{what} not found ({code}: {message}); see the names with dtrain list") from None
        hint = HINTS.get(code) or (_AWS_SIDE if str(code).isdigit() and int(code) >= 500 else "see the AWS message")
        if isinstance(kw.get("Bucket"), str):
            hint = hint.replace("s3://BUCKET", f"s3://{kw['Bucket']}")
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        later = code in RETRY_LATER or (str(code).isdigit() and int(code) >= 500) or (
            isinstance(status, int) and (status == 429 or status >= 500))
        # throttled or failing on AWS's side (botocore already retried): a poll may ask again
        refused = (UnavailableError if later else BackendError)(f"{what}: {code}: {message}; {hint}")
        refused.code = code  # AWS's error code, for a caller that tells one refusal from another
        raise refused from None


# AWS's codes for "ask again later": throttling and its own failures (botocore's retry handler's set)
RETRY_LATER = frozenset({"Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
                         "TooManyRequestsException", "ProvisionedThroughputExceededException",
                         "TransactionInProgressException", "RequestLimitExceeded", "BandwidthLimitExceeded",
                         "LimitExceededException", "RequestThrottled", "SlowDown", "PriorRequestNotComplete",
                         "EC2ThrottledException", "InternalFailure", "InternalError", "ServiceUnavailable",
                         "InternalServerError", "InternalServerException"})


def _unanswered(err: Exception) -> bool:
    """botocore's network errors: no answer came (refused, timed out, closed midway)."""
    try:
        from botocore import exceptions as bx
    except ImportError:
        return False
    return isinstance(err, (bx.ConnectionError, bx.HTTPClientError))


def read_body(what: str, body: Any, out: Any, *, total: int | None = None, chunk: int = 1 << 20) -> int:
    """Copy an S3 object's streaming body into the binary file `out`; bytes copied. botocore raises
    a connection that breaks or stalls midway from `read` (IncompleteReadError, ResponseStreamingError,
    ReadTimeoutError), long after get_object returned: one line here, as every AWS refusal."""
    done = 0
    while True:
        try:
            block = body.read(chunk)
        except Exception as err:
            if _botocore_line(what, err) is None:
                raise
            of = f" of {total}" if total is not None else ""
            raise BackendError(f"{what} broke off after {done}{of} bytes ({type(err).__name__}: "
                               f"{cut(err, MAX_MESSAGE)}); nothing was kept: run the command again") from None
        if not block:
            return done
        out.write(block)
        done += len(block)
