"""Notebooks and config, audit 12: a HOME the user sets in a notebook's terminal, a broken default
kubeconfig, YAML 1.1's number forms in config.yaml and job files, every Kubernetes setting from
`dtrain config kubernetes`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import Dtrain, assert_usage_error


# ---------------------------------------------------------------- a HOME set in a notebook's terminal

def _terminal(tmp_path: Path, monkeypatch) -> tuple[dict[str, str], Path, Path]:
    """The environment of a local notebook's terminal (its HOME: the workspace), started by a user
    whose HOME is host-home; and those two folders."""
    from dtrain.backends.local import launch
    from dtrain.spec import notebook_spec

    host_home, workspace = tmp_path / "host-home", tmp_path / "ws"
    host_home.mkdir()
    workspace.mkdir()
    spec = notebook_spec("nb", volumes=[f"ws:{workspace}"])
    monkeypatch.setenv("HOME", str(host_home))
    plan = launch.plan(spec, job_dir=tmp_path / "h" / "jobs" / "nb", cwd=str(workspace), mounts=[], devices=[[]],
                       master_port=1, notebook_token="t")
    return {**launch.inherited_env(os.environ), **plan.env}, host_home, workspace


def test_a_home_typed_in_a_notebooks_terminal_is_the_jobs_home(tmp_path, monkeypatch):
    """`HOME=/x dtrain submit ...` in a notebook's terminal gave the job the HOME the notebook replaced,
    not /x: a HOME the user sets there is kept, as outside a notebook; the notebook's own HOME (the
    workspace) still is not handed on, and -e HOME=... is the job's whatever the terminal's HOME."""
    from dtrain.backends.local.launch import inherited_env, job_env
    from dtrain.spec import JobSpec

    terminal, host_home, workspace = _terminal(tmp_path, monkeypatch)
    assert inherited_env(terminal)["HOME"] == str(host_home)  # untouched: the HOME the notebook replaced
    typed = {**terminal, "HOME": str(tmp_path / "x")}
    assert inherited_env(typed)["HOME"] == str(tmp_path / "x")
    assert not {"DTRAIN_OUTER_HOME", "DTRAIN_NOTEBOOK_HOME"} & set(inherited_env(typed))
    given = JobSpec(name="j", command=("true",), env={"HOME": "/given"})
    assert job_env(given, devices=[[]], master_port=1, attempt=0)["HOME"] == "/given"
    # a notebook started from that terminal hands the typed HOME on to its own jobs, as it would be outside
    monkeypatch.setattr(os, "environ", typed)
    from dtrain.backends.local.launch import plan
    from dtrain.spec import notebook_spec

    inner = plan(notebook_spec("nb2"), job_dir=tmp_path / "h" / "jobs" / "nb2", cwd=str(tmp_path), mounts=[],
                 devices=[[]], master_port=2, notebook_token="t").env
    assert inherited_env({**inherited_env(typed), **inner})["HOME"] == str(tmp_path / "x")


def test_a_home_typed_in_a_notebooks_terminal_reaches_the_job(dt: Dtrain, tmp_path, monkeypatch):
    """End to end: `HOME=/x dtrain submit` with a notebook terminal's environment."""
    terminal, host_home, workspace = _terminal(tmp_path, monkeypatch)
    typed = tmp_path / "typed"
    typed.mkdir()
    user = Dtrain(dt.home, env={**terminal, "HOME": str(typed)})
    user("submit", "typed", "--", "python", "-c", "import os; print(os.environ['HOME'])")
    assert user.wait_for("typed", {"Succeeded", "Failed"})["status"] == "Succeeded"
    assert user("logs", "typed").stdout == f"{typed}\n"


# ---------------------------------------------------------------- a broken default kubeconfig

