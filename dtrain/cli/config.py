"""`dtrain config`: the default project and backend, SageMaker and Kubernetes settings, storage
classes and node labels, each shown or set in config.yaml through the client."""

from __future__ import annotations

import os
import sys

from dtrain.cli.cluster import _set_default_project
from dtrain.client import Client
from dtrain.config import number_fields, section_numbers
from dtrain.errors import NotFoundError, SpecError
from dtrain.names import counted, shown
from dtrain.numbers import NUMBER_WORD_RE, NumberWord, whole_number
from dtrain.spec import yaml_value


def cmd_config(args, client: Client) -> int:
    given = [k for k in (*dict.fromkeys(_SAGEMAKER_KEYS + _KUBERNETES_KEYS), "set", "unset") if getattr(args, k) is not None]
    flags = [f"--{k.replace('_', '-')}" for k in given]
    if args.what == "storage-class":
        return _config_storage_class(args, client, [g for g in flags if g != "--unset"])
    if args.what == "node-labels":
        return _config_node_labels(args, client, [g for g in flags if g not in ("--set", "--unset")])
    if args.what == "forget-backend":
        return _config_forget_backend(args, client, flags)
    if args.folder is not None:
        raise SpecError(f"'dtrain config {args.what}' takes one value, not {args.value!r} and {args.folder!r}; "
                        f"nothing was changed")
    sections = {"sagemaker": _SAGEMAKER_KEYS, "kubernetes": (*_KUBERNETES_KEYS, "set")}
    keys = sections.get(args.what, ())
    stray = [k for k in given if k not in keys and not (k == "unset" and keys)]
    if stray:  # else silently dropped: the user believes them saved
        owners = [w for w, ks in sections.items() if all(k in ks or k == "unset" for k in stray)] or list(sections)
        said = [f"--{k.replace('_', '-')}" for k in stray]
        raise SpecError(f"{', '.join(said)} {'is' if len(said) == 1 else 'are'} for "
                        f"{' or '.join(f'{chr(39)}dtrain config {w}{chr(39)}' for w in owners)}, "
                        f"not 'dtrain config {args.what}'; nothing was changed")
    # config.yaml's every Kubernetes setting, not only those with a flag (--set sets the others)
    unsettable = tuple(k.replace("_", "-") for k in (client.kubernetes_settings() if args.what == "kubernetes"
                                                     else keys or _SAGEMAKER_KEYS))
    if args.unset == []:  # `--unset` alone (nargs="*": a storage class's name may come before it)
        raise SpecError(f"--unset needs the settings to remove, e.g. --unset image (one of {', '.join(unsettable)})"
                        f"; nothing was changed")
    if args.unset is not None and (bad := [k for k in args.unset if k.replace("_", "-") not in unsettable]):
        what = "a Kubernetes" if args.what == "kubernetes" else "a SageMaker"
        raise SpecError(f"--unset {bad[0]!r}: not {what} setting; use one of {', '.join(unsettable)}")
    if args.project is not None and args.what != "backend":
        raise SpecError(f"-p/--project is for 'dtrain config backend' (a project's own backend), not 'dtrain config "
                        f"{args.what}'; nothing was changed")
    if args.what in ("sagemaker", "kubernetes"):
        return _config_settings(args, client, shown_only=not given)
    if args.value is None:  # as `git config KEY` and `gcloud config get project`: the current value, alone
        if args.what == "project":
            print(client.default_project)
        else:
            print(client.config.backend_for(args.project) if args.project else client.config.backend)
        return 0
    if args.what == "project":
        _set_default_project(client, args.value)
    else:
        client.set_default_backend(args.value, project=args.project)
        print(f"Backend '{args.value}' is now the default" + (f" for project '{args.project}'" if args.project else ""))
    return 0


