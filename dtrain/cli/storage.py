"""Volume and snapshot verbs: dtrain volume ..., dtrain snapshot ..."""

from __future__ import annotations

import json
import sys

from dtrain.cli import format as fmt
from dtrain.client import Client


def _progress():
    """A tqdm bar on a terminal, nothing otherwise (logs stay clean)."""
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    bar = tqdm(total=0, unit="B", unit_scale=True, file=sys.stderr, leave=False)

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()
    return update


def _print_json_or(data, text: str, as_json: bool) -> None:
    print(json.dumps(data, indent=2, default=str) if as_json else text)


def cmd_volume(args, client: Client) -> int:
    if args.action == "create":
        v = client.create_volume(args.name, size=args.size, storage_class=args.storage_class)
        print(f"volume '{v['name']}' created ({v.get('size', args.size)}, class {v.get('storage_class', '-')})")
    elif args.action == "list":
        vols = client.list_volumes()
        rows = [[v["name"], v.get("storage_class", "-"), v.get("size", "-"), fmt.size(v.get("used_bytes")),
                 v.get("origin_snapshot") or "-", fmt.age(v.get("created"))] for v in vols]
        _print_json_or(vols, fmt.table(["NAME", "CLASS", "SIZE", "USED", "FROM SNAPSHOT", "AGE"], rows), args.json)
    elif args.action == "describe":
        v = client.get_volume(args.name)
        _print_json_or(v, fmt.mapping(v), args.json)
    elif args.action == "delete":
        client.delete_volume(args.name, force=args.force)
        print(f"volume '{args.name}' deleted")
    return 0


def cmd_snapshot(args, client: Client) -> int:
    a = args.action
    if a == "create":
        s = client.create_snapshot(args.volume, name=args.name, job=args.job, progress=_progress())
        print(f"snapshot '{s['name']}' of volume '{s['volume']}' created"
              + (f", linked to job '{s['job']}'" if s.get("job") else ""))
    elif a == "list":
        snaps = client.list_snapshots(volume=args.volume, job=args.job)
        rows = [[s["name"], s["volume"], s.get("job") or "-", s.get("source_snapshot") or "-",
                 s.get("files", "-"), fmt.size(s.get("bytes")), fmt.age(s.get("created"))] for s in snaps]
        _print_json_or(snaps, fmt.table(["NAME", "VOLUME", "JOB", "FROM SNAPSHOT", "FILES", "SIZE", "AGE"], rows),
                       args.json)
    elif a == "describe":
        s = client.get_snapshot(args.name)
        _print_json_or(s, fmt.mapping(s), args.json)
    elif a == "restore":
        if bool(args.to) == bool(args.in_place):
            from dtrain.errors import SpecError
            raise SpecError("say where to restore: --to NEW_VOLUME (a clone) or --in-place (roll the volume back)")
        v = client.restore_snapshot(args.name, to=args.to, in_place=args.in_place, progress=_progress())
        print(f"snapshot '{args.name}' restored " + ("in place" if args.in_place else f"into new volume '{v['name']}'"))
    elif a == "delete":
        freed = client.delete_snapshot(args.name)
        print(f"snapshot '{args.name}' deleted" + (f", {fmt.size(freed['freed_bytes'])} freed"
                                                   if freed.get("freed_bytes") is not None else ""))
    elif a == "verify":
        report = client.verify_snapshot(args.name)
        data = report.to_dict() if hasattr(report, "to_dict") else report
        _print_json_or(data, fmt.mapping(data), args.json)
        return 0 if data.get("ok", not data.get("damaged")) else 1
    elif a == "diff":
        changes = client.diff_snapshots(args.a, args.b)
        data = [c.to_dict() if hasattr(c, "to_dict") else c for c in changes]
        if args.json:
            print(json.dumps(data, indent=2, default=str))
        else:
            for c in data:
                print(f"{c.get('kind', c.get('change', '?'))[:1].upper()} {c['path']}"
                      + (f"  ({', '.join(c['fields'])})" if c.get("fields") else ""))
            print(f"{len(data)} change(s)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("volume", help="create, list, describe and delete volumes")
    vs = p.add_subparsers(dest="action", required=True)
    c = vs.add_parser("create")
    c.add_argument("name")
    c.add_argument("--size", default="10Gi")
    c.add_argument("--class", dest="storage_class")
    for verb in ("list", "describe", "delete"):
        c = vs.add_parser(verb)
        if verb != "list":
            c.add_argument("name")
        if verb == "delete":
            c.add_argument("--force", action="store_true", help="delete even while a job uses it")
        else:
            c.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_volume)

    p = sub.add_parser("snapshot", help="point-in-time snapshots of volumes")
    ss = p.add_subparsers(dest="action", required=True)
    c = ss.add_parser("create")
    c.add_argument("volume")
    c.add_argument("--name")
    c.add_argument("--job", help="link the snapshot to this job")
    c = ss.add_parser("list")
    c.add_argument("--volume")
    c.add_argument("--job")
    c.add_argument("--json", action="store_true")
    c = ss.add_parser("describe")
    c.add_argument("name")
    c.add_argument("--json", action="store_true")
    c = ss.add_parser("restore")
    c.add_argument("name")
    c.add_argument("--to", metavar="NEW_VOLUME")
    c.add_argument("--in-place", action="store_true")
    c = ss.add_parser("delete")
    c.add_argument("name")
    c = ss.add_parser("verify")
    c.add_argument("name", nargs="?", help="one snapshot (default: the whole store)")
    c.add_argument("--json", action="store_true")
    c = ss.add_parser("diff")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_snapshot)
