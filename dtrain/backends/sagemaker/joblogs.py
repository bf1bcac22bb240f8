"""A SageMaker job's logs: its hosts' CloudWatch streams, the current container's or (--previous) the
one before, followed with `-f` (SageMakerBackend's mixin)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Iterator

from dtrain.backends.base import JobStatus, LogLine, Notice
from dtrain.backends.sagemaker import logs as cwlogs
from dtrain.backends.sagemaker import status
from dtrain.backends.sagemaker.clients import Clients
from dtrain.errors import NotFoundError


class JobLogs:
    """SageMakerBackend's `_logs`."""

    def _logs(self, name: str, *, rank: int | None, tail: int | None, since: float | None,
              follow: bool, previous: bool = False) -> Iterator[LogLine | Notice]:
        """Lines as they come, and once a notice naming the hosts whose current container has not started.
        Following reads CloudWatch every pace.first seconds while lines arrive,
        waiting up to twice as long after each read that found none (to pace.most), and asks for the
        job's status (DescribeTrainingJob, throttled by AWS) every pace.status seconds of waiting. Once
        the job has ended, reads continue until one finds nothing new (CloudWatch takes lines late)."""
        clients = self._clients_for(name)
        pace = self.pace if clients is not self._local else cwlogs.Pace(  # --local: files read, no AWS quota
            first=self.pace.first, most=self.pace.first, status=0.0)
        tokens: dict[str, str | None] = {}  # per stream: a host has one per start of its container
        wait, waited, ended = pace.first, pace.status, False  # waited: seconds since the status was asked
        logged = False  # whether any host has a stream yet
        current: dict[int, int] = {}  # per host, when its current attempt's container started (or will)
        attempt: float | None = None  # when the job's current attempt began (after a spot interruption, a retry)
        asked = noted = False  # noted: the hosts not started again have been named
        while True:
            found = cwlogs.streams(clients.logs, name)
            if found and not asked:  # streams older than the attempt are an earlier container's
                desc, asked = self._describe(clients, name), True
                attempt = status.attempt_start(desc)
                if follow and not ended:  # it is also the follower's status ask, not one more
                    ended, waited = status.job_status(desc)[0].terminal, 0.0
            for r, names in found.items():  # -f goes on into starts that come while it follows
                current.setdefault(r, cwlogs.current_start(names, attempt))
            picked = {r: [s for s in names if cwlogs.started(s)[0] >= current[r]]  # as kubectl: the current
                      for r, names in found.items() if rank is None or r == rank}  # container's lines only
            waiting = sorted(r for r, names in picked.items() if not names)
            if waiting and not noted and not previous:  # said at once: -f may wait long
                noted = True
                yield Notice(code="logs-incomplete", message=self._not_started(name, waiting, attempt))
            if previous:  # a host's stream before its current start: its container's previous one (a retry, a spot stop)
                picked = {r: [s for s in names if cwlogs.started(s)[0] < current[r]][-1:]
                          for r, names in found.items() if rank is None or r == rank}
                picked = {r: names for r, names in picked.items() if names}
                if not picked:
                    raise NotFoundError(f"job {name!r} has no previous attempt (previous terminated container not "
                                        f"found): no host{'' if rank is None else f' of rank {rank}'} started its "
                                        f"container more than once; '{self.cmd(f'logs {name}')}' shows its lines")
            logged = logged or bool(found)
            if not found and not follow:
                self._no_lines(clients, name)
            if rank is not None and not picked and not follow and rank not in found:
                hosts = ", ".join(str(r) for r in sorted(found)) or "none yet"
                raise NotFoundError(f"job {name!r} has no host for --rank {rank} (ranks with logs: {hosts})")
            read: list[int] = []  # a mark per line read (before any --tail cut): was there anything new
            hosts = [_marked(cwlogs.host_lines(clients.logs, r, names, since=since, tokens=tokens), read)
                     for r, names in sorted(picked.items())]
            yield from cwlogs.merged(hosts, tail=tail)
            new = bool(read)
            if not follow or ended and not new:
                if follow and not logged:
                    self._no_lines(clients, name)
                return
            tail = None
            if not ended and waited >= pace.status:
                ended, waited = status.job_status(self._describe(clients, name))[0].terminal, 0.0
                if ended:
                    continue  # read once more: lines the job wrote before it ended
            wait = pace.first if new else min(pace.most, wait * 2)
            self._sleep(wait)
            waited += wait

    def _not_started(self, name: str, ranks: list[int], attempt: float | None) -> str:
        """The one line `logs` adds for hosts whose container has not started again since the job's last
        interruption or retry: they have no lines of the current attempt yet."""
        hosts = ", ".join(f"algo-{r + 1} (rank {r})" for r in ranks)
        when = datetime.fromtimestamp(attempt or 0, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return (f"job {name!r} was interrupted or restarted at {when} and the container of {hosts} has not "
                f"started again yet: no lines of the current attempt; '{self.cmd(f'logs {name} --previous')}' shows "
                f"the last attempt's, '{self.cmd(f'logs {name} -f')}' waits for the current one's")

    def _no_lines(self, clients: Clients, name: str) -> None:
        """A job that failed or stopped before any host logged (an image or data that could not be fetched,
        a stop while instances launched) has no streams, and an empty answer would hide why: say it."""
        state, message = status.job_status(self._describe(clients, name))
        if state.terminal and state != JobStatus.SUCCEEDED:
            raise NotFoundError(f"job {name!r} ended {state.value} before any host logged a line"
                                f"{': ' + message if message else ''}; see {self.cmd(f'describe job {name}')}")


def _marked(lines: Iterator[LogLine], read: list[int]) -> Iterator[LogLine]:
    """`lines`, marking `read` once the first is taken (a --tail cut may drop it from the output)."""
    for line in lines:
        if not read:
            read.append(1)
        yield line
