"""`dtrain project` (projects and their GPU quotas) and `dtrain nodes` / `top` (nodes and their GPUs)."""

from __future__ import annotations

import argparse

from dtrain import JobStatus
from dtrain.cli import format as fmt
from dtrain.cli import jobs
from dtrain.client import Client
from dtrain.errors import DtrainError
from dtrain.names import check_gpu_quota, counted, require_project


def _set_default_project(client: Client, name: str) -> None:
    if not name:  # the line naming a name to give, not the name rule's
        require_project(name, [])
    client.set_default_project(name)  # a name no project can have: its rule; one that does not exist: refused
    print(f"Project '{name}' has been set as the default project")


def cmd_project(args, client: Client) -> int:
    if args.action == "set":  # Run:AI's newer spelling of `config project`
        _set_default_project(client, args.name)
        return 0
    if args.action == "create":
        existed = client.has_project(args.name)
        if existed and args.gpu_quota is None and not args.no_gpu_quota:
            print(f"project '{args.name}' already exists (unchanged)")
            return 0
        if args.gpu_quota is not None:
            check_gpu_quota(args.gpu_quota)  # named as the flag (the SDK names its argument)
        client.create_project(args.name, gpu_quota=args.gpu_quota, no_gpu_quota=args.no_gpu_quota)
        quota = f" with a GPU quota of {args.gpu_quota}" if args.gpu_quota is not None else ""
        now = "no GPU quota now" if args.no_gpu_quota else f"a GPU quota of {args.gpu_quota} now"
        print(f"project '{args.name}' " + (f"already exists; it has {now}" if existed else f"created{quota}")
              + _quota_notes(client, args.name, args.gpu_quota, existed))
        return 0
    if args.action == "delete":
        gone = client.delete_project(args.name)
        if args.json:
            print(fmt.record_text(gone.to_dict(), args.json))
            return 0
        removed = f" (removed: {', '.join(gone.removed)})" if gone.removed else ""
        print(f"project '{gone.name}' deleted{removed}" + (f"; {gone.kept}" if gone.kept else ""))
        return 0
    projects = client.list_projects()
    fmt.warn(projects.notices)  # a backend that did not answer, a GPU quota or pods Kubernetes did not let us read
    default = client.default_project
    if args.json:  # `default` said, as the HTTP API's GET /projects says it
        print(fmt.record_text([{**p.to_dict(), "default": p.name == default} for p in projects], args.json))
        return 0
    rows = [[p.name + _marks(p, default),
             "-" if p.gpu_quota is None else p.gpu_quota, p.gpus_allocated, p.jobs] for p in projects]
    print(fmt.table(["PROJECT", "GPU QUOTA", "GPUs ALLOCATED", "JOBS"], rows))
    return 0


def _marks(project, default: str) -> str:
    """A project's marks in the table: ' (default)', ' (Terminating)' while Kubernetes deletes its namespace."""
    marks = [m for m in ("default" if project.name == default else "", "Terminating" if project.terminating else "")
             if m]
    return f" ({', '.join(marks)})" if marks else ""


def cmd_nodes(args, client: Client) -> int:
    if args.what in ("job", "jobs"):  # `runai top job`: the configured project's jobs, as `dtrain list` shows them
        return jobs.cmd_list(argparse.Namespace(what="jobs", project=None, all_projects=False, show_deleted=False,
                                                selector=None, status=None, json=args.json,
                                                default_backend=args.default_backend), client)
    nodes = client.nodes()
    fmt.warn(nodes.notices)  # Kubernetes: pods this account may not list (GPUs allocated count some or none)
    if args.json:
        print(fmt.record_text([n.to_dict() for n in nodes], args.json))
        return 0
    print(fmt.table(["NODE", "GPUs Allocatable", "GPUs Allocated", "CPUs", "MEMORY", "LABELS"],
                    [[n.name, n.gpus_allocatable, n.gpus_allocated, n.cpus or "-", fmt.size(n.memory),
                      _labels_cell(n.labels)] for n in nodes]))
    gpus = [(n.name, g) for n in nodes for g in n.gpus]
    if gpus:
        print()
        print(fmt.table(["NODE", "GPU", "NAME", "JOB", "UTILIZATION", "MEMORY USED / TOTAL"],
                        [[n, g.index, g.name or "-", _holder(g),
                          "-" if g.utilization is None else f"{g.utilization:.0f}%",
                          f"{fmt.size(g.memory_used)} / {fmt.size(g.memory_total)}"] for n, g in gpus]))
    return 0


SHOWN_LABELS = 3  # a node's labels in the table; `nodes --json` has them all


def _labels_cell(labels) -> str:
    """A node's labels that tell it apart, as --node-selector takes them: those a person or a tool gave it
    (run.ai/type, nvidia.com/gpu.product), not the kubelet's own (kubernetes.io/hostname, arch, os,
    node.kubernetes.io/instance-type: every node has them); SHOWN_LABELS at most, then how many more."""
    def kubelets(key: str) -> bool:
        prefix = key.partition("/")[0] if "/" in key else ""
        return any(prefix == d or prefix.endswith("." + d) for d in ("kubernetes.io", "k8s.io"))
    own = sorted(f"{k}={v}" for k, v in labels.items() if not kubelets(k))
    more = f" (+{len(own) - SHOWN_LABELS} more)" if len(own) > SHOWN_LABELS else ""
    return ",".join(own[:SHOWN_LABELS]) + more if own else "-"


