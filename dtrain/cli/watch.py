"""Following a job and reaching into it: `logs` (-f), `wait` (exit codes as kubectl wait's), `exec` and
`bash` beside a running process, `artifacts`; the --rank, --pod and duration flags they read, and what
Ctrl-C while following says."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable

from dtrain import JobStatus
from dtrain.cli import format as fmt
from dtrain.cli.lookup import _get, _in_project, _job_names
from dtrain.client import Client, TimeoutError_
from dtrain.errors import NotFoundError, SpecError
from dtrain.names import (EXEC_RUNNING_WAIT, MAX_WAIT, check_exec_rank_form, check_limit_bytes, check_rank,
                          check_tail, counted, shown, wait_refusal)
from dtrain.numbers import exact, plain, real_number, whole_number


def cmd_logs(args, client: Client) -> int:
    if args.container is not None or args.all_containers not in (None, "false", "False"):  # kubectl's: a dtrain job's processes are its ranks
        raise SpecError(f"{'-c/--container' if args.container is not None else '--all-containers'} is kubectl's: a "
                        f"job's processes here are ranks, not containers; every rank's lines are "
                        f"shown by default, or one rank's with --rank R (e.g. dtrain logs {shown(args.name)[1:-1]} "
                        f"--rank 0)")
    rank = None if args.rank in (None, "all") else _rank(args.rank)
    since = (fmt.parse_since(args.since) if args.since is not None else
             fmt.parse_time(args.since_time) if args.since_time is not None else None)
    since = None if since is None else max(since, 0.0)  # a time before 1970: every line, as kubectl has it
    tail = None if args.tail in (None, -1) else check_tail(args.tail, "cli")  # kubectl's --tail=-1 (its default): all
    if args.limit_bytes is not None:  # refused before the job is read, as by HTTP
        check_limit_bytes(args.limit_bytes, "cli")
    _in_project(args)
    try:
        info = _get(args, client, args.name)
    except NotFoundError:  # a deleted job's snapshot, not a near name, says where its logs went
        if (gone := client.gone_job_logs(args.name, project=args.project)) is not None:
            raise gone from None
        raise
    refuse_pod(args, client, info)
    many = rank is None and info.spec.processes > 1
    printed = False
    # a bare wait read as a hang; a job Pending again after a run: the backend's notice says it (its next run)
    if args.follow and info.status is JobStatus.PENDING and info.started is None and not args.previous:
        try:
            pending = _still_pending(client, args, info)
        except KeyboardInterrupt:
            return _left(client, info, "following the logs of")
        if pending is not None:
            print(f"dtrain: job '{info.name}' is Pending ({pending.message or 'not started'}): its lines follow "
                  f"once it starts (Ctrl-C stops following, not the job)", file=sys.stderr, flush=True)
    lines = client.logs(args.name, rank=rank, tail=tail, since=since, follow=args.follow,
                        previous=args.previous, limit_bytes=args.limit_bytes, project=args.project)
    try:
        for line in lines:
            printed = True
            if args.json:
                sys.stdout.write(fmt.record_text(line.to_dict(), args.json, indent=None, stream=True) + "\n")
            else:
                prefix = (fmt.when(line.time) + " " if args.timestamps else "") + (f"[rank {line.rank}] " if many else "")
                sys.stdout.write(prefix + line.text + "\n")
            if args.follow:  # a line shows when it is written; otherwise a flush a line cost a write(2) a line
                sys.stdout.flush()
    except KeyboardInterrupt:
        if not args.follow:
            raise
        return _left(client, info, "following the logs of")
    if args.follow and not args.previous:
        _said_suspended(client, args, info)
    # as kubectl: why nothing came (unless the backend said it: a restarted SageMaker host not started again)
    if (not printed and not args.follow and info.status.value == "Pending"
            and not lines.notices):
        follow = client.command_for(f"logs {info.name} -f", backend=info.backend, project=info.spec.project)
        print(f"dtrain: job '{info.name}' is Pending ({info.message or 'not started'}): no process has "
              f"started, so there are no logs yet; '{follow}' waits for them", file=sys.stderr)
    return 0


PENDING_NOTE_AFTER = 2.0  # seconds: a job just submitted is Pending until its processes start


def _still_pending(client: Client, args, info):
    """The job, read again, when it is still Pending PENDING_NOTE_AFTER seconds on (None once it has
    left Pending): a job submitted a moment ago starts within that time, and a note then was noise."""
    deadline = time.monotonic() + PENDING_NOTE_AFTER
    now = info
    while time.monotonic() < deadline:
        time.sleep(0.25)  # a read of a remote job is several requests
        try:
            now = client.get(info.name, project=args.project)
        except NotFoundError:  # deleted meanwhile: following ends with it, nothing to explain
            return None
        if now.status is not JobStatus.PENDING or now.started is not None:
            return None
    return now


def _said_suspended(client: Client, args, info) -> None:
    """`logs -f` ends at a suspension (the processes have stopped): said, since a bare prompt reads as
    a job that ended, and the lines come back only after a resume, on a new follow."""
    try:
        now = client.get(info.name, project=args.project)
    except NotFoundError:  # purged meanwhile: nothing to resume
        return
    if now.status is not JobStatus.SUSPENDED:
        return
    resume = client.command_for(f"resume {info.name}", backend=now.backend, project=now.spec.project)
    follow = client.command_for(f"logs {info.name} -f", backend=now.backend, project=now.spec.project)
    print(f"dtrain: job '{info.name}' is Suspended: its processes are stopped, so following ends here; "
          f"'{resume}' starts it again, then '{follow}' follows it", file=sys.stderr, flush=True)


def pod_ranks(pod: str, info) -> list[int]:
    """The ranks that pod `pod` of job `info` runs, as its backend maps ranks to pods (the mapping
    `logs --rank` and `exec --rank` use): several for a pod of packed ranks (gpus_per_node); none
    for a pod that is not the job's or runs no rank (an MPIJob's launcher)."""
    return [p.rank for p in info.processes if p.pod == pod]


def refuse_pod(args, client: Client, info) -> None:
    """`--pod NAME` (Run:AI's and kubectl's): a job's processes are its ranks here; the one line names
    the exact `--rank N` for a pod of the job's (its first where it runs several), else its pods."""
    if args.pod is None:
        return
    ranks = pod_ranks(args.pod, info)
    tail = " -- COMMAND" if args.verb == "exec" else ""
    if not ranks:
        pods = list(dict.fromkeys(p.pod for p in info.processes if p.pod))
        look = client.command_for(f"describe job {info.name}", backend=info.backend, project=args.project)
        fix = client.command_for(f"{args.verb} {info.name} --rank R{tail}", backend=info.backend, project=args.project)
        n = info.spec.processes
        known = f"its pods: {', '.join(pods)}" if pods else f"its {counted(n, 'rank')} {'has' if n == 1 else 'have'} no pod now"
        raise SpecError(f"--pod is Run:AI's: a job's processes are its ranks here: {fix}; {shown(args.pod)} is "
                        f"no pod of job {info.name!r} ({known}; '{look}' lists its ranks)")
    fix = client.command_for(f"{args.verb} {info.name} --rank {ranks[0]}{tail}", backend=info.backend,
                             project=args.project)
    if len(ranks) == 1:
        raise SpecError(f"--pod is Run:AI's: a job's processes are its ranks here, and pod {shown(args.pod)} runs "
                        f"rank {ranks[0]}: {fix}")
    others = f"--rank {ranks[1]}" + (f" to {ranks[-1]}" if len(ranks) > 2 else "")
    raise SpecError(f"--pod is Run:AI's: a job's processes are its ranks here, and pod {shown(args.pod)} runs "
                    f"ranks {ranks[0]}-{ranks[-1]} (gpus_per_node packs {len(ranks)} in a pod): {fix} for the "
                    f"first, {others} for the others")


