"""Showing jobs: `list` (a table, or a line saying why it is empty) and `describe` (spec, status history,
processes)."""

from __future__ import annotations

import shlex

from dtrain.cli import format as fmt
from dtrain.cli.lookup import _OTHER_KINDS, _elsewhere, _get, _in_project, _job_names
from dtrain.client import Client
from dtrain.errors import DtrainError, SpecError
from dtrain.names import check_name, shown
from dtrain.spec import SNAPSHOT_ENV, SNAPSHOT_VOLUME_ENV


def cmd_list(args, client: Client) -> int:
    if args.what in ("notebook", "notebooks"):
        raise SpecError("'dtrain list' is for jobs: use 'dtrain notebook list' (or 'dtrain list', where "
                        "notebooks are jobs of type Notebook)")
    if args.what in _OTHER_KINDS:
        raise SpecError(_elsewhere(args.what, "list"))
    if args.what not in ("job", "jobs"):
        if _a_job(client, args.what):  # kubectl's `get pytorchjob X`
            raise SpecError(f"'dtrain list' takes no job's name: see one job with 'dtrain describe job {args.what}'")
        raise SpecError(f"'dtrain list' lists jobs, not {shown(args.what)}: use 'dtrain list' or 'dtrain list jobs' "
                        f"(volumes: 'dtrain volume list', snapshots: 'dtrain snapshot list')")
    if args.project is not None:  # `-p "$PROJECT"` with the variable unset is a mistake, not the default project
        check_name(args.project, "project")
    project = None if args.all_projects else (args.project or client.default_project)
    jobs = client.list(project=project, show_deleted=args.show_deleted,  # a typo in -p: NotFoundError
                       selector=args.selector, status=args.status)
    fmt.warn(jobs.notices)  # SageMaker: AWS failed, the --local jobs are shown
    if args.json:
        print(fmt.record_text([j.to_dict() for j in jobs], args.json))
        return 0
    # -A reads every configured backend (kubectl -A adds NAMESPACE): BACKEND says where each job runs
    every = args.all_projects
    rows = [[j.name, fmt.status_word(j), fmt.age(j.created), j.node or "-", j.spec.kind, j.spec.project,
             *([j.backend] if every else []),
             *_counts(j)] for j in jobs]
    if not rows:  # a header alone reads as a failed listing (kubectl: "No resources found in NS namespace.")
        print(_no_jobs(args, client, project))
        return 0
    print(fmt.table(["NAME", "STATUS", "AGE", "NODE", "TYPE", "PROJECT", *(["BACKEND"] if every else []),
                     "GPUs Allocated (Requested)", "PROCESSES Running (Pending)"], rows))
    return 0


def _a_job(client: Client, word: str) -> bool:
    """Whether `word` is a job's name (of any project): `dtrain list train` meant that job."""
    try:
        check_name(word, "job")
        client.get(word)
    except DtrainError:
        return False
    return True


def _counts(job) -> list[str]:
    """A row's GPUs Allocated (Requested) and PROCESSES Running (Pending). Where every process is
    Unknown (Kubernetes: pods this account may not read), what the pods hold is unknown too: '?',
    not a '0 (0)' that reads as a job with nothing running (the notice above the table says why)."""
    if job.processes and all(p.status == "Unknown" for p in job.processes):
        return [f"? ({job.spec.gpus_requested})", "? (?)"]
    return [f"{job.gpus_allocated} ({job.spec.gpus_requested})", f"{job.processes_running} ({job.processes_pending})"]


def _no_jobs(args, client: Client, project: str | None) -> str:
    """The line `dtrain list` prints when it has no job to show (none_listed), or none matching -l."""
    if args.selector or args.status:
        which = " and ".join([*([f"-l {args.selector}"] if args.selector else []),
                              *([f"--status {args.status}"] if args.status else [])])
        return f"No jobs {_where(project)} match {which}"
    hidden = 0 if args.show_deleted else len(client.list(project=project, show_deleted=True))
    return none_listed(args, client, project, what="jobs", hidden=hidden, make="submit",
                       command="submit NAME -- COMMAND")


