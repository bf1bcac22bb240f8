"""Where a job is: the backend a job verb's name reaches (`backend=`, `project=`, where this client
submitted it, else the backends this home's `submit --backend` sent jobs to: state.db's sent_to), and
the one line of a job not found there, in the words of the door a client serves. A mixin of Client.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dtrain.backends.base import Backend, JobInfo
from dtrain.backends.records import _Record
from dtrain.config import BACKENDS
from dtrain.errors import BackendError, ConflictError, DtrainError, NotFoundError, SpecError
from dtrain.names import shown
from dtrain.spec import check_name

if TYPE_CHECKING:
    from dtrain.config import UserConfig
    from dtrain.remotes import SentTo

# How a message names a job verb's project, in the words of the door a client serves (`Client.door`):
# the SDK's argument, the CLI's -p (dtrain.cli sets "cli"), the HTTP API's query parameter ("http").
PROJECT_ARG = {"sdk": ("project={!r}", "no project"), "cli": ("-p {}", "no -p"),
               "http": ("?project={}", "no ?project=")}
# How a message names the jobs of another backend, in the words of each door.
BACKEND_LIST = {"sdk": "dtrain.Client(backend={!r}).list()", "cli": "dtrain --backend {} list",
                "http": "GET /api/v1/jobs of 'dtrain --backend {} server'"}
# How a message names forgetting a backend that `submit --backend` sent jobs to (state.db's sent_to), in
# the words of each door.
FORGET_BACKEND = {"sdk": "dtrain.Client().forget_backend({!r})", "cli": "dtrain config forget-backend {}",
                  "http": "POST /api/v1/backends/{}/forget"}
# How a message names a SageMaker job run on this machine (no AWS), and the backend a job goes to,
# in the words of each door.
SAGEMAKER_LOCAL = {"sdk": "sagemaker={'local': True}", "cli": "--local", "http": '"sagemaker": {"local": true}'}
BACKEND_ARG = {"sdk": "backend={!r}", "cli": "--backend {}", "http": '"backend": "{}"'}
# How a message names reaching a job on one backend with any job verb, in the words of each door: the SDK's
# job verbs' argument, the CLI's option, the HTTP API's job routes' query parameter.
JOB_BACKEND = {"sdk": "backend={!r}", "cli": "--backend {}", "http": "?backend={}"}


@dataclass(frozen=True, kw_only=True)
class ForgotBackend(_Record):
    """What `forget_backend` did: the backend no longer asked for the jobs `submit` sent there, and why a list
    of every project asks it still (config.yaml's settings for it, a project sent there, the default
    backend), each in words: POST /api/v1/backends/NAME/forget's answer."""

    backend: str
    still_asked: tuple[str, ...] = ()