def _rank(text: str) -> int:
    """--rank R: names.py's check (the SDK's and the HTTP API's) says why one is refused, naming it as typed."""
    value = whole_number(text)  # as every whole-number flag reads it ('1_0', '2.')
    check_rank(value, "cli", text)
    return value  # as typed: the job's own refusal names it so ('invalid rank 1E3: job 'x' has 2 processes')


def _exec_rank(text: str) -> int | str:
    """exec's --rank as the SDK would be given it: a whole number (-1 too) as that number, anything
    else as typed; the backend's check (names.check_exec_rank, told the CLI's door) names it --rank as typed."""
    value = whole_number(text)  # as every whole-number flag reads it ('1_0', '2.')
    return value if isinstance(value, int) else text


def cmd_exec(args, command: list[str], client: Client, _launcher=None) -> int:
    waits = running_timeout(args.pod_running_timeout)  # a bad number before any look-up
    rank = 0 if args.rank is None else check_exec_rank_form(_exec_rank(args.rank), "cli")  # before the look-up, as logs
    _in_project(args)
    refuse_pod(args, client, _get(args, client, args.name))
    code = client.exec(args.name, command, rank=rank, project=args.project, running_timeout=waits)
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell and kubectl exec say


def cmd_bash(args, client: Client) -> int:
    """Run:AI's `runai bash JOB`: `dtrain exec JOB -- bash`."""
    return cmd_exec(args, ["bash"], client)


