"""The job verbs' command line: the parsers of submit, submit-dist, submit-mpi, list, describe, logs,
delete, suspend, resume, artifacts, exec, bash and wait (`register`), the flags they share and how
each is read (`--gpu`, `--cpu`, Run:AI's and the launchers' flags named with ours), and each verb's
`--help` examples. The verbs' handlers live beside it: submit.py (submitting), listing.py (list,
describe), watch.py (logs, wait, exec, bash, artifacts), control.py (delete, suspend, resume)."""

from __future__ import annotations

import argparse
import math
import re

from dtrain.cli.control import _PAUSES, cmd_delete, cmd_suspend_resume
from dtrain.cli.listing import cmd_describe, cmd_list
from dtrain.cli.lookup import JOB_NOUNS  # noqa: F401  (usage.py's parse hints read it as jobs.JOB_NOUNS)
from dtrain.cli.submit import cmd_submit
from dtrain.cli.watch import EXIT_TIMEOUT, cmd_artifacts, cmd_bash, cmd_exec, cmd_logs, cmd_wait
from dtrain.names import as_typed_number, written
from dtrain.numbers import exact, whole_number  # whole_number: every whole-number flag's type=


# argparse takes a word starting with '-' for an option unless it is a plain negative number, so
# `--memory -5Gi`, `--cpu -1e3` or `volume create --size -5x10` stopped at "expected one argument";
# in dtrain's parser (cli.usage.Parser) any word starting with '-' and a digit is a value (no option
# of any verb looks like that), and the spec or the size parser says why it is refused.
NEGATIVE_VALUE = re.compile(r"^-\.?[0-9]")


# Run:AI's submit flags that dtrain spells otherwise (or answers otherwise): named with ours, where
# argparse said only "unrecognized" (and, for a flag's value, that the command goes after '--').
RUNAI_FLAGS = {
    "--name": "the job's name is the first word: dtrain {verb} NAME [options] -- COMMAND",
    "--backoff-limit": "restarts after a failure are --max-restarts N",
    "--memory-limit": "the memory limit per process is --memory (e.g. --memory 8Gi)",
    "--cpu-limit": "the CPU limit per process is --cpu (e.g. --cpu 2)",
    "--existing-pvc": "an existing volume is mounted with --pvc VOLUME:MOUNT[:ro] (claimname=data,path=/mnt: "
                      "--pvc data:/mnt)",
    "--volume": "a folder is shared with a job as a volume: --pvc VOLUME:MOUNT[:ro] ('dtrain volume create')",
    "-v": "a folder is shared with a job as a volume: --pvc VOLUME:MOUNT[:ro] ('dtrain volume create')",
    "--interactive": "an interactive job is a notebook: dtrain notebook NAME --pvc VOLUME:/home/jovyan",
    "--attach": "follow the job once submitted with 'dtrain logs NAME -f', or open a shell with 'dtrain bash NAME'",
    "--command": "drop it: the words after '--' are always the command (dtrain {verb} NAME [options] -- COMMAND)",
    "--gpu-memory": "GPUs are whole here: --gpu N per process",
    "--preemptible": ("jobs of a project without a GPU quota are the preemptible ones: 'dtrain project list' shows "
                      "the quotas"),
    "--pod": "a job's processes are its ranks here: --rank R ('dtrain describe job NAME' lists them)",
    "--job-name-prefix": "a job is named in full, as the first word: dtrain {verb} NAME [options] -- COMMAND",
    "--name-prefix": "a job is named in full, as the first word: dtrain {verb} NAME [options] -- COMMAND",
    "--args": "drop it: the words after '--' are the command and its arguments (dtrain {verb} NAME [options] -- "
              "COMMAND ARGS...)",
    "--gpu-devices-request": "whole GPUs per process are --gpu N",
    "--cpu-core-request": "CPU threads per process are --cpu N",
    "--cpu-core-limit": "the CPU limit per process is --cpu (e.g. --cpu 2)",
    "--cpu-memory-request": "memory per process is --memory (e.g. --memory 8Gi)",
    "--cpu-memory-limit": "the memory limit per process is --memory (e.g. --memory 8Gi)",
    "--host-ipc": "a large shared memory (/dev/shm) for the processes is --large-shm",
    "--stdin": "an interactive job is a notebook: dtrain notebook NAME --pvc VOLUME:/home/jovyan",
    "--tty": "an interactive job is a notebook: dtrain notebook NAME --pvc VOLUME:/home/jovyan",
    "--ttl-after-finish": "an ended job is kept until 'dtrain delete NAME' (--purge forgets its record too; "
                          "config.yaml's deleted_job_ttl forgets deleted jobs after a time, e.g. 7d)",
    "--completions": "no job of many separate runs here: submit one job a run (dtrain {verb} NAME-1 ... -- "
                     "COMMAND), or N processes of one run with dtrain submit-dist NAME --processes N -- COMMAND",
    "--parallelism": "no job of many separate runs here: submit one job a run (dtrain {verb} NAME-1 ... -- "
                     "COMMAND), or N processes of one run with dtrain submit-dist NAME --processes N -- COMMAND",
    "--annotation": "a job's own KEY=VALUE is a label: --label KEY=VALUE (a Kubernetes label, a SageMaker tag)",
    "--node-pools": "nodes are picked by their labels: --node-selector KEY=VALUE (or --node-type TYPE, Run:AI's "
                    "run.ai/type; 'dtrain nodes' lists them)",
    "--service-type": "a job's ports are not exposed here; a notebook's is: dtrain notebook NAME, then "
                      "'dtrain notebook open NAME' prints its URL",
    "--port": "a job's ports are not exposed here; a notebook's is: dtrain notebook NAME, then "
              "'dtrain notebook open NAME' prints its URL",
    "--git-sync": "no repository is cloned for a job here: put the code in its image (--image), in a volume "
                  "(--pvc VOLUME:MOUNT), or submit from its checkout (a local job runs in the current folder)",
    "--run-as-user": "a job runs as its image's user (a local job as you): there is no user flag",
    "--create-home-dir": "a home folder is a volume: --pvc VOLUME:MOUNT with -e HOME=MOUNT",
    "--template": "settings kept in a file are a job file: dtrain {verb} NAME -f FILE (flags given too override "
                  "its fields)",
    "--mig-profile": "GPUs are whole here: --gpu N per process",
}


