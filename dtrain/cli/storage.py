"""Volume and snapshot verbs: dtrain volume ..., dtrain snapshot ..."""

from __future__ import annotations

import argparse
import shlex
import sys
import time

from dtrain.cli import format as fmt
from dtrain.cli.storage_text import (_class_rows, _free, _freed, _from, _job_word, _path, _snapshot_text, _state,
                                     _verify_text, _volume_text, _volume_word)
from dtrain.cli.watch import EXIT_TIMEOUT, wait_timeout
from dtrain.client import Client
from dtrain.errors import DtrainError, NotFoundError, SpecError, TimeoutError_
from dtrain.names import counted, shown


class NetAppTier(argparse.Action):
    """NetApp's --tier (a volume's performance tier, as its reference names it), refused naming ours: a
    tier is a storage class here, where argparse said only "unrecognized" (and, on `volume update`,
    that --class was missing, as if nothing had been typed)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} is NetApp's: a volume's performance tier is its storage class here: "
                     f"--class {values or 'CLASS'} (the classes: 'dtrain volume classes')")


class SizeNotChanged(argparse.Action):
    """`volume update --size` (a PVC's expansion, `kubectl patch pvc`): refused saying what a size is here,
    where argparse said only "unrecognized" and that --class was missing, as if nothing had been typed."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} cannot change: a volume's size is set when it is made (locally it is "
                     f"recorded, not enforced: a volume may outgrow it, and 'dtrain volume list' shows what it "
                     f"uses); 'volume update' changes its storage class (--class CLASS)")


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


def _print(records, text: str, as_json: bool | str) -> None:
    """One record or a list of them: their to_dict() as JSON (as YAML for -o yaml), or the text."""
    if as_json:
        data = [r.to_dict() for r in records] if isinstance(records, list) else records.to_dict()
        print(fmt.record_text(data, as_json))
    else:
        print(text)


def cmd_volume(args, client: Client) -> int:
    if args.action == "create" and args.dry_run:
        print(fmt.dry_run_text(client.render_volume(args.name, size=args.size, storage_class=args.storage_class,
                                                    project=args.project), args.json), end="")
    elif args.action == "delete" and args.dry_run:
        for name in _existing(args, client, "volume"):  # an unknown volume is an error in a dry run too
            print(f"volume '{name}' would be deleted (dry run)")
    elif args.action == "create":
        v = client.create_volume(args.name, size=args.size, storage_class=args.storage_class, project=args.project)
        _print(v, f"volume '{v.name}' created ({v.size}, class {v.storage_class or 'default'})", args.json)
    elif args.action == "list":
        vols = _older(client.list_volumes(project=args.project), args.older_than)
        rows = [[v.name, v.storage_class or "-", v.size, fmt.size(v.used_bytes), v.status,
                 _from(v.origin_snapshot, v.origin_snapshot_deleted),
                 fmt.age(v.created)] for v in vols]
        text = (fmt.table(["NAME", "CLASS", "SIZE", "USED", "STATUS", "FROM SNAPSHOT", "AGE"], rows) if rows else
                f"No volumes older than {args.older_than}" if args.older_than is not None else
                f"No volumes yet: make one with '{_said(client, args, 'volume create NAME --size 10Gi')}'")
        _print(vols, text, args.json)
    elif args.action == "classes":
        classes = client.list_storage_classes(project=args.project)
        kinds = len({c.kind for c in classes}) > 1  # Kubernetes: StorageClasses and VolumeAttributesClasses
        rows = [row for c in classes for row in _class_rows(c, kinds)]
        text = fmt.table(["NAME", *(["KIND"] if kinds else []), "FOLDER" if classes and classes[0].root else
                          "PROVISIONER", "STATUS", "FREE", "VOLUMES"], rows)
        why = [f"{c.name}: {c.message}" for c in classes if c.message]
        fmt.warn(classes.notices)  # Kubernetes: VolumeAttributesClasses forbidden, the rest shown
        _print(classes, "\n".join([text, *why]), args.json)
    elif args.action == "describe":
        v = client.get_volume(args.name, project=args.project)
        _print(v, _volume_text(v), args.json)
    elif args.action == "update" and args.dry_run:
        print(fmt.dry_run_text([client.render_volume_update(args.name, storage_class=args.storage_class,
                                                            project=args.project)], args.json), end="")
    elif args.action == "update":
        return _update_volume(args, client)
    elif args.action == "delete":
        def delete(name: str) -> None:
            kept = client.delete_volume(name, force=args.force, project=args.project)
            # Kubernetes keeps a claim its pods still use (kubectl: Terminating) until they stop
            print(f"volume '{name}' deleting ({kept})" if kept else f"volume '{name}' deleted")
        with client.room_to_free():  # a full home disk: room for the names' checks, which read the index, too
            _each(_existing(args, client, "volume"), delete)
    return 0


