"""Which job a job verb's words name: Run:AI's noun before the name (`delete job X`), another kind
sent to the verb that handles it (`describe volume X`), and -p, which finds only that project's job."""

from __future__ import annotations

from dtrain.client import Client
from dtrain.errors import NotFoundError, SpecError
from dtrain.names import check_name


# Other kinds a Run:AI or kubectl user names to a job verb (`describe volume X`, `list nodes`):
# the kind, in the words of the verb that handles it.
_OTHER_KINDS = {"volume": "volume", "volumes": "volume", "snapshot": "snapshot", "snapshots": "snapshot",
                "project": "project", "projects": "project", "node": "nodes", "nodes": "nodes"}


# The actions of `dtrain volume` and `dtrain snapshot` that a job verb has a namesake of; for another
# verb (`wait volume X`, `suspend snapshot X`, which named 'dtrain volume wait NAME', no command) describe.
_KIND_ACTIONS = {"volume": ("list", "describe", "delete"), "snapshot": ("list", "describe", "delete", "wait")}


def _elsewhere(kind: str, verb: str, name: str = "NAME") -> str:
    """The one line sending `dtrain VERB KIND ...` (kubectl's `VERB KIND/NAME`: `name`) to where that kind
    is handled."""
    kind = _OTHER_KINDS[kind]
    if kind in ("volume", "snapshot"):
        action = verb if verb in _KIND_ACTIONS[kind] else "describe"
        fix = f"use 'dtrain {kind} {action}" + ("'" if action == "list" else f" {name}'")
    elif kind == "project":
        fix = f"use 'dtrain project delete {name}'" if verb == "delete" else "use 'dtrain project list'"
    else:
        fix = "use 'dtrain nodes'"
    return f"'dtrain {verb}' is for jobs: {fix}"


# The nouns Run:AI writes before a job's name (`delete job X`); a notebook is a job, and so is what kubectl
# names a Kubeflow job (`kubectl describe pytorchjob X`: it said "describe one job", `logs` "unrecognized")
JOB_NOUNS = ("job", "jobs", "notebook", "notebooks", "pytorchjob", "pytorchjobs", "mpijob", "mpijobs")


def job_word(word: str, verb: str = "describe") -> str:
    """kubectl's KIND/NAME (`pytorchjob/train`, `mpijob/train`, `job/train`, `notebook/train`) as NAME, where
    KIND is one of JOB_NOUNS (it was refused as a job's name holding '/'); any other word as it is. Another
    kind's (`volume/data`, `snapshot/s1`, `project/team`, `node/n1`) is refused in one line naming the
    command for it (it was "invalid job name 'volume/data'")."""
    kind, slash, name = word.partition("/")
    if slash and name and kind in _OTHER_KINDS:
        raise SpecError(_elsewhere(kind, verb, name if _is_name(name) else "NAME"))
    return name if slash and name and kind in JOB_NOUNS else word


def _is_name(word: str) -> bool:
    try:
        check_name(word, "volume")
    except SpecError:
        return False
    return True


def _job_names(words: list[str], verb: str) -> list[str]:
    """Run:AI writes the noun (`delete job X`); kubectl-style bare names work too, and kubectl's
    `pytorchjob/X`. A notebook is a job, so `delete notebook X` is `delete job X`."""
    if len(words) > 1 and words[0] in JOB_NOUNS:
        return [job_word(w, verb) for w in words[1:]]
    if words and words[0] in _OTHER_KINDS:
        raise SpecError(_elsewhere(words[0], verb))
    return [job_word(w, verb) for w in words]


def _in_project(args) -> str | None:
    """Run:AI's -p on a job verb (`runai logs train -p team`), checked: the project each call of
    this command passes on (`project=`), which looks at that project's backend and (Kubernetes) its
    namespace, and finds only that project's jobs; None without -p. config.yaml is not read for it."""
    return None if args.project is None else check_name(args.project, "project")


def _get(args, client: Client, name: str):
    """The job `name`; with -p, only if it is that project's. Run:AI's noun alone (`describe job`, the name
    forgotten) is a job's name, as it may be one; when none is, the refusal says where the name goes."""
    try:
        return client.get(name, project=args.project)
    except NotFoundError as err:
        if name not in JOB_NOUNS:
            raise
        raise NotFoundError(f"{err}; '{name}' alone is read as a job's name: give the job's name after it "
                            f"(dtrain {args.verb} {name} NAME{f' -p {args.project}' if args.project else ''})") from None
