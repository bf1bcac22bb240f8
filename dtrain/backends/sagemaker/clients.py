"""The three AWS clients the backend calls, and the one mapping of AWS refusals to dtrain errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from dtrain.backends.sagemaker.config import SageMakerConfig
from dtrain.errors import BackendError, EnvironmentError_, NotFoundError

HINTS = {
    "AccessDenied": "check the role ARN and your credentials (aws sts get-caller-identity) and the bucket policy",
    "AccessDeniedException": "check your credentials (aws sts get-caller-identity) and that the role may be passed",
    "ResourceLimitExceeded": "ask AWS for a higher quota for this instance type, or pick another --instance-type",
    "ValidationException": "fix the value SageMaker names above",
    "ResourceInUse": "training job names are unique for good on SageMaker: submit under a new name",
    "ThrottlingException": "SageMaker is throttling calls: retry in a minute",
    "NoSuchBucket": "create the bucket (aws s3 mb s3://BUCKET) or set another with dtrain config sagemaker --bucket",
}


@dataclass(frozen=True)
class Clients:
    """The three AWS clients the backend calls (boto3's, or the local contract's)."""

    sagemaker: Any
    s3: Any
    logs: Any


def aws_clients(config: SageMakerConfig, session: Any = None) -> Clients:
    try:
        import boto3  # lazy: the optional 'sagemaker' extra
    except ImportError:
        raise EnvironmentError_("the SageMaker backend needs boto3: pip install 'dtrain[sagemaker]'") from None
    session = session or boto3.session.Session(region_name=config.region)
    return Clients(*(session.client(n, region_name=config.region) for n in ("sagemaker", "s3", "logs")))


def aws_call(what: str, fn: Callable, **kw) -> Any:
    """Call AWS; its refusals become one-line BackendErrors that carry the AWS error code."""
    try:
        return fn(**kw)
    except Exception as err:  # botocore's exceptions are only importable when boto3 is installed
        code = getattr(err, "response", {}).get("Error", {}).get("Code") if hasattr(err, "response") else None
        if code is None and type(err).__name__ in ("NoCredentialsError", "PartialCredentialsError"):
            raise BackendError(f"{what}: no AWS credentials found; set AWS_PROFILE or AWS_ACCESS_KEY_ID/"
                               f"AWS_SECRET_ACCESS_KEY (they are never stored by dtrain)") from None
        if code is None and type(err).__name__ in ("EndpointConnectionError", "ConnectTimeoutError"):
            raise BackendError(f"{what}: cannot reach AWS ({err}); check the network and --region") from None
        if code is None:
            raise
        message = err.response.get("Error", {}).get("Message", "")
        if code in ("NoSuchKey", "404", "ResourceNotFound") or (
                code == "ValidationException" and ("not found" in message.lower() or "could not find" in message.lower())):
            raise NotFoundError(f"{what} not found ({code}: {message}); see the names with dtrain list") from None
        raise BackendError(f"{what}: {code}: {message}; {HINTS.get(code, 'see the AWS message')}") from None