def _update_volume(args, client: Client) -> int:
    """`volume update --class`; with --wait, as `snapshot create --wait`: until the class is in effect
    (Kubernetes: the CSI driver's asynchronous ModifyVolume), EXIT_TIMEOUT if --timeout runs out first."""
    if args.timeout is not None and not args.wait:
        again = _said(client, args, f"volume update {args.name} --class {args.storage_class} --wait --timeout "
                                    f"{shlex.quote(args.timeout)}")
        raise SpecError(f"--timeout goes with --wait: {again}")
    timeout = None if args.timeout is None else wait_timeout(args.timeout)
    v = client.update_volume(args.name, storage_class=args.storage_class, project=args.project)
    if args.wait:
        try:
            waited = client.wait_volume(v.name, timeout=timeout, project=args.project)
        except TimeoutError_ as err:
            kind = "VolumeAttributesClass" if v.extra.get("volume_attributes_class") else "storage class"
            print(f"dtrain: --timeout {args.timeout} ran out waiting for volume {v.name!r} to take {kind} "
                  f"{args.storage_class!r} (set; the storage system goes on); check '{err.look}'", file=sys.stderr)
            return EXIT_TIMEOUT
        if v.extra.get("volume_attributes_class"):  # the class in effect now; a local move's record says more
            v = waited
    if v.extra.get("volume_attributes_class"):  # Kubernetes: the StorageClass stays, the tier changes
        if args.wait:
            said = (f"volume '{v.name}' now has VolumeAttributesClass '{args.storage_class}' in effect (its "
                    f"storage class stays)")
        else:
            said = (f"volume '{v.name}' now has VolumeAttributesClass '{args.storage_class}' (its storage class "
                    f"stays; the storage system changes the tier in place, when it can: '"
                    f"{client.command_for(f'volume describe {v.name}', backend=v.backend, project=args.project)}' "
                    f"shows the class in effect, --wait waits for it)")
    else:
        where = v.extra.get("path")
        said = f"volume '{v.name}' is now in storage class '{args.storage_class}'"
        if v.extra.get("relabeled"):  # two classes named at one folder: only the record changed
            said = (f"volume '{v.name}' is now in storage class '{args.storage_class}', whose folder it was in "
                    f"already as class '{v.extra['relabeled']}': nothing moved")
        elif v.extra.get("moved") is False:
            said = f"volume '{v.name}' is already in storage class '{args.storage_class}': nothing moved"
        said += f" ({where})" if where else ""
    _print(v, said, args.json)
    return 0


