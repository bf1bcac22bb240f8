"""The security-group check of a file-system channel (secgroups.py) where its rules name IPv6 ranges or managed
prefix lists, where the file system's places (mount targets, network interfaces) have different groups or none
named, and the fixes its warnings give, applied as written. moto's server for EC2 (groups, subnets with IPv6,
prefix lists); botocore's Stubber for EFS's DescribeMountTargetSecurityGroups (moto's EFS keeps no IPv6 address
of a mount target, so the targets are given as DescribeMountTargets answers them)."""

from __future__ import annotations

import ipaddress
import itertools
import re

import pytest

boto3 = pytest.importorskip("boto3")
from botocore.stub import Stubber  # noqa: E402

from test_sagemaker_backend import moto_url, session  # noqa: E402,F401

from dtrain.backends.sagemaker import secgroups  # noqa: E402

_names = itertools.count()


@pytest.fixture(scope="module")
def vpc(moto_url):  # noqa: F811
    """A dual-stack VPC on moto's EC2 with two subnets (IPv4 and IPv6 each), two prefix lists (`near`: the first
    subnet's IPv4 CIDR; `far`: 192.168.0.0/16), and the ec2 client."""
    ec2 = session().client("ec2", endpoint_url=moto_url)
    made = ec2.create_vpc(CidrBlock="10.8.0.0/16", AmazonProvidedIpv6CidrBlock=True)["Vpc"]
    v6 = ipaddress.ip_network(made["Ipv6CidrBlockAssociationSet"][0]["Ipv6CidrBlock"])
    nets6 = list(itertools.islice(v6.subnets(new_prefix=64), 2))
    a, b = (ec2.create_subnet(VpcId=made["VpcId"], CidrBlock=f"10.8.{i + 1}.0/24", Ipv6CidrBlock=str(nets6[i]))
            ["Subnet"]["SubnetId"] for i in range(2))
    pl = {n: ec2.create_managed_prefix_list(PrefixListName=n, MaxEntries=5, AddressFamily="IPv4",
                                            Entries=[{"Cidr": c}])["PrefixList"]["PrefixListId"]
          for n, c in (("near", "10.8.1.0/24"), ("far", "192.168.0.0/16"))}
    return {"ec2": ec2, "vpc": made["VpcId"], "a": a, "b": b, "a6": nets6[0], "b6": nets6[1], **pl}


def _group(vpc, out: list[dict] = (), into: list[dict] = ()) -> str:
    """A new group letting TCP 2049 out to each destination of `out` and in from each of `into` (nothing else)."""
    ec2 = vpc["ec2"]
    gid = ec2.create_security_group(GroupName=f"g{next(_names)}", Description="t", VpcId=vpc["vpc"])["GroupId"]
    default = ec2.describe_security_groups(GroupIds=[gid])["SecurityGroups"][0]["IpPermissionsEgress"]
    if default:
        ec2.revoke_security_group_egress(GroupId=gid, IpPermissions=default)
    nfs = {"IpProtocol": "tcp", "FromPort": 2049, "ToPort": 2049}
    if out:
        ec2.authorize_security_group_egress(GroupId=gid, IpPermissions=[{**nfs, **d} for d in out])
    if into:
        ec2.authorize_security_group_ingress(GroupId=gid, IpPermissions=[{**nfs, **d} for d in into])
    return gid


def _check(vpc, job: str, targets: list[dict], their: list[list[str]], subnet: str = "a") -> list[str]:
    """secgroups.check of an EFS channel whose mount targets `targets` have the groups `their` (one list each)."""
    efs = session().client("efs")
    with Stubber(efs) as stub:
        for t, gs in zip(targets, their):
            stub.add_response("describe_mount_target_security_groups", {"SecurityGroups": gs},
                              {"MountTargetId": t["MountTargetId"]})
        lines = secgroups.check(vpc["ec2"], efs, "channel training: EFS", "EFS", [job], [vpc[subnet]], targets)
        stub.assert_no_pending_responses()
    return lines


def _target(vpc, name: str, subnet: str = "a", *, v4: bool = True, v6: bool = False) -> dict:
    t = {"MountTargetId": name, "FileSystemId": "fs-0123456789abcdef0", "SubnetId": vpc[subnet],
         "LifeCycleState": "available"}
    if v4:
        t["IpAddress"] = f"10.8.{1 if subnet == 'a' else 2}.{10 + int(name[-2:])}"
    if v6:
        t["Ipv6Address"] = str(vpc[subnet + "6"][10 + int(name[-2:])])
    return t


