"""A job's EFS and FSx for Lustre channels are asked about before CreateTrainingJob: a file system that does not
exist in the region, an EFS one without a mount target, or an FSx path without its mount name was taken by
SageMaker and failed once the instances started ("ClientError: ... unable to mount"), billed; one the job's
subnets may not reach is warned of (a mount target serves its Availability Zone). botocore's
Stubber against the real EFS and FSx models for AWS's answers moto lacks (AccessDenied, mount names, file
system types); moto's server (EC2, EFS, FSx, SageMaker, S3) for the submit itself."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

import pytest

boto3 = pytest.importorskip("boto3")
from botocore.stub import Stubber  # noqa: E402

from test_audit15_sm import cli  # noqa: E402,F401  (dtrain's CLI in this process, AWS at moto's server)
from test_sagemaker_backend import CFG, clients, code, moto_url, session, spec  # noqa: E402,F401

from dtrain.backends.sagemaker.backend import Clients, SageMakerBackend  # noqa: E402
from dtrain.backends.sagemaker.config import SageMakerConfig  # noqa: E402
from dtrain.backends.sagemaker.filesystems import FileSystemChannel, check_file_system  # noqa: E402
from dtrain.errors import NotFoundError, SpecError  # noqa: E402

FS = "fs-0123456789abcdef0"
MINE, OTHER = "subnet-0aaa1111", "subnet-0bbb2222"
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _efs_fs(fs_id: str = FS) -> dict:
    return {"OwnerId": "123456789012", "CreationToken": "t", "FileSystemId": fs_id, "CreationTime": T0,
            "LifeCycleState": "available", "NumberOfMountTargets": 1, "SizeInBytes": {"Value": 6144},
            "PerformanceMode": "generalPurpose", "Tags": []}


def _target(subnet: str, state: str = "available") -> dict:
    return {"MountTargetId": "fsmt-0123abcd", "FileSystemId": FS, "SubnetId": subnet, "LifeCycleState": state}


def _fsx_fs(subnet: str = MINE, *, kind: str = "LUSTRE", mount: str = "abcdefgh") -> dict:
    return {"FileSystemId": FS, "FileSystemType": kind, "Lifecycle": "AVAILABLE", "SubnetIds": [subnet],
            "LustreConfiguration": {"MountName": mount, "DeploymentType": "SCRATCH_2"}}


@pytest.fixture
def stubbed():
    """An `efs` and an `fsx` client whose answers the test gives (nothing reaches the network)."""
    s = session()
    efs, fsx = s.client("efs"), s.client("fsx")
    with Stubber(efs) as e, Stubber(fsx) as f:
        yield efs, e, fsx, f
        e.assert_no_pending_responses()
        f.assert_no_pending_responses()


def efs_ch(path: str = "/data") -> FileSystemChannel:
    return FileSystemChannel("training", "EFS", FS, path)


def fsx_ch(path: str = "/abcdefgh/data") -> FileSystemChannel:
    return FileSystemChannel("training", "FSxLustre", FS, path)


def test_an_efs_file_system_that_does_not_exist_is_refused_naming_its_id_and_region(stubbed):
    efs, e, _, _ = stubbed
    e.add_client_error("describe_file_systems", "FileSystemNotFound", "File system does not exist.", 404,
                       expected_params={"FileSystemId": FS})
    with pytest.raises(SpecError, match=rf"channel training: EFS file system {FS} in eu-west-1 does not exist.*"
                                        r"aws efs describe-file-systems --region eu-west-1"):
        check_file_system(efs, efs_ch(), [MINE], "eu-west-1")


@pytest.mark.parametrize("targets", [[], [_target(MINE, "deleting")]])
def test_an_efs_file_system_without_any_mount_target_is_refused(stubbed, targets):
    efs, e, _, _ = stubbed
    e.add_response("describe_file_systems", {"FileSystems": [_efs_fs()]}, {"FileSystemId": FS})
    e.add_response("describe_mount_targets", {"MountTargets": targets}, {"FileSystemId": FS})
    with pytest.raises(SpecError) as err:
        check_file_system(efs, efs_ch(), [MINE], "us-east-1")
    line = str(err.value)
    assert "\n" not in line and "has no mount target" in line and "unable to mount" in line
    assert f"aws efs create-mount-target --file-system-id {FS} --subnet-id {MINE}" in line


def test_an_efs_file_system_whose_mount_targets_are_in_other_subnets_is_a_warning_not_a_refusal(stubbed):
    """A mount target serves its whole Availability Zone: a job in another subnet of that zone and VPC mounts
    the file system, so only a warning says what to check."""
    efs, e, _, _ = stubbed
    e.add_response("describe_file_systems", {"FileSystems": [_efs_fs()]}, {"FileSystemId": FS})
    e.add_response("describe_mount_targets", {"MountTargets": [_target(OTHER)]}, {"FileSystemId": FS})
    line = check_file_system(efs, efs_ch(), [MINE], "us-east-1")
    assert line is not None and "\n" not in line and f"its mount targets are in {OTHER}" in line
    assert "Availability Zone" in line and f"--subnet-id {MINE}" in line


def test_an_efs_file_system_with_a_mount_target_in_a_jobs_subnet_passes(stubbed):
    efs, e, _, _ = stubbed
    e.add_response("describe_file_systems", {"FileSystems": [_efs_fs()]}, {"FileSystemId": FS})
    e.add_response("describe_mount_targets", {"MountTargets": [_target(OTHER), _target(MINE)]}, {"FileSystemId": FS})
    assert check_file_system(efs, efs_ch(), [MINE, "subnet-0ccc3333"], "us-east-1") is None


@pytest.mark.parametrize("op, action", [("describe_file_systems", "elasticfilesystem:DescribeFileSystems"),
                                        ("describe_mount_targets", "elasticfilesystem:DescribeMountTargets")])
def test_an_efs_describe_refused_to_these_credentials_is_a_warning_naming_the_action(stubbed, op, action):
    efs, e, _, _ = stubbed
    if op == "describe_mount_targets":
        e.add_response("describe_file_systems", {"FileSystems": [_efs_fs()]}, {"FileSystemId": FS})
    e.add_client_error(op, "AccessDeniedException", "not authorized", 403)
    line = check_file_system(efs, efs_ch(), [MINE], "us-east-1")
    assert line is not None and "\n" not in line and action in line and "submitted all the same" in line


def test_an_fsx_file_system_that_does_not_exist_is_refused(stubbed):
    _, _, fsx, f = stubbed
    f.add_client_error("describe_file_systems", "FileSystemNotFound", "nope", 400,
                       expected_params={"FileSystemIds": [FS]})
    with pytest.raises(SpecError, match=rf"FSx for Lustre file system {FS} in us-east-1 does not exist.*"
                                        r"aws fsx describe-file-systems"):
        check_file_system(fsx, fsx_ch(), [MINE], "us-east-1")


@pytest.mark.parametrize("answer, path, said", [
    (_fsx_fs(mount="fsx"), "/abcdefgh/data", f"is mounted as /fsx.*--channel training=fsx://{FS}/fsx/data"),
    (_fsx_fs(kind="ONTAP"), "/abcdefgh/data", "SageMaker mounts FSx for Lustre only"),
    ({**_fsx_fs(), "Lifecycle": "FAILED"}, "/abcdefgh/data", "is FAILED"),
])
def test_an_fsx_file_system_sagemaker_could_not_mount_is_refused(stubbed, answer, path, said):
    _, _, fsx, f = stubbed
    f.add_response("describe_file_systems", {"FileSystems": [answer]}, {"FileSystemIds": [FS]})
    with pytest.raises(SpecError, match=said):
        check_file_system(fsx, fsx_ch(path), [MINE], "us-east-1")


def test_an_fsx_file_system_in_another_subnet_is_a_warning_not_a_refusal(stubbed):
    """Subnets of one VPC route to each other: a job in another subnet may mount it (security groups allowing)."""
    _, _, fsx, f = stubbed
    f.add_response("describe_file_systems", {"FileSystems": [_fsx_fs(OTHER)]}, {"FileSystemIds": [FS]})
    line = check_file_system(fsx, fsx_ch(), [MINE], "us-east-1")
    assert line is not None and f"is in {OTHER}, not among the job's subnets" in line and "TCP 988" in line


def test_an_fsx_file_system_in_a_jobs_subnet_with_its_mount_name_passes(stubbed):
    _, _, fsx, f = stubbed
    f.add_response("describe_file_systems", {"FileSystems": [_fsx_fs()]}, {"FileSystemIds": [FS]})
    assert check_file_system(fsx, fsx_ch(), [MINE], "us-east-1") is None


def test_a_file_system_refusal_in_a_pipeline_names_its_parameters(stubbed):
    """The hybrid pipeline's data_uri is the job's training channel, and a step pod has no config.yaml: what
    EFS and FSx refuse names --param data_uri and --param sagemaker_region, as an S3 channel's refusal does."""
    from dtrain.pipelines.step_specs import in_pipeline_words

    efs, e, fsx, f = stubbed
    e.add_client_error("describe_file_systems", "FileSystemNotFound", "File system does not exist.", 404)
    f.add_response("describe_file_systems", {"FileSystems": [_fsx_fs(mount="fsx")]}, {"FileSystemIds": [FS]})
    f.add_response("describe_file_systems", {"FileSystems": [_fsx_fs(kind="WINDOWS")]}, {"FileSystemIds": [FS]})
    said = []
    for client, ch in ((efs, efs_ch()), (fsx, fsx_ch()), (fsx, fsx_ch())):
        with pytest.raises(SpecError) as err:
            check_file_system(client, ch, [MINE], "eu-west-1")
        said.append(in_pipeline_words(str(err.value)))
    assert said[0].startswith(f"--param data_uri: EFS file system {FS} in eu-west-1 does not exist"), said
    assert said[0].endswith("or use the file system's region (--param sagemaker_region=REGION)"), said
    assert said[1].startswith(f"--param data_uri: FSx for Lustre file system {FS} in eu-west-1 is mounted as /fsx")
    assert said[1].endswith(f"; pass --param data_uri=fsx://{FS}/fsx/data"), said
    assert said[2].endswith("use a Lustre file system, or an EFS one (--param data_uri=efs://FS-ID/PATH)"), said
    assert all("channel training" not in s and "dtrain config" not in s for s in said), said
    other = FileSystemChannel("extra", "EFS", FS, "/data")  # another channel: not the pipeline's data_uri
    e.add_client_error("describe_file_systems", "FileSystemNotFound", "File system does not exist.", 404)
    with pytest.raises(SpecError) as err:
        check_file_system(efs, other, [MINE], "eu-west-1")
    assert in_pipeline_words(str(err.value)) == str(err.value)