def _holder(gpu) -> str:
    """A GPU's JOB column: the dtrain job holding it, another workload (its pod), unknown, or '-' (free)."""
    if gpu.job:
        return gpu.job
    if gpu.held_by:
        return f"another workload ({gpu.held_by})"
    return "unknown" if gpu.unknown else "-"


def _quota_notes(client: Client, name: str, quota: int | None, existed: bool) -> str:
    """What a quota just set means, from one read of the projects after it."""
    if not quota and not (existed and quota is not None):
        return ""
    try:
        projects = client.list_projects()
    except DtrainError:  # the quota is set; an account that may not read the projects' jobs misses only the notes
        return ""
    return ((_over_new_quota(client, projects, name, quota) if existed else "")
            + (_quotas_past_the_gpus(client, projects) if quota else ""))


def _over_new_quota(client: Client, projects, name: str, quota: int) -> str:
    """What a quota lowered below the project's use means, said when it is set (else the user
    learns it from a job that never starts): nothing running is stopped, and a queued job that
    needs more than the new quota waits until it is raised."""
    this = next((p for p in projects if p.name == name), None)
    held = this.gpus_allocated if this is not None else 0
    # the local scheduler preempts jobs of a project over its quota (scheduler.py); a cluster does not
    preempted = (", or until an in-quota job of another project needs their GPUs: the most recently "
                 "started over the quota are preempted then" if this is not None and this.backend == "local" else "")
    note = (f"; its running jobs hold {counted(held, 'GPU')}, more than that: they keep them until they end{preempted} "
            f"(nothing is stopped now), and its queued jobs wait until fewer are in use") if held > quota else ""
    never = [j.name for j in client.list(project=name, show_deleted=False)
             if j.status == JobStatus.PENDING and j.spec.gpus_requested > quota]
    if never:
        note += (f"; queued {'job' if len(never) == 1 else 'jobs'} {', '.join(never)} "
                 f"need{'s' if len(never) == 1 else ''} more than {counted(quota, 'GPU')} and start only once it "
                 f"is raised, or once deleted and submitted with fewer")
    return note


def _quotas_past_the_gpus(client: Client, projects) -> str:
    """Quotas that add up to more GPUs than this machine has promise what it cannot keep: each
    project may wait for GPUs within its quota while another's jobs hold them (the scheduler orders
    in-quota jobs before over-quota ones, not one quota project before another). Said when a quota
    is set, as Run:AI asks before over-subscribing; the local backend only (a cluster's quotas
    count its nodes, which it may add)."""
    if client.backend().name != "local":
        return ""
    total = sum(p.gpu_quota or 0 for p in projects)
    gpus = sum(n.gpus_allocatable for n in client.nodes())
    return (f"; the projects' GPU quotas now add up to {total}, more than this machine's {gpus} GPUs: a project "
            f"may wait for GPUs within its quota while another's jobs hold them (lower a quota with "
            f"'dtrain project create NAME --gpu-quota N')") if total > gpus else ""


def _add_project(sub) -> None:
    p = sub.add_parser("project", help="create, list, set and delete projects (GPU quotas, the default one)")
    ps = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = ps.add_parser("create", help="create a project, or change its GPU quota")
    c.add_argument("name", help="project name (lower-case letters, digits, '-')")
    quota = c.add_mutually_exclusive_group()
    quota.add_argument("--gpu-quota", type=jobs.whole_number, help="GPUs the project's running jobs may hold together")
    quota.add_argument("--no-gpu-quota", action="store_true", help="remove the project's GPU quota")
    c = ps.add_parser("delete", help="delete a project that holds no jobs, notebooks, volumes or snapshots")
    c.add_argument("name", help="the project (not the default one)")
    c.add_argument("--json", action="store_true", help="print what was removed as JSON")
    c = ps.add_parser("set", help="make a project the default (as 'dtrain config project NAME')")
    c.add_argument("name", help="a project that exists")
    c = ps.add_parser("list", help="projects, quotas, GPUs in use, jobs")
    c.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(handler=cmd_project)


def _add_nodes(sub) -> None:
    for verb, text in (("nodes", "nodes and their GPUs: allocation, utilization, memory"),
                       ("top", "the GPU dashboard: the nodes (as 'nodes'); 'top job': the jobs (as 'list')")):
        p = sub.add_parser(verb, help=text)
        # Run:AI's `runai top node` (and kubectl's `top node`) name the kind: taken, as `list jobs` is;
        # `runai top job` lists the jobs with the GPUs they hold: `dtrain list`'s table
        jobs_too = verb == "top"
        p.add_argument("what", nargs="?", choices=("node", "nodes", *(("job", "jobs") if jobs_too else ())),
                       metavar="node|job" if jobs_too else "node",
                       help="optional, as in Run:AI's 'runai top node'" + (
                           "; job: the jobs with their GPUs Allocated (Requested), as 'dtrain list' "
                           "(which takes -p, -A, -l)" if jobs_too else ""))
        p.add_argument("--json", action="store_true", help="print a JSON list")
        p.set_defaults(handler=cmd_nodes)