@pytest.fixture
def in_cluster(tmp_path, monkeypatch):
    """A pod's service account, as load_incluster_config reads it: its token and CA files and the
    KUBERNETES_SERVICE_* variables."""
    pytest.importorskip("kubernetes")
    from kubernetes.config import incluster_config

    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("pod-token")
    (account / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(account / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(account / "ca.crt"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("KUBECONFIG", "")
    monkeypatch.delenv("DTRAIN_OUTER_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "home" / ".kube" / "config"


def _host() -> str:
    from dtrain.backends.kubernetes.client import client_from_config
    from dtrain.backends.kubernetes.config import KubernetesConfig

    client = client_from_config(KubernetesConfig())
    try:
        return client.configuration.host
    finally:
        client.close()


def test_no_default_kubeconfig_uses_the_in_cluster_account(in_cluster):
    assert _host() == "https://10.0.0.1:443"
    in_cluster.parent.mkdir(parents=True)
    in_cluster.write_text("# nothing yet\n")  # an empty one is none, as client-go's IsEmptyConfig
    assert _host() == "https://10.0.0.1:443"


@pytest.mark.parametrize("broken, problem", [
    ("apiVersion: v1\nclusters: [\n  {name: c", "is not valid YAML: "),
    ("- a\n- list\n", "is not a kubeconfig: it must be a YAML mapping"),
    (None, "cannot read "),  # a folder where the file goes: unreadable (as root, a mode 000 file is read)
])
def test_a_broken_default_kubeconfig_is_refused_not_passed_over_for_in_cluster(in_cluster, broken, problem):
    """kubectl refuses a kubeconfig that is there but broken; dtrain went on to the pod's account
    without a word, to another cluster or identity than the user's file names."""
    from dtrain.errors import BackendError

    in_cluster.parent.mkdir(parents=True)
    if broken is None:
        in_cluster.mkdir()
    else:
        in_cluster.write_text(broken)
    with pytest.raises(BackendError) as err:
        _host()
    line = str(err.value)
    assert "\n" not in line and problem in line, line
    assert str(in_cluster) in line and "in-cluster" not in line, line
    assert line.endswith(": fix that file (kubectl reads it too), or point KUBECONFIG at another kubeconfig"), line


# ---------------------------------------------------------------- YAML 1.1 numbers

YAML11 = [("0x7000", 28672, "hexadecimal", "write master_port: 28672"),
          ("0b101", 5, "binary", "write master_port: 5"),
          ("017", 15, "octal", "write master_port: 17 (without the leading zero), or 15 for the octal"),
          ("1:30", 90, "sexagesimal", "write master_port: 90"),
          ("1_000", 1000, "number with '_'", "write master_port: 1000")]


@pytest.mark.parametrize("written, read, form, fix", YAML11)
def test_config_yaml_refuses_yaml11_numbers_naming_the_key(dt: Dtrain, written, read, form, fix):
    """`master_port: 0x7000` was taken as 28672 (017 as 15, 1:30 as 90): YAML 1.1's forms, which no
    flag takes and YAML 1.2 reads otherwise or not at all. One line naming the key and the decimal."""
    config = dt.home / "config.yaml"
    text = f"backend: local  # ours\nkubernetes:\n  master_port: {written}\n"
    config.write_text(text)
    proc = dt("config", "kubernetes", check=False)
    assert_usage_error(proc, f"{config}: kubernetes.master_port: {written} is a YAML 1.1 {form}",
                       f"read as {read}; ", fix)
    assert config.read_text() == text  # nothing rewritten
    config.write_text("kubernetes:\n  master_port: 29501\n  request_timeout: 0.50\n  gpus_per_node: +8\n")
    assert "master_port=29501" in dt("config", "kubernetes").stdout  # decimal, as typed, is taken


@pytest.mark.parametrize("section, key", [("sagemaker", "volume_size"), ("kubernetes", "gpus_per_node"),
                                          ("kubernetes", "request_timeout")])
def test_every_numeric_key_of_config_yaml_refuses_them(home, section, key):
    from dtrain.config import UserConfig
    from dtrain.errors import SpecError

    (home / "config.yaml").write_text(f"{section}:\n  {key}: 1_0\n")
    with pytest.raises(SpecError, match=rf"{section}\.{key}: 1_0 is a YAML 1.1 number with '_' between digits, "
                                        rf"read as 10; .*: write {key}: 10$"):
        UserConfig.load(home)


@pytest.mark.parametrize("field, written, read", [("processes", "0x2", 2), ("cpu", "1_0.5", 10.5),
                                                  ("max_restarts", "0b11", 3), ("idle_timeout", "1:00", 60),
                                                  ("sagemaker", "{instance_count: 010}", 8)])
def test_a_job_files_number_fields_refuse_them(dt: Dtrain, tmp_path, field, written, read):
    job = tmp_path / "job.yaml"
    job.write_text(f"name: j\ncommand: [echo, 0x10, 017]\nenv: {{MASK: 0x1F}}\n{field}: {written}\n")
    proc = dt("submit", "-f", str(job), "--dry-run", check=False)
    key = "sagemaker.instance_count" if field == "sagemaker" else field
    assert_usage_error(proc, f"job file '{job}': {key}: ", f", read as {read}; ")
    assert dt.json("list", "-A") == []


def test_a_job_files_text_fields_keep_such_numbers_as_typed(dt: Dtrain, tmp_path):
    """command and env take text: 0x1F there is the string as typed, and stays taken."""
    job = tmp_path / "job.yaml"
    job.write_text("name: j\ncommand: [echo, 0x10, 017, '1:30']\nenv: {MASK: 0x1F, AT: 12:30}\nprocesses: +1\n")
    out = dt("submit", "-f", str(job), "--dry-run").stdout
    assert "- '0x10'" in out and "MASK: '0x1F'" in out and "AT: '12:30'" in out, out


# ---------------------------------------------------------------- every Kubernetes setting from the CLI

def test_config_kubernetes_sets_any_setting_with_set_keeping_the_files_comments(dt: Dtrain):
    """Only seven of config.yaml's Kubernetes settings had a flag (master_port, access_modes, ttl, ...
    had to be typed into the file): --set KEY=VALUE sets any of them, read as YAML reads it and
    checked as the flags' values are; --unset removes any; the user's comments stay."""
    from dtrain.client import Client

    config = dt.home / "config.yaml"
    config.write_text("# mine\nbackend: local  # ours\nkubernetes:\n  context: prod  # the GPU cluster\n")
    out = dt("config", "kubernetes", "--set", "master_port=29501", "--set", "access-modes=[ReadWriteOnce]",
             "--set", "snapshot_watcher=false", "--set", "request_timeout=30.5", "--namespace", "team").stdout
    assert out.startswith("Kubernetes settings saved: "), out
    assert config.read_text().startswith("# mine\nbackend: local  # ours\nkubernetes:\n  context: prod  # the GPU cluster\n")
    k8s = Client(home=dt.home).kubernetes_config()
    assert (k8s.master_port, k8s.access_modes, k8s.snapshot_watcher, k8s.request_timeout, k8s.namespace) == (
        29501, ("ReadWriteOnce",), False, 30.5, "team")
    dt("config", "kubernetes", "--unset", "master-port", "snapshot_watcher")
    assert Client(home=dt.home).kubernetes_config().master_port == 29500
    assert "# the GPU cluster" in config.read_text()
    # every KubernetesConfig field but the project (each command's own) can be set this way
    assert "project" not in Client.kubernetes_settings() and "ttl_seconds_after_finished" in Client.kubernetes_settings()


@pytest.mark.parametrize("argv, needle", [
    (["--set", "master_port=abc"], "invalid Kubernetes master_port 'abc': use a whole number from 1 to 65535"),
    (["--set", "master_port=0x10"], "invalid Kubernetes master_port '0x10': use a whole number from 1 to 65535"),  # as a number flag reads it
    (["--set", "mastr_port=1"], "unknown Kubernetes setting 'mastr_port' (did you mean 'master_port'?)"),
    (["--set", "project=x"], "unknown Kubernetes setting 'project'"),
    (["--set", "master_port"], "--set 'master_port': give KEY=VALUE"),
    (["--set", "context="], "--set context= gives no value: give one, or remove the saved one with --unset context"),
    (["--set", "context=a", "--context", "b"], "context is given both as --context and with --set"),
    (["--set", "a=1", "--set", "a=2"], "--set a is given twice"),
    (["--unset", "mastr-port"], "--unset 'mastr-port': not a Kubernetes setting"),
])
def test_a_bad_set_is_one_line_and_changes_nothing(dt: Dtrain, argv, needle):
    config = dt.home / "config.yaml"
    config.write_text("kubernetes:\n  context: prod  # mine\n")
    assert_usage_error(dt("config", "kubernetes", *argv, check=False), needle)
    assert config.read_text() == "kubernetes:\n  context: prod  # mine\n"


def test_set_is_for_config_kubernetes_only(dt: Dtrain):
    assert_usage_error(dt("config", "sagemaker", "--set", "a=b", check=False),
                       "--set is for 'dtrain config kubernetes', not 'dtrain config sagemaker'")


# ---------------------------------------------------------------- the dashboard's snapshot prompt

@pytest.mark.slow  # a browser, as tests/test_dashboard_browser.py's
def test_the_snapshot_prompt_offers_a_name_that_is_free(home, tmp_path):
    """The name offered was VOLUME-<UTC second> whatever snapshots there were: taken as offered, a second click
    in that second (or a name taken so by the CLI) was the server's 409. It now goes past the names taken, as
    the server's own default does (-2, -3); a name taken meanwhile is still the 409, shown."""
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    browser_tests = pytest.importorskip("test_dashboard_browser")
    if not (browser_tests.CHROMIUM and browser_tests.CHROMEDRIVER):
        pytest.skip("chromium and chromedriver are not installed (scripts/setup.sh installs them)")
    from server_util import ServerProcess, wait_until

    text_of = browser_tests.text_of
    server = ServerProcess(home, cwd=tmp_path)
    dt = server.dtrain()
    try:
        dt("volume", "create", "data", "--size", "1Gi")
        for name in ("data-20260101-000000", "data-20260101-000000-2"):
            dt("snapshot", "create", "data", "--name", name)
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/storage")
            row = "#volumes-table tr[data-volume='data']"
            wait_until(lambda: text_of(browser, row + " button.snapshot") == "Snapshot", what="the volume's button")
            # the page's clock at 2026-01-01 00:00:00 UTC, the second those two were named for
            browser.execute_script("const Real = Date, at = Real.UTC(2026, 0, 1);"
                                   "window.Date = class extends Real { constructor(...a) { super(...(a.length ? a : [at])); } };"
                                   "window.Date.now = () => at;")
            browser.execute_script("document.querySelector(arguments[0]).click()", row + " button.snapshot")
            wait_until(lambda: _alert(browser), what="the prompt")
            browser.switch_to.alert.accept()  # the name offered, as it is
            said = wait_until(lambda: text_of(browser, "#snapshot-message").startswith("Snapshot ")
                              and text_of(browser, "#snapshot-message"), what="the snapshot said")
            assert said.startswith("Snapshot data-20260101-000000-3 of volume data taken"), said
            assert not text_of(browser, "#banner")
            assert dt.json("snapshot", "describe", "data-20260101-000000-3")["volume"] == "data"
    finally:
        server.stop()


def _alert(browser) -> bool:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        return browser.switch_to.alert.text is not None
    except NoAlertPresentException:  # the names taken are still being read
        return False