# kubectl run's label flags, which submit spells --label: `-l a=b` was told that the command goes after '--'.
KUBECTL_FLAGS = dict.fromkeys(("-l", "--labels"), "a job's label is --label KEY=VALUE (repeat it; "
                                                  "'dtrain list -l KEY=VALUE' selects by it)")


# Flags that other tools' submit takes to stay and watch the job (`--follow`, `--wait`, az ml's `--stream`):
# submit returns once the job is stored; `--wait` was answered 'did you mean --max-wait?' (SageMaker spot's).
WATCH_FLAGS = dict.fromkeys(("--follow", "--wait", "--stream", "--logs"),
                            "{verb} returns once the job is stored: follow it with 'dtrain logs NAME -f', or wait "
                            "for its end with 'dtrain wait NAME'")


# The process-count flags of the launchers a user has typed before (torchrun's, mpirun's): argparse's
# nearest flag named --project for --nproc and SageMaker's --hp for --np, or said the command goes after '--'.
LAUNCHER_FLAGS = {"--nproc-per-node": "torchrun", "--nproc_per_node": "torchrun", "--nproc": "torchrun",
                  "-np": "mpirun", "--np": "mpirun", "-n": "mpirun"}


class RunaiOnly(argparse.Action):
    """A Run:AI flag that is the start of one of ours, refused naming ours: argparse took `--volume
    /data:/mnt` for SageMaker's --volume-size ("use a whole number") and `exec --pod` for
    --pod-running-timeout ("use seconds")."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS)

    def __call__(self, parser, namespace, values, option_string=None):
        verb = parser.prog.removeprefix("dtrain ")
        parser.error(f"{option_string} is Run:AI's: {RUNAI_FLAGS[option_string].format(verb=verb)}")


def real(text: str) -> int | float | str:
    """The `type=` of a flag that takes fractions (--cpu): the number typed (an int for whole digits,
    a float for a decimal, an exponent, inf or nan), or the text itself when it is none; the flag's
    own check (the SDK's and the HTTP API's) then refuses it in its words, naming the flag, its bounds
    and an example, where float gave argparse's "invalid float value". Other scripts' digits ('١٢',
    which float reads as 12) stay text, as numbers.whole_number keeps them."""
    if not text.isascii():
        return text
    value = as_typed_number(text)
    if isinstance(value, str) and len(value) <= 64:  # a float's spelling is short; a longer text stays text
        try:
            value = float(value)
        except ValueError:
            pass
    return written(value, text.strip())  # refused as typed: '--cpu 1e9', not 1000000000


def gpu_count(text: str) -> int | float | str:
    """--gpu: whole GPUs per process. Run:AI also takes a fraction of one (--gpu 0.5), which is not
    shared out here: a fraction goes to the spec, which names it as such (as for a job file or the
    HTTP API), where int() said only "invalid int value"."""
    if not text.isascii():  # '١٢', which int() reads as 12: the spec names it as typed
        return real(text)
    try:
        return written(int(text), text.strip())
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if math.isfinite(value) and exact(written(value, text.strip())).denominator == 1:
        return written(int(value), text.strip())  # 2.0, 1e1; not 1.0000000000000001, a fraction as typed
    if math.isfinite(value) and value > 0:
        return written(value, text.strip())  # the spec's one message for a fraction
    return real(text)  # the spec names it: "invalid --gpu 'x': use a whole number from 0 to 16"


def add_job_options(p: argparse.ArgumentParser, *, dist: bool, mpi: bool = False) -> None:
    p.add_argument("name", nargs="?", help="job name (lower-case letters, digits, '-')")
    p.add_argument("-f", "--file", help="a YAML job spec; flags given too override its fields")
    p.add_argument("--volume", action=RunaiOnly)
    if dist:
        p.add_argument("--processes", type=whole_number, help="number of data-parallel processes (default 1)")
        if not mpi:
            p.add_argument("--launcher", choices=["torchrun", "mpi"],
                           help="what starts the processes: torchrun (the default) or mpi (mpirun, as submit-mpi)")
    p.add_argument("-g", "--gpu", type=gpu_count, help="whole GPUs per process (default 0: CPU only; no fractions)")
    p.add_argument("--cpu", type=real, help="CPU threads per process (sets OMP_NUM_THREADS, by default the machine's "
                                             "CPUs shared out among the processes; each local process is pinned to its "
                                             "own cores when they go round)")
    p.add_argument("--memory", help="memory per process, e.g. 8Gi")
    p.add_argument("-e", "--environment", action="append", metavar="KEY=VALUE", help="environment variable (repeat; a name given twice keeps the last value, with a warning)")
    p.add_argument("--label", action="append", metavar="KEY=VALUE",
                   help="a label on the job (Kubernetes label, SageMaker tag; repeat); 'dtrain list -l' selects by it")
    p.add_argument("--pvc", action="append", metavar="SPEC",
                   help="VOLUME:MOUNT[:ro|:rw] for an existing volume (read-write unless :ro), CLASS:SIZE:MOUNT[:rw] for a "
                        "new one, read-write (repeat)")
    add_node_options(p)
    p.add_argument("--large-shm", action="store_const", const=True,
                   help="a large in-memory /dev/shm (local: half the machine's memory, or the host's /dev/shm if larger; Kubernetes: the "
                        "pod's memory, or config.yaml's kubernetes shm_size)")
    p.add_argument("--json", action="store_true", help="print the submitted job as one JSON object")
    p.add_argument("--working-dir", help="working directory of the command (default: local, the folder submit "
                                         "is run in; Kubernetes, the image's)")
    p.add_argument("-p", "--project", help="project (default: 'dtrain config project')")
    p.add_argument("--backend", choices=["local", "kubernetes", "sagemaker"], help="where to run (default from config)")
    p.add_argument("--max-restarts", type=whole_number, help="restarts of the job after a failure (default 0)")
    p.add_argument("--snapshot-on-success", metavar="VOLUME", help="snapshot VOLUME when the job succeeds")
    p.add_argument("-i", "--image", help="container image (Kubernetes)")
    p.add_argument("--image-pull-policy", choices=["Always", "IfNotPresent", "Never"],
                   help="when the node pulls the image (Kubernetes)")
    p.add_argument("--image-pull-secret", action="append", help="image pull secret (repeat)")
    p.add_argument("--dry-run", action="store_true",
                   help="print what would run and stop (local: the spec as submit stores it, refused as submit "
                        "would but for volumes; Kubernetes: the YAML; SageMaker: the requests as JSON; with --json, "
                        "one JSON object a line)")
    add_sagemaker_options(p)


def add_node_options(p: argparse.ArgumentParser) -> None:
    """Where the job may run: a pod's nodeSelector (submit and notebook start alike)."""
    p.add_argument("--node-selector", action="append", metavar="KEY=VALUE",
                   help="run only on nodes with this label (Kubernetes nodeSelector; repeat: all must match; "
                        "local: this machine's labels, see 'dtrain nodes --json')")
    p.add_argument("--node-type", metavar="TYPE", help="Run:AI's node type: --node-selector run.ai/type=TYPE")
    p.add_argument("--toleration", action="append", metavar="FIELDS",
                   help="tolerate a node taint (Kubernetes tolerations; Run:AI's flag; repeat), e.g. "
                        "operator=Exists,key=nvidia.com/gpu,effect=NoSchedule; fields operator=Equal|Exists, key, "
                        "value, effect=NoSchedule|PreferNoSchedule|NoExecute, seconds (NoExecute only); local: "
                        "accepted, its node has no taints")