def cmd_snapshot(args, client: Client) -> int:
    a = args.action
    if a == "create" and args.dry_run:
        print(fmt.dry_run_text(client.render_snapshot(args.volume, name=args.name, job=args.job,
                                                      project=args.project), args.json), end="")
    elif a == "restore" and args.dry_run:
        print(fmt.dry_run_text(client.render_restore(args.name, to=args.to, in_place=args.in_place,
                                                     storage_class=args.storage_class, project=args.project),
                               args.json), end="")
    elif a == "create":
        s = client.create_snapshot(args.volume, name=args.name, job=args.job, progress=_progress(),
                                   project=args.project)
        if args.wait and not s.ready:  # as `snapshot wait`: ready, or the storage system's error
            s = client.wait_snapshot(s.name, project=args.project)
        _print(s, f"snapshot '{s.name}' of volume '{s.volume}' created"
               + (f", linked to job '{s.job}'" if s.job else "")
               + ("" if s.ready else " (the storage system is still taking it)"), args.json)
    elif a == "wait":
        return _wait_snapshots(args, client)
    elif a == "list":
        # -p: that project's backend (on Kubernetes its namespace, where its jobs keep their snapshots)
        snaps = client.list_snapshots(volume=args.volume, job=args.job, project=args.project)  # a name that never was: its one line
        snaps = _older(snaps, args.older_than)
        rows = [[s.name + ("" if s.ready else f" ({_state(s)})"), _volume_word(s), _job_word(s),
                 _from(s.source_snapshot, s.source_snapshot_deleted), "-" if s.files is None else s.files,
                 fmt.size(s.bytes), fmt.age(s.created)]
                for s in snaps]
        whose = " and".join(w for w in (f" of volume '{args.volume}'" if args.volume else "",
                                        f" linked to job '{args.job}'" if args.job else "") if w)
        if args.older_than is not None:
            whose += f" older than {args.older_than}"
        take = f"snapshot create {args.volume or 'VOLUME'}" + (f" --job {args.job}" if args.job else "")
        text = (fmt.table(["NAME", "VOLUME", "JOB", "FROM SNAPSHOT", "FILES", "SIZE", "AGE"], rows) if rows else
                f"No snapshots{whose}" if args.older_than is not None else
                f"No snapshots{whose} yet: take one with '{_said(client, args, take)}'"
                + ("" if args.volume or args.job else ", or submit a job with --snapshot-on-success VOLUME"))
        _print(snaps, text, args.json)
    elif a == "describe":
        s = client.get_snapshot(args.name, project=args.project)
        _print(s, _snapshot_text(s), args.json)
    elif a == "restore":
        v = client.restore_snapshot(args.name, to=args.to, in_place=args.in_place, storage_class=args.storage_class,
                                    progress=_progress(), project=args.project)
        _print(v, f"snapshot '{args.name}' restored " + ("in place" if args.in_place else f"into new volume '{v.name}'")
               + (f" (class {v.storage_class})" if args.storage_class else ""), args.json)
    elif a == "delete":
        def delete(name: str) -> None:
            freed = client.delete_snapshot(name, project=args.project)
            if args.json and len(names) > 1:  # a JSON object a line, as `snapshot wait --json`
                print(fmt.record_text(freed.to_dict(), args.json, indent=None, stream=True))
            else:
                _print(freed, f"snapshot '{name}' deleted" + _freed(freed, lambda w: _said(client, args, w)), args.json)
        with client.room_to_free():  # a full home disk: room for the names' checks, which read the index, too
            names = _existing(args, client, "snapshot")
            _each(names, delete)
    elif a == "verify":
        report = client.verify_snapshot(args.name, project=args.project)
        _print(report, _verify_text(report), args.json)
        return 0 if report.ok else 1
    elif a == "diff":
        changes = client.diff_snapshots(args.a, args.b, project=args.project)
        if args.json:
            print(fmt.record_text([c.to_dict() for c in changes], args.json))
        else:
            for c in changes:
                print(f"{c.kind[:1].upper()} {_path(c.path)}" + (f"  ({', '.join(c.fields)})" if c.fields else ""))
            print(counted(len(changes), "change"))
    return 0


