"""Notebooks, audit 11: the HOME of a job submitted from a notebook's terminal, where the Kubernetes
backend looks for a kubeconfig, what `resume` of a notebook says next, and an empty `notebook list`."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from conftest import Dtrain


def _notebook_env(spec, job_dir: Path, host_home: Path, monkeypatch) -> dict[str, str]:
    """The environment a local notebook's terminal has: its launch plan's, started by a user whose HOME
    is `host_home`."""
    from dtrain.backends.local import launch

    monkeypatch.setenv("HOME", str(host_home))
    plan = launch.plan(spec, job_dir=job_dir, cwd=spec.volumes[0].mount_path if spec.volumes else str(job_dir),
                       mounts=[], devices=[[]], master_port=1, notebook_token="t")
    return {**launch.inherited_env(os.environ), **plan.env}


def test_a_job_submitted_from_a_notebooks_terminal_gets_the_home_the_notebook_replaced(tmp_path, monkeypatch):
    """A notebook's HOME is its workspace volume; a job submitted from its terminal inherited it, so the
    job's ~/.cache, ~/.kube and pip --user went onto that volume. It gets the HOME the notebook replaced,
    as a Kubeflow pod gets its image's, not its submitter's; -e HOME=... is taken as given."""
    from dtrain.backends.local.launch import inherited_env, plan
    from dtrain.spec import notebook_spec

    host_home, workspace = tmp_path / "host-home", tmp_path / "ws"
    host_home.mkdir()
    workspace.mkdir()
    terminal = _notebook_env(notebook_spec("nb", volumes=[f"ws:{workspace}"]), tmp_path / "h" / "jobs" / "nb",
                             host_home, monkeypatch)
    assert terminal["HOME"] == str(workspace)  # the notebook's own HOME is its workspace, as before
    assert inherited_env(terminal)["HOME"] == str(host_home)
    # a notebook started from that terminal replaces the same outer HOME: its jobs never get the workspace
    monkeypatch.setattr(os, "environ", dict(terminal))
    inner = plan(notebook_spec("nb2"), job_dir=tmp_path / "h" / "jobs" / "nb2", cwd=str(tmp_path), mounts=[],
                 devices=[[]], master_port=2, notebook_token="t").env
    assert inherited_env({**inherited_env(terminal), **inner})["HOME"] == str(host_home)


def test_a_job_submitted_with_a_notebooks_home_sees_another_home(dt: Dtrain, tmp_path, monkeypatch):
    """End to end: `dtrain submit` run with a notebook terminal's environment (HOME: the workspace)."""
    from dtrain.spec import notebook_spec

    host_home, workspace = tmp_path / "host-home", tmp_path / "ws"
    host_home.mkdir()
    workspace.mkdir()
    terminal = _notebook_env(notebook_spec("nb", volumes=[f"ws:{workspace}"]), dt.home / "jobs" / "nb",
                             host_home, monkeypatch)
    user = Dtrain(dt.home, env=terminal)
    show = "import os; print(os.environ['HOME'], 'DTRAIN_OUTER_HOME' in os.environ)"
    user("submit", "homes", "--", "python", "-c", show)
    user("submit", "given", "-e", f"HOME={workspace}", "--", "python", "-c", show)
    for name, home in (("homes", host_home), ("given", workspace)):
        assert user.wait_for(name, {"Succeeded", "Failed"})["status"] == "Succeeded"
        assert user("logs", name).stdout == f"{home} False\n"
    assert list(workspace.iterdir()) == []


def test_notebook_list_with_none_says_so_and_how_to_start_one(dt: Dtrain):
    """A header alone read as a listing that failed; the words are the dashboard's empty Notebooks page's."""
    assert dt("notebook", "list").stdout == (
        "No notebooks yet in project 'default': start one with 'dtrain notebook start NAME --pvc VOLUME:/home/jovyan'\n")
    assert dt("notebook", "list", "-A").stdout == (
        "No notebooks yet in any project: start one with 'dtrain notebook start NAME --pvc VOLUME:/home/jovyan'\n")
    dt("project", "create", "team")
    assert dt("notebook", "list", "-p", "team").stdout == (
        "No notebooks yet in project 'team': start one with 'dtrain notebook start NAME --pvc VOLUME:/home/jovyan -p team'\n")
    assert dt("notebook", "list", "--json").stdout == "[]\n"