def add_sagemaker_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("SageMaker (--backend sagemaker)")
    g.add_argument("--local", action="store_const", const=True,
                   help="run here inside the SageMaker contract (no Docker, no AWS)")
    g.add_argument("--instance-type", help="ml.* instance type (default from 'dtrain config sagemaker')")
    g.add_argument("--instance-count", type=whole_number, help="instances (default: one per process, or per GPUs of the type)")
    g.add_argument("--channel", action="append", metavar="NAME=URI",
                   help="input channel: s3://BUCKET/PREFIX, efs://FS-ID/PATH, fsx://FS-ID/MOUNT/PATH, "
                        "file:///PATH with --local (repeat)")
    g.add_argument("--hp", action="append", metavar="KEY=VALUE", help="hyperparameter (repeat)")
    g.add_argument("--source-dir", help="folder packed as sourcedir.tar.gz (default: the working folder)")
    g.add_argument("--spot", action="store_const", const=True, help="managed spot training, checkpoints in S3")
    g.add_argument("--max-runtime", type=whole_number, metavar="SECONDS", help="MaxRuntimeInSeconds (default 86400)")
    g.add_argument("--max-wait", type=whole_number, metavar="SECONDS", help="spot: MaxWaitTimeInSeconds (default 2 x runtime)")
    g.add_argument("--volume-size", type=whole_number, metavar="GB", help="ML storage volume per instance (default 30)")
    g.add_argument("--network-isolation", action="store_const", const=True, help="EnableNetworkIsolation")
    g.add_argument("--encrypt-inter-container", action="store_const", const=True,
                   help="EnableInterContainerTrafficEncryption")
    g.add_argument("--checkpoint-s3-uri", dest="checkpoint_uri", metavar="S3URI",
                   help="CheckpointConfig.S3Uri (default s3://BUCKET/PREFIX/JOB/checkpoints)")
    g.add_argument("--checkpoint-local-path", metavar="PATH",
                   help="CheckpointConfig.LocalPath: where the job sees its checkpoints (default /opt/ml/checkpoints)")
    g.add_argument("--output-path", metavar="S3URI",
                   help="OutputDataConfig.S3OutputPath: the model goes to S3URI/JOB/output/ (default s3://BUCKET/PREFIX)")


