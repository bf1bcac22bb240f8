"""Notebook defects found by use: the URL handed out before Jupyter listens, `notebook list`'s scope,
the actions' own names in their errors. The real jupyter-server runs, held back by its own config."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import Dtrain, assert_usage_error

pytest.importorskip("jupyter_server", reason="notebooks need jupyter-server: pip install 'dtrain[notebook]'")

# Jupyter loads this before it binds its port: it waits for the test's go-ahead (at most 120 s).
HOLD = """import os, time
deadline = time.monotonic() + 120
while not os.path.exists(os.environ["NB_TEST_GO"]) and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def _port(dt: Dtrain, name: str, timeout: float = 60) -> int:
    access = dt.home / "jobs" / name / "notebook.json"
    deadline = time.monotonic() + timeout
    while not access.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return json.loads(access.read_text())["port"]


@pytest.mark.slow  # Jupyter started twice: about 30 s
def test_open_never_hands_out_a_port_another_program_took_before_jupyter_bound_it(home, tmp_path):
    config, go = tmp_path / "jupyter-config", tmp_path / "go"
    config.mkdir()
    (config / "jupyter_server_config.py").write_text(HOLD)
    dt = Dtrain(home, env={"JUPYTER_CONFIG_DIR": str(config), "NB_TEST_GO": str(go)})
    try:
        dt("notebook", "held")
        port = _port(dt, "held")
        early = dt("notebook", "open", "held", "--wait", "0", check=False)  # Jupyter is not listening yet
        assert early.returncode == 2 and early.stdout == "" and "not serving on port" in early.stderr
        with socket.socket() as squatter:  # another program takes the port before Jupyter binds it
            squatter.bind(("127.0.0.1", port))
            squatter.listen()
            taken = dt("notebook", "open", "held", "--wait", "0", check=False)
            assert taken.returncode == 2 and "token" not in taken.stdout + taken.stderr  # never sent to it
            assert "another program holds the port" in taken.stderr and len(taken.stderr.splitlines()) == 1
            go.touch()
            # Jupyter could not bind it; as Kubeflow's controller starts a notebook's pod again, the
            # supervisor starts Jupyter again on a new port (it was Failed for good: "rank 0 exited")
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                opened = dt("notebook", "open", "held", "--wait", "0", check=False)
                if opened.returncode == 0 or dt.json("describe", "job", "held")["status"] != "Running":
                    break
                time.sleep(0.5)
            assert opened.returncode == 0, (opened.stderr, dt.json("describe", "job", "held"))
        url = opened.stdout.strip()
        assert f":{port}/" not in url and _port(dt, "held") != port
        with urllib.request.urlopen(url.replace("/?", "/api/status?"), timeout=10) as resp:
            assert resp.status == 200
        job = dt.json("describe", "job", "held")
        assert job["status"] == "Running" and job["restarts"] == 0, job
        assert any(f"another program took port {port}" in e["message"] for e in job["events"]), job["events"]
    finally:
        go.touch()
        dt("delete", "held", check=False)


@pytest.mark.slow
def test_notebook_list_shows_the_projects_dtrain_list_shows(dt: Dtrain):
    """`dtrain notebook list` lists what `dtrain list` lists (the configured project; -p one; -A all),
    and a project that does not exist is an error there as here, not an empty table."""
    dt("project", "create", "team")
    dt("notebook", "mine")
    dt("notebook", "theirs", "-p", "team")
    try:
        assert [n["name"] for n in dt.json("notebook", "list")] == ["mine"]
        assert [j["name"] for j in dt.json("list")] == ["mine"]
        assert [n["name"] for n in dt.json("notebook", "list", "-p", "team")] == ["theirs"]
        assert sorted(n["name"] for n in dt.json("notebook", "list", "-A")) == ["mine", "theirs"]
        for project in ("nope", ""):
            typo = dt("notebook", "list", "-p", project, check=False)
            assert typo.returncode == 2 and typo.stdout == "" and len(typo.stderr.splitlines()) == 1
            assert "project" in typo.stderr and "Traceback" not in typo.stderr
    finally:
        dt("delete", "mine")
        dt("delete", "theirs")


def test_an_action_missing_its_argument_names_itself(dt: Dtrain):
    for action in ("open", "start"):
        proc = dt("notebook", action, check=False)
        assert proc.returncode == 2 and proc.stderr == (
            f"dtrain notebook {action}: error: the following arguments are required: name "
            f"(see 'dtrain notebook {action} --help')\n")