def _config_settings(args, client: Client, *, shown_only: bool) -> int:
    """`config sagemaker` / `config kubernetes`: flags set settings, `--unset` removes them; without
    either, what is set (config.yaml left as it was)."""
    if args.value is not None:
        example = "--role ARN --bucket NAME --region R" if args.what == "sagemaker" else "--context NAME --namespace NS"
        raise SpecError(f"'dtrain config {args.what}' takes flags only, e.g. {example}")
    unset = [k.replace("-", "_") for k in args.unset or ()]
    had = (client.config.sagemaker if args.what == "sagemaker" else client.config.kubernetes) or {}
    absent = [k.replace("_", "-") for k in unset if k not in had]  # nothing to remove: said, not "saved"
    not_set = f" ({', '.join(absent)} {'was' if len(absent) == 1 else 'were'} not set)" if absent else ""
    if args.what == "sagemaker":
        if shown_only:
            client.sagemaker_config()  # a typo'd or bad setting is named, not shown as if it were in use
            settings = client.config.sagemaker
            print("SageMaker settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()) if settings else
                  "SageMaker is not configured: dtrain config sagemaker --role ARN --bucket NAME [--region R]")
            return 0
        settings = client.configure_sagemaker(unset=unset, **{k: getattr(args, k) for k in _SAGEMAKER_KEYS}).settings
        print("SageMaker settings saved: " + ", ".join(f"{k}={v}" for k, v in settings.items()) + not_set)
        return 0
    if shown_only:
        client.kubernetes_config()  # as for SageMaker: a bad setting is named, not shown as if in use
        settings = client.config.kubernetes
        print("Kubernetes settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()) if settings else
              "Kubernetes settings: none (the kubeconfig's current context, namespace dtrain-PROJECT): "
              "dtrain config kubernetes --context NAME [--namespace NS]")
        return 0
    flagged = {k: getattr(args, k) for k in _KUBERNETES_KEYS if getattr(args, k) is not None}
    pairs = section_numbers("kubernetes", _set_pairs(args.set or (), number_fields("kubernetes")))
    if twice := next((k for k in pairs if k in flagged), None):
        raise SpecError(f"{twice} is given both as --{twice.replace('_', '-')} and with --set: give one; "
                        f"nothing was changed")
    settings = client.configure_kubernetes(unset=unset, **flagged, **pairs).settings
    print("Kubernetes settings saved: " + (", ".join(f"{k}={v}" for k, v in settings.items()) or "none") + not_set)
    return 0


def _set_pairs(pairs, numbers: dict) -> dict:
    """`--set KEY=VALUE ...`: VALUE read as config.yaml's `kubernetes: {KEY: VALUE}` reads it (29501 a
    number, false, [ReadWriteOnce] a list, a quoted '0' a string), then checked as the flags' values are.
    A number field's unquoted value is read as its flag reads it (`numbers`: each number field's reader):
    --set gpus_per_node=1_000 is --gpus-per-node 1_000 (YAML 1.1 refused it), with its bounds and words."""
    out: dict = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise SpecError(f"--set {pair!r}: give KEY=VALUE, e.g. --set master_port=29501; nothing was changed")
        if key in out:
            raise SpecError(f"--set {key} is given twice: give it once; nothing was changed")
        word = value.strip()
        if key in numbers and word and word[0] not in "'\"[{" and word.lower() not in ("~", "null"):
            out[key] = NumberWord(word)  # section_numbers reads it with the flag's reader, unquoted
            continue
        out[key] = yaml_value(value, key, "--set", fix_as="--set {}={}")
        if out[key] == value.strip() and NUMBER_WORD_RE.fullmatch(out[key]):  # unquoted 1e3: config.yaml's NumberWord
            out[key] = NumberWord(out[key])
        if out[key] is None:  # `--set context=`: nothing to save, which configure_kubernetes would drop unsaid
            raise SpecError(f"--set {key}= gives no value: give one, or remove the saved one with "
                            f"--unset {key.replace('_', '-')}; nothing was changed")
    return out


_SAGEMAKER_KEYS = ("role", "bucket", "region", "prefix", "image", "instance_type", "subnets", "security_groups")
# The Kubernetes settings a flag sets (config.yaml's `kubernetes:` takes every KubernetesConfig field)
_KUBERNETES_KEYS = ("namespace", "context", "kubeconfig", "image", "notebook_image", "scheduler_name", "gpus_per_node",
                    "trainer")


