"""Whether the job's security groups (its VpcConfig's) let it reach an EFS or FSx for Lustre channel's file
system: NFS (TCP 2049) to an EFS mount target, Lustre (TCP 988 and 1018-1023, AWS's "File system access control
with Amazon VPC" for FSx for Lustre) to an FSx file system. Without an outbound rule of the job's groups for each
of those ports, or an inbound rule of the file system's groups (an EFS mount target's, an FSx file system's
network interfaces') from the job's groups or subnets, SageMaker fails the job once its instances started
("unable to mount"), billed.

An outbound rule counts where its destination holds the file system: a group of its, or a CIDR holding each of
its addresses (0.0.0.0/0 among them); a prefix list's CIDRs are not read (taken as holding it). Only warned of,
never refused: the rules may be changed by others before the job starts. Asked with
EC2 DescribeSecurityGroups, EFS DescribeMountTargetSecurityGroups (whose IAM policy also needs
ec2:DescribeNetworkInterfaceAttribute), EC2 DescribeNetworkInterfaces (an FSx file system's NetworkInterfaceIds,
from its DescribeFileSystems answer) and, where an inbound rule names CIDRs, EC2
DescribeSubnets (the job's subnets' CIDRs); each request is checked against botocore's model first. Where AWS
does not answer or refuses these credentials, one warning: the job goes on; so where its answer names no
security group of a mount target or of an FSx file system's network interfaces (whose inbound rules then go
unread)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from dtrain.backends.sagemaker.clients import aws_call
from dtrain.backends.sagemaker.validate import check_request
from dtrain.errors import BackendError, NotFoundError, SetupError

# the TCP ports SageMaker mounts each kind through, as (first, last) ranges, and the protocol's name
PORTS = {"EFS": (((2049, 2049),), "NFS"), "FSxLustre": (((988, 988), (1018, 1023)), "Lustre")}


class Unread(Exception):
    """AWS did not answer a describe call, refused it to these credentials, or knows no such group."""


def _ask(service: str, operation: str, action: str, fn: Any, **params) -> dict:
    check_request(service, operation, params)  # botocore's model of the request, before it is sent
    try:
        return aws_call(action, fn, **params)
    except (BackendError, SetupError, NotFoundError) as err:
        raise Unread(str(err)) from None


def opens(rule: dict, port: int) -> bool:
    """An IpPermissions entry lets TCP `port` through (all protocols, or TCP over a range holding it)."""
    proto = str(rule.get("IpProtocol", ""))
    if proto == "-1":
        return True
    return proto in ("tcp", "6") and rule.get("FromPort", 0) <= port <= rule.get("ToPort", 65535)


def groups(ec2: Any, ids: list[str]) -> list[dict]:
    """The security groups `ids`, as DescribeSecurityGroups answers."""
    got = _ask("ec2", "DescribeSecurityGroups", "ec2:DescribeSecurityGroups", ec2.describe_security_groups,
               GroupIds=list(ids))
    return list(got.get("SecurityGroups") or [])


def spans(ports: list[int]) -> list[tuple[int, int]]:
    """Ascending `ports` as (first, last) runs of consecutive ports."""
    out: list[tuple[int, int]] = []
    for p in ports:
        if out and out[-1][1] == p - 1:
            out[-1] = (out[-1][0], p)
        else:
            out.append((p, p))
    return out


def said(span: tuple[int, int]) -> str:
    """A port range as the aws CLI's --port takes it: 988, 1018-1023."""
    return str(span[0]) if span[0] == span[1] else f"{span[0]}-{span[1]}"


@dataclass(frozen=True)
class Side:
    """The file system's side of the mount: its security groups, its IPv4 addresses the job connects to (the EFS
    mount targets' IpAddress, the FSx network interfaces' PrivateIpAddress; none where AWS named none), and the
    mount targets (or the FSx file system) whose security groups AWS's answer named none of."""

    groups: tuple[str, ...] = ()
    addresses: tuple[str, ...] = ()
    bare: tuple[str, ...] = ()


def reaches(rule: dict, side: Side, address: str | None) -> bool:
    """An outbound rule's destination holds the file system's `address` (None: not known): a group of the file
    system's (any group, where some of them went unread), a CIDR holding the address (any, where it is not
    known), or a prefix list (its CIDRs are not read: left to the benefit of the doubt)."""
    if rule.get("PrefixListIds"):
        return True
    pairs = [p.get("GroupId") for p in rule.get("UserIdGroupPairs") or []]
    if pairs and (side.bare or any(g in side.groups for g in pairs)):
        return True
    cidrs = [c["CidrIp"] for c in rule.get("IpRanges") or [] if c.get("CidrIp")]
    if address is None:
        return bool(cidrs)
    return any(ipaddress.ip_address(address) in ipaddress.ip_network(c, strict=False) for c in cidrs)


