"""`snapshot verify`: crash leftovers tidied, then the content of one snapshot or all re-hashed
(the engine's verify), its damage named by snapshot and path; on a full or read-only disk it only
checks. A mixin of Storage (volumes.py).
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import TYPE_CHECKING, Callable

from dtrain import db
from dtrain.errors import NotFoundError
from dtrain.storage.info import TIDYING_SKIPPED, Damage, Snapshot, VerifyReport
from dtrain.storage.progress import Progress, reporter

if TYPE_CHECKING:
    from dtrain.storage.engine import Engine


class Verifying:
    """Mixed into Storage, which provides the engine, the snapshots' rows and housekeeping."""

    if TYPE_CHECKING:
        conn: sqlite3.Connection
        engine: Engine
        cmd: Callable[[str], str]
        _live_ids: Callable[[], list[str]]

        def get_snapshot(self, name: str) -> Snapshot: ...

        def list_snapshots(self, *, volume: str | None = None, job: str | None = None) -> list[Snapshot]: ...

        def _snapshots(self, *, volume: str | None = None, job: str | None = None) -> list[Snapshot]: ...

        def _collect(self, *, sweep: bool = True) -> None: ...

    def verify(self, name: str | None = None, *, progress: Progress | bool | None = None) -> VerifyReport:
        """Clean up crash leftovers, then re-hash the content of one snapshot or all of them.

        On a disk that is full or read-only (the databases opened read-only: `db.reads_only`, or a
        write refused since this Client opened them: a server's) it only checks: nothing is tidied,
        swept or set aside, the findings are reported as ever, and `skipped` says what was not done."""
        rows = [self.get_snapshot(name)] if name is not None else self._snapshots()  # its own sweep reports garbage
        write = db.writable(self.conn) and db.writable(self.engine.packs.conn)
        swept = None
        if write:
            try:
                self._collect(sweep=False)
                swept = self.engine.sweep(self._live_ids, force=True)
            except (sqlite3.Error, OSError) as err:  # the disk filled since this Client opened (a server)
                if not db.no_room(err):             # what was not finished is finished by the next command
                    raise
                write = False
        with self.engine.pin(marked=write), reporter(progress, "verify") as cb:
            stats = self.engine.verify([s.id for s in rows], progress=cb, write=write)
        skipped = None
        if not write:
            skipped = (f"{TIDYING_SKIPPED}: the disk holding the home folder ($DTRAIN_HOME) is full or read-only, so "
                       "leftovers of interrupted snapshots were neither counted nor removed and damaged objects were "
                       "not set aside; free space there (df -h) and verify again to tidy")
        elif stats.unrecorded:
            skipped = ("setting aside skipped: the disk holding the home folder ($DTRAIN_HOME) filled, so damaged "
                       "objects were not taken out of the store and hashes computed now were not recorded; free space "
                       "there (df -h) and verify again")
        bad = ({d: "missing" for d in stats.missing} | {d: "corrupt" for d in stats.corrupt}
               | {d: "unreadable" for d in stats.unreadable})
        hits = self._hits(set(bad)) if bad else {}
        # absent now because an earlier verify took it out: that verify's finding, not 'missing'
        earlier = self.engine.packs.damaged_problems() if stats.missing else {}
        damaged = [Damage(object=d, problem=earlier.get(d, p) if p == "missing" else p, hits=tuple(hits.get(d, ())),
                          earlier=p == "missing" and d in earlier) for d, p in sorted(bad.items())]
        by_id = {s.id: s.name for s in rows}
        # a manifest that could not be read because another command deleted its snapshot meanwhile
        # is no damage: that snapshot is simply gone (the report said 'manifest' damage, exit 1)
        deleted = {m for m in stats.bad_manifests
                   if self.conn.execute("SELECT 1 FROM snapshots WHERE uid = ?", (m,)).fetchone() is None}
        if name is not None and deleted:
            raise NotFoundError(f"no snapshot named {name!r}: another command deleted it just now; list snapshots "
                                f"with '{self.cmd('snapshot list')}'")
        damaged += [Damage(object=m, problem="manifest", hits=((by_id[m], "*"),))
                    for m in stats.bad_manifests if m not in deleted]
        return VerifyReport(snapshots=tuple(s.name for s in rows if s.id not in deleted), objects=stats.objects, bytes=stats.bytes,
                            damaged=tuple(damaged), garbage_objects=swept.objects if swept else 0,
                            garbage_bytes=swept.bytes if swept else 0,
                            unlisted_manifests=swept.unlisted if swept else 0, skipped=skipped)

    def _hits(self, bad: set[str]) -> dict[str, list[tuple[str, str]]]:
        """Which (snapshot, path) pairs hold each damaged object."""
        hits: dict[str, list[tuple[str, str]]] = {}
        for snap in self.list_snapshots():
            with contextlib.suppress(OSError, ValueError):
                for e in self.engine.load(snap.id).entries:
                    for d in bad.intersection(e.chunks):
                        hits.setdefault(d, []).append((snap.name, e.path))
        return hits
