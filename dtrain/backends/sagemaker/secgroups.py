"""Whether the job's security groups (its VpcConfig's) let it reach an EFS or FSx for Lustre channel's file
system: NFS (TCP 2049) to an EFS mount target, Lustre (TCP 988 and 1018-1023, AWS's "File system access control
with Amazon VPC" for FSx for Lustre) to an FSx file system. Without an outbound rule of the job's groups for each
of those ports, or an inbound rule of the file system's groups (an EFS mount target's, an FSx file system's
network interfaces') from the job's groups or subnets, SageMaker fails the job once its instances started
("unable to mount"), billed.

An outbound rule counts where its destination holds each place the job mounts the file system through (each
EFS mount target, each FSx network interface): a group of that place's, or a CIDR holding one of its addresses
(IPv4 or IPv6, as AWS names them: a dual-stack place is reached through either; 0.0.0.0/0 holds every IPv4 one,
::/0 every IPv6 one), a managed prefix list's entries among the CIDRs. Each place must let it in by its own
groups' inbound rules; one from a CIDR counts where it overlaps one of the job's subnets' CIDRs of a family the
file system's addresses have. The outbound fix names the narrowest destinations that reach every place missed:
a group each is in (one they share where there is one), else (its groups unread) its subnet's CIDR, IPv6 as
--ip-permissions (the CLI's --cidr takes IPv4 only); the inbound fix, a group of each place missed. Only warned of,
never refused: the rules may be changed by others before the job starts. Asked with EC2 DescribeSecurityGroups,
EFS DescribeMountTargetSecurityGroups (whose IAM policy also needs ec2:DescribeNetworkInterfaceAttribute), EC2
DescribeNetworkInterfaces (an FSx file system's NetworkInterfaceIds, from its DescribeFileSystems answer), EC2
GetManagedPrefixListEntries (a prefix list a rule for the port names, each once, at most 20 pages: a longer
one's rules are said unchecked, not judged on part of it) and, where an inbound rule names
CIDRs or a fix a subnet, EC2 DescribeSubnets; each request is checked against botocore's model first. Where AWS
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
class End:
    """One place the job mounts the file system through (an EFS mount target, an FSx network interface, or the FSx
    file system where AWS named none of its interfaces): its id, its security groups (none: not named, its
    inbound rules unread), its addresses (IPv4 and IPv6, as AWS named them; a dual-stack one is reached through
    either) and its subnet."""

    name: str
    groups: tuple[str, ...] = ()
    addresses: tuple[str, ...] = ()
    subnet: str = ""


@dataclass(frozen=True)
class Side:
    """The file system's side of the mount: each place the job mounts it through (every one must be reached)."""

    ends: tuple[End, ...] = ()

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(g for e in self.ends for g in e.groups))

    @property
    def addresses(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a for e in self.ends for a in e.addresses))

    @property
    def bare(self) -> tuple[str, ...]:
        """The ends whose security groups AWS's answer named none of."""
        return tuple(e.name for e in self.ends if not e.groups)


class PrefixLists:
    """A managed prefix list's CIDRs (EC2 GetManagedPrefixListEntries), asked once each and only where a rule that
    lets the port through names the list."""

    PAGES = 20  # a prefix list holds at most 1000 entries: 20 pages of 100 read it all

    def __init__(self, ec2: Any):
        self.ec2, self.read = ec2, {}
        self.cut: dict[str, int] = {}  # a list AWS still had a page of after PAGES: the entries read of it
        self.consulted: set[str] = set()  # the lists read for the judgement under way (cleared by its caller)

    def cidrs(self, pl_id: str) -> list[str]:
        self.consulted.add(pl_id)
        if pl_id not in self.read:
            out: list[str] = []
            params: dict = {"PrefixListId": pl_id, "MaxResults": 100}
            for _ in range(self.PAGES):
                got = _ask("ec2", "GetManagedPrefixListEntries", "ec2:GetManagedPrefixListEntries",
                           self.ec2.get_managed_prefix_list_entries, **params)
                out += [e["Cidr"] for e in got.get("Entries") or [] if e.get("Cidr")]
                if not got.get("NextToken"):
                    break
                params["NextToken"] = got["NextToken"]
            else:  # a page still unread: a rule may count through an entry of it
                self.cut[pl_id] = len(out)
            self.read[pl_id] = out
        return self.read[pl_id]