ANY6, ANY4 = {"Ipv6Ranges": [{"CidrIpv6": "::/0"}]}, {"IpRanges": [{"CidrIp": "0.0.0.0/0"}]}


def test_ipv6_rules_count_for_an_ipv6_only_mount_target(vpc):
    """Ipv6Ranges were never read: an IPv6-only mount target behind ::/0 rules out and in was warned of twice."""
    mt = _group(vpc, into=[ANY6])
    assert _check(vpc, _group(vpc, out=[ANY6]), [_target(vpc, "fsmt-0a000001", v4=False, v6=True)], [[mt]]) == []
    near6 = {"Ipv6Ranges": [{"CidrIpv6": str(vpc["a6"])}]}  # the job's subnet's IPv6 block, in and out
    assert _check(vpc, _group(vpc, out=[near6]), [_target(vpc, "fsmt-0a000001", v4=False, v6=True)],
                  [[_group(vpc, into=[near6])]]) == []


def test_ipv6_rules_do_not_count_for_an_ipv4_mount_target(vpc):
    lines = _check(vpc, _group(vpc, out=[ANY6]), [_target(vpc, "fsmt-0a000002")], [[_group(vpc, into=[ANY6])]])
    assert len(lines) == 2, lines
    assert "no outbound rule of the job's security groups" in lines[0]
    assert "no inbound rule of its mount targets' security groups" in lines[1]


def test_a_dual_stack_mount_target_is_reached_through_either_family(vpc):
    assert _check(vpc, _group(vpc, out=[ANY4]), [_target(vpc, "fsmt-0a000003", v6=True)],
                  [[_group(vpc, into=[ANY6])]]) == []


def test_a_prefix_list_counts_only_where_its_entries_hold_the_mount_target(vpc):
    """A rule naming a managed prefix list counted as allowing whatever the list held."""
    near, far = ({"PrefixListIds": [{"PrefixListId": vpc[n]}]} for n in ("near", "far"))
    target = _target(vpc, "fsmt-0a000004")
    assert _check(vpc, _group(vpc, out=[near]), [target], [[_group(vpc, into=[near])]]) == []
    lines = _check(vpc, _group(vpc, out=[far]), [target], [[_group(vpc, into=[far])]])
    assert len(lines) == 2, lines
    assert "no outbound rule" in lines[0] and "no inbound rule" in lines[1]


def test_a_prefix_list_aws_refuses_to_show_is_the_one_unread_warning(vpc):
    ec2 = session().client("ec2")
    job = {"GroupId": "sg-0aaa1111", "GroupName": "j", "IpPermissionsEgress": [
        {"IpProtocol": "tcp", "FromPort": 2049, "ToPort": 2049, "PrefixListIds": [{"PrefixListId": "pl-0abc1234"}]}]}
    efs = session().client("efs")
    with Stubber(ec2) as e, Stubber(efs) as f:
        e.add_response("describe_security_groups", {"SecurityGroups": [job]}, {"GroupIds": ["sg-0aaa1111"]})
        f.add_response("describe_mount_target_security_groups", {"SecurityGroups": ["sg-0bbb2222"]},
                       {"MountTargetId": "fsmt-0a000005"})
        e.add_response("describe_security_groups", {"SecurityGroups": [{"GroupId": "sg-0bbb2222", "GroupName": "m"}]},
                       {"GroupIds": ["sg-0bbb2222"]})
        e.add_client_error("get_managed_prefix_list_entries", "UnauthorizedOperation", "no", 403,
                           expected_params={"PrefixListId": "pl-0abc1234", "MaxResults": 100})
        with pytest.raises(secgroups.Unread, match="ec2:GetManagedPrefixListEntries"):
            secgroups.check(ec2, efs, "h", "EFS", ["sg-0aaa1111"], [vpc["a"]], [_target(vpc, "fsmt-0a000005")])