def _config_forget_backend(args, client: Client, flags: list[str]) -> int:
    """`config forget-backend NAME`: `list -A` no longer asks a backend that only a `submit --backend`
    made it ask (state.db's sent_to); its jobs stay, `dtrain --backend NAME list` reaches them."""
    if stray := flags + (["-p"] if args.project is not None else []):
        raise SpecError(f"{', '.join(stray)} {'is' if len(stray) == 1 else 'are'} not for 'dtrain config "
                        f"forget-backend', which takes a backend, e.g. dtrain config forget-backend kubernetes")
    if args.value is None or args.folder is not None:
        raise SpecError("give one backend to forget, e.g. dtrain config forget-backend kubernetes")
    still = client.forget_backend(args.value).still_asked
    print(f"Forgot backend {args.value}: 'dtrain list -A' no longer asks it for the jobs sent there; its jobs are "
          f"not touched ('dtrain --backend {args.value} list' lists them)")
    if still:
        print(f"It is still asked as {' and as '.join(still)}")
    return 0


def _config_node_labels(args, client: Client, flags: list[str]) -> int:
    """`config node-labels [--set KEY=VALUE ...] [--unset KEY ...]`: config.yaml's node_labels, this
    machine's labels beside the kubelet's own (what a local job's --node-selector / --node-type match)."""
    if flags or args.project is not None or args.value is not None:
        stray = flags + ["-p/--project"] * (args.project is not None) + [repr(args.value)] * (args.value is not None)
        raise SpecError(f"{', '.join(stray)} {'is' if len(stray) == 1 else 'are'} not for 'dtrain config node-labels', "
                        f"which takes --set KEY=VALUE and --unset KEY, e.g. dtrain config node-labels --set "
                        f"run.ai/type=dgx-a100; nothing was changed")
    if args.unset == []:
        raise SpecError("--unset needs the labels to remove, e.g. dtrain config node-labels --unset run.ai/type; "
                        "nothing was changed")
    if args.set is None and args.unset is None:
        labels = client.config.node_labels
        print("node labels: " + ", ".join(f"{k}={v}" for k, v in labels.items()) if labels else
              "no node labels besides this machine's own ('dtrain nodes --json'): dtrain config node-labels --set "
              "KEY=VALUE, e.g. --set run.ai/type=dgx-a100")
        return 0
    given: dict[str, str] = {}
    for pair in args.set or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SpecError(f"--set {shown(pair)}: give KEY=VALUE, e.g. --set run.ai/type=dgx-a100; "
                            f"nothing was changed")
        if key in given:
            raise SpecError(f"--set {key} is given twice: give it once; nothing was changed")
        given[key] = value
    labels = client.configure_node_labels(given, unset=args.unset or ()).settings
    print("node labels saved: " + (", ".join(f"{k}={v}" for k, v in labels.items()) or "none"))
    return 0


