"""`dtrain`: the command line. Every verb calls the Python client; errors print one line, exit 2."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from dtrain.cli import format as fmt
from dtrain.cli import jobs, notebook, pipeline, server, storage
from dtrain.client import Client
from dtrain.config import BACKENDS
from dtrain.errors import DtrainError, SpecError

# Workload commands are passed through to the workload's own `main(argv)`: the same code runs
# under plain torchrun as `python -m dtrain.workloads.<w>` without the platform.
WORKLOADS = {
    ("lanes", "prepare"): "dtrain.workloads.lanes.prepare",
    ("lanes", "synth"): "dtrain.workloads.lanes.synth",
    ("lanes", "train"): "dtrain.workloads.lanes.train",
    ("lanes", "predict"): "dtrain.workloads.lanes.predict",
    ("lanes", "evaluate"): "dtrain.workloads.lanes.metric",
    ("cifar10", "train"): "dtrain.workloads.cifar10.train",
    ("cifar10", "synth"): "dtrain.workloads.cifar10.data",
    ("bench", "scaling"): "dtrain.bench.scaling",
}


def cmd_config(args, client: Client) -> int:
    if args.what == "sagemaker":
        if args.value is not None:
            raise SpecError("'dtrain config sagemaker' takes flags only, e.g. --role ARN --bucket NAME --region R")
        settings = client.configure_sagemaker(role=args.role, bucket=args.bucket, region=args.region,
                                              prefix=args.prefix, image=args.image, instance_type=args.instance_type,
                                              subnets=args.subnets, security_groups=args.security_groups)
        print("SageMaker settings saved: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
        return 0
    if args.value is None:
        raise SpecError(f"'dtrain config {args.what}' needs a value, e.g. dtrain config {args.what} NAME")
    if args.what == "project":
        client.set_default_project(args.value)
        print(f"Project '{args.value}' has been set as the default project")
    else:
        client.set_default_backend(args.value, project=args.project)
        print(f"Backend '{args.value}' is now the default" + (f" for project '{args.project}'" if args.project else ""))
    return 0


def cmd_project(args, client: Client) -> int:
    if args.action == "create":
        client.create_project(args.name, gpu_quota=args.gpu_quota)
        print(f"project '{args.name}' created" + (f" with a GPU quota of {args.gpu_quota}"
                                                 if args.gpu_quota is not None else ""))
        return 0
    projects = client.list_projects()
    if args.json:
        print(json.dumps([p.to_dict() for p in projects], indent=2))
        return 0
    default = client.default_project
    rows = [[p.name + (" (default)" if p.name == default else ""),
             "-" if p.gpu_quota is None else p.gpu_quota, p.gpus_allocated, p.jobs] for p in projects]
    print(fmt.table(["PROJECT", "GPU QUOTA", "GPUs ALLOCATED", "JOBS"], rows))
    return 0


def cmd_nodes(args, client: Client) -> int:
    nodes = client.nodes()
    if args.json:
        print(json.dumps([n.to_dict() for n in nodes], indent=2))
        return 0
    print(fmt.table(["NODE", "GPUs Allocatable", "GPUs Allocated", "CPUs", "MEMORY"],
                    [[n.name, n.gpus_allocatable, n.gpus_allocated, n.cpus or "-", fmt.size(n.memory)]
                     for n in nodes]))
    gpus = [(n.name, g) for n in nodes for g in n.gpus]
    if gpus:
        print()
        print(fmt.table(["NODE", "GPU", "NAME", "JOB", "UTILIZATION", "MEMORY USED / TOTAL"],
                        [[n, g.index, g.name or "-", g.job or "-",
                          "-" if g.utilization is None else f"{g.utilization:.0f}%",
                          f"{fmt.size(g.memory_used)} / {fmt.size(g.memory_total)}"] for n, g in gpus]))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dtrain", description="Distributed training on one machine or a cluster.")
    parser.add_argument("--home", help="state folder (default $DTRAIN_HOME or ~/.dtrain)")
    parser.add_argument("--backend", dest="default_backend", choices=list(BACKENDS),
                        help="backend for this command (default from config), e.g. dtrain --backend sagemaker list")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    jobs.register(sub)
    storage.register(sub)
    pipeline.register(sub)
    server.register(sub)
    notebook.register(sub)
    p = sub.add_parser("config", help="set the default project or backend; SageMaker settings")
    p.add_argument("what", choices=["project", "backend", "sagemaker"])
    p.add_argument("value", nargs="?")
    p.add_argument("-p", "--project", help="with 'backend': only for this project")
    g = p.add_argument_group("with 'sagemaker' (credentials come from boto3's chain and are never stored)")
    g.add_argument("--role", help="IAM role ARN SageMaker assumes")
    g.add_argument("--bucket", help="S3 bucket for code, checkpoints and models")
    g.add_argument("--region", help="AWS region, e.g. us-east-1")
    g.add_argument("--prefix", help="S3 key prefix (default dtrain)")
    g.add_argument("--image", help="training image URI (default: the AWS PyTorch training image)")
    g.add_argument("--instance-type", help="default instance type, e.g. ml.m5.xlarge")
    g.add_argument("--subnets", nargs="+", metavar="SUBNET", help="VPC subnets (EFS/FSx channels need a VPC)")
    g.add_argument("--security-groups", nargs="+", metavar="SG", help="VPC security groups")
    p.set_defaults(handler=cmd_config)
    p = sub.add_parser("project", help="create and list projects (GPU quotas)")
    ps = p.add_subparsers(dest="action", required=True)
    c = ps.add_parser("create")
    c.add_argument("name")
    c.add_argument("--gpu-quota", type=int)
    c = ps.add_parser("list")
    c.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_project)
    p = sub.add_parser("nodes", help="nodes and their GPUs: allocation, utilization, memory")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_nodes)
    p = sub.add_parser("top", help="alias of 'nodes': the GPU dashboard")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_nodes)
    for group in dict.fromkeys(g for g, _ in WORKLOADS):  # listed in --help; main() dispatches them
        sub.add_parser(group, help=f"{group} commands: {', '.join(v for g, v in WORKLOADS if g == group)}")
    return parser


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if len(argv) >= 1 and argv[0] in {g for g, _ in WORKLOADS}:
            return _workload(argv)
        head, command = split_command(argv)
        args = build_parser().parse_args(head)
        client = Client(home=args.home, backend=args.default_backend)
        if getattr(args, "takes_command", False):
            return args.handler(args, command, client, args.launcher_for)
        if command:
            raise SpecError(f"'dtrain {args.verb}' takes no command after '--'")
        return args.handler(args, client)
    except DtrainError as err:
        print(f"dtrain: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def _workload(argv: list[str]) -> int:
    group = argv[0]
    verbs = sorted(v for g, v in WORKLOADS if g == group)
    if len(argv) < 2 or (group, argv[1]) not in WORKLOADS:
        print(f"usage: dtrain {group} {{{','.join(verbs)}}} ...", file=sys.stderr)
        return 0 if len(argv) >= 2 and argv[1] in ("-h", "--help") else 2
    module = importlib.import_module(WORKLOADS[(group, argv[1])])
    return module.main(argv[2:]) or 0


if __name__ == "__main__":
    sys.exit(main())
