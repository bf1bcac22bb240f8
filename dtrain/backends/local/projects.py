"""The local backend's projects: a row each in the job store (its GPU quota), `default` always among them;
a job's project is its column there (LocalBackend takes these hooks from LocalProjects)."""

from __future__ import annotations

import json

from dtrain.backends.base import DeletedProjectInfo, ProjectInfo, project_in_use
from dtrain.errors import NotFoundError, QuotaError
from dtrain.names import counted, near_name


class LocalProjects:
    """Backend hooks for projects, over `self.store` (JobStore), `self.cmd` and `self.reconcile_others`."""

    def _create_project(self, name: str, *, gpu_quota: int | None, no_gpu_quota: bool) -> None:
        from dtrain.backends.local.devices import inventory

        gpus = len(inventory())
        if gpu_quota is not None and gpu_quota > gpus:
            raise QuotaError(f"a GPU quota of {gpu_quota} is larger than this machine's {counted(gpus, 'GPU')}; "
                             + (f"give a quota of {gpus} or less" if gpus else
                                "give a quota of 0, or set DTRAIN_GPUS=N, which stands in N GPUs to try the scheduler "
                                "and quotas without them"))
        self.store.upsert_project(name, gpu_quota, keep_quota=gpu_quota is None and not no_gpu_quota)

    def _delete_project(self, name: str) -> DeletedProjectInfo:
        """Its row (the GPU quota `project create` stored) goes; volumes and snapshots are every project's here
        (one store), so only its jobs and notebooks not Deleted keep it. Its Deleted jobs keep their records."""
        row, jobs = self.store.delete_project(name)
        if jobs:
            kinds: dict[str, list[str]] = {"job": [], "notebook": []}
            for job in jobs:
                kinds["notebook" if json.loads(job["spec"]).get("notebook") else "job"].append(job["name"])
            raise project_in_use(name, kinds, lambda words: self.cmd(words, name)) or AssertionError(name)
        if row is None:
            known = [p["name"] for p in self.store.projects()]
            near = near_name(name, known)  # a typo ('team-aa')
            raise NotFoundError(f"no project named {name!r} ({'' if near is None else f'did you mean {near!r}? '}"
                                f"projects: {', '.join(known)}); see 'dtrain project list'")
        quota = row["gpu_quota"]
        return DeletedProjectInfo(name=name, backend=self.name,
                                  removed=() if quota is None else (f"GPU quota {quota}",))

    def _list_projects(self) -> list[ProjectInfo]:
        return self._projects(None)

    def _one_project(self, name: str) -> list[ProjectInfo]:
        """Project `name`'s row, its jobs alone counted in SQL."""
        return self._projects(name)

    def _projects(self, name: str | None) -> list[ProjectInfo]:
        """Every project (`name` None), or that one alone, with its jobs and the GPUs they hold counted."""
        self.reconcile_others(None)  # as `list` does, so that a lost job's GPUs are not counted
        jobs: dict[str, int] = {}
        for project, status, n in self.store.count(project=name):  # a deleted job is no longer the
            if status != "Deleted":  # project's (`list` hides it too)
                jobs[project] = jobs.get(project, 0) + n
        held = self.store.allocations()  # devices are held by jobs that may run only
        project_of = {row["name"]: row["project"] for row in (*self.store.active_jobs(), *self.store.held_by_stopped())}
        return [ProjectInfo(name=p["name"], backend=self.name, gpu_quota=p["gpu_quota"], jobs=jobs.get(p["name"], 0),
                            gpus_allocated=sum(project_of.get(job) == p["name"] for job in held.values()))
                for p in self.store.projects() if name is None or p["name"] == name]