def _put(base: str, path: str, content: str) -> tuple[int, str]:
    req = urllib.request.Request(f"{base}/api/contents/{path}", method="PUT", headers={"Authorization": "token tok"},
                                 data=json.dumps({"type": "file", "format": "text", "content": content}).encode())
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.fixture
def volume_jupyter(tmp_path):
    """The real jupyter-server with dtrain's contents manager, rooted at a folder like a volume."""
    root, runtime = tmp_path / "volume", tmp_path / "runtime"
    root.mkdir()
    env = {**os.environ, "JUPYTER_TOKEN": "tok", "JUPYTER_RUNTIME_DIR": str(runtime),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_DATA_DIR": str(tmp_path / "data")}
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "jupyter-server"), "--ServerApp.ip=127.0.0.1", "--ServerApp.port=0",
         "--ServerApp.open_browser=False", "--ServerApp.allow_root=True", f"--ServerApp.root_dir={root}",
         "--ServerApp.contents_manager_class=dtrain.backends.local.notebook.VolumeContentsManager"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline, info = time.monotonic() + 60, None
        while info is None:  # Jupyter's own record of where it serves, once it is whole
            assert server.poll() is None and time.monotonic() < deadline, server.stderr and server.stderr.read()
            try:
                info = json.loads(next(runtime.glob("jpserver-*.json")).read_text())
            except (StopIteration, ValueError):
                time.sleep(0.1)
        base = f"http://127.0.0.1:{info['port']}"
        while True:  # its record is written just before it listens
            try:
                urllib.request.urlopen(f"{base}/api/status?token=tok", timeout=10).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        yield root, base
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
def test_saving_on_a_shared_volume_replaces_the_file_and_never_writes_through_a_link(volume_jupyter, tmp_path):
    root, base = volume_jupyter
    outside = tmp_path / "outside.txt"  # e.g. the user's ~/.bashrc
    outside.write_text("the user's own file\n")
    (root / "notes.txt").symlink_to(outside)  # left by a job or a teammate's notebook on the volume
    (root / "linked").symlink_to(tmp_path)
    secret = root / "secret.txt"
    secret.write_text("old\n")
    secret.chmod(0o600)
    (root / ".~secret.txt").symlink_to(outside)  # at the name of Jupyter's own backup copy

    assert _put(base, "notes.txt", "saved\n")[0] == 200
    assert (root / "notes.txt").read_text() == "saved\n" and not (root / "notes.txt").is_symlink()
    code, answer = _put(base, "linked/outside.txt", "saved\n")
    assert code == 403 and "linked is reached through a link" in answer

    with open(secret) as reader:  # a job reading the file while the notebook saves it
        assert _put(base, "secret.txt", "new\n")[0] == 200
        assert reader.read() == "old\n"  # the old file whole, never a truncated one
    assert secret.read_text() == "new\n" and stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert outside.read_text() == "the user's own file\n"

    req = urllib.request.Request(f"{base}/api/contents/secret.txt/checkpoints", method="POST",
                                 headers={"Authorization": "token tok"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 201
    checkpoint = root / ".ipynb_checkpoints" / "secret-checkpoint.txt"
    assert checkpoint.read_text() == "new\n" and stat.S_IMODE(checkpoint.stat().st_mode) == 0o600
    left = sorted(p.name for p in root.iterdir())
    assert left == [".ipynb_checkpoints", ".~secret.txt", "linked", "notes.txt", "secret.txt"]  # no temporary file


def _open_url(dt: Dtrain, name: str, timeout: float = 60) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    while (opened := dt("notebook", "open", name, check=False)).returncode != 0:
        assert time.monotonic() < deadline and dt.status(name) in ("Pending", "Running"), opened.stderr
        time.sleep(0.2)
    url = opened.stdout.strip()
    return url.split("/?")[0], url.split("token=")[1]


def _shell_cwds(parent: int) -> list[str]:
    """The working folders of `parent`'s child processes that are shells (a Jupyter terminal's)."""
    cwds = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and _parent(int(p.name)) == parent and \
                    (p / "comm").read_text().strip() in ("bash", "sh", "dash", "zsh"):
                cwds.append(os.readlink(p / "cwd"))
        except OSError:
            continue  # it ended meanwhile
    return cwds


@pytest.mark.slow
def test_a_notebook_on_a_volume_works_in_it_not_in_the_callers_folder(dt: Dtrain, tmp_path):
    """A Kubeflow notebook's terminal opens in its workspace volume: here too, not where
    `dtrain notebook` was typed (a folder that may hold the dtrain home and its server token)."""
    caller = tmp_path / "caller"
    caller.mkdir()
    dt("volume", "create", "work")
    dt("notebook", "nbw", "--pvc", "work:/home/jovyan/work", cwd=caller)
    try:
        assert dt.json("describe", "job", "nbw")["extra"]["cwd"] == "/home/jovyan/work"
        base, token = _open_url(dt, "nbw")
        req = urllib.request.Request(f"{base}/api/terminals", method="POST", data=b"{}",
                                     headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
        runtime = dt.home / "jobs" / "nbw" / "jupyter"
        (server,) = [json.loads(p.read_text())["pid"] for p in runtime.glob("jpserver-*.json")]
        # the terminal's shell, among the server's children (others come and go: one gone between the
        # listing and its readlink failed the test on CI)
        deadline = time.monotonic() + 30
        while not (cwds := _shell_cwds(server)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cwds and set(cwds) == {"/home/jovyan/work"}, cwds
    finally:
        dt("delete", "nbw")


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def test_a_flag_before_the_name_says_where_it_goes(dt: Dtrain):
    """`dtrain notebook --pvc V:/M nb` said 'unrecognized arguments: --pvc nb', as if --pvc were not a flag."""
    for flag in ("--pvc", "--gpu", "-p"):
        proc = dt("notebook", flag, "x", "nb", check=False)
        assert proc.returncode == 2 and proc.stderr.startswith(f"dtrain notebook: error: put {flag} after the "
                                                               f"notebook's name (or the action): dtrain notebook NAME")
        assert len(proc.stderr.splitlines()) == 1
    assert dt.json("list", "-A") == []


def test_a_notebook_name_that_breaks_the_rule_is_called_a_notebook_name(dt: Dtrain):
    refused = dt("notebook", "Bad_Name", check=False)
    assert_usage_error(refused, "invalid notebook name 'Bad_Name': use 1-53 lower-case letters")
