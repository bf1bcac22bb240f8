"""Where the Kubernetes backend's credentials come from: the kubeconfig, found and read as kubectl
does (kubeconfig_at), else the in-cluster service account, loaded into an ApiClient by the official
client (client_from_config); every way that fails is one line naming the file and the fix.
client.py builds the API objects on that ApiClient."""

from __future__ import annotations

import logging
import os
import shlex

from dtrain.errors import BackendError, SetupError
from dtrain.spec import OUTER_HOME, outer_home

from .config import KubernetesConfig


def import_kubernetes():
    try:
        import kubernetes.client
        import kubernetes.config
    except ImportError:
        raise SetupError("the Kubernetes backend needs the official client: pip install kubernetes") from None
    return kubernetes


def kubeconfig_at(config: KubernetesConfig) -> str:
    """Where the kubeconfig is looked for, as kubectl looks: config.yaml's kubeconfig, else $KUBECONFIG
    (files separated by ':'; empty is unset), else $HOME/.kube/config, read now: the client's own default
    is $KUBECONFIG as it was when it was imported, and an empty one is no file at all to it."""
    return config.kubeconfig or os.environ.get("KUBECONFIG") or os.path.join(os.path.expanduser("~"), ".kube", "config")


def client_from_config(config: KubernetesConfig):
    """An ApiClient from the kubeconfig (kubeconfig_at, config.context), else the in-cluster account."""
    k8s = import_kubernetes()
    import yaml

    plugin = _PluginErrors()
    logging.getLogger().addHandler(plugin)  # the client logs a failed exec plugin and goes on without it
    try:
        # persist_config=False: a refreshed token (an auth-provider's gcp cmd-path, oidc, azure) stays in
        # memory; the client would otherwise re-dump the user's kubeconfig, comments gone, through a link.
        client = k8s.config.new_client_from_config(config_file=kubeconfig_at(config), context=config.context,
                                                   persist_config=False)
    except (k8s.config.ConfigException, OSError, yaml.YAMLError, TypeError, AttributeError, ValueError) as err:
        problem = _config_problem(err, config)
        if config.context and f"Expected object with name {config.context} in " in str(err):
            raise BackendError(f"no usable Kubernetes configuration ({problem}): {_context_fix(config)}") from None
        if not _no_kubeconfig(err):  # kubectl too refuses a broken kubeconfig rather than go past it
            other = ("give another with 'dtrain config kubernetes --kubeconfig FILE'" if config.kubeconfig
                     else "point KUBECONFIG at another kubeconfig")
            raise BackendError(f"no usable Kubernetes configuration ({problem}): fix that file (kubectl reads "
                               f"it too), or {other}") from None
        if config.kubeconfig is None and config.context is None:  # kubectl's last resort: the pod's account
            conf = k8s.client.Configuration()
            try:
                k8s.config.load_incluster_config(client_configuration=conf)
                return k8s.client.ApiClient(conf)
            except k8s.config.ConfigException as incluster:
                problem += f"; no in-cluster service account, {_incluster_problem(incluster)}"
        raise BackendError(f"no usable Kubernetes configuration ({problem}): {_config_fix()}") from None
    finally:
        logging.getLogger().removeHandler(plugin)
    if plugin.messages:
        raise BackendError(f"the kubeconfig's credential plugin (users[].user.exec) failed: {plugin.messages[0]}; "
                           f"install the command it runs or log in again, then retry")
    return client


class _PluginErrors(logging.Handler):
    """Collects what the kubernetes client logs while it loads a kubeconfig: only a failed exec
    credential plugin logs at ERROR there, and the client then carries on with no credentials."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(" ".join(record.getMessage().split()))


def _no_kubeconfig(err: Exception) -> bool:
    """The kubeconfig is missing or empty: where kubectl (client-go's IsEmptyConfig) goes on to the
    in-cluster account. A file that is there but unreadable or broken is refused instead."""
    text = str(err)
    return "No configuration found" in text or text.endswith(" file is empty")


def _incluster_problem(err: Exception) -> str:
    if not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "KUBERNETES_SERVICE_HOST is not set"
    return " ".join(str(err).split()).rstrip(".").lower()


def _config_fix() -> str:
    """The fix a refusal names; in a local notebook's terminal, whose HOME is its workspace, the
    kubeconfig of the HOME it replaced (kubectl there misses it too)."""
    outer = os.environ.get(OUTER_HOME)
    replaced = outer and outer_home(os.environ) == outer  # not where the user set HOME there
    theirs = os.path.join(outer, ".kube", "config") if replaced else None
    if theirs and not os.environ.get("KUBECONFIG") and os.path.isfile(theirs):
        return (f"this notebook's HOME is its workspace: export KUBECONFIG={shlex.quote(theirs)} "
                "(the kubeconfig of the HOME it replaced), or point KUBECONFIG at another kubeconfig")
    return "point KUBECONFIG at a kubeconfig, choose a context, or run dtrain inside the cluster"


def _config_problem(err: Exception, config: KubernetesConfig) -> str:
    """One line for why the kubeconfig could not be loaded (YAML errors span several lines)."""
    import yaml

    where = kubeconfig_at(config)
    if not config.kubeconfig:  # what named it, as kubectl reads them: a notebook's HOME is its workspace
        where = f"KUBECONFIG={where}" if os.environ.get("KUBECONFIG") else f"$HOME/.kube/config = {where}"
    text = " ".join(str(err).split())
    if isinstance(err, OSError) and err.strerror:  # unreadable: [Errno 13] Permission denied: '...'
        return f"cannot read {err.filename or where}: {err.strerror.lower()}"
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        return f"{err.problem_mark.name} is not valid YAML: {err.problem} at line {err.problem_mark.line + 1}"
    if isinstance(err, (yaml.YAMLError, TypeError, AttributeError)):
        return f"{where} is not a kubeconfig: it must be a YAML mapping with clusters, users and contexts"
    if isinstance(err, ValueError):
        return f"{where}: {text}"
    if "No configuration found" in text:
        return f"no kubeconfig at {where}"
    if config.context and f"Expected object with name {config.context} in " in text:  # the file is fine
        return f"context {config.context!r}, config.yaml's kubernetes.context, is not in {where}"
    return text


def _context_fix(config: KubernetesConfig) -> str:
    """The fix of a context config.yaml names that the kubeconfig has not: the contexts it has."""
    import yaml

    names: list[str] = []
    for path in kubeconfig_at(config).split(os.pathsep):  # KUBECONFIG's files, merged as the client merges them
        try:
            with open(path, encoding="utf-8") as f:
                doc = yaml.safe_load(f)
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            continue
        for entry in (doc.get("contexts") or []) if isinstance(doc, dict) else []:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str) and entry["name"] not in names:
                names.append(entry["name"])
    has = f" (it has {', '.join(names[:10])}{', ...' if len(names) > 10 else ''})" if names else ""
    return (f"choose one of its contexts with 'dtrain config kubernetes --context NAME'{has}, or its "
            f"current-context with 'dtrain config kubernetes --unset context'")
