"""How the volume and snapshot verbs (cli/storage.py) write their records as text: `volume describe`,
`snapshot describe`, a snapshot's state and job, a class's free space and rows, `snapshot verify`'s report, a
changed file's name and what a delete freed. cli/storage.py imports every name here.
"""

from __future__ import annotations

import shlex

from dtrain.cli import format as fmt
from dtrain.spec import SNAPSHOT_ENV, SNAPSHOT_VOLUME_ENV, TRUE_WORDS

def _verify_text(report) -> str:
    """The report as `describe` shows things, each damaged object's hits as words (they were
    Python tuples: ('s1', 'f.bin')) and one found by an earlier verify said so (it read 'missing')."""
    data = report.to_dict()
    data["damaged"] = [{"object": d.object,
                        "problem": d.problem + (", found by an earlier verify and set aside (the next snapshot of a "
                                               "volume that still holds this content stores it again)"
                                               if d.earlier else ""),
                        "hits": ", ".join(f"all of snapshot {snap}" if path == "*" else f"{_path(path)} in {snap}"
                                          for snap, path in d.hits) or "-"}
                       for d in report.damaged]
    if data["skipped"] is None:
        del data["skipped"]
    if not report.tidied:  # their 0 means not looked for: one line saying so, in place of three zeros
        data = {("leftovers" if key == "garbage_objects" else key): value for key, value in data.items()
                if key not in ("garbage_bytes", "unlisted_manifests")}
        data["leftovers"] = ("not looked for: with the disk full or read-only verify only checks, so leftovers "
                             "of interrupted snapshots and unlisted manifests were neither counted nor removed "
                             "(see skipped)")
    return fmt.mapping(data)


def _path(path: str) -> str:
    """A volume's file name as one line of text: one holding a newline, a terminal escape or bytes
    that are not UTF-8 (a job names its files as it likes) is quoted, those characters escaped
    ('\\n', '\\x1b', '\\xff'), so that it can neither pass for two changes nor recolor the terminal."""
    if path.isprintable():
        return path
    out = []
    for c in path:
        if 0xDC80 <= ord(c) <= 0xDCFF:  # a byte that is not UTF-8, kept by surrogateescape
            out.append(f"\\x{ord(c) - 0xDC00:02x}")
        elif c in "\\'" or not c.isprintable():
            out.append(c.encode("unicode_escape").decode("ascii") if c != "'" else "\\'")
        else:
            out.append(c)
    return "'" + "".join(out) + "'"


def _free(c) -> str:
    """A class's free space, 'free / size' where known."""
    if c.free_bytes is None:
        return "-"
    return f"{fmt.size(c.free_bytes)} / {fmt.size(c.total_bytes)}" if c.total_bytes else fmt.size(c.free_bytes)


def _class_rows(c, kinds: bool) -> list[list[object]]:
    """`volume classes`' rows of a class: one, or, where its volumes live in more than one folder (a class
    re-pointed since keeps its volumes where they were made), one a folder, each with its count, the folder
    config.yaml names marked '(configured)' (it showed that folder alone, with every volume counted there)."""
    row = [c.name + (" (default)" if c.default else ""), *([c.kind] if kinds else []),
           c.root or c.provisioner or "-", c.status or "-", _free(c), c.volumes]
    if len(c.folders) < 2:
        return [row]
    if c.status != "NotConfigured":
        row[-4] = f"{c.root} (configured)"
    row[-1] = c.folders.get(c.root, 0)
    return [row, *[["", *([""] if kinds else []), folder, "-", "-", count]
                   for folder, count in c.folders.items() if folder != c.root]]


def _volume_text(v) -> str:
    """`volume describe`, laid out as `describe job`: labels a person reads (sizes in units, times
    in UTC), then the backend's own details under their keys (--json has every field raw)."""
    head = {"Name": v.name, "Status": v.status, "Backend": v.backend, "Storage class": v.storage_class or "default",
            "Size": v.size, "Used": fmt.size(v.used_bytes), "Job": v.job or "-",
            "From snapshot": _from(v.origin_snapshot, v.origin_snapshot_deleted),
            "Created": fmt.when(v.created),
            "Labels": ", ".join(f"{k}={val}" for k, val in v.labels.items()) or "-"}
    return fmt.described(head, {"Details": _details(v.extra)})