def none_listed(args, client: Client, project: str | None, *, what: str, hidden: int, make: str, command: str) -> str:
    """The line a list of jobs or notebooks prints when it has none to show: where it looked (None: every
    project), the deleted ones it hid (--show-deleted), and `dtrain COMMAND`, which makes one, with the
    -p and --backend it needs."""
    backend = getattr(args, "default_backend", None) or client.config.backend_for(project or client.default_project)
    deleted = f" ({hidden} deleted: --show-deleted lists them)" if hidden else ""
    return (f"No {what}{'' if hidden else ' yet'} {_where(project)}{deleted}: {make} one with "
            f"'{client.command_for(command, backend=backend, project=project)}'")


def _where(project: str | None) -> str:
    return "in any project" if project is None else f"in project '{project}'"


def cmd_describe(args, client: Client) -> int:
    names = _job_names(args.names, "describe")
    if len(names) != 1:
        raise SpecError("describe one job: dtrain describe job NAME")
    _in_project(args)
    info = _get(args, client, names[0])
    if args.json:
        print(fmt.record_text(info.to_dict(), args.json))
        return 0
    head = {"Name": info.name, "Status": fmt.status_word(info), "Message": info.message or "-",
            "Type": info.spec.kind, "Project": info.spec.project, "Backend": info.backend, "Node": info.node,
            "UID": info.uid or "-", "Created": fmt.when(info.created), "Started": fmt.when(info.started),
            "Finished": fmt.when(info.finished), "Restarts": info.restarts,
            "GPUs Allocated (Requested)": f"{info.gpus_allocated} ({info.spec.gpus_requested})",
            "Snapshot": (info.snapshot or "-") + " (deleted)" * info.snapshot_deleted}
    if info.extra.get("limits"):
        head["Limits"] = info.extra["limits"]
    if info.data_sources:  # one per mounted volume whose content was a snapshot's when the job started
        head["Started from snapshot"] = ", ".join(
            f"{d.snapshot}{' (deleted)' * d.snapshot_deleted} on volume {d.volume}{' (deleted)' * d.volume_deleted}"
            for d in info.data_sources)
    elif info.extra.get("source_snapshot"):  # a job of before, or a backend that records only its snapshot's source
        head["Started from snapshot"] = info.extra["source_snapshot"]
    if info.extra.get("model_artifacts"):  # SageMaker
        head["Model"] = info.extra["model_artifacts"]
    if info.extra.get("output_data"):  # SageMaker: what the job wrote to $SM_OUTPUT_DATA_DIR
        head["Output data"] = f"{info.extra['output_data']} ($SM_OUTPUT_DATA_DIR)"
    if info.extra.get("training_seconds") is not None:
        head["Billable / training seconds"] = f"{info.extra.get('billable_seconds')} / {info.extra['training_seconds']}"
    if info.extra.get("spot_saving_percent") is not None:
        head["Spot saving"] = f"{info.extra['spot_saving_percent']:.1f}%"
    # what the job's process runs: a Kubernetes notebook's pod runs its image's Jupyter, not the spec's command
    spec = {**info.spec.to_dict(), "command": info.extra.get("pod_command") or shlex.join(info.spec.command)}
    if info.spec.env:  # as -e flags: `KEY: VALUE` left an empty value, spaces or a '=' ambiguous
        spec["env"] = fmt.env_flags(info.spec.env)
    if info.spec.snapshot_on_success is None and info.spec.snapshot_volume:  # the seed's form: the same request
        spec["snapshot_on_success"] = f"{info.spec.snapshot_volume} (from -e {SNAPSHOT_ENV} + {SNAPSHOT_VOLUME_ENV})"
    print(fmt.described(head, {"Spec": spec}))
    print("Processes:")
    print(_indent(process_table(info)))
    print("Events:")
    print(_indent(fmt.table(["TIME", "STATUS", "MESSAGE"],
                            [[fmt.when(e.time), e.status, e.message] for e in info.events])))
    return 0


def process_table(info) -> str:
    """`describe job`'s processes; a POD column where the backend runs them in pods of its own
    naming (Kubernetes: `--pod` takes them, `kubectl logs` too). The local backend's pod names are
    Run:AI's short form of the rank (NAME-R), so its table stays as it was."""
    pods = info.backend != "local" and any(p.pod for p in info.processes)
    return fmt.table(["RANK", *(["POD"] if pods else []), "STATUS", "EXIT CODE", "DEVICES", "NODE"],
                     [[p.rank, *([p.pod or "-"] if pods else []), p.status, "-" if p.exit_code is None else p.exit_code,
                       ",".join(p.devices) or "-", p.node or "-"] for p in info.processes])


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