def running_timeout(text: str | None) -> float:
    """--pod-running-timeout as `wait --timeout` reads its number: seconds or a Go duration, bounded."""
    if text is None:
        return EXEC_RUNNING_WAIT
    return _seconds(text, lambda: SpecError(f"invalid --pod-running-timeout {shown(text.strip() or text)}: use seconds "
                                            f"from 0 to {MAX_WAIT_TIMEOUT} (366 days) or a duration, e.g. "
                                            f"--pod-running-timeout 5m"))


EXIT_TIMEOUT = 124  # `wait --timeout` ran out: the job goes on (the code GNU timeout uses)
MAX_WAIT_TIMEOUT = MAX_WAIT  # a year and a day: past any training run, and every number is bounded


def wait_timeout(text: str) -> float:
    """--timeout in seconds (600, 1.5) or as kubectl wait's Go duration (10m, 1h30m), bounded; a
    refused value is named as typed (1e400 was 'invalid --timeout inf', 5m 'invalid float value')."""
    return _seconds(text, lambda: wait_refusal(text, "cli"))


def _seconds(text: str, refusal: Callable[[], Exception]) -> float:
    """A duration flag's seconds, up to MAX_WAIT_TIMEOUT: a Go duration or a number, the bound checked
    as typed (a year and 1e-10 s is over); `refusal()` is raised for anything else."""
    seconds = fmt.go_duration(text)
    if seconds is None:
        seconds = real_number(text)  # as the HTTP API's ?timeout= reads it
        seconds = math.nan if isinstance(seconds, str) else seconds
    if not 0 <= exact(seconds) <= MAX_WAIT_TIMEOUT:  # NaN compares false
        raise refusal()
    return plain(seconds)


EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as a shell says


def _left(client: Client, info, doing: str) -> int:
    """Ctrl-C in `logs -f` or `wait`: the job is in its own session, so it goes on; said, since a new
    user cannot tell that from a bare prompt (and Ctrl-C in a foreground `docker run` would stop it)."""
    stop = client.command_for(f"delete {info.name}", backend=info.backend, project=info.spec.project)
    print(f"\ndtrain: stopped {doing} job '{info.name}'; the job goes on (stop it with '{stop}')",
          file=sys.stderr, flush=True)
    return EXIT_INTERRUPTED


def cmd_wait(args, client: Client) -> int:
    """As kubectl wait: one job or several, in turn, under one --timeout; exit 0 if every one
    Succeeded, 1 if any did not, EXIT_TIMEOUT if the time ran out first."""
    names = _job_names(args.names, "wait")
    if not names:
        raise SpecError("name the job to wait for: dtrain wait NAME")
    timeout = None if args.timeout is None else wait_timeout(args.timeout)
    _in_project(args)
    names = list(dict.fromkeys(names))
    infos = {name: _get(args, client, name) for name in names}  # an unknown name is an error before any waiting
    deadline = None if timeout is None else time.monotonic() + timeout
    failed = False
    ended = 0  # counted before its line is printed: Ctrl-C after the line names the next job
    try:
        for name in names:
            if infos[name].status is JobStatus.SUSPENDED:  # a script's wait would hang without a word
                resume = client.command_for(f"resume {name}", backend=infos[name].backend, project=infos[name].spec.project)
                print(f"dtrain: job {name!r} is Suspended: waiting until it is resumed ('{resume}') and ends",
                      file=sys.stderr, flush=True)
            try:
                info = client.wait(name, timeout=timeout if deadline is None or len(names) == 1
                                   else max(0.0, deadline - time.monotonic()), project=args.project)
            except TimeoutError_ as err:
                print(f"dtrain: {err}" if len(names) == 1 else
                      f"dtrain: --timeout {args.timeout} ran out waiting for job {name!r} ({names.index(name)} of "
                      f"{len(names)} jobs ended); wait longer (--timeout) or check '{err.look}'", file=sys.stderr)
                return EXIT_TIMEOUT
            ended += 1
            if args.json:
                print(fmt.record_text(info.to_dict(), args.json, indent=None, stream=True))
            else:
                print(f"{info.name}: {info.status.value}" + (f" ({info.message})" if info.message else ""))
            failed |= info.status.value != "Succeeded"
    except KeyboardInterrupt:
        if ended == len(names):
            raise
        return _left(client, infos[names[ended]], "waiting for")
    return 1 if failed else 0


def cmd_artifacts(args, client: Client) -> int:
    _in_project(args)
    _get(args, client, args.name)
    out = client.artifacts(args.name, to=args.to, project=args.project, output_data=args.output_data)
    print(f"The {'output data' if args.output_data else 'model'} of job '{args.name}' is in {out}")
    return 0
