"""Lineage as a graph: which volume each snapshot was taken of, which job's results it holds,
which volume was restored from it and which jobs mounted what (pure: records in, graph out).

    volume ──snapshot──> snapshot ──restored──> volume ──mounted──> job ──results──> snapshot
                         snapshot ──started────> job  (the job's data came from that snapshot)
    volume ──mounted──> jobs  (K older jobs that did nothing else: folded into one node)

The graph stays small however many jobs there are: it is drawn from the newest jobs (a page, not
the history), and of the jobs that only mounted a volume, each volume keeps its newest
`per_volume`; the older ones are counted in one node per volume.
"""

from __future__ import annotations

from collections import Counter

from dtrain.server import wire

PER_VOLUME = 8  # jobs drawn per volume among those that only mounted it (the GET's default)


def lineage(jobs, volumes, snapshots, *, per_volume: int = PER_VOLUME, unread: int = 0, linked=(),
            forgotten=frozenset()) -> wire.Lineage:
    """JobInfo (newest first), VolumeInfo and SnapshotInfo records -> nodes and edges. `unread`:
    how many older jobs were not read (told, not drawn); a snapshot's job among them is drawn
    without its status, unless it is in `linked` (the records of snapshots' jobs read apart: a
    Deleted one, an older one), or in `forgotten` (names no job has now: purged), drawn "gone"."""
    nodes: dict[str, wire.LineageNode] = {}
    edges: list[wire.LineageEdge] = []

    # a job's project, from its record or else its snapshot's copy of its spec: its node opens its page with it
    project_of = {**{s.job: (s.job_spec or {}).get("project") for s in snapshots if s.job},
                  **{j.name: j.spec.project for j in (*linked, *jobs)}}

    def node(kind: str, name: str, status: str | None = None) -> str:
        key = f"{kind}:{name}"
        if key not in nodes or status is not None:
            nodes[key] = wire.LineageNode(id=key, kind=kind, name=name, status=status,
                                          project=project_of.get(name) if kind == "job" else None)
        return key

    live = {v.name for v in volumes}
    taken = {s.name: s.created for s in snapshots}
    submitted = {j.name: j.created for j in (*linked, *jobs)}
    status_of = {**{j.name: j.status.value for j in linked}, **{name: "gone" for name in forgotten}}

    def snapshot(name: str) -> str:  # a deleted one stays in the graph, marked as a deleted volume is
        return node("snapshot", name, None if name in taken else "gone")

    def named(kind: str, name: str, born: dict[str, float], at: float, via: str, earlier: bool = False) -> str:
        """The node a record made at `at` points at by name. Names are reused after a delete: when the
        one of that name now came into being after `at`, the record meant an earlier, deleted one,
        drawn apart (KIND:NAME@VIA) and gone. Times have whole seconds (snapshots and volumes keep
        no finer): one made in the record's own second reads as the record's, unless the record says it
        meant an earlier one (`earlier`: a snapshot's job uid that is not the job's now)."""
        if earlier or int(born.get(name, at)) > at:
            key = f"{kind}:{name}@{via}"
            nodes.setdefault(key, wire.LineageNode(id=key, kind=kind, name=name, status="gone"))
            return key
        return snapshot(name) if kind == "snapshot" else node(kind, name, status_of.get(name) if kind == "job" else None)

    for v in volumes:
        node("volume", v.name)
        if v.origin_snapshot:
            edges.append(wire.LineageEdge(source=named("snapshot", v.origin_snapshot, taken, v.created, v.name),
                                          target=f"volume:{v.name}", label="restored"))
    for s in snapshots:
        target = snapshot(s.name)
        if s.volume:  # None where the storage system no longer says
            vol = node("volume", s.volume, None if s.volume in live else "gone")
            edges.append(wire.LineageEdge(source=vol, target=target, label="snapshot"))
    linked = {s.job for s in snapshots if s.job}
    drawn: Counter[str] = Counter()  # per volume: jobs drawn that only mounted it
    folded: Counter[str] = Counter()
    for j in jobs:
        mounts = {m.volume for m in j.spec.resolved_volumes()} & live
        # one per mounted volume whose content was a snapshot's when it started (a job of before, or
        # another backend's, may have recorded only its snapshot's source)
        sources = list(dict.fromkeys(_source(d, j.name, taken, nodes) for d in j.data_sources)) or (
            [snapshot(j.extra["source_snapshot"])] if j.extra.get("source_snapshot") else [])
        if not (sources or j.name in linked):
            if not any(drawn[m] < per_volume for m in mounts):
                folded.update(mounts)
                continue
            drawn.update(mounts)
        key = node("job", j.name, j.status.value)
        edges += [wire.LineageEdge(source=f"volume:{m}", target=key, label="mounted") for m in sorted(mounts)]
        edges += [wire.LineageEdge(source=source, target=key, label="started") for source in sources]
    for m, k in sorted(folded.items()):
        key = f"jobs:{m}"
        nodes[key] = wire.LineageNode(id=key, kind="jobs", name=f"{k} older job{'s' * (k != 1)}", count=k)
        edges.append(wire.LineageEdge(source=f"volume:{m}", target=key, label="mounted"))
    for s in snapshots:
        if s.job:
            edges.append(wire.LineageEdge(source=named("job", s.job, submitted, s.created, s.name, s.earlier_run),
                                          target=f"snapshot:{s.name}", label="results"))
    return wire.Lineage(nodes=list(nodes.values()), edges=edges, jobs_unread=unread)


def _source(d, job: str, taken: dict, nodes: dict) -> str:
    """The node of a job's data source (a DataSource): the snapshot of that name, drawn gone when it
    was deleted; a deleted one whose name a newer snapshot took is drawn apart (snapshot:NAME@JOB)."""
    key = f"snapshot:{d.snapshot}"
    if d.snapshot_deleted and d.snapshot in taken:
        key = f"{key}@{job}"
    if key not in nodes or d.snapshot_deleted:
        nodes[key] = wire.LineageNode(id=key, kind="snapshot", name=d.snapshot,
                                      status="gone" if d.snapshot_deleted or d.snapshot not in taken else None)
    return key