def test_a_prefix_list_longer_than_the_pages_read_is_said_not_judged(vpc):
    """A prefix list was read for at most 20 pages of 100 entries, silently: a rule naming a longer one was judged
    on the entries read, and one whose entry holding the mount target lay further on was warned of as letting
    nothing through."""
    ec2, efs = session().client("ec2"), session().client("efs")
    pl, pages = "pl-0abc1234", secgroups.PrefixLists.PAGES
    job = {"GroupId": "sg-0aaa1111", "GroupName": "j", "IpPermissionsEgress": [
        {"IpProtocol": "tcp", "FromPort": 2049, "ToPort": 2049, "PrefixListIds": [{"PrefixListId": pl}]}]}
    theirs = {"GroupId": "sg-0bbb2222", "GroupName": "m", "IpPermissions": [
        {"IpProtocol": "tcp", "FromPort": 2049, "ToPort": 2049, "UserIdGroupPairs": [{"GroupId": "sg-0aaa1111"}]}]}
    with Stubber(ec2) as e, Stubber(efs) as f:
        e.add_response("describe_security_groups", {"SecurityGroups": [job]}, {"GroupIds": ["sg-0aaa1111"]})
        f.add_response("describe_mount_target_security_groups", {"SecurityGroups": ["sg-0bbb2222"]},
                       {"MountTargetId": "fsmt-0a000006"})
        e.add_response("describe_security_groups", {"SecurityGroups": [theirs]}, {"GroupIds": ["sg-0bbb2222"]})
        for page in range(pages):  # every page far from the target, and one more left each time
            params = {"PrefixListId": pl, "MaxResults": 100, **({"NextToken": f"t{page}"} if page else {})}
            e.add_response("get_managed_prefix_list_entries",
                           {"Entries": [{"Cidr": f"192.168.{page}.{i}/32"} for i in range(100)],
                            "NextToken": f"t{page + 1}"}, params)
        lines = secgroups.check(ec2, efs, "h", "EFS", ["sg-0aaa1111"], [vpc["a"]], [_target(vpc, "fsmt-0a000006")])
        e.assert_no_pending_responses()
    assert lines == [f"h: the managed prefix list {pl} has more than the {pages * 100} entries read of it ({pages} "
                     f"pages), so whether the security groups' rules naming it let NFS (TCP 2049) through is not "
                     f"checked: see aws ec2 get-managed-prefix-list-entries --prefix-list-id {pl}"], lines


# ---- the egress fix, applied as written ------------------------------------------------------------------
def _apply(ec2, line: str) -> None:
    """Each `aws ec2 authorize-security-group-egress` command of a warning's fix, made on moto as the CLI would."""
    for cmd in re.findall(r"aws ec2 authorize-security-group-egress [^;)]*(?:\)'|[^;)])*", line):
        gid = re.search(r"--group-id (\S+)", cmd)[1]
        v6 = re.search(r"--ip-permissions 'IpProtocol=tcp,FromPort=(\d+),ToPort=(\d+),"
                       r"Ipv6Ranges=\[\{CidrIpv6=([^}]+)\}\]'", cmd)
        if v6:
            perm = {"IpProtocol": "tcp", "FromPort": int(v6[1]), "ToPort": int(v6[2]),
                    "Ipv6Ranges": [{"CidrIpv6": v6[3]}]}
        else:
            port = re.search(r"--protocol tcp --port (\d+)(?:-(\d+))? (--source-group|--cidr) (\S+)$", cmd.strip())
            assert port, cmd
            to = {"UserIdGroupPairs": [{"GroupId": port[4]}]} if port[3] == "--source-group" else \
                {"IpRanges": [{"CidrIp": port[4]}]}
            perm = {"IpProtocol": "tcp", "FromPort": int(port[1]), "ToPort": int(port[2] or port[1]), **to}
        ec2.authorize_security_group_egress(GroupId=gid, IpPermissions=[perm])


def _fixed(vpc, job: str, targets: list[dict], their: list[list[str]]) -> tuple[str, list[str]]:
    """The egress warning for `job`, and the lines once its fix is applied."""
    lines = [w for w in _check(vpc, job, targets, their) if "no outbound rule" in w]
    assert len(lines) == 1, lines
    _apply(vpc["ec2"], lines[0])
    return lines[0], [w for w in _check(vpc, job, targets, their) if "no outbound rule" in w]