def _older(records: list, older_than: str | None) -> list:
    """The records created at least `older_than` ago (a duration: 7d, 12h, 1h30m), for the clean-up
    habit `list --older-than 30d --json | jq -r '.[].name' | xargs -r dtrain snapshot delete`; a record
    whose creation time is unknown is kept out (never deleted by mistake)."""
    if older_than is None:
        return records
    seconds = fmt.go_duration(older_than)
    if seconds is None or not 0 <= seconds <= fmt.MAX_SINCE_DAYS * 86400:
        raise SpecError(f"invalid --older-than {shown(older_than)}: use a duration of at most {fmt.MAX_SINCE_DAYS}d, "
                        "such as 30d, 12h or 1h30m")
    cutoff = time.time() - seconds
    return [r for r in records if r.created is not None and r.created <= cutoff]


def _existing(args, client: Client, kind: str) -> list[str]:
    """The names a delete was given (`xargs dtrain snapshot delete` passes many), each checked before
    anything is deleted, as `dtrain delete` checks jobs: a slip among them deletes nothing."""
    get = client.get_volume if kind == "volume" else client.get_snapshot
    names, missing = list(dict.fromkeys(args.names)), []
    if len(names) > 1 and args.project is not None:  # a wrong -p is the one problem, not every name
        client.check_project(args.project)
    for name in names:
        try:
            get(name, project=args.project)
        except NotFoundError:
            if len(names) == 1:  # the backend's own line, as the SDK and the HTTP API say it
                raise
            missing.append(name)
    if missing:
        raise NotFoundError(f"no {kind} named {', '.join(map(shown, missing[:5]))}; nothing was deleted "
                            f"(see '{_said(client, args, f'{kind} list')}')")
    return names


def _each(names: list[str], delete) -> None:
    """delete(name) for each name in turn; a refusal part-way (a volume a job uses) names those deleted
    before it, which a script that runs the command again would otherwise find missing."""
    for i, name in enumerate(names):
        try:
            delete(name)
        except DtrainError as err:
            if not i:
                raise
            raise type(err)(f"{err}; deleted before it: {', '.join(names[:i])}") from None


def _ready_now(client: Client, name: str, project: str | None) -> bool:
    try:
        return client.get_snapshot(name, project=project).ready
    except DtrainError:  # gone, or the storage system not answering: not ready
        return False


def _wait_snapshots(args, client: Client) -> int:
    """As `dtrain wait` for jobs (and kubectl wait --for=jsonpath='{.status.readyToUse}'=true): the
    snapshots in turn under one --timeout; exit 0 once every one is ready, EXIT_TIMEOUT if the time
    ran out; one the storage system failed to take is an error (it will never be ready)."""
    names = list(dict.fromkeys(args.names))
    timeout = None if args.timeout is None else wait_timeout(args.timeout)
    for name in names:  # an unknown name is an error before any waiting
        client.get_snapshot(name, project=args.project)
    deadline = None if timeout is None else time.monotonic() + timeout
    for i, name in enumerate(names):
        try:
            s = client.wait_snapshot(name, timeout=None if deadline is None else max(0.0, deadline - time.monotonic()),
                                     project=args.project)
        except TimeoutError_ as err:  # those after it were not waited for: counted as they are now
            ready = i + sum(_ready_now(client, later, args.project) for later in names[i + 1:])
            print(f"dtrain: --timeout {args.timeout} ran out waiting for snapshot {name!r}"
                  + (f" ({ready} of {len(names)} ready)" if len(names) > 1 else "")
                  + f"; wait longer (--timeout) or check '{err.look}'", file=sys.stderr)
            return EXIT_TIMEOUT
        if args.json:
            print(fmt.record_text(s.to_dict(), args.json, indent=None, stream=True))
        else:
            print(f"{s.name}: {_state(s)}")
    return 0


def _said(client: Client, args, words: str) -> str:
    """`dtrain WORDS` as a hint on where this command looked (its -p and --backend carried)."""
    return client.command_for(words, backend=client.backend(project=args.project).name, project=args.project)