def test_notebook_list_with_only_deleted_ones_names_show_deleted(dt: Dtrain):
    pytest.importorskip("jupyter_server", reason="notebooks need jupyter-server: pip install 'dtrain[notebook]'")
    dt("notebook", "gone")
    dt("delete", "gone")
    assert dt("notebook", "list").stdout == (
        "No notebooks in project 'default' (1 deleted: --show-deleted lists them): start one with "
        "'dtrain notebook start NAME --pvc VOLUME:/home/jovyan'\n")
    assert "gone" in dt("notebook", "list", "--show-deleted").stdout


@pytest.mark.slow
def test_resume_of_a_notebook_says_how_to_open_it_and_suspend_how_to_resume_it(dt: Dtrain):
    """`dtrain notebook NAME` names `notebook open NAME`; `dtrain resume NAME` of a notebook named nothing."""
    pytest.importorskip("jupyter_server", reason="notebooks need jupyter-server: pip install 'dtrain[notebook]'")
    dt("project", "create", "team")
    dt("notebook", "start", "nbr", "-p", "team")
    try:
        assert dt("suspend", "nbr", "-p", "team").stdout == (
            "The job 'nbr' has been suspended (Suspended); start it again with 'dtrain resume nbr -p team'\n")
        resumed = dt("resume", "nbr", "-p", "team").stdout
        assert resumed.startswith("The job 'nbr' has been resumed ("), resumed
        assert "; open it with 'dtrain notebook open nbr -p team'" in resumed
        # resume queues it (Pending): the line then says "once it is Running", when open takes it
        deadline = time.monotonic() + 120
        while dt.json("describe", "job", "nbr", "-p", "team")["status"] != "Running" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert dt("notebook", "open", "nbr", "-p", "team").stdout.startswith("http://")
    finally:
        dt("delete", "nbr", "-p", "team")
    dt("submit", "plain", "--", "true")
    dt("suspend", "plain", check=False)
    assert "notebook open" not in dt("resume", "plain", check=False).stdout


_KUBECONFIG = """apiVersion: v1
kind: Config
current-context: c
clusters: [{name: c, cluster: {server: "https://SERVER:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
"""


def _kubeconfig(path: Path, server: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_KUBECONFIG.replace("SERVER", server))
    return path


def test_the_kubeconfig_is_looked_for_as_kubectl_does(tmp_path, monkeypatch):
    """KUBECONFIG (read when asked, not when the client was imported; empty is unset), else
    $HOME/.kube/config: a notebook's terminal (HOME its workspace) reads the one kubectl there reads."""
    pytest.importorskip("kubernetes")
    from dtrain.backends.kubernetes.client import client_from_config
    from dtrain.backends.kubernetes.config import KubernetesConfig

    def server() -> str:
        client = client_from_config(KubernetesConfig())
        try:
            return client.configuration.host
        finally:
            client.close()

    _kubeconfig(tmp_path / "home" / ".kube" / "config", "home.example")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KUBECONFIG", "")
    assert server() == "https://home.example:6443"
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "other", "other.example")))
    assert server() == "https://other.example:6443"


@pytest.mark.slow
def test_no_kubeconfig_and_no_cluster_is_one_line_naming_where_it_looked(home, tmp_path):
    pytest.importorskip("kubernetes")
    from conftest import assert_usage_error

    env = {"HOME": str(tmp_path / "ws"), "KUBECONFIG": "", "KUBERNETES_SERVICE_HOST": "", "DTRAIN_OUTER_HOME": ""}
    user = Dtrain(home, env=env)
    assert_usage_error(user("--backend", "kubernetes", "list", check=False),
                       f"no kubeconfig at $HOME/.kube/config = {tmp_path / 'ws'}/.kube/config; no in-cluster "
                       f"service account, KUBERNETES_SERVICE_HOST is not set): point KUBECONFIG at a kubeconfig")
    user = Dtrain(home, env={**env, "KUBECONFIG": str(tmp_path / "nope")})
    assert_usage_error(user("--backend", "kubernetes", "list", check=False),
                       f"no kubeconfig at KUBECONFIG={tmp_path / 'nope'};")
    # In a local notebook's terminal: the kubeconfig of the HOME the notebook replaced, named
    theirs = _kubeconfig(tmp_path / "host" / ".kube" / "config", "host.example")
    user = Dtrain(home, env={**env, "DTRAIN_OUTER_HOME": str(tmp_path / "host")})
    assert_usage_error(user("--backend", "kubernetes", "list", check=False),
                       f"this notebook's HOME is its workspace: export KUBECONFIG={theirs} ")
