"""How dtrain reaches SageMaker: a frozen, keyword-only config stored in config.yaml.

`dtrain config sagemaker --role ARN --bucket NAME --region R ...` writes it. Credentials are
never here: boto3 finds them through its standard chain (environment, ~/.aws, instance role).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

from dtrain.errors import SpecError, Worded
from dtrain.names import SHOWN, cut, listed, near_name, shown
from dtrain.spec_sagemaker import INSTANCE_RE, REGION_RE, ROLE_RE, gpu_type, instance_family, option_named
from dtrain.spec_sagemaker import S3_BUCKET_RE as BUCKET_RE  # S3 bucket naming rules
# No leading or trailing "/", no "//": the prefix is joined into s3://BUCKET/PREFIX/JOB/...
PREFIX_RE = re.compile(r"^(?=.{0,200}\Z)(?:[A-Za-z0-9!_.*'()\-]+(?:/[A-Za-z0-9!_.*'()\-]+)*)?\Z")
# botocore's VpcConfig: ids of at most 32 characters, 1-16 subnets, 1-5 security groups.
SUBNET_RE = re.compile(r"^subnet-[0-9a-z]{1,25}\Z")
SG_RE = re.compile(r"^sg-[0-9a-z]{1,29}\Z")
VPC_LIMITS = {"subnets": 16, "security-groups": 5}
IMAGE_RE = re.compile(r"^[\S]{1,255}\Z")
# The AWS Deep Learning Container with PyTorch and the SageMaker training toolkit: the image the
# SageMaker SDK picks for PyTorch 2.3.0 (py311), in the region's registry, for the instance type's
# processor (a g or p type: gpu; cpu otherwise).
DEFAULT_IMAGE = "{account}.dkr.ecr.{region}.{domain}/pytorch-training:2.3.0-{processor}-py311"
DLC_ACCOUNT = "763104351884"
# Regions whose images live in another account (the SDK's image_uri_config/pytorch.json for
# pytorch-training 2.3.0); a region in neither list has no known image: --image says which.
DLC_ACCOUNTS = {
    "af-south-1": "626614931356", "ap-east-1": "871362719292", "ap-east-2": "975050140332",
    "ap-northeast-3": "364406365360", "ap-south-2": "772153158452", "ap-southeast-3": "907027046896",
    "ap-southeast-4": "457447274322", "ap-southeast-5": "550225433462", "ap-southeast-6": "633930458069",
    "ap-southeast-7": "590183813437", "ca-west-1": "204538143572", "cn-north-1": "727897471807",
    "cn-northwest-1": "727897471807", "eu-central-2": "380420809688", "eu-south-1": "692866216735",
    "eu-south-2": "503227376785", "il-central-1": "780543022126", "me-central-1": "914824155844",
    "me-south-1": "217643126080", "mx-central-1": "637423239942", "us-gov-east-1": "446045086412",
    "us-gov-west-1": "442386744353",
}
DLC_REGIONS = {*DLC_ACCOUNTS, "ap-northeast-1", "ap-northeast-2", "ap-south-1", "ap-southeast-1", "ap-southeast-2",
               "ca-central-1", "eu-central-1", "eu-north-1", "eu-west-1", "eu-west-2", "eu-west-3", "sa-east-1",
               "us-east-1", "us-east-2", "us-west-1", "us-west-2"}
LOCAL_ROLE = "arn:aws:iam::000000000000:role/dtrain-local"  # what --local jobs name (nothing checks it)
LOCAL_BUCKET = "dtrain-local"  # the bucket a --local job's "S3" folder stands for


def setting_named(key: str, door: str = "cli") -> str:
    """A setting as a refusal names it, in the words of the door it came through: the CLI's flag
    (--instance-type; config.yaml's and the HTTP API's refusals say it so too), the SDK's argument of
    Client.configure_sagemaker (instance_type). A job's SageMaker options are named so (option_named),
    whose flags these settings' are, but for the CLI as the default door."""
    return option_named(key, door)


