"""Logs and exec: the verbs of the Kubernetes backend that reach into a job's pods.

`logs` reads the pods' logs (timestamps=True) in bounded memory, merged by time (several pods'
set aside one after the other, then merged); `logs -f` streams them as they
grow: one pod in the caller's thread, several through reader threads and a bounded read-ahead
(logs.ReadAhead). A stream goes on across what ends it while the job runs on: the kubelet ending
it (a restart in place, its idle timeout) opens it again after the last line seen
(logs.SeenLines); a pod that failed and was replaced by a new one (a batch Job's next try) goes
on in the new pod. `exec` runs a command in the pod that holds a rank. The parsing is logs.py's.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from contextlib import closing, contextmanager
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from dtrain.backends.base import JobInfo, LogLine
from dtrain.errors import BackendError, NotFoundError, NotReadyError

from .client import POD, Forbidden, Hangup, Unauthenticated
from .logs import (LogSource, ReadAhead, SeenLines, check_pods_left, keep, log_sources, merge, next_attempt,
                   parse_line, set_aside)
from .objects import pod_reader_fix
from .status import job_status, newest_pod, rank_pods, stuck_reason

if TYPE_CHECKING:
    from .client import KubeApi
    from .objects import Resource

_DONE = object()


class PodVerbs:
    """Mixed into KubernetesBackend, which provides api, namespace and the job look-ups."""

    api: KubeApi
    namespace: str
    poll_interval = 1.0  # seconds between looks while `logs -f` waits for a pod to start
    # Lines `logs -f` of several pods reads ahead of its caller at most: a few MB of usual lines, at
    # most 64 MB of the longest (logs.MAX_LINE bytes each: a longer line comes in pieces).
    read_ahead = 1000
    _exec_stream: Any

    def _find(self, name: str) -> tuple[Resource, dict]: ...

    def _pods(self, name: str) -> list[dict]: ...

    def _get(self, name: str) -> JobInfo: ...

    def _try_read(self, resource: Resource, namespace: str, name: str) -> dict | None: ...

    def cmd(self, words: str) -> str: ...

    def _exec(self, name: str, command: list[str], *, rank: int) -> int:
        """`kubectl exec` into the pod that runs `rank` (a replica pod; packed ranks share one)."""
        resource, obj = self._find(name)
        pods = [p for p in rank_pods(resource.kind, obj, self._pods_needed(name, f"exec into rank {rank}"), rank)
                if (p.get("status") or {}).get("phase") == "Running"]
        if not pods:
            raise NotReadyError(f"no running pod holds rank {rank} of job {name!r}; see '{self.cmd(f'describe job {name}')}'")
        pod = newest_pod(pods)["metadata"]["name"]
        if self._exec_stream is not None:
            return self._exec_stream(self.namespace, pod, command)
        return self.api.exec(self.namespace, pod, command)

    # ---------------------------------------------------------------- logs

    def _logs(self, name: str, *, rank: int | None, tail: int | None, since: float | None,
              follow: bool, previous: bool = False) -> Iterator[LogLine]:
        resource, obj = self._find(name)
        sources, pods = self._sources(name, resource.kind, obj, rank)
        if follow:
            return self._follow(name, resource.kind, rank, sources, pods, tail, since)
        query = _log_query(sources, rank, tail, since)
        if previous:  # the container's instance before the current one (a restart in place), as kubectl's --previous
            query["previous"] = True
        streams, stuck = [], []
        for source in sources:
            try:
                raw = self._read_log(name, source, query)
                if len(sources) > 1:  # read through now, one connection at a time, and merged from there
                    raw = set_aside(raw)
            except PodStuck as err:
                stuck.append(err)
                continue
            except BackendError as err:
                if not previous or "previous terminated container" not in str(err):
                    raise
                continue  # a pod that did not restart has no previous lines; the others' are shown
            streams.append(_parsed(raw, source, rank, since))
        if previous and not streams and not stuck:
            raise NotFoundError(f"job {name!r} has no previous attempt (previous terminated container not found): "
                                f"none of its pods{'' if rank is None else f' holding rank {rank}'} restarted; "
                                f"'{self.cmd(f'logs {name}')}' shows the current attempt")
        return _then_raise(merge(streams, tail), stuck[0] if stuck else None)

    def _sources(self, name: str, kind: str, obj: dict, rank: int | None) -> tuple[list[LogSource], list[dict]]:
        """The pods that hold the wanted ranks' lines, and every pod of the job; none left of an
        ended job is an error."""
        pods = self._pods_needed(name, "show the logs")
        sources = log_sources(kind, obj, pods, rank)
        if not sources:
            check_pods_left(name, kind, obj, pods, rank, self.cmd)
        return sources, pods

    def _read_log(self, name: str, source: LogSource, query: dict) -> Iterator[str]:
        """A pod's log lines as they are read; the request is made (and refused) here, not at the
        first line taken."""
        lines = self.api.pod_log(self.namespace, source.pod, tags=source.tags, **query)
        try:
            with self._log_access(name):
                first = next(lines, None)
        except BackendError as err:
            if "waiting to start" not in str(err):
                raise
            self._check_startable(name, source.pod)
            return iter(())  # a pod that is on its way has written nothing yet
        return iter(()) if first is None else itertools.chain((first,), lines)

    def _pods_needed(self, name: str, what: str) -> list[dict]:
        """The job's pods, for a verb that has nothing to go on without them: refused in one line
        naming the permission and the Role that grants it (describe and wait do without pods)."""
        with self._refused_pods(f"cannot {what} of job {name!r}: that needs its pods, and this account may not list "
                                f"pods", "list pods"):
            return self._pods(name)

    @contextmanager
    def _log_access(self, name: str) -> Iterator[None]:
        """A refused pod log (RBAC grants pods/log apart from pods) in one line with its fix."""
        with self._refused_pods(f"cannot show the logs of job {name!r}: this account may not read pods/log",
                                "get pods/log"):
            yield

    @contextmanager
    def _refused_pods(self, said: str, check: str) -> Iterator[None]:
        """A 403 as one line: `said` in the namespace, the Role that grants pods, and `kubectl auth can-i CHECK`."""
        try:
            yield
        except Forbidden as err:
            if isinstance(err, Unauthenticated):
                raise
            raise Forbidden(f"{said} in namespace {self.namespace}; {pod_reader_fix(self.namespace)}, then check it "
                            f"(kubectl auth can-i {check} -n {self.namespace})") from None

    def _check_startable(self, name: str, pod: str) -> None:
        """Raise when a pod's container cannot start without a change of the job (a wrong image, a
        missing secret): the kubelet retries for good, so neither waiting nor an empty log helps."""
        stuck = stuck_reason(self._try_read(POD, self.namespace, pod) or {})
        if stuck:
            raise PodStuck(f"pod {pod} of job {name!r} cannot start ({stuck}): fix the image, secret or "
                           f"config it names and submit the job again, or delete it ('{self.cmd(f'delete {name}')}')")

    def _stream(self, name: str, source: LogSource, query: dict, hangup: Hangup | None = None) -> Iterator[str]:
        """A pod's log as it grows, to the pod's end. The kubelet ends a stream when the container
        exits, also when it restarts in place (restartPolicy OnFailure, --max-restarts) and the job
        runs on, and when it was idle for its streaming timeout (4 h by default): while the pod
        runs, the stream is opened again, for the lines after the last one seen."""
        seen = SeenLines()
        while True:
            try:
                with self._log_access(name):
                    for raw in self.api.pod_log(self.namespace, source.pod, follow=True, hangup=hangup,
                                                tags=source.tags, **query):
                        if seen.new(raw):
                            yield raw
            except BackendError as err:
                if "waiting to start" not in str(err) or self._get(name).status.stopped:
                    raise
                self._check_startable(name, source.pod)
            else:
                if not self._runs_on(name, source):
                    return
                query = seen.query(query)
            if hangup is None:
                time.sleep(self.poll_interval)
            elif hangup.wait(self.poll_interval):
                return

    def _attempts(self, name: str, source: LogSource, query: dict, known: set[str],
                  hangup: Hangup | None = None) -> Iterator[str]:
        """The log of a replica's pod as it grows, then of each pod that replaces it while the job
        runs (of uids not `known`: there when the follow began), from its start; ends with the job."""
        known = set(known)
        while True:
            yield from self._stream(name, source, query, hangup)
            later = self._next_attempt(name, source, known, hangup)
            if later is None:
                return
            source, query = later, {"timestamps": True}  # a new pod: all of it is new
            known.add(source.uid)

    def _next_attempt(self, name: str, source: LogSource, known: set[str], hangup: Hangup | None) -> LogSource | None:
        """After a pod's stream ended: the pod that takes over its ranks, once the controller made
        it; None when none will come (the pod succeeded, the job ended or is gone, the caller left)."""
        try:
            resource, _ = self._find(name)
        except NotFoundError:
            return None
        while hangup is None or not hangup.done:
            # One read a look: the controller waits longer before each next try (10 s, 20 s, ... 6 min).
            obj = self._try_read(resource, self.namespace, name)
            if obj is None:
                return None
            pods = self._pods_needed(name, "show the logs")
            ended = [p for p in pods if p["metadata"].get("uid") == source.uid]
            if ended and (ended[0].get("status") or {}).get("phase") == "Succeeded":
                return None  # only a failed pod is replaced
            later = next_attempt(resource.kind, obj, pods, source, known)
            if later is not None:
                return later
            if job_status(resource.kind, obj, pods)[0].stopped:
                return None
            if hangup is None:
                time.sleep(self.poll_interval)
            elif hangup.wait(self.poll_interval):
                return None
        return None

    def _runs_on(self, name: str, source: LogSource) -> bool:
        """Whether a pod whose log stream ended may write more: it is there (not another pod made
        under its name: _attempts follows that one from its start), has not ended, and its job has
        not ended."""
        try:
            if self._get(name).status.stopped:
                return False
        except NotFoundError:
            return False
        pod = self._try_read(POD, self.namespace, source.pod) or {}
        if source.uid and (pod.get("metadata") or {}).get("uid") != source.uid:
            return False
        return (pod.get("status") or {}).get("phase") in ("Pending", "Running")

    def _follow(self, name: str, kind: str, rank: int | None, sources: list[LogSource], pods: list[dict],
                tail: int | None, since: float | None) -> Iterator[LogLine]:
        while not sources:  # no pod yet: wait for the operator, or for the job to end
            time.sleep(self.poll_interval)
            resource, obj = self._find(name)
            sources, pods = self._sources(name, kind, obj, rank)
        # Only now are the pods known, and with them whether the server's tail is ours (a packed pod's
        # log holds the lines of several ranks). Pods there now and not followed are earlier attempts.
        query = _log_query(sources, rank, tail, since)
        known = {str(p["metadata"].get("uid") or "") for p in pods}
        if len(sources) > 1:
            yield from self._follow_many(name, rank, sources, known, query, since)
            return
        source, skip = sources[0], 0
        if tail is not None and "tail_lines" not in query:
            # One rank of a packed pod: count its lines so far and pass over all but the last `tail` of
            # them as the stream replays the log from its start (a log only grows, so they come first).
            kept = sum(keep(parse_line(r, source), rank, since) for r in self._read_log(name, source, query))
            skip = max(0, kept - tail)
        for raw in self._attempts(name, source, query, known):
            line = parse_line(raw, source)
            if not keep(line, rank, since):
                continue
            if skip:
                skip -= 1
                continue
            yield line

    def _follow_many(self, name: str, rank: int | None, sources: list[LogSource], known: set[str], query: dict,
                     since: float | None) -> Iterator[LogLine]:
        """Several pods at once: one reader thread per pod, lines yielded as they arrive, at most
        `read_ahead` of them read ahead of the caller (a reader that finds no room stops reading
        its stream: logs/ReadAhead). When the caller stops reading (closes this generator, or drops
        it), the readers' connections are shut down and the readers end, even on a silent pod: a
        dashboard that stopped showing a job's logs must not leave them streaming."""
        backlog, hangup = self._read_ahead(), Hangup()

        def pump(source: LogSource) -> None:
            try:
                with closing(self._attempts(name, source, query, known, hangup)) as stream:
                    for raw in stream:
                        line = parse_line(raw, source)
                        if keep(line, rank, since) and not backlog.put(line):
                            return  # the caller is gone
            except Exception as err:  # raised in the caller: a reader that died must not end the output quietly
                backlog.put(err)
            finally:
                backlog.put(_DONE)

        for source in sources:
            threading.Thread(target=pump, args=(source,), name=f"logs-{source.pod}", daemon=True).start()
        done = 0
        try:
            while done < len(sources):
                item = backlog.get()
                if item is _DONE:
                    done += 1
                elif isinstance(item, Exception):
                    raise item
                else:
                    yield item
        finally:
            backlog.close()
            hangup.hang_up()

    def _read_ahead(self) -> ReadAhead:
        return ReadAhead(self.read_ahead)


class PodStuck(BackendError):
    """A pod's container cannot start until the job changes (a wrong image, a missing secret)."""


def _log_query(sources: list[LogSource], rank: int | None, tail: int | None, since: float | None) -> dict[str, Any]:
    """The pod log request's query for these pods."""
    query: dict[str, Any] = {"timestamps": True}
    if tail is not None and (rank is None or all(s.tags is None for s in sources)):
        query["tail_lines"] = tail  # exact only when the server's lines are the ones we keep
    if since is not None:
        query["since_seconds"] = max(1, math.ceil(time.time() - since))
    return query


def _parsed(raw: Iterable[str], source: LogSource, rank: int | None, since: float | None) -> Iterator[LogLine]:
    """A pod's lines as records, those asked for (a function, so that each pod's keeps its source)."""
    for r in raw:
        line = parse_line(r, source)
        if keep(line, rank, since):
            yield line


def _then_raise(lines: Iterable[LogLine], error: Exception | None) -> Iterator[LogLine]:
    """The lines, then the error: a pod that cannot start (one worker's image pull) is named after
    what the other pods wrote, instead of hiding it."""
    yield from lines
    if error is not None:
        raise error
