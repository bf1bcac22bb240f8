"""Submit's check of a job's EFS and FSx for Lustre channels, which SageMaker mounts only once the job's
instances started: a file system that does not exist in the region, an EFS one without any mount target, an
FSx one that is not Lustre or is failed or being deleted, or an FSx path without the file system's mount name
failed the job minutes later ("ClientError: ... unable to mount"), its instances billed: refused.

Reachability is only warned of: an EFS file system whose mount targets are all in other subnets than the
job's, or an FSx one in another subnet, may still be reached (a mount target serves its whole Availability
Zone, and subnets of one VPC route to each other), which telling would take routes and zones; so are security
groups that may not let NFS or Lustre through (secgroups.py), as their rules may change before the job starts.
Asked with DescribeFileSystems (EFS, FSx) and DescribeMountTargets (EFS), once per file system however many
channels mount it; where AWS does not answer or refuses
these credentials (AccessDenied), one warning and the job goes on. The dry run asks the same (describe calls
only), so it refuses what submit would."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from dtrain.backends.sagemaker import secgroups
from dtrain.backends.sagemaker.clients import aws_call
from dtrain.errors import BackendError, NotFoundError, SetupError, SpecError

GONE = ("deleting", "deleted", "error")  # an EFS mount target's LifeCycleState that mounts nothing
FSX_BROKEN = ("FAILED", "DELETING", "MISCONFIGURED")  # an FSx file system's Lifecycle that mounts nothing


@dataclass(frozen=True)
class FileSystemChannel:
    """One FileSystemDataSource channel of a CreateTrainingJob request."""

    channel: str
    kind: str  # "EFS" or "FSxLustre", as SageMaker names it
    fs_id: str
    path: str  # DirectoryPath: /PATH (EFS), /MOUNTNAME/PATH (FSx)


def file_system_channels(req: dict) -> list[FileSystemChannel]:
    """The EFS and FSx channels of a request, in its order."""
    out = []
    for ch in req.get("InputDataConfig") or []:
        fs = ch["DataSource"].get("FileSystemDataSource")
        if fs:
            out.append(FileSystemChannel(ch["ChannelName"], fs["FileSystemType"], fs["FileSystemId"],
                                         fs["DirectoryPath"]))
    return out


def by_file_system(channels: list[FileSystemChannel]) -> list[list[FileSystemChannel]]:
    """`channels` grouped by the file system they mount (kind and id), in the order each first comes."""
    out: dict[tuple[str, str], list[FileSystemChannel]] = {}
    for ch in channels:
        out.setdefault((ch.kind, ch.fs_id), []).append(ch)
    return list(out.values())


def named(chs: list[FileSystemChannel]) -> str:
    """'channel training', or as a sentence names several: "channels 'training' and 'extra'", "channels 'a', 'b'
    and 'c'"."""
    if len(chs) == 1:
        return f"channel {chs[0].channel}"
    quoted = [f"'{ch.channel}'" for ch in chs]
    return f"channels {', '.join(quoted[:-1])} and {quoted[-1]}"