def cidrs(rule: dict, lists: PrefixLists | None) -> list[Any]:
    """The IPv4 and IPv6 CIDRs a rule names, its prefix lists' entries among them (`lists` None: none read)."""
    out = [c["CidrIp"] for c in rule.get("IpRanges") or [] if c.get("CidrIp")]
    out += [c["CidrIpv6"] for c in rule.get("Ipv6Ranges") or [] if c.get("CidrIpv6")]
    for pl in rule.get("PrefixListIds") or []:
        out += lists.cidrs(pl["PrefixListId"]) if lists is not None and pl.get("PrefixListId") else []
    return [ipaddress.ip_network(c, strict=False) for c in out]


def reaches(rule: dict, end: End, lists: PrefixLists | None = None) -> bool:
    """An outbound rule's destination holds the place `end`: one of its groups (any group, where its groups went
    unread), or a CIDR (IPv4, IPv6, a prefix list's entry) holding one of its addresses (any CIDR, where AWS named
    none)."""
    pairs = [p.get("GroupId") for p in rule.get("UserIdGroupPairs") or []]
    if pairs and (not end.groups or any(g in end.groups for g in pairs)):
        return True
    if not rule.get("IpRanges") and not rule.get("Ipv6Ranges") and not rule.get("PrefixListIds"):
        return False
    nets = cidrs(rule, lists)
    if not end.addresses:
        return bool(nets)
    return any(ipaddress.ip_address(a) in n for a in end.addresses for n in nets)


def _destinations(ends: list[End], subnet_cidrs: Any) -> list[str]:
    """The narrowest destinations that, allowed, reach every place of `ends`: a group each one is in (one shared by
    most first), else (its groups unread) its subnet's CIDR, of its addresses' family."""
    out: list[str] = []
    left = [e for e in ends if e.groups]
    while left:
        best = max(dict.fromkeys(g for e in left for g in e.groups), key=lambda g: sum(g in e.groups for e in left))
        out.append(f"--source-group {best}")
        left = [e for e in left if best not in e.groups]
    for e in ends:
        if e.groups:
            continue
        version = 6 if e.addresses and all(ipaddress.ip_address(a).version == 6 for a in e.addresses) else 4
        nets = subnet_cidrs(e.subnet, version) if e.subnet else []
        if not nets:  # no subnet named: its own address, else (nothing named) anywhere
            nets = [ipaddress.ip_network(a) for a in e.addresses if ipaddress.ip_address(a).version == version][:1]
        dest = [f"ipv6:{n}" if version == 6 else f"--cidr {n}" for n in nets] or ["--cidr 0.0.0.0/0"]
        out += [d for d in dest if d not in out]
    return out


def _egress_command(group: str, span: tuple[int, int], dest: str) -> str:
    """The aws CLI command that lets TCP `span` out of `group` to `dest` (--source-group SG, --cidr CIDR, or
    ipv6:CIDR, which the CLI's --cidr does not take)."""
    if dest.startswith("ipv6:"):
        return (f"aws ec2 authorize-security-group-egress --group-id {group} --ip-permissions 'IpProtocol=tcp,"
                f"FromPort={span[0]},ToPort={span[1]},Ipv6Ranges=[{{CidrIpv6={dest[5:]}}}]'")
    return f"aws ec2 authorize-security-group-egress --group-id {group} --protocol tcp --port {said(span)} {dest}"


def egress_doubt(head: str, job: list[dict], ranges: tuple[tuple[int, int], ...], proto: str, side: Side,
                 lists: PrefixLists | None = None, subnet_cidrs: Any = lambda subnet, version: []) -> str | None:
    """A warning line where no outbound rule of the job's groups `job` lets some TCP port of `ranges` out to each
    place of the file system (`side`), naming those ports in its fix, whose destinations reach each place missed
    (its groups, else its subnet's CIDR: `subnet_cidrs(subnet, 4 or 6)`, asked only then)."""
    rules = [r for g in job for r in g.get("IpPermissionsEgress") or []]
    ends = list(side.ends) or [End("?")]
    missed: dict[End, None] = {}
    missing = []
    for p in [p for lo, hi in ranges for p in range(lo, hi + 1)]:
        cut = [e for e in ends if not any(opens(r, p) and reaches(r, e, lists) for r in rules)]
        missing += [p] if cut else []
        missed.update(dict.fromkeys(cut))
    if not missing:
        return None
    ids, needed = ", ".join(g["GroupId"] for g in job), ", ".join(said(r) for r in ranges)
    gaps = spans(missing)
    what = f"{proto} (TCP {needed})" if gaps == list(ranges) else \
        f"TCP {', '.join(said(s) for s in gaps)} of the ports {proto} needs (TCP {needed})"
    where = ", ".join([*side.addresses, *side.groups])
    dests = _destinations(list(missed), subnet_cidrs)
    fix = "; ".join(_egress_command(job[0]["GroupId"], s, d) for s in gaps for d in dests)
    return (f"{head}: no outbound rule of the job's security groups ({ids}) allows {what}"
            f"{f' to the file system ({where})' if where else ''}, and SageMaker would fail the job once its "
            f"instances started (unable to mount) unless the rules change first: allow "
            f"{'it' if len(gaps) * len(dests) == 1 else 'them'} ({fix})")