@dataclass(frozen=True, kw_only=True)
class SageMakerConfig:
    """Everything the SageMaker backend needs besides the job spec."""

    role: str | None = None  # IAM role ARN SageMaker assumes (RoleArn)
    bucket: str | None = None  # S3 bucket for code, checkpoints and model artifacts
    region: str = "us-east-1"  # AWS region of the jobs and the bucket
    prefix: str = "dtrain"  # key prefix: s3://BUCKET/PREFIX/JOB/{source,output,checkpoints}
    image: str | None = None  # training image URI; None: the AWS PyTorch training image of the region
    instance_type: str = "ml.m5.xlarge"  # instance type of jobs that give none
    subnets: tuple[str, ...] = ()  # VpcConfig subnets (EFS/FSx channels need them)
    security_groups: tuple[str, ...] = ()  # VpcConfig security group ids
    master_port: int = 7777  # rendezvous port the toolkit's torchrun uses (its default)

    def __post_init__(self):
        object.__setattr__(self, "subnets", tuple(self.subnets))
        object.__setattr__(self, "security_groups", tuple(self.security_groups))
        checks = [("role", self.role, ROLE_RE, "arn:aws:iam::123456789012:role/SageMakerRole"),
                  ("bucket", self.bucket, BUCKET_RE, "my-training-bucket"),
                  ("region", self.region, REGION_RE, "us-east-1"),
                  ("prefix", self.prefix, PREFIX_RE, "dtrain"),
                  ("image", self.image, IMAGE_RE, "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.0-cpu-py311"),
                  ("instance_type", self.instance_type, INSTANCE_RE, "ml.m5.xlarge")]
        optional = ("role", "bucket", "image")  # the others have defaults: an empty `region:` in config.yaml is None
        for key, value, pattern, example in checks:
            if (value is not None or key not in optional) and (not isinstance(value, str) or not pattern.match(value)):
                raise Worded(lambda door, key=key, value=value, example=example:
                                     f"invalid SageMaker {setting_named(key, door)} {shown(value)}: use a value "
                                     f"like {example}", "cli")
        for key, values, pattern, example in (("subnets", self.subnets, SUBNET_RE, "subnet-0abc1234"),
                                              ("security_groups", self.security_groups, SG_RE, "sg-0abc1234")):
            bad = [v for v in values if not isinstance(v, str) or not pattern.match(v)]
            limit = VPC_LIMITS[key.replace("_", "-")]
            if bad or len(values) > limit:
                said = cut(", ".join(map(str, bad)) or " ".join(values), SHOWN)
                raise Worded(lambda door, key=key, said=said, limit=limit, example=example:
                                     f"invalid SageMaker {setting_named(key, door)} {said}: use up to {limit} ids "
                                     f"of at most 32 characters like {example}", "cli")
        if bool(self.subnets) != bool(self.security_groups):
            raise Worded(lambda door: (
                "a VPC needs both --subnets and --security-groups; give both or neither (dtrain config sagemaker "
                "--unset subnets security-groups removes a saved VPC)" if door != "sdk" else
                "a VPC needs both subnets and security_groups; give both or neither "
                "(configure_sagemaker(unset=['subnets', 'security_groups']) removes a saved VPC)"), "cli")
        if isinstance(self.master_port, bool) or not isinstance(self.master_port, int) or not 1 <= self.master_port <= 65535:
            raise SpecError(f"invalid SageMaker master_port {self.master_port!r}: use 1..65535")

    @property
    def vpc(self) -> dict[str, list[str]] | None:
        if not self.subnets:
            return None
        return {"SecurityGroupIds": list(self.security_groups), "Subnets": list(self.subnets)}

    def image_uri(self, instance_type: str) -> str:
        """`image`, or the AWS PyTorch training image of the region for the instance type."""
        if self.image:
            return self.image
        if instance_family(instance_type).startswith(("trn", "inf")):
            raise SpecError(f"{instance_type} runs AWS Neuron (Trainium), not CUDA or a CPU: give a Neuron "
                            f"training image with --image, or pick a GPU (ml.g5.xlarge) or CPU (ml.m5.xlarge) type")
        if self.region not in DLC_REGIONS:
            raise SpecError(f"no AWS PyTorch training image is known for region {self.region}: give one with "
                            f"--image (or dtrain config sagemaker --image URI)")
        return DEFAULT_IMAGE.format(account=DLC_ACCOUNTS.get(self.region, DLC_ACCOUNT), region=self.region,
                                    domain="amazonaws.com.cn" if self.region.startswith("cn-") else "amazonaws.com",
                                    processor="gpu" if gpu_type(instance_type) else "cpu")

    def require_aws(self, *, local: str = "--local") -> None:
        """A job bound for AWS needs a role and a bucket; say how to set them. `local`: how the caller's
        door spells a job run on this machine instead (the SDK's sagemaker={'local': True})."""
        missing = [f for f, v in (("--role", self.role), ("--bucket", self.bucket)) if not v]
        if missing:
            raise SpecError(f"SageMaker is not configured ({' and '.join(missing)} missing): run "
                            f"'dtrain config sagemaker --role arn:aws:iam::ACCOUNT:role/ROLE --bucket BUCKET "
                            f"--region REGION', or submit with {local} to run here")

    def for_local(self) -> "SageMakerConfig":
        """The same settings with placeholders where AWS values are missing (a --local job)."""
        from dataclasses import replace
        return replace(self, role=self.role or LOCAL_ROLE, bucket=self.bucket or LOCAL_BUCKET)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["subnets"], d["security_groups"] = list(self.subnets), list(self.security_groups)
        return {k: v for k, v in d.items() if v not in (None, [], ())}

    @classmethod
    def unknown_settings(cls, keys: Iterable[Any]) -> dict[Any, str | None]:
        """The keys among `keys` that are no setting, in the order given, each with the setting one
        slip away from it (None when none is): what every door that takes these settings refuses."""
        known = list(cls.__dataclass_fields__)
        return {key: near_name(key, known) for key in keys if key not in known}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "config.yaml") -> "SageMakerConfig":
        unknown = cls.unknown_settings(sorted(data or {}, key=str))
        if unknown:
            said = [f"{key}{f' (did you mean {near!r}?)' if near else ''}" for key, near in unknown.items()]
            raise SpecError(f"{where}: unknown sagemaker {listed(said, 'setting')}; known: "
                            f"{', '.join(cls.__dataclass_fields__)}")
        return cls(**dict(data or {}))