def check_channels(client: Any, chs: list[FileSystemChannel], subnets: list[str], region: str, *,
                   dry: bool = False, ec2: Any = None, groups: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Refuse (SpecError) channels `chs`, on one file system, that SageMaker could not mount; else their warning
    lines, each said once naming them all ("channels 'training' and 'extra': ..."): AWS could not be asked, the job's
    subnets may not reach the file system, or (`ec2` given) the job's security `groups` or the file system's may
    not let NFS or Lustre through (secgroups.py). The file system is described once, however many channels
    mount it. `client` None: the injected clients have none, nothing asked. `dry`: the dry run's, whose warning
    says what a submit would do."""
    if client is None or not chs:
        return []
    fs = chs[0]
    what = "EFS file system" if fs.kind == "EFS" else "FSx for Lustre file system"
    head = f"{named(chs)}: {what} {fs.fs_id} in {region}"
    goes_on = "a submit goes on" if dry else "the job is submitted"
    try:
        if fs.kind == "EFS":
            doubt, targets = _check_efs(client, fs, subnets, head, region)
        else:
            doubt, targets = _check_fsx(client, chs, subnets, head, region)
    except _Unasked as err:
        return [f"{head} could not be checked ({err}); {goes_on} all the same, and SageMaker fails it "
                f"once its instances start if it cannot mount the file system"]
    lines = [doubt] if doubt else []
    if ec2 is not None and groups:
        try:
            lines += secgroups.check(ec2, client, head, fs.kind, list(groups), subnets, targets)
        except secgroups.Unread as err:
            lines.append(f"{head}: the job's security groups could not be checked against it ({err}); {goes_on} "
                         f"all the same, and SageMaker fails it once its instances start if they block the mount")
    return lines


def check_channel(client: Any, ch: FileSystemChannel, subnets: list[str], region: str, *, dry: bool = False,
                  ec2: Any = None, groups: list[str] | tuple[str, ...] = ()) -> list[str]:
    """check_channels of the one channel `ch`."""
    return check_channels(client, [ch], subnets, region, dry=dry, ec2=ec2, groups=groups)


def check_file_system(client: Any, ch: FileSystemChannel, subnets: list[str], region: str, *,
                      dry: bool = False) -> str | None:
    """check_channel without the security groups: its one warning line, or None."""
    lines = check_channel(client, ch, subnets, region, dry=dry)
    return lines[0] if lines else None


class _Unasked(Exception):
    """AWS did not answer a describe call, or refused it to these credentials: the check is not made."""


DENIED = ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnrecognizedClientException")


def _not_found(head: str, region: str, service: str) -> SpecError:
    return SpecError(f"{head} does not exist, and SageMaker would fail the job once its instances started: check the "
                     f"id (aws {service} describe-file-systems --region {region}) or use the file system's region "
                     f"(dtrain config sagemaker --region REGION)")


def _described(action: str, fn: Any, **kw) -> dict | None:
    """AWS's answer to the IAM `action` (service:Operation), or None where it says the file system does not
    exist; _Unasked where it refused these credentials or did not answer (no network, no endpoint)."""
    try:
        return aws_call(action, fn, **kw)
    except NotFoundError:
        return None
    except (BackendError, SetupError) as err:
        code = getattr(err, "code", None)
        if code == "FileSystemNotFound":
            return None
        if code in DENIED:
            raise _Unasked(f"{code}: these credentials may not call {action}; allow it to have the file system "
                           f"checked before the instances start") from None
        raise _Unasked(str(err)) from None


def _vpc_fix(subnets: list[str]) -> str:
    return f"(dtrain config sagemaker --subnets SUBNET --security-groups SG; now {', '.join(subnets)})"


def _check_efs(client: Any, ch: FileSystemChannel, subnets: list[str], head: str,
               region: str) -> tuple[str | None, list[dict]]:
    """None or the warning that the job's subnets may not reach it, and the mount targets the job would use
    (those in its subnets, else every live one)."""
    if _described("elasticfilesystem:DescribeFileSystems", client.describe_file_systems, FileSystemId=ch.fs_id) is None:
        raise _not_found(head, region, "efs")
    targets = _described("elasticfilesystem:DescribeMountTargets", client.describe_mount_targets,
                          FileSystemId=ch.fs_id)
    if targets is None:  # deleted between the two calls
        raise _not_found(head, region, "efs")
    live = [t for t in targets.get("MountTargets") or [] if t.get("LifeCycleState") not in GONE]
    near = [t for t in live if t.get("SubnetId") in subnets]
    if near:
        return None, near
    subnet = subnets[0] if subnets else "SUBNET"
    add = (f"aws efs create-mount-target --file-system-id {ch.fs_id} --subnet-id {subnet} --security-groups SG")
    if not live:
        raise SpecError(f"{head} has no mount target, and SageMaker would fail the job once its instances started "
                        f"(unable to mount): add one in the job's subnet ({add})")
    theirs = ", ".join(sorted(t.get("SubnetId", "?") for t in live))
    return (f"{head} has no mount target in the job's subnets (its mount targets are in {theirs}): the job "
            f"mounts it only if one of its subnets is in the VPC and Availability Zone of one of those; else "
            f"add one ({add}) or run the job in one of those subnets {_vpc_fix(subnets)}"), live


def _check_fsx(client: Any, chs: list[FileSystemChannel], subnets: list[str], head: str,
               region: str) -> tuple[str | None, list[dict]]:
    """None or the warning that the job's subnets may not reach the file system of the channels `chs`, and [its
    DescribeFileSystems answer] (whose NetworkInterfaceIds secgroups.py reads); each channel's path is checked."""
    ch = chs[0]
    got = _described("fsx:DescribeFileSystems", client.describe_file_systems, FileSystemIds=[ch.fs_id])
    found = [f for f in (got or {}).get("FileSystems") or [] if f.get("FileSystemId") == ch.fs_id]
    if not found:
        raise _not_found(head, region, "fsx")
    fs = found[0]
    if fs.get("FileSystemType", "LUSTRE") != "LUSTRE":
        raise SpecError(f"{head} is an FSx for {fs['FileSystemType'].title()} file system, and SageMaker mounts "
                        f"FSx for Lustre only: use a Lustre file system, or an EFS one (efs://FS-ID/PATH)")
    if fs.get("Lifecycle") in FSX_BROKEN:
        raise SpecError(f"{head} is {fs['Lifecycle']}, and SageMaker could not mount it: see aws fsx "
                        f"describe-file-systems --file-system-ids {ch.fs_id} --region {region}")
    theirs = list(fs.get("SubnetIds") or [])
    mount = (fs.get("LustreConfiguration") or {}).get("MountName")
    for one in chs:
        first, _, rest = one.path.strip("/").partition("/")
        if mount and first != mount:
            raise SpecError(f"channel {one.channel}: {head.partition(': ')[2]} is mounted as /{mount}, and the "
                            f"channel's path {one.path} starts with /{first}: SageMaker would fail the job once its "
                            f"instances started; pass --channel {one.channel}=fsx://{one.fs_id}/{mount}/"
                            f"{rest or 'PATH'}")
    if theirs and not set(theirs) & set(subnets):
        return (f"{head} is in {', '.join(theirs)}, not among the job's subnets: the job mounts it only if its "
                f"subnets are in the file system's VPC and its security groups allow Lustre (TCP 988 and 1018-1023); else "
                f"run the job in its subnet {_vpc_fix(subnets)}"), [fs]
    return None, [fs]


def warn(line: str) -> None:
    logging.getLogger(__name__).warning("dtrain: warning: %s", line)