def register(sub) -> None:
    p = sub.add_parser("volume", help="create, list, describe and delete volumes")
    vs = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = vs.add_parser("create", help="an empty volume")
    c.add_argument("name", help="volume name (lower-case letters, digits, '-')")
    c.add_argument("--size", default="10Gi",
                   help="a quantity from 1Mi to 1Ei such as 100Gi (default 10Gi; a number without a unit, bytes to "
                        "Kubernetes, is refused below 1Mi: write --size 100Gi, not 100); Kubernetes: the PVC's request; local: "
                        "recorded only, not a quota (a volume may outgrow it; 'volume list' shows USED)")
    c.add_argument("--class", "--storage-class", dest="storage_class", help="storage class (local: 'local'; Kubernetes: a StorageClass)")
    c.add_argument("--json", action="store_true", help="print the new volume as one JSON object")
    c = vs.add_parser("update", help="change a volume's storage class (performance tier) in place")
    c.add_argument("name", help="the volume")
    c.add_argument("--class", "--storage-class", dest="storage_class", required=True,
                   help="local: a class of config.yaml's storage_classes; Kubernetes: a VolumeAttributesClass")
    c.add_argument("--dry-run", action="store_true", help="print the PVC patch (Kubernetes) or the planned move "
                                                                "(with --json, as one JSON object)")
    c.add_argument("--json", action="store_true", help="print the moved volume as one JSON object")
    c.add_argument("--wait", action="store_true",
                   help="return once the class is in effect (Kubernetes: the CSI driver changes the tier "
                        "asynchronously; local: at once)")
    c.add_argument("--timeout", help=f"with --wait: give up after this many seconds, or a duration such as 10m "
                                     f"(exit code {EXIT_TIMEOUT}; default: never)")
    for verb, text in (("list", "volumes, sizes, space used"), ("describe", "one volume"),
                       ("delete", "delete a volume and its data"),
                       ("classes", "storage classes (performance tiers): folder or provisioner, free space, "
                                   "volumes, the default (kubectl get storageclass)")):
        c = vs.add_parser(verb, help=text)
        if verb == "delete":  # several, as `xargs` passes them
            c.add_argument("names", nargs="+", metavar="NAME", help="the volumes, each checked before any is deleted")
        elif verb not in ("list", "classes"):
            c.add_argument("name", help="the volume")
        if verb == "list":
            _older_flag(c, "volumes")
        if verb == "delete":
            c.add_argument("--force", action="store_true", help="delete even while a job uses it")
        else:
            c.add_argument("--json", action="store_true", help="print JSON")
    for verb in ("create", "delete"):
        _dry_run_flag(vs.choices[verb])
    for verb in ("create", "update"):
        vs.choices[verb].add_argument("--tier", action=NetAppTier)
    vs.choices["update"].add_argument("--size", action=SizeNotChanged)
    for c in vs.choices.values():
        _project_flag(c)
        _backend_flag(c)
    p.set_defaults(handler=cmd_volume)

    p = sub.add_parser("snapshot", help="point-in-time snapshots of volumes")
    ss = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = ss.add_parser("create", help="snapshot a volume now")
    c.add_argument("volume", help="the volume")
    c.add_argument("--name", help="snapshot name (default: VOLUME-<time>)")
    c.add_argument("--job", help="link the snapshot to this job")
    c.add_argument("--json", action="store_true", help="print the new snapshot as one JSON object (its name: .name)")
    c.add_argument("--wait", action="store_true",
                   help="return once it is ready to use (Kubernetes takes a snapshot asynchronously; local: at once)")
    c = ss.add_parser("wait", help="wait until snapshots are ready to use; exit 0 when all are, "
                                   f"{EXIT_TIMEOUT} if --timeout ran out",
                      usage="dtrain snapshot wait NAME [NAME...] [--timeout T] [-p PROJECT] [--json]")
    c.add_argument("names", nargs="+", metavar="NAME", help="the snapshots, waited for in turn")
    c.add_argument("--timeout", help="give up after this many seconds, or a duration such as 10m, for all of them "
                                     f"together (exit code {EXIT_TIMEOUT}; default: never)")
    c.add_argument("--json", action="store_true", help="print each ready snapshot as one JSON object (a line each)")
    c = ss.add_parser("list", help="snapshots, newest last")
    c.add_argument("--volume", help="only this volume's snapshots")
    c.add_argument("--job", help="only snapshots linked to this job")
    _older_flag(c, "snapshots")
    c.add_argument("--json", action="store_true", help="print a JSON list")
    c = ss.add_parser("describe", help="one snapshot: volume, job, lineage, size")
    c.add_argument("name", help="the snapshot")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c = ss.add_parser("restore", help="into a new volume (--to) or in place (--in-place)")
    c.add_argument("name", help="the snapshot")
    where = c.add_mutually_exclusive_group()  # one of them: argparse names both when both are given
    where.add_argument("--to", metavar="NEW_VOLUME", help="create this volume from the snapshot (a clone)")
    where.add_argument("--in-place", action="store_true", help="roll the snapshot's volume back to it")
    c.add_argument("--class", "--storage-class", dest="storage_class",
                   help="with --to: the new volume's storage class (default: the class of the snapshot's volume; "
                        "local: a class of config.yaml's storage_classes; Kubernetes: the PVC's StorageClass); "
                        "an in-place restore keeps the volume's class (change it with 'volume update --class')")
    c.add_argument("--json", action="store_true", help="print the restored volume as one JSON object")
    c = ss.add_parser("delete", help="delete snapshots; data no other snapshot holds is freed")
    c.add_argument("names", nargs="+", metavar="NAME", help="the snapshots, each checked before any is deleted")
    c.add_argument("--json", action="store_true", help="print what was freed as one JSON object (a line each when "
                                                        "several are deleted)")
    c = ss.add_parser("verify", help="re-hash stored data against the snapshot manifests")
    c.add_argument("name", nargs="?", help="one snapshot (default: the whole store)")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c = ss.add_parser("diff", help="files added, removed or changed between two snapshots, or since a snapshot")
    c.add_argument("a", help="the older snapshot")
    c.add_argument("b", nargs="?", help="the newer snapshot (default: the snapshot's volume as it is now)")
    c.add_argument("--json", action="store_true", help="print a JSON list")
    for verb in ("create", "restore"):
        _dry_run_flag(ss.choices[verb])
    for c in ss.choices.values():
        _project_flag(c)
        _backend_flag(c)
    p.set_defaults(handler=cmd_snapshot)


def _older_flag(p, what: str) -> None:
    p.add_argument("--older-than", metavar="DURATION", help=f"only {what} created at least this long ago (30d, 12h, "
                                                             f"1h30m); with --json, names to delete")


def _dry_run_flag(p) -> None:
    p.add_argument("--dry-run", action="store_true", help="print what would be sent (Kubernetes: the YAML; with "
                                                                "--json, one JSON object a line) and stop")


def _project_flag(p) -> None:
    # Client's storage verbs: that project's backend (config.yaml's project_backends) and, on Kubernetes, its namespace
    p.add_argument("-p", "--project", help="on this project's backend (its namespace on Kubernetes), where its "
                                           "volumes and its jobs' snapshots are (default: the configured project's)")


def _backend_flag(p) -> None:
    # main() builds the Client with this backend, so every storage verb goes there
    # sagemaker too: its refusal is the one line naming where its data lives (--channel), as with a global --backend
    p.add_argument("--backend", dest="storage_backend", choices=["local", "kubernetes", "sagemaker"],
                   help="where the volumes and snapshots are (default from config)")