class JobLookup:
    """Mixed into Client, which provides the backends, config.yaml and what this client submitted."""

    if TYPE_CHECKING:
        door: str
        config: UserConfig
        _backend_name: str | None
        _backends: dict[str, Backend]
        _sagemaker: dict
        _submitted: dict[str, tuple[str, str]]
        _sent_to: SentTo

        @property
        def default_project(self) -> str: ...

        def backend(self, name: str | None = None, *, project: str | None = None) -> Backend: ...

        def check_project(self, project: str) -> None: ...

    def _job_backend(self, name: str, project: str | None, backend: str | None = None) -> Backend:
        """The backend that holds job `name`: `backend` when given; else `project`'s (the CLI's -p:
        its configured backend, its namespace on Kubernetes); else the one this client submitted
        the job to; else this client's, or the configured project's."""
        return self._located(name, project, backend)[0]

    def _located(self, name: str, project: str | None, backend: str | None = None
                 ) -> tuple[Backend, JobInfo | None]:
        """`_job_backend`, with the job's record when looking for it there read it (None: not read):
        `_found` uses it, so that a verb reads a remote job once, not once to find it and again."""
        if backend is not None:
            self.check_backend(backend)
        if project is not None:
            check_name(project, "project")
        elif isinstance(name, str) and backend in (None, self._submitted.get(name, ("",))[0]):
            backend, project = self._submitted.get(name, (backend, None))
        found = self.backend(backend, project=project)
        if backend is None and self._backend_name is None and isinstance(name, str):
            return self._holder(found, name, project)
        return found, None

    def _holder(self, first: Backend, name: str, project: str | None) -> tuple[Backend, JobInfo | None]:
        """`first` (where a bare name looks) when it has job `name`; else the one backend that any
        `submit --backend` of this home sent jobs to (state.db's sent_to) and that has it, in `project`
        (`list -A` shows it there). Several that have it: a ConflictError naming each to give. With the
        record read where it was found (None: not found, or not read)."""
        sent = [b for b, _ in self._sent_to.read() if b != first.name]
        if not sent:
            return first, None
        try:
            return first, first.get(name)
        except NotFoundError:
            pass
        holders = []
        for other in sent:
            try:
                backend = self.backend(other, project=project)
                holders.append((backend, backend.get(name)))
            except DtrainError:  # not there, or not answering: the miss's hint names it still
                continue
        if len(holders) > 1:
            give = " or ".join(JOB_BACKEND[self.door].format(b.name) for b, _ in holders)
            raise ConflictError(f"job {name!r} is on {len(holders)} backends this home sent jobs to: give "
                                f"{give}; nothing was changed")
        return holders[0] if holders else (first, None)

    def check_backend(self, name: str) -> None:
        """Refuse a job verb's `backend` that names no backend (SpecError), or one that cannot be opened from this
        home (NotFoundError: no kubeconfig, the refusal quotes why). One without settings here is used all the same: a cluster
        behind the default kubeconfig needs none, and SageMaker's --local jobs none."""
        known = list(dict.fromkeys([*BACKENDS, *self._backends]))
        if not isinstance(name, str) or name not in known:
            raise SpecError(f"unknown backend {shown(name)}; use one of {', '.join(known)}")
        try:
            made = self.backend(name)  # made once per thread and kept: the verb's own lookup uses it
            # an injected one is used as given (its own client, or a test's stand-in)
            problem = None if name in self._backends else made.opened_problem()
        except BackendError as err:
            problem = str(err)
        if problem is not None:  # not here to be found (an HTTP 404, not the server's own failure's 502)
            raise NotFoundError(f"backend {name!r} cannot be used from this home: {problem}")

    def _job(self, name: str, project: str | None, backend: str | None = None) -> Backend:
        """`_job_backend`, once the job is found there and, with `project`, found to be of that project."""
        backend, info = self._located(name, project, backend)
        if project is not None or self._elsewhere(backend):  # a job it does not find: where else to look
            self._found(backend, name, project, info)
        return backend

    def _elsewhere(self, backend: Backend) -> list[tuple[str, str]]:
        """(project, backend) of the projects config.yaml's `project_backends` sends to a backend
        other than `backend`: their jobs are not there."""
        return sorted((p, b) for p, b in self.config.project_backends.items() if b != backend.name)

    def _found(self, backend: Backend, name: str, project: str | None, info: JobInfo | None = None) -> JobInfo:
        """Job `name`'s record from `backend` (`info`: already read there by `_located`); with `project`,
        only if it is of that project, and a project that does not exist is said to be the problem (a
        typo in -p), not the job."""
        try:
            info = info or backend.get(name)
        except NotFoundError as err:
            if project is not None:
                self.check_project(project)
            elif elsewhere := self._elsewhere(backend):  # the job may be one of theirs: how to look there
                give = PROJECT_ARG[self.door][0]
                some = " or ".join(f"{give.format(p)} ({b})" for p, b in elsewhere[:3])
                raise NotFoundError(f"{err}; a job of a project that config.yaml sends to another backend is "
                                    f"found with its project: {some}" + (" or ..." if len(elsewhere) > 3 else "")
                                    ) from None
            elif others := self._other_backends(backend):  # submitted with --backend, which is not kept
                raise NotFoundError(f"{err}; a job submitted to another backend is listed there: " + " or ".join(
                    BACKEND_LIST[self.door].format(b) for b in others)) from None
            raise
        return info if project is None else self._of_project(info, project)

    def share_submitted(self, other: "Client") -> None:
        """Find the jobs `other` submitted as it finds them, and it this client's: the HTTP API's
        clients (one per thread) agree on where a job POSTed to another backend is."""
        self._submitted = other._submitted

    def _other_backends(self, backend: Backend) -> list[str]:
        """The backends config.yaml has settings for, other than `backend`, when this client was given
        none: a job submitted there (`dtrain submit --backend kubernetes`) is not found here."""
        if self._backend_name is not None:
            return []
        sent = [name for name, _ in self._sent_to.read()]
        return [name for name in dict.fromkeys([*self._configured_backends(), *sent]) if name != backend.name]

    def forget_backend(self, name: str) -> ForgotBackend:
        """Stop `list()` of every project asking backend `name` where only a `submit` to it (state.db's
        sent_to) made it ask (a cluster that is gone warned at each list); its jobs are not touched, and
        `backend=name` still reaches them. Returns the backend and the reasons it is asked still
        (config.yaml's settings for it, a project sent there); NotFoundError for a backend not among
        those remembered."""
        sent = [b for b, _ in self._sent_to.read()]
        if name not in sent:
            some = ", ".join(sent) or "none"
            raise NotFoundError(f"backend {shown(name)} is not one this home's submit --backend sent jobs to "
                                f"(those remembered: {some}); nothing was forgotten")
        self._sent_to.forget(name)
        for job in [j for j, (b, _) in list(self._submitted.items()) if b == name]:  # shared by the server's clients
            self._submitted.pop(job, None)
        still = [f"config.yaml's {name}: settings" for b in self._configured_backends() if b == name]
        still += [f"project {p}'s backend (config.yaml's project_backends)"
                  for p, b in sorted(self.config.project_backends.items()) if b == name]
        if self.config.backend_for(self.default_project) == name:
            still.append("the default backend")
        return ForgotBackend(backend=name, still_asked=tuple(still))

    def _configured_backends(self) -> list[str]:
        """The backends other than the local one that config.yaml (or this client's `sagemaker=`) has
        settings for: a job may have been sent there with `--backend` by any process."""
        configured = {"kubernetes": self.config.kubernetes, "sagemaker": self.config.sagemaker or self._sagemaker}
        return [name for name, settings in configured.items() if settings]

    def _of_project(self, info: JobInfo, project: str) -> JobInfo:
        """`info`, when its job is of `project` (a job verb's `project=`, the CLI's -p)."""
        if info.spec.project != project:
            give, none = PROJECT_ARG[self.door]
            raise NotFoundError(f"no job named {info.name!r} in project {project!r}: it is in project "
                                f"{info.spec.project!r} (give {give.format(info.spec.project)}, or {none})")
        return info


# the local store's "no job named" (a near name, then where else to look, may follow), as `_found` words it
_NO_JOB = re.compile(r"no job named (?P<name>'[^']*')(?: \(did you mean '[^']*'\?\))?; "
                     r"see '(?P<head>dtrain [^']*)list jobs(?P<tail>[^']*)' for the jobs there are")


def no_notebook(message: str, name: str) -> str:
    """`message`, a refusal of `name` as a name no job has, as `notebook open` words it: the notebook named,
    and the listing of notebooks ('no notebook named 'nb'; see 'dtrain notebook list' for the notebooks
    there are); a near job's name is left out (it need not be a notebook). Any other refusal is as it is."""
    said = _NO_JOB.match(message)
    if said is None or said["name"] != shown(name):
        return message
    return (f"no notebook named {said['name']}; see '{said['head']}notebook list{said['tail']}' for the notebooks "
            f"there are{message[said.end():]}")
