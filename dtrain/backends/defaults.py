"""What Backend's verbs call besides the hooks a backend must fill in: the default bodies of the
optional hooks a backend may override (`_page`, `_summary`, `_mounting_page`, `_has_project`,
`_volume_project`, `_wait_poll`, `_stopping_wait`, `_check_inputs`, `_list_of`, `_being_placed`) and the verbs' own
helpers (`_wait_storage`, `_open_notebook`, `_named`, `_volumes_named`).

Backend subclasses BackendDefaults; nothing here is public (public verbs are Backend's alone) and
nothing here imports base.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from typing import Any

from dtrain.backends.checks import HintCommand, _existing, _plain_command, check_notebook_open, named, volumes_named
from dtrain.backends.hooks import BackendHooks
from dtrain.backends.records import JobCount, JobInfo, JobPage, JobStatus, Listed, newest_first
from dtrain.backends.waiting import _until
from dtrain.errors import DtrainError, NotReadyError, TimeoutError_
from dtrain.names import check_wait, wait_longer
from dtrain.spec import JobSpec


class BackendDefaults(BackendHooks):
    """The optional hooks' defaults and the verbs' helpers (see Backend's docstring)."""

    def _list_of(self, project: str | None) -> list[JobInfo]:
        """`_list`, or less where a backend can read `project`'s jobs alone (Kubernetes: its namespace)."""
        return self._list()

    def _page(self, *, project: str | None, statuses: frozenset[JobStatus] | None, limit: int | None,
              offset: int) -> JobPage:
        jobs = self.list(project=project)
        return newest_first(Listed((j for j in jobs if (j.status != JobStatus.DELETED if statuses is None
                                                        else j.status in statuses)), jobs.notices), limit, offset)

    def _mounting_page(self, volumes: frozenset[str], *, project: str | None, limit: int | None) -> JobPage | None:
        return None

    def _summary(self, *, project: str | None) -> tuple[list[JobCount], list[JobInfo]]:
        jobs = self.list(project=project)
        counts = Counter((j.spec.project, j.status) for j in jobs)
        return ([JobCount(project=p, status=s, jobs=n) for (p, s), n in counts.items()],
                [j for j in jobs if not j.status.terminal])

    def _wait_storage(self, kind: str, name: str, get: Callable[[str], Any], done: Callable[[Any, Callable], bool],
                      still: Callable[[Any, Callable, str], str], *, timeout: float | None, poll: float,
                      command: Callable[[str], str] | None, door: str = "sdk") -> Any:
        """wait_snapshot's and wait_volume's loop: `kind` NAME looked up as every verb does, then read
        with `get` until `done(info, say)`; a timeout says "KIND NAME is still `still(info, say, after)`"
        and names `describe`. `say` writes a command as the caller's hints do; `door`: whose words name the
        timeout (the SDK's timeout=, the CLI's --timeout)."""
        if timeout is not None:
            check_wait(timeout, door)
        with self._named(kind, name):
            info = get(_existing(name, kind))
        say = command or (lambda words: f"dtrain {words}")

        def late(info) -> DtrainError:
            look = say(f"{kind} describe {name}")
            return TimeoutError_(f"{kind} {name!r} is still {still(info, say, f'{timeout:g}s')}; wait longer "
                                 f"({wait_longer(door)}) or check '{look}'", look)

        return _until(info, lambda: get(name), lambda i: done(i, say), late, timeout=timeout, poll=lambda: poll)

    def _wait_poll(self, name: str) -> float:
        """Seconds between the statuses `wait` reads: a backend whose status is a throttled API call
        (SageMaker's DescribeTrainingJob) asks less often."""
        return 0.5

    def _stopping_wait(self, name: str) -> float:
        """The most seconds `_resume` may wait for the job's last processes to stop; 0: it will not
        wait (they are gone, or this backend never waits)."""
        return 0.0

    def _check_inputs(self, spec: JobSpec) -> None:
        """Nothing to ask by default: the volumes a job mounts are looked up by `render`."""

    def _open_notebook(self, name: str, cmd: HintCommand | None) -> str:
        with self._named("job", name, "notebook"):
            info = self._get(_existing(name, "notebook"))
        if info.spec.notebook and info.status == JobStatus.PENDING and self._being_placed(info):
            look = (cmd or _plain_command)(f"describe job {name}", info.spec.project)
            raise NotReadyError(f"notebook {name!r} is Pending ({info.message}): the scheduler places it within "
                                f"moments; open it once it is Running (see '{look}')")
        check_notebook_open(name, info, cmd or _plain_command)
        return self._notebook_url(info)

    def _being_placed(self, info: JobInfo) -> bool:
        """Whether Pending job `info` is only being placed, a moment after its start or resume (not ready yet:
        NotReadyError, asked again while `notebook_url`'s `wait` lasts), not kept waiting (for GPUs, a quota:
        refused at once). None is known to be so here; the local backend tells its scheduler's first moment."""
        return False

    def _has_project(self, name: str) -> bool:
        """Project `name` read alone (`_one_project`); a backend that can tell without counting its jobs
        (Kubernetes: its namespace) overrides this."""
        return bool(self._one_project(name))

    def _volume_project(self) -> str | None:
        return None

    # ---- a name that does not exist: the near one (checks.named) ---------------------------
    def _named(self, what: str, name: str, noun: str | None = None) -> contextlib.AbstractContextManager[None]:
        """Around a hook given an existing job, volume or snapshot: see `checks.named`."""
        return named(what, name, self._names, noun)

    def _volumes_named(self, spec: JobSpec) -> contextlib.AbstractContextManager[None]:
        """Around a hook given a job spec: see `checks.volumes_named`."""
        return volumes_named(spec, self._names)