def _config_storage_class(args, client: Client, flags: list[str]) -> int:
    """`config storage-class [NAME [FOLDER]]`, `--unset NAME...`: config.yaml's storage_classes, as
    `config project` shows and sets the default project."""
    if flags or args.project is not None:
        flags += ["-p/--project"] if args.project is not None else []
        raise SpecError(f"{', '.join(flags)} {'is' if len(flags) == 1 else 'are'} not for 'dtrain config "
                        f"storage-class'; nothing was changed")
    if args.unset is not None:  # `--unset fast` or, as git's flags go anywhere, `fast --unset`
        names = [n for n in (args.value, args.folder) if n is not None] + args.unset
        if not names:
            raise SpecError("'dtrain config storage-class --unset' needs the classes to remove, e.g. "
                            "dtrain config storage-class --unset fast; nothing was changed")
        folders = dict(client.config.storage_classes)
        spread = _spread(client)
        held = client.unset_storage_classes(names).volumes
        for name in dict.fromkeys(names):
            print(f"storage class '{name}' removed")
            if held.get(name):  # as kubectl warns: what the removal leaves behind, and how to undo it
                # a class re-pointed since: each folder and its count (it said they all stayed in the last one)
                where = (" and ".join(f"{f} ({counted(n, 'volume')})" for f, n in spread[name].items() if n)
                         if name in spread else folders[name])
                print(f"dtrain: warning: storage class '{name}' still holds {counted(held[name], 'volume')}: they stay in "
                      f"{where} and keep working (jobs mount them; snapshots and in-place restores work; "
                      f"'dtrain volume update VOLUME --class local' moves one out), but no new volume can go there "
                      f"until the class is named again: dtrain config storage-class {name} {folders[name]}",
                      file=sys.stderr)
        return 0
    classes = client.config.storage_classes
    if client.config_problem is not None and args.folder is None:  # shown as it is, to repair: what is wrong, how
        print(f"dtrain: warning: {client.config_problem}", file=sys.stderr)
    if args.value is None:
        print("\n".join(f"{n}: {r}" for n, r in classes.items()) if classes else
              "no storage classes besides 'local': dtrain config storage-class NAME FOLDER")
        return 0
    if args.folder is None:  # as `config project`: the value alone
        if args.value not in classes:
            raise NotFoundError(f"no storage class {args.value!r} in {client.home / 'config.yaml'}"
                                + (f" (it has {', '.join(classes)})" if classes else "")
                                + f": dtrain config storage-class {args.value} FOLDER")
        print(classes[args.value])
        return 0
    old = classes.get(args.value)
    # the volumes in its folder now: those an earlier re-pointing left elsewhere stay there (it counted them here)
    held = 0 if old is None or client.config_problem is not None else next(
        (c.folders.get(c.root, 0) for c in client.backend("local").list_storage_classes() if c.name == args.value), 0)
    root = client.set_storage_class(args.value, args.folder).settings[args.value]
    print(f"storage class '{args.value}' is {root}; 'dtrain volume classes' shows whether volumes can go there")
    if held and os.path.realpath(old) != os.path.realpath(root):  # the same folder spelled anew moves nothing
        they = ("stays", "keeps") if held == 1 else ("stay", "keep")
        print(f"dtrain: warning: the {counted(held, 'volume')} of storage class '{args.value}' {they[0]} in {old} and "
              f"{they[1]} working; "
              f"new ones go to {root}, and 'dtrain volume update VOLUME --class {args.value}' moves one there",
              file=sys.stderr)
    _warn_shared_folder(client, args.value, root)
    return 0


def _spread(client: Client) -> dict[str, dict[str, int]]:
    """The local classes whose volumes live in more than one folder (re-pointed since), each folder's count."""
    if client.config_problem is not None:
        return {}
    return {c.name: c.folders for c in client.backend("local").list_storage_classes() if len(c.folders) > 1}


def _warn_shared_folder(client: Client, name: str, root: str) -> None:
    """A class named at the folder of another class's volumes: of a class config.yaml no longer names
    (removed, or renamed by hand), or of one re-pointed elsewhere since (each volume records its folder).
    Allowed, as two Kubernetes StorageClasses may share a NetApp backend and each PV keeps its own
    storageClassName; said, since the old class cannot be named there again now."""
    local = client.backend("local")
    classes = client.config.storage_classes
    for other, count in local.volumes_in(root).items():  # the local backend's own
        if other == name:
            continue
        they = ("it stays", "keeps", "it") if count == 1 else ("they stay", "keep", "them")
        if other in classes:  # re-pointed away: its volumes stayed here
            print(f"dtrain: warning: {root} holds {counted(count, 'volume')} of storage class '{other}', whose "
                  f"folder is {classes[other]} now: {they[0]} here in class '{other}' and {they[1]} working; "
                  f"'dtrain volume update VOLUME --class {other}' moves one to {classes[other]}, and "
                  f"'dtrain volume update VOLUME --class {name}' gives one class '{name}' without moving it",
                  file=sys.stderr)
        elif other != "local":
            print(f"dtrain: warning: {root} holds the {counted(count, 'volume')} of storage class "
                  f"'{other}', which {client.home / 'config.yaml'} no longer names: {they[0]} in class "
                  f"'{other}' and {they[1]} working, but '{other}' cannot be named again while '{name}' "
                  f"shares its folder; to give {they[2]} class '{other}' back instead: dtrain config storage-class "
                  f"--unset {name}, then dtrain config storage-class {other} {root}", file=sys.stderr)
    for (other, folder), count in local.volumes_around(root).items():  # named: it cannot take a volume yet
        print(f"dtrain: warning: storage class '{name}' takes no volume while {folder}, which overlaps its folder, "
              f"holds {counted(count, 'volume')} of storage class '{other}': 'dtrain volume classes' says how to move "
              f"{'it' if count == 1 else 'them'} out, or give '{name}' a folder of its own with 'dtrain config "
              f"storage-class {name} FOLDER'", file=sys.stderr)