def egress_doubt(head: str, job: list[dict], ranges: tuple[tuple[int, int], ...], proto: str,
                 to: str, side: Side = Side()) -> str | None:
    """A warning line where no outbound rule of the job's groups `job` lets some TCP port of `ranges` out to each
    of the file system's addresses (`side`), naming those ports in its fix; `to`: the destination the fix names
    (--source-group SG, --cidr CIDR)."""
    rules = [r for g in job for r in g.get("IpPermissionsEgress") or []]
    to_each = list(side.addresses) or [None]
    missing = [p for lo, hi in ranges for p in range(lo, hi + 1)
               if not all(any(opens(r, p) and reaches(r, side, a) for r in rules) for a in to_each)]
    if not missing:
        return None
    ids, needed = ", ".join(g["GroupId"] for g in job), ", ".join(said(r) for r in ranges)
    gaps = spans(missing)
    what = f"{proto} (TCP {needed})" if gaps == list(ranges) else \
        f"TCP {', '.join(said(s) for s in gaps)} of the ports {proto} needs (TCP {needed})"
    where = ", ".join([*side.addresses, *side.groups])
    fix = "; ".join(f"aws ec2 authorize-security-group-egress --group-id {job[0]['GroupId']} --protocol tcp "
                    f"--port {said(s)} {to}" for s in gaps)
    return (f"{head}: no outbound rule of the job's security groups ({ids}) allows {what}"
            f"{f' to the file system ({where})' if where else ''}, and SageMaker would fail the job once its "
            f"instances started (unable to mount) unless the rules change first: allow "
            f"{'it' if len(gaps) == 1 else 'them'} ({fix})")


def target_groups(efs: Any, targets: list[dict]) -> Side:
    """The security groups of the EFS mount targets `targets` (DescribeMountTargetSecurityGroups, one each), their
    addresses, and the ids of those whose answer named no group."""
    out: list[str] = []
    bare: list[str] = []
    for t in targets:
        got = _ask("efs", "DescribeMountTargetSecurityGroups", "elasticfilesystem:DescribeMountTargetSecurityGroups",
                   efs.describe_mount_target_security_groups, MountTargetId=t["MountTargetId"])
        named = list(got.get("SecurityGroups") or [])
        out += [g for g in named if g not in out]
        bare += [] if named else [t["MountTargetId"]]
    return Side(tuple(out), tuple(t["IpAddress"] for t in targets if t.get("IpAddress")), tuple(bare))


def interface_groups(ec2: Any, fs: dict) -> Side:
    """The security groups of an FSx file system's network interfaces (its DescribeFileSystems answer `fs`:
    NetworkInterfaceIds; EC2 DescribeNetworkInterfaces: their Groups) and addresses, and [its id] where no group
    was named."""
    ids = list(fs.get("NetworkInterfaceIds") or [])
    if not ids:
        return Side(bare=(fs.get("FileSystemId", "?"),))
    got = _ask("ec2", "DescribeNetworkInterfaces", "ec2:DescribeNetworkInterfaces", ec2.describe_network_interfaces,
               NetworkInterfaceIds=ids)
    out: list[str] = []
    enis = list(got.get("NetworkInterfaces") or [])
    for eni in enis:
        out += [g["GroupId"] for g in eni.get("Groups") or [] if g.get("GroupId") and g["GroupId"] not in out]
    return Side(tuple(out), tuple(e["PrivateIpAddress"] for e in enis if e.get("PrivateIpAddress")),
                () if out else (fs.get("FileSystemId", "?"),))


def unread_targets(head: str, bare: list[str], ranges: tuple[tuple[int, int], ...], proto: str,
                   kind: str = "EFS") -> str:
    """The warning line for mount targets `bare` (EFS), or the FSx file system, whose security groups AWS's
    answer did not name."""
    needed = ", ".join(said(r) for r in ranges)
    if kind != "EFS":
        return (f"{head}: AWS named no security group of its network interfaces (fsx DescribeFileSystems' "
                f"NetworkInterfaceIds, ec2 DescribeNetworkInterfaces), so whether they let {proto} (TCP {needed}) in "
                f"from the job is not checked: see aws fsx describe-file-systems --file-system-ids {bare[0]}")
    many = len(bare) > 1
    return (f"{head}: AWS named no security group of its mount target{'s' if many else ''} {', '.join(bare)} "
            f"(DescribeMountTargetSecurityGroups), so whether {'they let' if many else 'it lets'} {proto} (TCP "
            f"{needed}) in from the job is not checked: see aws efs describe-mount-target-security-groups "
            f"--mount-target-id {bare[0]}")


