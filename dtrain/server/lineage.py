"""Lineage as a graph: which volume each snapshot was taken of, which job's results it holds,
which volume was restored from it and which jobs mounted what (pure: records in, graph out).

    volume ──snapshot──> snapshot ──restored──> volume ──mounted──> job ──results──> snapshot
                         snapshot ──started────> job  (the job's data came from that snapshot)
"""

from __future__ import annotations

from dtrain.server import wire


def lineage(jobs, volumes, snapshots) -> wire.Lineage:
    """JobInfo, VolumeInfo and SnapshotInfo records -> nodes and edges."""
    nodes: dict[str, wire.LineageNode] = {}
    edges: list[wire.LineageEdge] = []

    def node(kind: str, name: str, status: str | None = None) -> str:
        key = f"{kind}:{name}"
        if key not in nodes or status is not None:
            nodes[key] = wire.LineageNode(id=key, kind=kind, name=name, status=status)
        return key

    live = {v.name for v in volumes}
    kept = {s.name for s in snapshots}

    def snapshot(name: str) -> str:  # a deleted one stays in the graph, marked as a deleted volume is
        return node("snapshot", name, None if name in kept else "gone")

    taken = {s.name: s.created for s in snapshots}
    for v in volumes:
        node("volume", v.name)
        if not v.origin_snapshot:
            continue
        if taken.get(v.origin_snapshot, v.created) > v.created:
            # The snapshot of that name now was taken after this volume was restored: the volume came
            # from an earlier, deleted snapshot of the same name, drawn apart and gone.
            source = f"snapshot:{v.origin_snapshot}@{v.name}"
            nodes.setdefault(source, wire.LineageNode(id=source, kind="snapshot", name=v.origin_snapshot,
                                                      status="gone"))
        else:
            source = snapshot(v.origin_snapshot)
        edges.append(wire.LineageEdge(source=source, target=f"volume:{v.name}", label="restored"))
    for s in snapshots:
        target = snapshot(s.name)
        if s.volume:  # None where the storage system no longer says
            vol = node("volume", s.volume, None if s.volume in live else "gone")
            edges.append(wire.LineageEdge(source=vol, target=target, label="snapshot"))
    linked = {s.job for s in snapshots if s.job}
    for j in jobs:
        mounts = {m.volume for m in j.spec.resolved_volumes()} & live
        source = j.extra.get("source_snapshot")
        if not (mounts or source or j.name in linked):
            continue
        key = node("job", j.name, j.status.value)
        edges += [wire.LineageEdge(source=f"volume:{m}", target=key, label="mounted") for m in sorted(mounts)]
        if source:
            edges.append(wire.LineageEdge(source=snapshot(source), target=key, label="started"))
    submitted = {j.name: j.created for j in jobs}
    for s in snapshots:
        if not s.job:
            continue
        # A snapshot's time has whole seconds: a job submitted in the snapshot's second reads as its own.
        if int(submitted.get(s.job, s.created)) > s.created:
            # The job of that name now was submitted after this snapshot was taken: the snapshot holds
            # the results of an earlier, deleted job of the same name, drawn apart and gone.
            source = f"job:{s.job}@{s.name}"
            nodes.setdefault(source, wire.LineageNode(id=source, kind="job", name=s.job, status="gone"))
        else:
            source = node("job", s.job)
        edges.append(wire.LineageEdge(source=source, target=f"snapshot:{s.name}", label="results"))
    return wire.Lineage(nodes=list(nodes.values()), edges=edges)