def _add_config(sub) -> None:
    p = sub.add_parser("config", help="show or set the default project or backend; SageMaker and Kubernetes settings")
    p.add_argument("what", choices=["project", "backend", "sagemaker", "kubernetes", "storage-class", "node-labels",
                                    "forget-backend"],
                   help="what to show or set; 'forget-backend NAME': 'list -A' stops asking a backend that a "
                        "submit --backend sent jobs to (a cluster that is gone)")
    p.add_argument("value", nargs="?",
                   help="a project that exists ('dtrain project list'), or local / kubernetes / sagemaker, or a "
                        "storage class's name; without it, the current one is printed")
    p.add_argument("folder", nargs="?",
                   help="with 'storage-class NAME': the class's root folder (made absolute), e.g. /nvme/dtrain")
    p.add_argument("-p", "--project", help="with 'backend': only for this project")
    g = p.add_argument_group("with 'sagemaker' (credentials come from boto3's chain and are never stored)")
    g.add_argument("--role", help="IAM role ARN SageMaker assumes")
    g.add_argument("--bucket", help="S3 bucket for code, checkpoints and models")
    g.add_argument("--region", help="AWS region, e.g. us-east-1")
    g.add_argument("--prefix", help="S3 key prefix (default dtrain)")
    g.add_argument("--image", help="training image URI (default: the AWS PyTorch training image); with "
                                   "'kubernetes': the image of jobs that give no --image")
    g.add_argument("--instance-type", help="default instance type, e.g. ml.m5.xlarge")
    g.add_argument("--subnets", nargs="+", metavar="SUBNET", help="VPC subnets (EFS/FSx channels need a VPC)")
    g.add_argument("--security-groups", nargs="+", metavar="SG", help="VPC security groups")
    k = p.add_argument_group("with 'kubernetes' (config.yaml's kubernetes: holds the others; --image as above)")
    k.add_argument("--namespace", help="one namespace for every project (default: dtrain-PROJECT)")
    k.add_argument("--context", help="kubeconfig context (default: the current one, or in-cluster config)")
    k.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    k.add_argument("--notebook-image", metavar="IMAGE",
                   help="the image of notebooks that give no --image (--image is the jobs'), a Kubeflow "
                        "notebook-server image, e.g. kubeflownotebookswg/jupyter-pytorch-full:v1.9.2")
    k.add_argument("--scheduler-name", help="pods' schedulerName, e.g. runai-scheduler")
    k.add_argument("--gpus-per-node", type=whole_number, metavar="N", help="GPUs of one node: GPU jobs pack processes per pod")
    k.add_argument("--trainer", help="v1: PyTorchJob/MPIJob (Training Operator), v2: TrainJob (Trainer v2)")
    k.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="any other setting of config.yaml's kubernetes:, VALUE as YAML reads it, e.g. --set "
                        "master_port=29501 --set access_modes=[ReadWriteOnce] (repeat it for several); with "
                        "'node-labels': a label of this machine, e.g. --set run.ai/type=dgx-a100")
    g.add_argument("--unset", nargs="*", metavar="SETTING",
                   help="remove saved settings, e.g. --unset subnets security-groups (no VPC) or --unset image; "
                        "with 'kubernetes': e.g. --unset namespace; with 'storage-class': remove classes, e.g. "
                        "--unset fast; with 'node-labels': remove labels, e.g. --unset run.ai/type")
    p.set_defaults(handler=cmd_config)