def _snapshot_text(s) -> str:
    """`snapshot describe`, laid out as `describe job`; the spec of the job it holds as that job's Spec."""
    head = {"Name": s.name, "Status": _state(s), "Backend": s.backend, "Volume": _volume_word(s),
            "Job": _job_word(s), "Job UID": s.job_uid or "-",
            "From snapshot": _from(s.source_snapshot, s.source_snapshot_deleted),
            "Files": "-" if s.files is None else s.files, "Size": fmt.size(s.bytes),
            "Volume size": s.volume_size or "-", "Storage class": s.storage_class or "-",
            "Created": fmt.when(s.created)}
    spec = dict(s.job_spec or {})
    if isinstance(spec.get("command"), list):
        spec["command"] = shlex.join(map(str, spec["command"]))
    env = spec.get("env") if isinstance(spec.get("env"), dict) else {}
    asked = env.get(SNAPSHOT_VOLUME_ENV) if str(env.get(SNAPSHOT_ENV, "")).strip().lower() in TRUE_WORDS else None
    if not spec.get("snapshot_on_success") and asked:  # the seed's form, as `describe job` shows it
        spec["snapshot_on_success"] = f"{asked} (from -e {SNAPSHOT_ENV} + {SNAPSHOT_VOLUME_ENV})"
    if env:  # as `describe job` shows it: the -e flags
        spec["env"] = fmt.env_flags(env)
    return fmt.described(head, {"Details": _details(s.extra), "Job spec": spec})


def _job_word(s) -> str:
    """A snapshot's job as its JOB column and `snapshot describe` name it: an earlier run of a name
    submitted again (after `delete --purge`) is marked, not shown as the job now so named; a job deleted
    since is marked '(deleted)', as `describe job` marks a deleted snapshot."""
    return "-" if s.job is None else s.job + (" (earlier run)" if s.earlier_run else " (deleted)" * s.job_deleted)


def _details(extra: dict) -> dict:
    """The backend's details but the marks `From snapshot:` and `Volume:` show already (extra's copies of the
    records' fields, kept for one release)."""
    return {k: v for k, v in extra.items() if k not in ("origin_snapshot_deleted", "source_snapshot_deleted",
                                                         "volume_deleted")}


def _volume_word(s) -> str:
    """The volume a snapshot was taken of, marked '(deleted)' where the backend says it was deleted
    since (one made again with its name is another volume): a restore --in-place has none to roll back."""
    return "-" if s.volume is None else s.volume + " (deleted)" * s.volume_deleted


def _from(snapshot: str | None, deleted: bool | None) -> str:
    """The snapshot a volume or a snapshot came from (FROM SNAPSHOT, `From snapshot:`), marked
    '(deleted)' where the backend says it was deleted since, as `describe job` marks its lineage."""
    return "-" if snapshot is None else snapshot + " (deleted)" * bool(deleted)


def _state(s) -> str:
    """A SnapshotInfo's state in Kubernetes' words."""
    return f"Error: {s.error}" if s.error else ("Ready" if s.ready else "Pending")


def _freed(freed, said) -> str:
    """The tail of the 'deleted' line: what a FreedInfo says was given back; `said(words)`: a hint's command."""
    if freed.bytes is None:
        return "; the storage system frees its space"
    if freed.no_room:
        return (f", its data not freed yet: the disk holding the home folder ($DTRAIN_HOME) had no room to update "
                f"the snapshot store's index; free some space there (df -h), then run '{said('snapshot list')}', "
                f"which frees it")
    return f", {fmt.size(freed.bytes)} freed" + (" (more once running snapshots finish)" if freed.pending else "")