# What `--help` ends with, as kubectl's and runai's help do: commands to copy (a test parses each one)
EXAMPLES = {
    "submit": ["dtrain submit prep --pvc local:10Gi:/mnt -- python prepare.py --out /mnt/data",
               "dtrain submit train -p team-a --gpu 1 -e BATCH_SIZE=32 -- python train.py",
               "dtrain submit -f job.yaml"],
    "submit-dist": ["dtrain submit-dist cifar --processes 2 --cpu 1 -- python -m dtrain.workloads.cifar10 train "
                    "--data-dir data",
                    "dtrain submit-dist train --processes 4 --gpu 1 --large-shm --pvc data:/mnt -- python train.py"],
    "submit-mpi": ["dtrain submit-mpi train --processes 3 --gpu 1 --large-shm -e BATCH_SIZE=33 --pvc data:/mnt -- "
                   "python train.py"],
    "logs": ["dtrain logs train -f                  # until the job ends; Ctrl-C stops following, not the job",
             "dtrain logs train -t 10 --rank 0",
             "dtrain logs train --since 10m --timestamps"],
    "wait": ["dtrain wait train --timeout 1h",
             "dtrain wait prep train && dtrain artifacts train --to out"],
}


class WithExamples(argparse.HelpFormatter):
    """argparse's help, with an `examples:` epilog kept line by line (argparse reflows every text)."""

    def _fill_text(self, text, width, indent):
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _examples(verb: str) -> dict:
    return {"formatter_class": WithExamples,
            "epilog": "examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES[verb])}


def register(sub) -> None:
    for verb, dist, mpi in (("submit", False, False), ("submit-dist", True, False), ("submit-mpi", True, True)):
        p = sub.add_parser(verb, help={"submit": "submit a one-process job",
                                       "submit-dist": "submit a data-parallel job (torchrun or mpi)",
                                       "submit-mpi": "submit an MPI data-parallel job"}[verb],
                           usage=f"dtrain {verb} NAME [options] -- COMMAND [ARGS...]", **_examples(verb))
        add_job_options(p, dist=dist, mpi=mpi)
        p.set_defaults(handler=cmd_submit, takes_command=True,
                       launcher_for="mpi" if mpi else ("dist" if dist else None))
    p = sub.add_parser("list", help="list jobs")
    p.add_argument("what", nargs="?", default="jobs", metavar="jobs",
                   help="what to list: jobs (volumes: 'dtrain volume list', snapshots: 'dtrain snapshot list')")
    which = p.add_mutually_exclusive_group()  # -A with -p named a project it then did not look at
    which.add_argument("-p", "--project", help="this project's jobs (default: the configured project)")
    which.add_argument("-A", "--all-projects", action="store_true", help="jobs of every project")
    p.add_argument("--show-deleted", action="store_true", help="also list deleted jobs")
    p.add_argument("-l", "--selector", metavar="SELECTOR",
                   help="only jobs whose labels match, as kubectl's -l: KEY=VALUE, KEY!=VALUE, KEY, !KEY, comma-separated")
    p.add_argument("--status", metavar="STATUS",
                   help="only jobs in this status, in any case: Pending, Running, Succeeded, Failed, Suspended, or "
                        "Deleted (these whatever --show-deleted says); SageMaker's InProgress reads as Pending and "
                        "Running, Stopping as Running, Completed as Succeeded, Stopped as Deleted")
    p.add_argument("--status-equals", dest="status", help=argparse.SUPPRESS)  # the AWS CLI's list-training-jobs'
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(handler=cmd_list)
    p = sub.add_parser("describe", help="describe a job: spec, status history, processes",
                       usage="dtrain describe [job] NAME [-p PROJECT] [--json]")
    p.add_argument("names", nargs="+", metavar="[job] NAME", help="the job (the word 'job' is optional)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _project_flag(p)
    p.set_defaults(handler=cmd_describe)
    p = sub.add_parser("logs", help="print a job's logs", **_examples("logs"))
    p.add_argument("name", help="the job (the word 'job' before it is optional)")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing new lines until the job ends or is suspended")
    p.add_argument("--previous", action="store_true",
                   help="the lines of the attempt before the current one, after a restart (--max-restarts); "
                        "without it, the current attempt's")
    p.add_argument("-t", "--tail", type=whole_number, metavar="N",
                   help="only the last N lines; -1 (as kubectl's): all of them, the default")
    p.add_argument("--rank", help="a process rank, or 'all' (default: all)")
    p.add_argument("--pod", help=argparse.SUPPRESS)  # Run:AI's and kubectl's: answered with --rank
    p.add_argument("--limit-bytes", type=whole_number, metavar="N",
                   help="at most N bytes of the log (as kubectl's), the last line cut short")
    p.add_argument("-c", "--container", help=argparse.SUPPRESS)  # kubectl's: answered with --rank
    p.add_argument("--all-containers", nargs="?", const="true", help=argparse.SUPPRESS)
    when = p.add_mutually_exclusive_group()  # as Run:AI's: one or the other
    when.add_argument("--since", help="only lines newer than a duration (10m) or a time")
    when.add_argument("--since-time", metavar="TIME", help="only lines newer than a time, e.g. 2026-11-30T12:00:00Z")
    p.add_argument("--timestamps", action="store_true", help="prefix each line with its time")
    p.add_argument("--json", action="store_true", help="one JSON object per line: rank, time, text")
    _project_flag(p)
    p.set_defaults(handler=cmd_logs)
    p = sub.add_parser("delete", help="stop and delete jobs",
                       usage="dtrain delete [job] NAME [NAME...] [-p PROJECT] [--purge]\n"
                             "       dtrain delete [job] --all [-p PROJECT] [--purge]")
    p.add_argument("names", nargs="*", metavar="[job] NAME", help="the jobs (the word 'job' is optional)")
    p.add_argument("-A", "--all", action="store_true",
                   help="every job of the project (-p, default: the configured one), as Run:AI's --all; with "
                        "--purge, the deleted ones too")
    p.add_argument("--purge", action="store_true",
                   help="also forget the job: its record, events and logs (and a local notebook's own work folder)")
    _project_flag(p)
    p.set_defaults(handler=cmd_delete)
    for verb, what in (("suspend", "stop jobs for now: they checkpoint and free their GPUs until resumed"),
                       ("resume", "queue suspended jobs again; they go on from their last checkpoint")):
        p = sub.add_parser(verb, help=what, usage=f"dtrain {verb} [job] NAME [NAME...] [-p PROJECT]\n"
                                                  f"       dtrain {verb} [job] --all [-p PROJECT]")
        p.add_argument("names", nargs="*", metavar="[job] NAME", help="the jobs (the word 'job' is optional)")
        p.add_argument("-A", "--all", action="store_true",
                       help=f"every {_PAUSES[verb][0].removeprefix('a ')} of the project (-p, default: the "
                            f"configured one), as Run:AI's --all")
        _project_flag(p)
        p.set_defaults(handler=cmd_suspend_resume)
    p = sub.add_parser("artifacts", help="copy a job's model folder (SageMaker: model.tar.gz, unpacked) to a folder")
    p.add_argument("name", help="the job (the word 'job' before it is optional)")
    p.add_argument("--to", required=True, metavar="DIR", help="a new (or empty) folder")
    p.add_argument("--output-data", action="store_true",
                   help="SageMaker: the job's output data ($SM_OUTPUT_DATA_DIR, output.tar.gz) instead of its model")
    _project_flag(p)
    p.set_defaults(handler=cmd_artifacts)
    p = sub.add_parser("exec", help="run a command beside a running job's process (its volumes, environment)",
                       usage="dtrain exec NAME [--rank R] [--pod-running-timeout T] [-p PROJECT] -- COMMAND [ARGS...]")
    p.add_argument("name", help="the job, Running (the word 'job' before it is optional)")
    p.add_argument("--rank", help="which process (default 0)")
    p.add_argument("--pod", help=argparse.SUPPRESS)  # Run:AI's and kubectl's: answered with --rank
    _running_timeout_flag(p)
    _project_flag(p)
    p.set_defaults(handler=cmd_exec, takes_command=True, launcher_for=None)
    p = sub.add_parser("bash", help="a shell beside a running job's process (Run:AI's 'runai bash'): exec NAME -- bash",
                       usage="dtrain bash NAME [--rank R] [-p PROJECT]")
    p.add_argument("name", help="the job, Running (the word 'job' before it is optional)")
    p.add_argument("--rank", help="which process (default 0)")
    p.add_argument("--pod", help=argparse.SUPPRESS)  # Run:AI's and kubectl's: answered with --rank
    _running_timeout_flag(p)
    _project_flag(p)
    p.set_defaults(handler=cmd_bash)
    p = sub.add_parser("wait", help=f"wait until jobs end; exit 0 if all succeeded, 1 if any did not, "
                                    f"{EXIT_TIMEOUT} if --timeout ran out",
                       usage="dtrain wait [job] NAME [NAME...] [--timeout T] [-p PROJECT] [--json]",
                       description=f"Wait until the jobs end, one after another, as kubectl wait: exit 0 if all "
                                   f"succeeded, 1 if any did not, {EXIT_TIMEOUT} if --timeout ran out first.",
                       **_examples("wait"))
    p.add_argument("names", nargs="+", metavar="[job] NAME",
                   help="the jobs, waited for in turn (the word 'job' is optional)")
    p.add_argument("--timeout",
                   help="give up after this many seconds, or a duration such as 10m, for all the jobs together "
                        "(exit code 124; default: never)")
    p.add_argument("--json", action="store_true", help="print each finished job as one JSON object (a line each)")
    _project_flag(p)
    p.set_defaults(handler=cmd_wait)


def _running_timeout_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pod-running-timeout", metavar="T",
                   help="wait this long for a Pending job or a process still being launched to run, in seconds or "
                        "a duration such as 5m, as kubectl exec (default 1m; 0: refuse at once)")


def _project_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-p", "--project", help="the job's project, as Run:AI's -p: given, a job of another project "
                                           "is not found (without it, any project's: job names are unique "
                                           "across projects)")