def test_an_fsx_describe_refused_is_a_warning_naming_the_action(stubbed):
    _, _, fsx, f = stubbed
    f.add_client_error("describe_file_systems", "AccessDeniedException", "not authorized", 400)
    assert "fsx:DescribeFileSystems" in check_file_system(fsx, fsx_ch(), [MINE], "us-east-1")


# ---- through submit, against moto's server ------------------------------------------------------------------
@pytest.fixture(scope="module")
def net(moto_url):
    """A VPC with two subnets on moto's EC2, an EFS file system with a mount target in the first only, one
    without any mount target, and an FSx for Lustre one in the second; the efs, fsx and ec2 clients. Security
    groups: `job` (all out, as AWS makes a group), `closed` (nothing out), `stranger` (all out, named by no
    rule), the mount target's `mt` (NFS in from job and closed), `lustre988` (TCP 988 out only), `lustre` (TCP 988
    and 1018-1023 out, as two rules), NFS out only to 192.168.0.0/16 (`to_far`), to `stranger` (`to_stranger`),
    to the first subnet's CIDR (`to_subnet`) or to `mt_cidr` (`to_mt`); `cidr_fs` has a mount target in the first
    subnet whose group lets NFS in from that subnet's CIDR only. FSx: `fsx`'s network interface (in the second
    subnet) has `fsx_sg`, which lets Lustre in from the VPC's CIDR; `fsx_narrow`'s has `fsx_988`, which lets TCP
    988 in from `job` only. moto's FSx answers no NetworkInterfaceIds, so the fsx client given is _WithInterfaces
    (moto's `fsx_moto` underneath)."""
    s = session()
    ec2, efs, fsx = (s.client(n, endpoint_url=moto_url) for n in ("ec2", "efs", "fsx"))
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    a, b = (ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.9.{i}.0/24")["Subnet"]["SubnetId"] for i in (1, 2))
    sg = {n: ec2.create_security_group(GroupName=n, Description=n, VpcId=vpc)["GroupId"]
          for n in ("job", "closed", "stranger", "mt", "mt_cidr", "lustre988", "lustre", "fsx_sg", "fsx_988",
                     "to_far", "to_stranger", "to_subnet", "to_mt")}
    for n in ("closed", "lustre988", "lustre", "to_far", "to_stranger", "to_subnet", "to_mt"):
        ec2.revoke_security_group_egress(GroupId=sg[n], IpPermissions=[{"IpProtocol": "-1",
                                                                        "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}])
    for n, ports in (("lustre988", [(988, 988)]), ("lustre", [(988, 988), (1018, 1023)])):
        ec2.authorize_security_group_egress(GroupId=sg[n], IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": lo, "ToPort": hi, "IpRanges": [{"CidrIp": "10.9.0.0/16"}]}
            for lo, hi in ports])
    for n, to in (("to_far", {"IpRanges": [{"CidrIp": "192.168.0.0/16"}]}),
                  ("to_stranger", {"UserIdGroupPairs": [{"GroupId": sg["stranger"]}]}),
                  ("to_subnet", {"IpRanges": [{"CidrIp": "10.9.1.0/24"}]}),
                  ("to_mt", {"UserIdGroupPairs": [{"GroupId": sg["mt_cidr"]}]})):
        ec2.authorize_security_group_egress(GroupId=sg[n], IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 2049, "ToPort": 2049, **to}])
    ec2.authorize_security_group_ingress(GroupId=sg["mt"], IpPermissions=[{
        "IpProtocol": "tcp", "FromPort": 2049, "ToPort": 2049,
        "UserIdGroupPairs": [{"GroupId": sg["job"]}, {"GroupId": sg["closed"]}]}])
    ec2.authorize_security_group_ingress(GroupId=sg["mt_cidr"], IpPermissions=[{
        "IpProtocol": "tcp", "FromPort": 2049, "ToPort": 2049, "IpRanges": [{"CidrIp": "10.9.1.0/24"}]}])
    fs = efs.create_file_system(CreationToken="dtrain-fs-test")["FileSystemId"]
    efs.create_mount_target(FileSystemId=fs, SubnetId=a, SecurityGroups=[sg["mt"]])
    cidr_fs = efs.create_file_system(CreationToken="dtrain-fs-cidr")["FileSystemId"]
    efs.create_mount_target(FileSystemId=cidr_fs, SubnetId=a, SecurityGroups=[sg["mt_cidr"]])
    bare = efs.create_file_system(CreationToken="dtrain-fs-bare")["FileSystemId"]
    ec2.authorize_security_group_ingress(GroupId=sg["fsx_sg"], IpPermissions=[
        {"IpProtocol": "tcp", "FromPort": lo, "ToPort": hi, "IpRanges": [{"CidrIp": "10.9.0.0/16"}]}
        for lo, hi in ((988, 988), (1018, 1023))])
    ec2.authorize_security_group_ingress(GroupId=sg["fsx_988"], IpPermissions=[{
        "IpProtocol": "tcp", "FromPort": 988, "ToPort": 988, "UserIdGroupPairs": [{"GroupId": sg["job"]}]}])
    lustre, narrow = (fsx.create_file_system(FileSystemType="LUSTRE", StorageCapacity=1200, SubnetIds=[b],
                                             LustreConfiguration={"DeploymentType": "SCRATCH_2"})
                      ["FileSystem"]["FileSystemId"] for _ in range(2))
    enis = {f: [ec2.create_network_interface(SubnetId=b, Groups=[sg[g]])["NetworkInterface"]["NetworkInterfaceId"]]
            for f, g in ((lustre, "fsx_sg"), (narrow, "fsx_988"))}
    return {"a": a, "b": b, "efs": fs, "cidr_fs": cidr_fs, "bare": bare, "fsx": lustre, "fsx_narrow": narrow,
            "efs_client": efs, "fsx_client": _WithInterfaces(fsx, enis), "fsx_moto": fsx, "ec2_client": ec2, **sg}


class _WithInterfaces:
    """moto's FSx client, whose DescribeFileSystems answer names no NetworkInterfaceIds (moto 5.2 keeps none), with
    those the test made on moto's EC2 added to it as AWS's answer has them; every other call is moto's own."""

    def __init__(self, fsx, enis: dict[str, list[str]]):
        self.fsx, self.enis = fsx, enis

    def describe_file_systems(self, **kw) -> dict:
        got = self.fsx.describe_file_systems(**kw)
        for fs in got.get("FileSystems") or []:
            fs["NetworkInterfaceIds"] = list(self.enis.get(fs["FileSystemId"], []))
        return got

    def __getattr__(self, name: str):
        return getattr(self.fsx, name)


def _backend(clients, net, code, subnet: str, group: str = "job", *, ec2=None) -> SageMakerBackend:  # noqa: F811
    cfg = SageMakerConfig(role=CFG.role, bucket=CFG.bucket, region=CFG.region, subnets=(subnet,),
                          security_groups=(net[group],))
    return SageMakerBackend(cfg, clients=Clients(clients.sagemaker, clients.s3, clients.logs, net["efs_client"],
                                                 net["fsx_client"], ec2 or net["ec2_client"]), cwd=str(code))


def _uploaded(clients, name: str) -> bool:  # noqa: F811
    return bool(clients.s3.list_objects_v2(Bucket=CFG.bucket, Prefix=f"dtrain/{name}/").get("KeyCount"))


def _warned(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_submit_with_an_efs_channel_its_subnet_reaches_creates_the_job(clients, net, code):  # noqa: F811
    be = _backend(clients, net, code, net["a"])
    be.submit(spec("efs-ok", sm=dict(channels=(f"training=efs://{net['efs']}/data",))))
    desc = clients.sagemaker.describe_training_job(TrainingJobName="efs-ok")
    assert desc["InputDataConfig"][0]["DataSource"]["FileSystemDataSource"]["FileSystemId"] == net["efs"]


@pytest.mark.parametrize("uri, subnet, said", [
    ("efs://fs-0123456789abcdef0/data", "a", "EFS file system fs-0123456789abcdef0 in us-east-1 does not exist"),
    ("efs://{bare}/data", "a", "EFS file system {bare} in us-east-1 has no mount target"),
    ("fsx://fs-0123456789abcdef0/abcdefgh/data", "b", "FSx for Lustre file system fs-0123456789abcdef0 in us-east-1 "
                                                     "does not exist"),
])
def test_submit_refuses_a_file_system_its_subnets_cannot_mount_before_anything_is_uploaded(
        clients, net, code, uri, subnet, said):  # noqa: F811
    be = _backend(clients, net, code, net[subnet])
    name = f"fs-bad-{abs(hash((uri, subnet))) % 10 ** 6}"
    with pytest.raises(SpecError) as err:
        be.submit(spec(name, sm=dict(channels=("training=" + uri.format(**net),))))
    assert said.format(**net) in str(err.value)
    assert not _uploaded(clients, name)  # refused before the code went to S3 and before CreateTrainingJob
    with pytest.raises(NotFoundError):
        be.get(name)


@pytest.mark.parametrize("uri, subnet, said", [
    ("efs://fs-0123456789abcdef0/data", "a", "EFS file system fs-0123456789abcdef0 in us-east-1 does not exist"),
    ("efs://{bare}/data", "a", "EFS file system {bare} in us-east-1 has no mount target"),
    ("fsx://fs-0123456789abcdef0/abcdefgh/data", "b", "FSx for Lustre file system fs-0123456789abcdef0 in us-east-1 "
                                                     "does not exist"),
])
def test_the_dry_run_refuses_a_file_system_as_submit_would(clients, net, code, uri, subnet, said):  # noqa: F811
    """The dry run makes submit's describe calls of EFS and FSx too: it refused nothing of a file system a
    submit then refused."""
    be = _backend(clients, net, code, net[subnet])
    with pytest.raises(SpecError) as err:
        be.render(spec("fs-dry-bad", sm=dict(channels=("training=" + uri.format(**net),))))
    assert said.format(**net) in str(err.value)


def test_the_dry_run_warns_as_submit_would_and_shows_the_requests(clients, net, code, caplog):  # noqa: F811
    be = _backend(clients, net, code, net["b"])
    with caplog.at_level(logging.WARNING):
        reqs = be.render(spec("fs-dry", sm=dict(channels=(f"training=efs://{net['efs']}/data",))))
    warned = _warned(caplog)
    assert len(warned) == 1 and f"its mount targets are in {net['a']}" in warned[0], warned
    assert "SageMaker.CreateTrainingJob" in reqs[-1]
    with pytest.raises(NotFoundError):
        be.get("fs-dry")  # nothing made


def _efs_describe_refused(clients, net, code, caplog, verb: str, name: str) -> list[str]:  # noqa: F811
    """The warnings of backend `verb` ("render" or "submit") of job `name`, whose channel is on the EFS file
    system, while EFS refuses DescribeFileSystems to these credentials (no FSx client)."""
    efs = session().client("efs")
    be = SageMakerBackend(SageMakerConfig(role=CFG.role, bucket=CFG.bucket, region=CFG.region, subnets=(net["a"],),
                                          security_groups=("sg-0abc1234",)),
                          clients=Clients(clients.sagemaker, clients.s3, clients.logs, efs, None, net["ec2_client"]),
                          cwd=str(code))
    with Stubber(efs) as e, caplog.at_level(logging.WARNING):
        e.add_client_error("describe_file_systems", "AccessDeniedException", "not authorized", 403)
        getattr(be, verb)(spec(name, sm=dict(channels=(f"training=efs://{net['efs']}/data",))))
    return _warned(caplog)


def test_a_dry_run_efs_describe_refused_says_what_a_submit_would_do(clients, net, code, caplog):  # noqa: F811
    warned = _efs_describe_refused(clients, net, code, caplog, "render", "efs-dry-denied")
    assert len(warned) == 1 and "elasticfilesystem:DescribeFileSystems" in warned[0]
    assert "a submit goes on all the same" in warned[0]


def test_a_refused_efs_describe_warns_once_and_the_job_is_created(clients, net, code, caplog):  # noqa: F811
    warned = _efs_describe_refused(clients, net, code, caplog, "submit", "efs-denied")
    assert len(warned) == 1 and "elasticfilesystem:DescribeFileSystems" in warned[0]
    assert clients.sagemaker.describe_training_job(TrainingJobName="efs-denied")["TrainingJobName"] == "efs-denied"


@pytest.mark.slow  # a CLI submit against moto, its clients made from boto3's standard chain
def test_cli_submit_of_an_efs_channel_without_a_mount_target_is_one_line_and_exit_2(cli, clients, net):  # noqa: F811
    assert cli("config", "sagemaker", "--subnets", net["b"], "--security-groups", "sg-0abc1234")[0] == 0
    rc, out, err = cli("submit", "fs-cli", "--backend", "sagemaker", "--channel", f"training=efs://{net['bare']}/data",
                       "--", "python", "train.py")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"EFS file system {net['bare']} in us-east-1 has no mount target" in err
    assert not _uploaded(clients, "fs-cli")


@pytest.mark.parametrize("uri, subnet, said", [("efs://{efs}/data", "b", "its mount targets are in {a}"),
                                               ("fsx://{fsx}/abcdefgh/data", "a", "is in {b}, not among")])
def test_submit_to_a_subnet_that_may_not_reach_the_file_system_warns_and_creates_the_job(
        clients, net, code, caplog, uri, subnet, said):  # noqa: F811
    be = _backend(clients, net, code, net[subnet])
    name = f"fs-doubt-{subnet}"
    with caplog.at_level(logging.WARNING):
        be.submit(spec(name, sm=dict(channels=("training=" + uri.format(**net),))))
    warned = _warned(caplog)
    assert len(warned) == 1 and said.format(**net) in warned[0], warned
    assert clients.sagemaker.describe_training_job(TrainingJobName=name)["TrainingJobName"] == name


# ---- the job's security groups (EC2 DescribeSecurityGroups, EFS DescribeMountTargetSecurityGroups) -----------
@pytest.mark.parametrize("uri, subnet, group, said", [
    # the job's group lets nothing out: the egress fix names it and the mount target's group
    ("efs://{efs}/data", "a", "closed", ("no outbound rule of the job's security groups ({closed}) allows NFS (TCP "
                                         "2049)", "(aws ec2 authorize-security-group-egress --group-id {closed} "
                                         "--protocol tcp --port 2049 --source-group {mt})")),
    # (FSx: to its network interfaces' group)
    ("fsx://{fsx}/abcdefgh/data", "b", "closed", ("allows Lustre (TCP 988, 1018-1023) to the file system (", "(aws ec2 "
                                                  "authorize-security-group-egress --group-id {closed} --protocol tcp "
                                                  "--port 988 --source-group {fsx_sg}; aws ec2 "
                                                  "authorize-security-group-egress --group-id {closed} --protocol tcp "
                                                  "--port 1018-1023 --source-group {fsx_sg})")),
    # Lustre's 988 out but not 1018-1023 (AWS's "File system access control with Amazon VPC"): those are named
    ("fsx://{fsx}/abcdefgh/data", "b", "lustre988", ("allows TCP 1018-1023 of the ports Lustre needs (TCP 988, "
                                                     "1018-1023)", "allow it (aws ec2 authorize-security-group-egress "
                                                     "--group-id {lustre988} --protocol tcp --port 1018-1023 "
                                                     "--source-group {fsx_sg})")),
    # the mount target's group lets NFS in from other groups only, or from another subnet's CIDR
    ("efs://{efs}/data", "a", "stranger", ("no inbound rule of its mount targets' security groups ({mt}) allows NFS "
                                           "(TCP 2049) from the job's", "(aws ec2 authorize-security-group-ingress "
                                           "--group-id {mt} --protocol tcp --port 2049 --source-group {stranger})")),
    ("efs://{cidr_fs}/data", "b", "job", ("no inbound rule of its mount targets' security groups ({mt_cidr})",
                                          "--group-id {mt_cidr} --protocol tcp --port 2049 --source-group {job}")),
])
def test_security_groups_that_block_the_mount_are_warned_of_naming_the_group_and_the_fix(
        clients, net, code, caplog, uri, subnet, group, said):  # noqa: F811
    """A warning, not a refusal: the rules may be changed before the job starts; the job is created."""
    be = _backend(clients, net, code, net[subnet], group)
    name = f"sg-{group}-{subnet}-{uri[:3]}"
    with caplog.at_level(logging.WARNING):
        be.submit(spec(name, sm=dict(channels=("training=" + uri.format(**net),))))
    parts = [p.format(**net) for p in said]
    assert [w for w in _warned(caplog) if all(p in w for p in parts) and "\n" not in w], (parts, _warned(caplog))
    assert clients.sagemaker.describe_training_job(TrainingJobName=name)["TrainingJobName"] == name


@pytest.mark.parametrize("uri, group", [("efs://{efs}/data", "job"), ("efs://{cidr_fs}/data", "stranger"),
                                        ("fsx://{fsx}/abcdefgh/data", "stranger"),
                                        ("fsx://{fsx}/abcdefgh/data", "lustre")])
def test_security_groups_that_let_the_mount_through_say_nothing(clients, net, code, caplog, uri, group):  # noqa: F811
    """By group (job's in the mount target's rule), by CIDR (the job's subnet's), all out or Lustre's ports (FSx)."""
    subnet = "b" if uri.startswith("fsx") else "a"
    be = _backend(clients, net, code, net[subnet], group)
    with caplog.at_level(logging.WARNING):
        be.render(spec("sg-fine", sm=dict(channels=("training=" + uri.format(**net),))))
    assert _warned(caplog) == []


def test_channels_on_one_file_system_say_each_warning_once_naming_them_all(clients, net, code, caplog):  # noqa: F811
    """Two EFS channels on one file system gave its warnings (its mount targets in other subnets, the job's
    group letting nothing out) once per channel; a channel on another file system keeps its own."""
    be = _backend(clients, net, code, net["b"], "closed")
    chans = (f"training=efs://{net['efs']}/a", f"extra=efs://{net['efs']}/b", f"other=efs://{net['cidr_fs']}/c")
    with caplog.at_level(logging.WARNING):
        be.render(spec("fs-twice", sm=dict(channels=chans)))
    dry = _warned(caplog)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        be.submit(spec("fs-twice", sm=dict(channels=chans)))
    for warned in (dry, _warned(caplog)):
        warned = [w.removeprefix("dtrain: warning: ") for w in warned]
        both = [w for w in warned if w.startswith(f"channels 'training' and 'extra': EFS file system {net['efs']} in ")]
        assert len(both) == 2 and "its mount targets are in" in both[0] and "no outbound rule" in both[1], warned
        assert "--source-group " + net["mt"] in both[1]
        other = [w for w in warned if w.startswith(f"channel other: EFS file system {net['cidr_fs']} in ")]
        assert len(other) == 3 and len(warned) == 5, warned
    assert clients.sagemaker.describe_training_job(TrainingJobName="fs-twice")["TrainingJobName"] == "fs-twice"


@pytest.mark.parametrize("code_, op", [("UnauthorizedOperation", "describe_security_groups"),
                                       ("InvalidGroup.NotFound", "describe_security_groups")])
def test_security_groups_aws_does_not_show_are_one_warning_and_the_job_goes_on(
        clients, net, code, caplog, code_, op):  # noqa: F811
    ec2 = session().client("ec2")
    be = _backend(clients, net, code, net["a"], ec2=ec2)
    name = f"sg-unread-{code_[:7].lower()}"
    with Stubber(ec2) as stub, caplog.at_level(logging.WARNING):
        stub.add_client_error(op, code_, "no", 400, expected_params={"GroupIds": [net["job"]]})
        be.submit(spec(name, sm=dict(channels=(f"training=efs://{net['efs']}/data",))))
    warned = _warned(caplog)
    assert len(warned) == 1 and "security groups could not be checked" in warned[0] and code_ in warned[0], warned
    assert "ec2:DescribeSecurityGroups" in warned[0] and "the job is submitted all the same" in warned[0]
    assert clients.sagemaker.describe_training_job(TrainingJobName=name)["TrainingJobName"] == name


def test_several_channels_are_named_as_a_sentence_names_them():
    """They read 'channels training, extra: ...', a list that did not read as one."""
    from dtrain.backends.sagemaker.filesystems import named

    chs = [FileSystemChannel(n, "EFS", FS, "/d") for n in ("training", "extra", "more")]
    assert [named(chs[:k]) for k in (1, 2, 3)] == [
        "channel training", "channels 'training' and 'extra'", "channels 'training', 'extra' and 'more'"]


def test_a_mount_target_aws_names_no_security_group_of_is_one_warning(net):
    """Its inbound rules cannot be read: that was passed over without a word (and, every target so, the whole
    inbound check); the other targets' groups are still checked."""
    from dtrain.backends.sagemaker import secgroups

    efs = session().client("efs")
    targets = [{"MountTargetId": "fsmt-0aaa1111"}, {"MountTargetId": "fsmt-0bbb2222"}]
    with Stubber(efs) as e:
        e.add_response("describe_mount_target_security_groups", {"SecurityGroups": []},
                       {"MountTargetId": "fsmt-0aaa1111"})
        e.add_response("describe_mount_target_security_groups", {"SecurityGroups": [net["mt"]]},
                       {"MountTargetId": "fsmt-0bbb2222"})
        for t in targets:  # then both name none
            e.add_response("describe_mount_target_security_groups", {"SecurityGroups": []}, t)
        mixed = secgroups.check(net["ec2_client"], efs, "channel training: EFS", "EFS", [net["job"]], [net["a"]],
                                targets)
        none = secgroups.check(net["ec2_client"], efs, "channel training: EFS", "EFS", [net["stranger"]],
                               [net["a"]], targets)
    assert mixed == ["channel training: EFS: AWS named no security group of its mount target fsmt-0aaa1111 "
                     "(DescribeMountTargetSecurityGroups), so whether it lets NFS (TCP 2049) in from the job is not "
                     "checked: see aws efs describe-mount-target-security-groups --mount-target-id fsmt-0aaa1111"]
    assert len(none) == 1 and "of its mount targets fsmt-0aaa1111, fsmt-0bbb2222 (" in none[0], none
    assert "so whether they let NFS (TCP 2049) in from the job is not checked" in none[0]


# ---- clients injected without efs, fsx or ec2 ------------------------------------------------------------
def test_clients_injected_without_efs_or_fsx_say_once_that_the_file_systems_are_not_checked(
        clients, net, code, caplog):  # noqa: F811
    """A client set the platform builds always has them (made when first asked); one given without them says
    so, once per kind, rather than skipping the check without a word."""
    cfg = SageMakerConfig(role=CFG.role, bucket=CFG.bucket, region=CFG.region, subnets=(net["a"],),
                          security_groups=(net["job"],))
    be = SageMakerBackend(cfg, clients=Clients(clients.sagemaker, clients.s3, clients.logs), cwd=str(code))
    with caplog.at_level(logging.WARNING):
        be.submit(spec("bare-1", sm=dict(channels=("training=efs://fs-0123456789abcdef0/a",
                                                     "extra=efs://fs-0123456789abcdef0/b"))))
        be.render(spec("bare-2", sm=dict(channels=("training=efs://fs-0123456789abcdef0/a",))))
    warned = _warned(caplog)
    assert len(warned) == 1 and "have no efs client, so EFS channels' file systems are not checked" in warned[0]
    assert "Clients(..., efs=...)" in warned[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        be.submit(spec("bare-3", sm=dict(channels=("training=fsx://fs-0123456789abcdef0/abcdefgh/a",))))
    assert [w for w in _warned(caplog) if "have no fsx client" in w] == _warned(caplog) and len(_warned(caplog)) == 1
    assert clients.sagemaker.describe_training_job(TrainingJobName="bare-1")["TrainingJobName"] == "bare-1"


def test_clients_injected_without_ec2_check_the_file_system_and_say_once_the_groups_are_not(
        clients, net, code, caplog):  # noqa: F811
    be = SageMakerBackend(SageMakerConfig(role=CFG.role, bucket=CFG.bucket, region=CFG.region, subnets=(net["a"],),
                                          security_groups=(net["closed"],)),
                          clients=Clients(clients.sagemaker, clients.s3, clients.logs, net["efs_client"],
                                          net["fsx_client"]), cwd=str(code))
    with caplog.at_level(logging.WARNING):
        for name in ("noec2-1", "noec2-2"):
            be.submit(spec(name, sm=dict(channels=(f"training=efs://{net['efs']}/data",))))
    warned = _warned(caplog)
    assert len(warned) == 1 and "have no ec2 client, so file-system channels' security groups are not" in warned[0]
    with pytest.raises(SpecError, match="has no mount target"):  # the file system itself is still asked about
        be.submit(spec("noec2-3", sm=dict(channels=(f"training=efs://{net['bare']}/data",))))


# ---- the pipelines' pre-run check ---------------------------------------------------------------------------
def test_the_pipeline_pre_run_check_asks_about_a_file_system_data_uri(clients, net, code, tmp_path,
                                                                     caplog):  # noqa: F811
    """The hybrid pipeline's data_uri as an EFS channel: its pre-run check (the step's dry run, then S3) asked S3
    only, and the train step's submit refused the file system after the earlier steps had run. Asked once:
    a warning is said once."""
    pytest.importorskip("kfp")
    from dtrain.client import Client
    from dtrain.pipelines import hybrid, steps

    be = SageMakerBackend(SageMakerConfig(role=CFG.role, bucket=CFG.bucket, region=CFG.region, subnets=(net["a"],),
                                          security_groups=(net["job"],)),
                          clients=Clients(clients.sagemaker, clients.s3, clients.logs, net["efs_client"],
                                          net["fsx_client"], net["ec2_client"]),
                          home=tmp_path / "sm-home", cwd=str(code))
    client = Client(home=tmp_path / "home", backend="sagemaker", backends={"sagemaker": be})
    params = {"training_runtime": "sagemaker", "processes": 1, "epochs": 1, "batch_size": 16, "lr": 0.001,
              "backend": "gloo", "data_volume": "cifar10", "max_steps": 0, "job_name": "fs-pipe",
              "job_image": "", "sagemaker_role_arn": "", "sagemaker_bucket": "", "sagemaker_region": "",
              "sagemaker_instance_type": "", "image": "registry.example.com/dtrain:1"}
    with pytest.raises(SpecError) as err:
        steps.check_plan(hybrid.NAME, hybrid.plan({**params, "data_uri": f"efs://{net['bare']}/cifar10"}),
                         client=client)
    said = str(err.value)
    assert said.startswith("pipeline 'hybrid-cifar10' cannot submit job 'fs-pipe' to the sagemaker backend: "
                           f"--param data_uri: EFS file system {net['bare']} in us-east-1 has no mount target"), said
    steps.check_plan(hybrid.NAME, hybrid.plan({**params, "data_uri": f"efs://{net['efs']}/cifar10"}), client=client)
    be.config = SageMakerConfig(role=CFG.role, bucket=CFG.bucket, region=CFG.region, subnets=(net["b"],),
                                security_groups=(net["job"],))
    with caplog.at_level(logging.WARNING):
        steps.check_plan(hybrid.NAME, hybrid.plan({**params, "data_uri": f"efs://{net['efs']}/cifar10"}),
                         client=client)
    assert len(_warned(caplog)) == 1 and f"its mount targets are in {net['a']}" in _warned(caplog)[0], _warned(caplog)


# ---- the FSx file system's own security groups (its network interfaces') -------------------------------------
@pytest.mark.parametrize("group, said", [
    ("job", ("no inbound rule of its network interfaces' security groups ({fsx_988}) allows TCP 1018-1023 of the "
             "ports Lustre needs (TCP 988, 1018-1023) from the job's", "allow it (aws ec2 "
             "authorize-security-group-ingress --group-id {fsx_988} --protocol tcp --port 1018-1023 --source-group "
             "{job})")),
    ("stranger", ("({fsx_988}) allows Lustre (TCP 988, 1018-1023) from the job's", "allow them (aws ec2 "
                  "authorize-security-group-ingress --group-id {fsx_988} --protocol tcp --port 988 --source-group "
                  "{stranger}; aws ec2 authorize-security-group-ingress --group-id {fsx_988} --protocol tcp --port "
                  "1018-1023 --source-group {stranger})")),
])
def test_an_fsx_file_systems_groups_that_keep_lustre_out_are_one_warning_naming_the_group_and_the_fix(
        clients, net, code, caplog, group, said):  # noqa: F811
    """Its network interfaces' groups were never read: a file system whose groups let Lustre in from nowhere passed."""
    be = _backend(clients, net, code, net["b"], group)
    name = f"fsx-in-{group}"
    with caplog.at_level(logging.WARNING):
        be.submit(spec(name, sm=dict(channels=(f"training=fsx://{net['fsx_narrow']}/abcdefgh/data",))))
    parts = [p.format(**net) for p in said]
    assert len(_warned(caplog)) == 1 and all(p in _warned(caplog)[0] for p in parts), (parts, _warned(caplog))
    assert clients.sagemaker.describe_training_job(TrainingJobName=name)["TrainingJobName"] == name


def test_an_fsx_file_system_whose_interfaces_aws_does_not_name_is_one_warning(clients, net, code, caplog):  # noqa: F811
    """moto's own answer (no NetworkInterfaceIds): its groups go unread, said once, and the job goes on."""
    cfg = SageMakerConfig(role=CFG.role, bucket=CFG.bucket, region=CFG.region, subnets=(net["b"],),
                          security_groups=(net["job"],))
    be = SageMakerBackend(cfg, clients=Clients(clients.sagemaker, clients.s3, clients.logs, net["efs_client"],
                                               net["fsx_moto"], net["ec2_client"]), cwd=str(code))
    with caplog.at_level(logging.WARNING):
        be.submit(spec("fsx-no-enis", sm=dict(channels=(f"training=fsx://{net['fsx']}/abcdefgh/data",))))
    assert _warned(caplog) == [
        f"dtrain: warning: channel training: FSx for Lustre file system {net['fsx']} in us-east-1: AWS named no "
        f"security group of its network interfaces (fsx DescribeFileSystems' NetworkInterfaceIds, ec2 "
        f"DescribeNetworkInterfaces), so whether they let Lustre (TCP 988, 1018-1023) in from the job is not "
        f"checked: see aws fsx describe-file-systems --file-system-ids {net['fsx']}"]
    assert clients.sagemaker.describe_training_job(TrainingJobName="fsx-no-enis")["TrainingJobName"] == "fsx-no-enis"


def test_fsx_network_interfaces_aws_refuses_to_show_are_one_warning_and_the_job_goes_on(
        clients, net, code, caplog):  # noqa: F811
    ec2 = session().client("ec2")
    be = _backend(clients, net, code, net["b"], ec2=ec2)
    job = {"GroupId": net["job"], "GroupName": "job", "IpPermissionsEgress": [
        {"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]}
    with Stubber(ec2) as stub, caplog.at_level(logging.WARNING):
        stub.add_response("describe_security_groups", {"SecurityGroups": [job]}, {"GroupIds": [net["job"]]})
        stub.add_client_error("describe_network_interfaces", "UnauthorizedOperation", "no", 403,
                              expected_params={"NetworkInterfaceIds": net["fsx_client"].enis[net["fsx"]]})
        be.submit(spec("fsx-enis-denied", sm=dict(channels=(f"training=fsx://{net['fsx']}/abcdefgh/data",))))
        stub.assert_no_pending_responses()
    warned = _warned(caplog)
    assert len(warned) == 1 and "security groups could not be checked" in warned[0], warned
    assert "ec2:DescribeNetworkInterfaces: UnauthorizedOperation" in warned[0]
    assert "fsx-enis-denied" == clients.sagemaker.describe_training_job(
        TrainingJobName="fsx-enis-denied")["TrainingJobName"]


# ---- an outbound rule's destination --------------------------------------------------------------------------
@pytest.mark.parametrize("group, warned_of", [("to_far", True), ("to_stranger", True), ("to_subnet", False),
                                              ("to_mt", False)])
def test_an_outbound_rule_counts_only_where_its_destination_holds_the_mount_target(
        clients, net, code, caplog, group, warned_of):  # noqa: F811
    """NFS out to an unrelated CIDR, or to a group that is not the mount target's, passed (the port alone was
    compared); to a CIDR holding the mount target's address, or to its group, it does."""
    be = _backend(clients, net, code, net["a"], group)
    with caplog.at_level(logging.WARNING):
        be.render(spec("sg-" + group.replace("_", "-"), sm=dict(channels=(f"training=efs://{net['cidr_fs']}/data",))))
    ip = net["efs_client"].describe_mount_targets(FileSystemId=net["cidr_fs"])["MountTargets"][0]["IpAddress"]
    if not warned_of:
        assert _warned(caplog) == []
        return
    assert len(_warned(caplog)) == 1, _warned(caplog)
    line = _warned(caplog)[0]
    assert f"no outbound rule of the job's security groups ({net[group]}) allows NFS (TCP 2049) to the file system " \
           f"({ip}, {net['mt_cidr']})" in line
    assert line.endswith(f"allow it (aws ec2 authorize-security-group-egress --group-id {net[group]} --protocol tcp "
                         f"--port 2049 --source-group {net['mt_cidr']})")


# ---- one file system, described once -------------------------------------------------------------------------
def test_channels_on_one_file_system_describe_it_once_per_submit(clients, net, code):  # noqa: F811
    """Each channel on a file system asked AWS about all of it again (DescribeFileSystems, its mount targets, the
    security groups): once per file system now, whatever the number of channels mounting it."""
    calls: list[str] = []

    def record(model, **_):
        calls.append(f"{model.service_model.service_name}:{model.name}")

    hooked = [(net["efs_client"], "before-call.efs"), (net["fsx_moto"], "before-call.fsx"),
              (net["ec2_client"], "before-call.ec2")]
    for client, event in hooked:
        client.meta.events.register(event, record, unique_id="dtrain-test-count")
    try:
        _backend(clients, net, code, net["a"]).submit(spec("fs-once-efs", sm=dict(channels=(
            f"training=efs://{net['efs']}/a", f"extra=efs://{net['efs']}/b", f"more=efs://{net['efs']}/c"))))
        efs_calls = sorted(calls)
        calls.clear()
        _backend(clients, net, code, net["b"]).submit(spec("fs-once-fsx", sm=dict(channels=(
            f"training=fsx://{net['fsx']}/abcdefgh/a", f"extra=fsx://{net['fsx']}/abcdefgh/b"))))
        fsx_calls = sorted(calls)
    finally:
        for client, event in hooked:
            client.meta.events.unregister(event, unique_id="dtrain-test-count")
    assert efs_calls == ["ec2:DescribeSecurityGroups", "ec2:DescribeSecurityGroups", "efs:DescribeFileSystems",
                         "efs:DescribeMountTargetSecurityGroups", "efs:DescribeMountTargets"], efs_calls
    assert fsx_calls == ["ec2:DescribeNetworkInterfaces", "ec2:DescribeSecurityGroups", "ec2:DescribeSecurityGroups",
                         "ec2:DescribeSubnets", "fsx:DescribeFileSystems"], fsx_calls  # (fsx_sg's rule: a CIDR)


def test_each_channel_on_one_fsx_file_system_has_its_path_checked_from_the_one_answer(stubbed):
    """Described once for both channels, the second channel's path without the mount name is still refused,
    naming that channel."""
    from dtrain.backends.sagemaker.filesystems import check_channels

    _, _, fsx, f = stubbed
    f.add_response("describe_file_systems", {"FileSystems": [_fsx_fs()]}, {"FileSystemIds": [FS]})
    chs = [fsx_ch(), FileSystemChannel("extra", "FSxLustre", FS, "/other/data")]
    with pytest.raises(SpecError, match=rf"^channel extra: FSx for Lustre file system {FS} in us-east-1 is mounted "
                                        rf"as /abcdefgh, .*--channel extra=fsx://{FS}/abcdefgh/data$"):
        check_channels(fsx, chs, [MINE], "us-east-1")