def target_groups(efs: Any, targets: list[dict]) -> Side:
    """The EFS mount targets `targets` as places of the mount: their security groups
    (DescribeMountTargetSecurityGroups, one each), addresses (IpAddress, Ipv6Address) and subnets."""
    ends: list[End] = []
    for t in targets:
        got = _ask("efs", "DescribeMountTargetSecurityGroups", "elasticfilesystem:DescribeMountTargetSecurityGroups",
                   efs.describe_mount_target_security_groups, MountTargetId=t["MountTargetId"])
        named = tuple(dict.fromkeys(got.get("SecurityGroups") or []))
        ends.append(End(t["MountTargetId"], named, tuple(t[k] for k in ("IpAddress", "Ipv6Address") if t.get(k)),
                        t.get("SubnetId", "")))
    return Side(tuple(ends))


def interface_groups(ec2: Any, fs: dict) -> Side:
    """An FSx file system's network interfaces (its DescribeFileSystems answer `fs`: NetworkInterfaceIds; EC2
    DescribeNetworkInterfaces) as places of the mount: their groups, addresses (PrivateIpAddress, Ipv6Addresses)
    and subnets; the file system itself, groups unread, where AWS named no interface."""
    ids = list(fs.get("NetworkInterfaceIds") or [])
    subnet = (list(fs.get("SubnetIds") or []) or [""])[0]
    if not ids:
        return Side((End(fs.get("FileSystemId", "?"), subnet=subnet),))
    got = _ask("ec2", "DescribeNetworkInterfaces", "ec2:DescribeNetworkInterfaces", ec2.describe_network_interfaces,
               NetworkInterfaceIds=ids)
    ends = []
    for eni in got.get("NetworkInterfaces") or []:
        named = tuple(dict.fromkeys(g["GroupId"] for g in eni.get("Groups") or [] if g.get("GroupId")))
        v6 = [a["Ipv6Address"] for a in eni.get("Ipv6Addresses") or [] if a.get("Ipv6Address")]
        addresses = tuple([eni["PrivateIpAddress"]] if eni.get("PrivateIpAddress") else []) + tuple(v6)
        name = eni.get("NetworkInterfaceId", "?") if named else fs.get("FileSystemId", "?")  # (said of the file system)
        ends.append(End(name, named, addresses, eni.get("SubnetId", subnet)))
    if not any(e.groups for e in ends):  # none named: the file system's groups go unread, said of it
        return Side((End(fs.get("FileSystemId", "?"), (), tuple(a for e in ends for a in e.addresses), subnet),))
    return Side(tuple(ends))


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


def _subnet_cidrs(subnet: dict, version: int) -> list[Any]:
    """A DescribeSubnets answer's CIDRs of IP `version` (its CidrBlock, its IPv6 blocks still associated)."""
    if version == 4:
        return [ipaddress.ip_network(subnet["CidrBlock"])] if subnet.get("CidrBlock") else []
    gone = ("disassociating", "disassociated", "failing", "failed")
    return [ipaddress.ip_network(a["Ipv6CidrBlock"]) for a in subnet.get("Ipv6CidrBlockAssociationSet") or []
            if a.get("Ipv6CidrBlock") and (a.get("Ipv6CidrBlockState") or {}).get("State") not in gone]


class Subnets:
    """Subnets' CIDRs (EC2 DescribeSubnets), each asked once and only where a rule or a fix needs them."""

    def __init__(self, ec2: Any):
        self.ec2, self.read = ec2, {}

    def cidrs(self, ids: list[str], version: int) -> list[Any]:
        wanted = [i for i in dict.fromkeys(ids) if i and i not in self.read]
        if wanted:
            got = _ask("ec2", "DescribeSubnets", "ec2:DescribeSubnets", self.ec2.describe_subnets, SubnetIds=wanted)
            self.read.update((s["SubnetId"], s) for s in got.get("Subnets") or [] if s.get("SubnetId"))
            self.read.update((i, {}) for i in wanted if i not in self.read)
        return [n for i in ids if i in self.read for n in _subnet_cidrs(self.read[i], version)]