def ingress_doubt(ec2: Any, head: str, theirs: list[dict], job_ids: list[str], subnets: list[str],
                  ranges: tuple[tuple[int, int], ...], proto: str, kind: str = "EFS") -> str | None:
    """A warning line where no inbound rule of the file system's groups `theirs` (its mount targets', its network
    interfaces') lets some TCP port of `ranges` in from the job: from one of its groups, or from a CIDR that
    overlaps one of its subnets (asked only where needed), naming those ports in its fix."""
    mine: list[Any] = []
    asked: list[bool] = []  # DescribeSubnets asked once, only where a rule names a CIDR

    def from_job(rule: dict) -> bool:
        if any(p.get("GroupId") in job_ids for p in rule.get("UserIdGroupPairs") or []):
            return True
        if rule.get("PrefixListIds"):
            return True  # a prefix list's CIDRs are not read: left to the benefit of the doubt
        cidrs = [ipaddress.ip_network(c["CidrIp"], strict=False) for c in rule.get("IpRanges") or []
                 if c.get("CidrIp")]
        if cidrs and not asked:
            asked.append(True)
            got = _ask("ec2", "DescribeSubnets", "ec2:DescribeSubnets", ec2.describe_subnets, SubnetIds=list(subnets))
            mine.extend(ipaddress.ip_network(s["CidrBlock"]) for s in got.get("Subnets") or [] if s.get("CidrBlock"))
        return any(c.overlaps(m) for c in cidrs for m in mine)

    rules = [r for g in theirs for r in g.get("IpPermissions") or []]
    missing = [p for lo, hi in ranges for p in range(lo, hi + 1)
               if not any(opens(r, p) and from_job(r) for r in rules)]
    if not missing:
        return None
    ids, needed, gaps = ", ".join(g["GroupId"] for g in theirs), ", ".join(said(r) for r in ranges), spans(missing)
    whose = "its mount targets'" if kind == "EFS" else "its network interfaces'"
    what = f"{proto} (TCP {needed})" if gaps == list(ranges) else \
        f"TCP {', '.join(said(s) for s in gaps)} of the ports {proto} needs (TCP {needed})"
    fix = "; ".join(f"aws ec2 authorize-security-group-ingress --group-id {theirs[0]['GroupId']} --protocol tcp "
                    f"--port {said(s)} --source-group {job_ids[0]}" for s in gaps)
    return (f"{head}: no inbound rule of {whose} security groups ({ids}) allows {what} from the job's security "
            f"groups or subnets, and SageMaker would fail the job once its instances started (unable to mount) "
            f"unless the rules change first: allow {'it' if len(gaps) == 1 else 'them'} ({fix})")


def check(ec2: Any, efs: Any, head: str, kind: str, job_ids: list[str], subnets: list[str],
          targets: list[dict]) -> list[str]:
    """The warning lines of a file-system channel's security groups: the job's outbound rules and the inbound
    ones of the file system's groups: (EFS) the mount targets `targets`', (FSx) the network interfaces' of the
    file system `targets[0]` (its DescribeFileSystems answer). Unread where AWS could not be asked."""
    ranges, proto = PORTS[kind]
    job = groups(ec2, job_ids)
    if not job:
        return []
    if kind == "EFS":
        side = target_groups(efs, targets)
    else:
        side = interface_groups(ec2, targets[0]) if targets else Side()
    theirs = groups(ec2, list(side.groups)) if side.groups else []  # no GroupIds would describe every group
    to = f"--source-group {theirs[0]['GroupId']}" if theirs else "--cidr 0.0.0.0/0"
    lines = [egress_doubt(head, job, ranges, proto, to, side)]
    if theirs:
        lines.append(ingress_doubt(ec2, head, theirs, job_ids, subnets, ranges, proto, kind))
    if side.bare:  # their inbound rules were not looked at: said, not passed over
        lines.append(unread_targets(head, list(side.bare), ranges, proto, kind))
    return [line for line in lines if line]
