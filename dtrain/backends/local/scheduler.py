"""Gang scheduling over a device inventory: all of a job's GPUs at once, or none.

Rules, checked in one SQLite write transaction so concurrent supervisors never race:
- a job starts only when every GPU it needs (processes x gpu) is free;
- FIFO within a project: a job asking for GPUs waits while an older one of its project is still
  Pending; a job that asks for none takes nothing they wait for, and never queues behind them;
- a project never holds more GPUs than its quota;
- across projects, in-quota before over-quota, FIFO within: a job of a project with a GPU quota
  is within it whenever it may start (the quota is a limit here, never exceeded), and it goes
  before any job of a project without one (Run:AI's over-quota jobs, which take idle GPUs only);
  among the latter the older goes first. The first job of another project's queue that ranks
  before this one and waits only for free GPUs keeps them: this job starts only on what is left
  over (so a stream of small jobs never starves an older or in-quota large one, and a small one
  still starts beside it when enough GPUs are free for both). Jobs of projects with a quota do
  not hold one another back: each has its own share (quotas that add up to more GPUs than the
  machine has are the admin's promise broken, and there the GPUs go to whoever asks first);
- preemption, as Run:AI's: a job of a project with a quota, within it, that waits only for free
  GPUs (first in its project's queue) preempts running jobs of other projects that have no quota,
  or that run over theirs (lowered since), the most recently started first (as Run:AI, which
  preempts by priority, then by the latest start: the least work lost; a job started again
  after a preemption counts from that start; the last submitted first among equals), only as
  many as it takes to free what it needs. GPUs that stopping jobs (preempted, suspended, deleted) still hold
  count as being freed, so a job preempts nothing while those make up for what it needs, and no
  job is preempted twice for the same GPUs (those of a job preempted for another in-quota job
  that still waits count for that one only: two arriving together each preempt their own). Nothing is preempted when all the candidates together
  would still not free enough; notebooks (interactive) and jobs taking their --snapshot-on-success
  snapshot are never preempted, nor a project's jobs within its quota. A preempted job moves
  Running -> Pending in this transaction, keeping its devices while its processes stop (its
  supervisor sees it within a second: SIGTERM, the workloads checkpoint, SIGKILL after the grace
  period); the supervisor then lets them go and queues the job again in its place (its
  submission order), and it starts from its last checkpoint once GPUs are free, spending no
  restart. Its message and events name the job and project that preempted it;
- a device is never given to two jobs (the allocations table's primary key is the device);
- a --cpu job's ranks are pinned to cores no other running job is pinned to, when enough are
  free (core_pins; cores are shared, never waited for).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Callable

from dtrain import db
from dtrain.backends.local.store import JobStore, injected_at_submit, injected_word, other_inventory, under_injected
from dtrain.names import counted, listed
from dtrain.spec import JobSpec


def try_allocate(store: JobStore, spec: JobSpec, devices: list[str], *,
                 at_start: Callable[[sqlite3.Connection], dict] | None = None) -> list[str] | None:
    """Allocate the job's devices and mark it Running; None if it must keep waiting.

    Returns the allocated device ids (possibly empty for CPU jobs). Returns None also when the
    job is no longer Pending (deleted meanwhile); callers check the job's status. `at_start(conn)`
    gives more columns of the job to record in the same transaction (what it starts from).
    """
    conn = store.conn
    with db.transaction(conn):
        row = conn.execute("SELECT * FROM jobs WHERE name=?", (spec.name,)).fetchone()
        if row is None or row["status"] != "Pending":
            return None
        reasons = []
        need = spec.gpus_requested
        # Only GPU jobs queue (a CPU job behind one waited as long as the GPUs stayed busy, hours
        # maybe, for nothing that job needed); Run:AI does not hold a CPU-only job back either.
        older = conn.execute("SELECT COUNT(*) AS n FROM jobs WHERE project=? AND status='Pending' AND seq<? AND "
                             "COALESCE(json_extract(spec, '$.gpu'), 0) > 0",
                             (spec.project, row["seq"])).fetchone()["n"] if need else 0
        if older:
            reasons.append(f"{_ordinal(older + 1)} in project {spec.project!r}'s queue")
        quota = conn.execute("SELECT gpu_quota FROM projects WHERE name=?", (spec.project,)).fetchone()
        if need and quota is not None and quota["gpu_quota"] is not None:  # a CPU job takes none of it
            used = conn.execute("SELECT COUNT(*) AS n FROM allocations a JOIN jobs j ON a.job=j.name "
                                "WHERE j.project=?", (spec.project,)).fetchone()["n"]
            if need > quota["gpu_quota"]:  # lowered since it was submitted: no wait ends this one
                reasons.append(f"it needs more than project {spec.project}'s quota of {counted(quota['gpu_quota'], 'GPU')}, "
                               f"and starts only once that is raised ('dtrain project create {spec.project} "
                               f"--gpu-quota {need}')")
            elif used + need > quota["gpu_quota"]:
                reasons.append(f"project quota {counted(quota['gpu_quota'], 'GPU')}, {used} in use")
        taken = {r["device"] for r in conn.execute("SELECT device FROM allocations")}
        free = [d for d in devices if d not in taken]
        if need > len(devices):  # the machine has fewer GPUs than when it was submitted
            reasons.insert(0, _never_starts(store, row, spec, need, len(devices)))
        elif len(free) < need:
            shortfall = f"needs {counted(need, 'GPU')}, {len(free)} free"
            if not reasons and quota is not None and quota["gpu_quota"] is not None:  # in quota, waits for GPUs only
                shortfall += _preempt(store, spec, need, len(free))
            reasons.insert(0, shortfall)
        elif need and not reasons and (quota is None or quota["gpu_quota"] is None):
            # over-quota (its project has no quota): it takes only what jobs ranked before it leave
            ahead = _ranked_ahead(conn, spec.project, row["seq"], len(devices))
            kept = sum(n for _job, _project, n, _why in ahead)
            if len(free) - kept < need:
                reasons.insert(0, f"needs {counted(need, 'GPU')}, {len(free)} free, {min(kept, len(free))} of them kept for "
                                  + ", ".join(f"job {job} of project {project!r} ({why})"
                                              for job, project, _n, why in ahead)
                                  + ", which go first")
        if reasons:  # say why it waits (describe, list); written only when the reason changes
            message = "waiting: " + "; ".join(reasons)
            if preempted := _PREEMPTED.match(row["message"]):  # it says so until it runs again
                message = f"{preempted.group(0)}; {message}"
            if row["message"] != message:
                store.update(spec.name, message=message)
            return None
        chosen = free[:need]
        conn.executemany("INSERT INTO allocations (device, job) VALUES (?, ?)", [(d, spec.name) for d in chosen])
        if spec.cpu is not None:
            pin_cores(conn, spec, sorted(os.sched_getaffinity(0)))
        # The store owns the status; moving it in this transaction means no other process ever
        # sees devices held by a Pending job, or a Running job without its devices.
        store.move(spec.name, "Running", "started on " + (", ".join(f"GPU {d}" for d in chosen) or "CPU"),
                   ran_on=json.dumps(chosen), **(at_start(conn) if at_start is not None else {}))  # `describe` shows each rank's devices after they are released
    return chosen


def _never_starts(store: JobStore, row: sqlite3.Row, spec: JobSpec, need: int, have: int) -> str:
    """Why a job needing more GPUs than this machine has never starts here: fewer GPUs than when it
    was submitted, or its supervisor (restarted by a `dtrain server` or another command started from
    another shell) has another DTRAIN_GPUS than its submit had: suspended, then resumed with that one."""
    (_known, submitted), now = injected_at_submit(row), os.environ.get("DTRAIN_GPUS")
    head = f"needs {counted(need, 'GPU')} but this machine now has {have}"
    if not other_inventory(row, now):
        return f"{head}: it never starts here; delete it and submit it with fewer"
    from dtrain.backends.local.ranks import local_command  # as the job's other hints name them (-p, --backend)

    def cmd(words: str) -> str:
        return local_command(store.path.parent, words, spec.project)

    return (f"{head} (its supervisor has {injected_word(now)}; it was submitted with {injected_word(submitted)}): "
            f"it never starts so; '{cmd(f'suspend {spec.name}')}', then "
            f"'{under_injected(submitted, cmd(f'resume {spec.name}'))}' queues it with the GPUs it was submitted with, or delete it and submit "
            f"it with fewer")


PREEMPTED = "preempted by job {job} of project {project!r}"
_PREEMPTED = re.compile(r"preempted by job (\S+) of project '[^']*'")


def _preempt(store: JobStore, spec: JobSpec, need: int, free: int) -> str:
    """Inside try_allocate's transaction, for an in-quota job that waits only for free GPUs: move
    the running jobs to preempt for it (see the module's rules) back to Pending, recording why in
    its events and theirs. Returns what its waiting message adds: the GPUs being freed, by whom."""
    conn = store.conn
    stopping = _stopping(conn, spec.name)
    freeing = sum(r["n"] for r in stopping)
    victims: list = []
    if free + freeing < need:
        candidates = conn.execute(
            "SELECT j.name, j.project, p.gpu_quota, COUNT(*) AS held, "
            "(SELECT COUNT(*) FROM allocations b JOIN jobs u ON b.job=u.name "
            " WHERE u.project=j.project AND u.status='Running') AS used "
            "FROM jobs j JOIN allocations a ON a.job=j.name LEFT JOIN projects p ON p.name=j.project "
            "WHERE j.status='Running' AND j.project<>? AND NOT COALESCE(json_extract(j.spec, '$.notebook'), 0) "
            "AND COALESCE((SELECT e.message FROM job_events e WHERE e.job=j.name ORDER BY e.id DESC LIMIT 1), '') "
            "NOT LIKE 'taking a snapshot of volume %' "
            "GROUP BY j.name ORDER BY COALESCE(j.last_started, j.started) DESC, j.seq DESC",
            (spec.project,)).fetchall()
        over: dict[str, int] = {}  # a project with a quota -> GPUs it still runs over it
        freed = 0
        for c in candidates:
            if free + freeing + freed >= need:
                break
            if c["gpu_quota"] is not None:
                over.setdefault(c["project"], c["used"] - c["gpu_quota"])
                if over[c["project"]] <= 0:
                    continue  # within its quota: never preempted
                over[c["project"]] -= c["held"]
            victims.append(c)
            freed += c["held"]
        if free + freeing + freed < need:
            victims = []  # all of them would still not be enough: nobody is stopped for nothing
    for v in victims:
        why = "no GPU quota" if v["gpu_quota"] is None else f"over its GPU quota of {v['gpu_quota']}"
        store.move(v["name"], "Pending",
                   PREEMPTED.format(job=spec.name, project=spec.project)
                   + f", which needs these GPUs within its quota (project {v['project']!r} has {why}): it stops "
                   f"(SIGTERM: the workload writes a checkpoint) and is queued again, to go on from its last "
                   f"checkpoint once GPUs are free; no restart is spent")
        store.add_event(spec.name, "Pending", f"preempted job {v['name']} of project {v['project']!r} ({counted(v['held'], 'GPU')}, "
                                              f"{why}) to free the GPUs it needs within its quota")
    if victims:
        stopping = _stopping(conn, spec.name)
        freeing = sum(r["n"] for r in stopping)
    if not freeing:
        return ""
    return f", {freeing} being freed by stopping " + listed(
        [f"{r['name']} of project {r['project']!r}" for r in stopping], "job")


def _stopping(conn, job: str) -> list:
    """(name, project, n) of the jobs that no longer run but still hold n GPUs: their processes are
    stopping (preempted, suspended, deleted); the GPUs are free once those are gone. Those preempted
    for another in-quota job that still waits are that job's, not `job`'s: two in-quota jobs that
    arrive together each preempt their own, instead of the second waiting for the first's to stop,
    then preempting only once the first took them."""
    rows = conn.execute("SELECT j.name, j.project, j.status, j.message, COUNT(*) AS n FROM allocations a "
                        "JOIN jobs j ON a.job=j.name WHERE j.status<>'Running' GROUP BY j.name ORDER BY j.seq").fetchall()
    waiting = {r["name"] for r in conn.execute("SELECT name FROM jobs WHERE status='Pending'")}
    return [r for r in rows if not (r["status"] == "Pending" and (m := _PREEMPTED.match(r["message"] or ""))
                                    and m.group(1) != job and m.group(1) in waiting)]


def _ranked_ahead(conn, project: str, seq: int, gpus: int) -> list[tuple[str, str, int, str]]:
    """(job, project, GPUs, why) of the jobs of other projects that go before an over-quota job
    (`seq`, of `project`, which has no quota) and wait only for free GPUs: the first GPU job of
    each other project's queue, when its project's quota leaves room for it and the machine has
    the GPUs, if that project has a quota (in-quota jobs go first) or it was queued earlier."""
    heads = conn.execute(
        "SELECT j.name, j.project, j.seq, p.gpu_quota, "
        "COALESCE(json_extract(j.spec, '$.gpu'), 0) * COALESCE(json_extract(j.spec, '$.processes'), 1) AS need, "
        "(SELECT COUNT(*) FROM allocations a JOIN jobs u ON a.job=u.name WHERE u.project=j.project) AS used "
        "FROM jobs j LEFT JOIN projects p ON p.name=j.project "
        "WHERE j.status='Pending' AND j.project<>? AND COALESCE(json_extract(j.spec, '$.gpu'), 0) > 0 "
        "AND j.seq=(SELECT MIN(k.seq) FROM jobs k WHERE k.project=j.project AND k.status='Pending' "
        "AND COALESCE(json_extract(k.spec, '$.gpu'), 0) > 0) ORDER BY j.seq", (project,)).fetchall()
    ahead = []
    for h in heads:
        if h["need"] > gpus or (h["gpu_quota"] is not None and h["used"] + h["need"] > h["gpu_quota"]):
            continue  # it waits for more than free GPUs: it keeps none
        if h["gpu_quota"] is not None:
            ahead.append((h["name"], h["project"], h["need"], f"{counted(h['need'], 'GPU')} within its quota"))
        elif h["seq"] < seq:
            ahead.append((h["name"], h["project"], h["need"], f"{counted(h['need'], 'GPU')}, queued earlier"))
    return ahead


def pin_cores(conn, spec: JobSpec, cores: list[int]) -> None:
    """Give a --cpu job's ranks cores no other running job is pinned to (`cores`: this machine's),
    inside the caller's transaction. CPU is never waited for: when the free cores do not go
    round, the job runs unpinned and the kernel shares all cores, rather than stacking two
    jobs' ranks on core 0 while another core idles."""
    taken = {r["core"] for r in conn.execute("SELECT core FROM core_pins")}
    from dtrain.backends.local.launch import pick_cores  # here: `dtrain list` needs only split_devices

    groups = pick_cores([c for c in cores if c not in taken], spec.processes, spec.cpu)
    if groups:
        conn.executemany("INSERT INTO core_pins (core, job) VALUES (?, ?)",
                         [(c, spec.name) for group in groups for c in group])


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def split_devices(devices: list[str], processes: int, gpu: int) -> list[list[str]]:
    """Give each process its own `gpu` devices, in rank order."""
    return [devices[r * gpu:(r + 1) * gpu] for r in range(processes)]