def test_the_egress_fix_names_each_mount_targets_group_and_works_as_written(vpc):
    """It named the file system's first group only: the other mount target stayed out of reach."""
    job = _group(vpc)
    mine, other = _group(vpc, into=[ANY4]), _group(vpc, into=[ANY4])
    targets = [_target(vpc, "fsmt-0a000006"), _target(vpc, "fsmt-0b000007", "b")]
    line, after = _fixed(vpc, job, targets, [[mine], [other]])
    assert f"--source-group {mine}" in line and f"--source-group {other}" in line, line
    assert after == []


def test_the_egress_fix_names_one_group_shared_by_every_mount_target(vpc):
    job, shared = _group(vpc), _group(vpc, into=[ANY4])
    own = _group(vpc, into=[ANY4])
    targets = [_target(vpc, "fsmt-0a000006"), _target(vpc, "fsmt-0b000007", "b")]
    line, after = _fixed(vpc, job, targets, [[own, shared], [shared]])
    assert line.count("--source-group") == 1 and f"--source-group {shared})" in line, line
    assert after == []


@pytest.mark.parametrize("v4, v6", [(True, False), (False, True)])
def test_the_egress_fix_for_a_mount_target_of_unnamed_groups_names_its_subnets_cidr(vpc, v4, v6):
    """Its groups unread, the fix said --cidr 0.0.0.0/0 (and an IPv4 CIDR for an IPv6-only target)."""
    job = _group(vpc)
    line, after = _fixed(vpc, job, [_target(vpc, f"fsmt-0a0000{int(v4)}{int(v6) + 8}", v4=v4, v6=v6)], [[]])
    want = "--cidr 10.8.1.0/24" if v4 else f"Ipv6Ranges=[{{CidrIpv6={vpc['a6']}}}]"
    assert want in line and "0.0.0.0/0" not in line, line
    assert after == []


def test_an_fsx_network_interfaces_ipv6_address_is_reached_by_an_ipv6_rule(vpc):
    """Its interfaces' Ipv6Addresses were not read: Lustre out to ::/0 only, and in from the job's subnet's IPv6
    block only, were warned of for a dual-stack file system."""
    lustre = [(988, 988), (1018, 1023)]
    ec2 = vpc["ec2"]
    job, fs_sg = _group(vpc), _group(vpc)
    near6 = {"Ipv6Ranges": [{"CidrIpv6": str(vpc["a6"])}]}
    ec2.authorize_security_group_egress(GroupId=job, IpPermissions=[
        {"IpProtocol": "tcp", "FromPort": lo, "ToPort": hi, **ANY6} for lo, hi in lustre])
    ec2.authorize_security_group_ingress(GroupId=fs_sg, IpPermissions=[
        {"IpProtocol": "tcp", "FromPort": lo, "ToPort": hi, **near6} for lo, hi in lustre])
    eni = ec2.create_network_interface(SubnetId=vpc["a"], Groups=[fs_sg], Ipv6Addresses=[
        {"Ipv6Address": str(vpc["a6"][99])}])["NetworkInterface"]["NetworkInterfaceId"]
    fs = {"FileSystemId": "fs-0123456789abcdef0", "SubnetIds": [vpc["a"]], "NetworkInterfaceIds": [eni]}
    assert secgroups.check(ec2, None, "h", "FSxLustre", [job], [vpc["a"]], [fs]) == []


def test_each_mount_target_needs_its_own_groups_to_let_nfs_in_and_the_fix_names_them(vpc):
    """The inbound rules of all the mount targets' groups were pooled: one target's group letting NFS in passed
    the other's, which let nothing in, and the fix named the first group only."""
    job = _group(vpc, out=[ANY4])
    mine, other = _group(vpc, into=[{"UserIdGroupPairs": [{"GroupId": job}]}]), _group(vpc)
    targets, their = [_target(vpc, "fsmt-0a000010"), _target(vpc, "fsmt-0b000011", "b")], [[mine], [other]]
    lines = _check(vpc, job, targets, their)
    assert len(lines) == 1 and "no inbound rule of its mount targets' security groups" in lines[0], lines
    assert lines[0].endswith(f"allow it (aws ec2 authorize-security-group-ingress --group-id {other} --protocol tcp "
                             f"--port 2049 --source-group {job})"), lines
    vpc["ec2"].authorize_security_group_ingress(GroupId=other, IpPermissions=[{
        "IpProtocol": "tcp", "FromPort": 2049, "ToPort": 2049, "UserIdGroupPairs": [{"GroupId": job}]}])
    assert _check(vpc, job, targets, their) == []