def ingress_doubt(head: str, theirs: list[dict], job_ids: list[str], subnets: list[str],
                  ranges: tuple[tuple[int, int], ...], proto: str, kind: str = "EFS", *, side: Side = Side(),
                  lists: PrefixLists | None = None, known: Subnets | None = None) -> str | None:
    """A warning line where no inbound rule of the file system's groups `theirs` (its mount targets', its network
    interfaces': each place's own, `side`) lets some TCP port of `ranges` in from the job: from one of its groups,
    or from a CIDR (IPv4, IPv6, a prefix list's entry) of a family the file system's addresses have (either where
    one place's are not known) that overlaps one of the job's subnets' CIDRs (asked only then), naming those ports
    in its fix, which adds the rule to a group of each place missed (one they share first)."""
    families = {ipaddress.ip_address(a).version for a in side.addresses}
    if not side.ends or any(not e.addresses for e in side.ends):
        families = {4, 6}

    def from_job(rule: dict) -> bool:
        if any(p.get("GroupId") in job_ids for p in rule.get("UserIdGroupPairs") or []):
            return True
        if not rule.get("IpRanges") and not rule.get("Ipv6Ranges") and not rule.get("PrefixListIds"):
            return False
        nets = [n for n in cidrs(rule, lists) if n.version in families]
        if not nets or known is None:
            return False
        return any(n.overlaps(m) for n in nets for m in known.cidrs(subnets, n.version))

    rules = {g["GroupId"]: list(g.get("IpPermissions") or []) for g in theirs}
    ends = [e for e in side.ends if e.groups] or [End("?", tuple(rules))]  # (each place: its own groups' rules)
    missed: dict[End, None] = {}
    missing = []
    for p in [p for lo, hi in ranges for p in range(lo, hi + 1)]:
        cut = [e for e in ends if not any(opens(r, p) and from_job(r) for g in e.groups for r in rules.get(g, []))]
        missing += [p] if cut else []
        missed.update(dict.fromkeys(cut))
    if not missing:
        return None
    ids, needed, gaps = ", ".join(g["GroupId"] for g in theirs), ", ".join(said(r) for r in ranges), spans(missing)
    whose = "its mount targets'" if kind == "EFS" else "its network interfaces'"
    what = f"{proto} (TCP {needed})" if gaps == list(ranges) else \
        f"TCP {', '.join(said(s) for s in gaps)} of the ports {proto} needs (TCP {needed})"
    into = [d.removeprefix("--source-group ") for d in _destinations(list(missed), lambda subnet, version: [])]
    fix = "; ".join(f"aws ec2 authorize-security-group-ingress --group-id {g} --protocol tcp --port {said(s)} "
                    f"--source-group {job_ids[0]}" for s in gaps for g in into)
    return (f"{head}: no inbound rule of {whose} security groups ({ids}) allows {what} from the job's security "
            f"groups or subnets, and SageMaker would fail the job once its instances started (unable to mount) "
            f"unless the rules change first: allow {'it' if len(gaps) * len(into) == 1 else 'them'} ({fix})")


def unjudged(head: str, lists: PrefixLists, ranges: tuple[tuple[int, int], ...], proto: str,
             doubt: str | None) -> str | None:
    """`doubt`, a judgement on the prefix lists it read (lists.consulted), where each was read whole; where one was
    not (more than PrefixLists.PAGES pages), the line saying so instead: an entry left unread may be the one that
    lets the port through. No doubt stands either way: an entry read already let it through."""
    cut = [pl for pl in lists.consulted if pl in lists.cut]
    if doubt is None or not cut:
        return doubt
    pl, needed = sorted(cut)[0], ", ".join(said(r) for r in ranges)
    return (f"{head}: the managed prefix list {pl} has more than the {lists.cut[pl]} entries read of it "
            f"({PrefixLists.PAGES} pages), so whether the security groups' rules naming it let {proto} (TCP {needed}) "
            f"through is not checked: see aws ec2 get-managed-prefix-list-entries --prefix-list-id {pl}")


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
    lists, known = PrefixLists(ec2), Subnets(ec2)
    lines = [unjudged(head, lists, ranges, proto, egress_doubt(head, job, ranges, proto, side, lists,
                                                                lambda subnet, v: known.cidrs([subnet], v)))]
    if theirs:
        lists.consulted.clear()
        lines.append(unjudged(head, lists, ranges, proto, ingress_doubt(head, theirs, job_ids, subnets, ranges, proto,
                                                                         kind, side=side, lists=lists, known=known)))
    bare = list(dict.fromkeys(side.bare))
    if bare:  # their inbound rules were not looked at: said, not passed over
        lines.append(unread_targets(head, bare, ranges, proto, kind))
    return [line for line in lines if line]
