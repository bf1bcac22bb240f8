"""A notebook is a local job running a real jupyter-server on a volume, reached over HTTP with its token."""

from __future__ import annotations

import json
import os
import stat
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, parse_qs

import pytest

from conftest import Dtrain

pytest.importorskip("jupyter_server", reason="notebooks need jupyter-server: pip install 'dtrain[notebook]'")


def _request(url: str, *, method: str = "GET", token: str | None = None, body: dict | None = None):
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"token {token}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, None


def _wait_serving(base: str, token: str, dt: Dtrain, name: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if _request(f"{base}/api/status", token=token)[0] == 200:
                return
        except OSError:
            pass
        assert dt.status(name) in ("Pending", "Running"), dt("logs", name, check=False).stdout
        time.sleep(0.5)
    raise AssertionError(f"notebook {name} never answered at {base}:\n{dt('logs', name, check=False).stdout}")


def _opened(dt: Dtrain, name: str) -> tuple[str, str]:
    """(base URL, token) that `dtrain notebook open NAME` prints once the notebook serves."""
    deadline = time.monotonic() + 30
    while (opened := dt("notebook", "open", name, check=False)).returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    url = urlsplit(opened.stdout.strip())
    return f"{url.scheme}://{url.netloc}", parse_qs(url.query)["token"][0]


def torch_version() -> str:
    import torch
    return torch.__version__.split("+")[0]


def _start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), None when there is no such process: a pid
    alone could name a later process."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _run_in_kernel(connection_file: Path, code: str) -> tuple[int, str]:
    """Run `code` in a running kernel through its connection file; (kernel pid, the rest of stdout)."""
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=str(connection_file))
    client.load_connection_file()
    # No heartbeat: a beat missed while the kernel starts (its first IPython start on a new volume
    # makes its profile there) reads as "Kernel died"; the kernel_info wait below has its timeout.
    client.start_channels(hb=False)
    out: list[str] = []
    try:
        client.wait_for_ready(timeout=90)
        reply = client.execute_interactive(
            code, timeout=90,
            output_hook=lambda msg: out.append(msg["content"]["text"]) if msg["msg_type"] == "stream" else None)
    finally:
        client.stop_channels()
    assert reply["content"]["status"] == "ok", reply["content"]
    pid, rest = "".join(out).split(" ", 1)
    return int(pid), rest


@pytest.mark.slow
def test_notebook_writes_to_the_volume_a_job_then_reads(dt: Dtrain):
    dt("volume", "create", "work")
    out = dt("notebook", "nb", "--pvc", "work:/home/jovyan/work", "--cpu", "1").stdout
    assert "dtrain notebook open nb" in out
    dt.wait_for("nb", {"Running"})
    base, token = _opened(dt, "nb")
    assert urlsplit(base).hostname == "127.0.0.1" and len(token) >= 32

    access = dt.home / "jobs" / "nb" / "notebook.json"
    assert stat.S_IMODE(os.lstat(access).st_mode) == 0o600  # only the user reads the token
    _wait_serving(base, token, dt, "nb")

    # No token, a wrong token: refused. The right token: the contents API writes into the volume.
    assert _request(f"{base}/api/contents/") [0] in (401, 403)
    assert _request(f"{base}/api/contents/", token="x" * 43)[0] in (401, 403)
    code, model = _request(f"{base}/api/contents/notes.txt", method="PUT", token=token,
                           body={"type": "file", "format": "text", "content": "written in jupyter\n"})
    assert code == 201 and model["path"] == "notes.txt"
    volume = Path(dt.json("volume", "describe", "work")["extra"]["path"])
    assert (volume / "notes.txt").read_text() == "written in jupyter\n"
    assert not Path("/home/jovyan/work/notes.txt").exists()  # written through the job's mount only

    listed = dt.json("notebook", "list")
    assert [(n["name"], n["status"], n["spec"]["notebook"]) for n in listed] == [("nb", "Running", True)]
    assert token not in dt("logs", "nb").stdout  # the token stays out of the world-readable logs
    # The user's workspace, as their shell: its terminal sees the volumes where dtrain keeps them (a
    # `dtrain snapshot create` run there reads them), where a training job sees only its own.
    assert "work" in dt("exec", "nb", "--", "ls", str(dt.home / "volumes")).stdout.split()

    dt("submit", "reader", "--pvc", "work:/mnt:ro", "--", "python", "-c", "print(open('/mnt/notes.txt').read(), end='')")
    assert dt.wait_for("reader", {"Succeeded", "Failed"})["status"] == "Succeeded"
    assert dt("logs", "reader").stdout == "written in jupyter\n"

    # JupyterLab's page, and a Python kernel (ipykernel, this machine's Python with torch) that
    # runs where Jupyter does: in the volume's folder, inside the job's mount namespace.
    with urllib.request.urlopen(urllib.request.Request(f"{base}/lab", headers={"Authorization": f"token {token}"}),
                                timeout=30) as page:
        assert page.status == 200 and b"JupyterLab" in page.read()
    code, kernel = _request(f"{base}/api/kernels", method="POST", token=token, body={"name": "python3"})
    assert code == 201, kernel
    pid, seen = _run_in_kernel(dt.home / "jobs" / "nb" / "jupyter" / f"kernel-{kernel['id']}.json",
                               "import os, torch; print(os.getpid(), torch.__version__.split('+')[0], "
                               "open('notes.txt').read(), end='')")
    assert seen == f"{torch_version()} written in jupyter\n"
    kernel_start = _start_time(pid)
    assert kernel_start is not None

    dt("delete", "nb")
    assert dt.status("nb") == "Deleted"
    with pytest.raises(OSError):
        _request(f"{base}/api/status", token=token)
    deadline = time.monotonic() + 30  # the kernel goes with its notebook
    while _start_time(pid) == kernel_start and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _start_time(pid) != kernel_start, f"kernel {pid} outlived its notebook"
    refused = dt("notebook", "open", "nb", check=False)
    assert refused.returncode == 2 and "Deleted" in refused.stderr


def test_open_refuses_a_training_job_and_the_notebook_flags_it_cannot_take(dt: Dtrain):
    dt("submit", "train", "--", "python", "-c", "pass")
    refused = dt("notebook", "open", "train", check=False)
    assert refused.returncode == 2 and "is not a notebook" in refused.stderr
    missing = dt("notebook", "nb", "--pvc", "nothere:/home/jovyan/work", check=False)
    assert missing.returncode == 2 and "nothere" in missing.stderr
    assert dt.json("notebook", "list") == []


@pytest.mark.slow
def test_a_notebook_holds_its_gpus_against_the_quota_until_deleted(dt_gpus: Dtrain):
    dt = dt_gpus
    dt("project", "create", "team", "--gpu-quota", "1")
    dt("notebook", "nbq", "-p", "team", "--gpu", "1")
    assert dt.wait_for("nbq", {"Running"})["gpus_allocated"] == 1
    dt("submit", "train", "-p", "team", "--gpu", "1", "--", "true")
    time.sleep(2)
    assert dt.status("train") == "Pending"  # the notebook never ends: its GPU stays taken
    dt("delete", "nbq")
    assert dt.wait_for("train", {"Succeeded", "Failed"})["status"] == "Succeeded"


def test_notebook_list_hides_deleted_notebooks_as_dtrain_list_hides_deleted_jobs(dt: Dtrain):
    dt("notebook", "gone")
    dt("notebook", "kept")
    dt("delete", "gone")
    assert [n["name"] for n in dt.json("notebook", "list")] == ["kept"]
    assert "gone" not in dt("notebook", "list").stdout
    shown = {n["name"]: n["status"] for n in dt.json("notebook", "list", "--show-deleted")}
    assert shown["gone"] == "Deleted" and shown["kept"] in ("Pending", "Running")
    assert [j["name"] for j in dt.json("list")] == ["kept"]  # the same rule as the job list
    dt("delete", "kept")


@pytest.mark.slow
def test_a_notebook_without_a_volume_serves_an_empty_folder_of_its_own_not_the_callers(dt: Dtrain, tmp_path):
    caller = tmp_path / "caller"
    caller.mkdir()
    (caller / "private.txt").write_text("not for jupyter\n")
    dt("notebook", "bare", cwd=caller)
    dt.wait_for("bare", {"Running"})
    try:
        base, token = _opened(dt, "bare")
        _wait_serving(base, token, dt, "bare")
        code, root = _request(f"{base}/api/contents/", token=token)
        assert code == 200 and root["content"] == []  # a new, empty folder: nothing of the caller's
        work = dt.home / "jobs" / "bare" / "work"
        assert work.is_dir() and dt.json("describe", "job", "bare")["extra"]["cwd"] == str(work)
    finally:
        dt("delete", "bare")


@pytest.mark.slow
def test_a_notebook_started_again_with_a_deleted_ones_name_keeps_its_files(dt: Dtrain):
    """`dtrain delete NAME` then `dtrain notebook NAME` again: the earlier notebook's own folder is kept
    and served again (Kubeflow keeps a deleted notebook's workspace volume); --purge removes it."""
    dt("notebook", "again")
    work = dt.home / "jobs" / "again" / "work"
    dt.wait_for("again", {"Running"})
    (work / "analysis.ipynb").write_text("{}\n")
    dt("delete", "again")
    dt("notebook", "again")
    dt.wait_for("again", {"Running"})
    try:
        assert (work / "analysis.ipynb").read_text() == "{}\n"
        base, token = _opened(dt, "again")
        _wait_serving(base, token, dt, "again")
        code, root = _request(f"{base}/api/contents/", token=token)
        assert code == 200 and [f["name"] for f in root["content"]] == ["analysis.ipynb"]
        assert not any(p.name.startswith(".again") for p in (dt.home / "jobs").iterdir())  # nothing left aside
    finally:
        dt("delete", "again")
    assert work.is_dir()
    dt("delete", "again", "--purge")
    assert not work.exists()


def test_a_notebook_whose_jupyter_died_names_a_way_back_that_works(dt: Dtrain):
    """It said 'start it again with dtrain notebook nb ...', which then refused the taken name."""
    import signal

    from conftest import rank_record

    dt("notebook", "died")
    dt.wait_for("died", {"Running"})
    (dt.home / "jobs" / "died" / "work" / "notes.txt").write_text("kept\n")
    os.kill(rank_record(dt.home, "died", 0)["pid"], signal.SIGKILL)
    dt.wait_for("died", {"Failed"})
    opened = dt("notebook", "open", "died", check=False)
    assert opened.returncode != 0 and opened.stderr == (
        "dtrain: error: notebook 'died' is Failed: delete it ('dtrain delete died', which keeps its files on its "
        "volume or in its own work folder), then start it again ('dtrain notebook died ...')\n"), opened.stderr
    dt("delete", "died")
    dt("notebook", "died")  # as the line says
    try:
        dt.wait_for("died", {"Running"})
        assert (dt.home / "jobs" / "died" / "work" / "notes.txt").read_text() == "kept\n"
    finally:
        dt("delete", "died")


@pytest.mark.slow
def test_a_notebooks_home_is_its_workspace_kept_over_a_suspend_and_read_by_jobs(dt: Dtrain, tmp_path):
    """HOME was the host user's: Jupyter's and IPython's files, and what a user keeps in ~/, went
    there, off the volume, unseen by jobs. It is the workspace volume's mount path, as a Kubeflow
    notebook's home (/home/jovyan) is its workspace volume."""
    host_home = tmp_path / "host-home"
    host_home.mkdir()
    user = Dtrain(dt.home, env={"HOME": str(host_home)})
    user("volume", "create", "ws")
    user("notebook", "nbh", "--pvc", "ws:/home/jovyan")
    volume = Path(user.json("volume", "describe", "ws")["extra"]["path"])

    def in_a_kernel(code: str) -> str:
        user.wait_for("nbh", {"Running"})
        base, token = _opened(user, "nbh")
        _wait_serving(base, token, user, "nbh")
        status, kernel = _request(f"{base}/api/kernels", method="POST", token=token, body={"name": "python3"})
        assert status == 201, kernel
        return _run_in_kernel(dt.home / "jobs" / "nbh" / "jupyter" / f"kernel-{kernel['id']}.json",
                              f"import os, pathlib; print(os.getpid(), {code}, end='')")[1]

    try:
        seen = in_a_kernel("os.environ['HOME'], os.getcwd(), "
                           "pathlib.Path('~/.config/tool.ini').expanduser().parent.mkdir(parents=True), "
                           "pathlib.Path('~/.config/tool.ini').expanduser().write_text('kept\\n')")
        assert seen == "/home/jovyan /home/jovyan None 5"
        assert (volume / ".config" / "tool.ini").read_text() == "kept\n"
        assert (volume / ".ipython").is_dir()  # the kernel's own ~/ files are on the volume too
        assert list(host_home.iterdir()) == []  # and nothing of the notebook's is in the host user's home
        user("suspend", "nbh")
        user.wait_for("nbh", {"Suspended"})
        user("resume", "nbh")
        assert in_a_kernel("pathlib.Path('~/.config/tool.ini').expanduser().read_text()") == "kept\n"
    finally:
        user("delete", "nbh")
    user("submit", "reader", "--pvc", "ws:/home/jovyan", "--",
         "python", "-c", "print(open('/home/jovyan/.config/tool.ini').read(), end='')")
    assert user.wait_for("reader", {"Succeeded", "Failed"})["status"] == "Succeeded"
    assert user("logs", "reader").stdout == "kept\n"


@pytest.mark.slow
def test_open_right_after_start_waits_for_jupyter_to_serve(dt: Dtrain):
    """`dtrain notebook NAME`, then `dtrain notebook open NAME` as its line says: open refused ("not
    serving on port N yet") for the seconds Jupyter takes to listen; it waits for it (--wait)."""
    dt("notebook", "quick")
    try:
        url = dt("notebook", "open", "quick").stdout.strip()
        with urllib.request.urlopen(url.replace("/?", "/api/status?"), timeout=10) as resp:
            assert resp.status == 200
        dt("suspend", "quick")
        refused = dt("notebook", "open", "quick", check=False)  # not Running: refused, never waited on
        assert refused.returncode == 2 and refused.stderr == (
            "dtrain: error: notebook 'quick' is Suspended: start it again with 'dtrain resume quick'\n")
        for typed in ("2h", "3601", "-1", "x", "1e400"):
            bad = dt("notebook", "open", "quick", "--wait", typed, check=False)
            assert bad.returncode == 2 and bad.stderr.startswith(f"dtrain: error: invalid --wait '{typed}': use seconds "
                                                                 f"from 0 to 3600"), bad.stderr
            assert len(bad.stderr.splitlines()) == 1
    finally:
        dt("delete", "quick")


def test_a_notebooks_home_in_its_launch_plan(tmp_path):
    """Its workspace (the first volume's mount path, else its own folder) unless -e HOME says otherwise;
    DTRAIN_HOME pinned, so dtrain in its terminal finds the home it found through the host's ~/.dtrain."""
    from dtrain.backends.local.launch import Mount, plan
    from dtrain.spec import notebook_spec

    job_dir = tmp_path / "home" / "jobs" / "nb"
    mounts = [Mount(source=tmp_path / "ws", target="/home/jovyan/work"), Mount(source=tmp_path / "d", target="/data")]

    def env(spec, cwd):
        return plan(spec, job_dir=job_dir, cwd=cwd, mounts=mounts if spec.volumes else [], devices=[[]],
                    master_port=1, notebook_token="t").env

    on_volume = env(notebook_spec("nb", volumes=["ws:/home/jovyan/work", "d:/data"]), "/home/jovyan/work")
    assert (on_volume["HOME"], on_volume["DTRAIN_HOME"]) == ("/home/jovyan/work", str(tmp_path / "home"))
    assert env(notebook_spec("nb"), str(job_dir / "work"))["HOME"] == str(job_dir / "work")
    assert env(notebook_spec("nb", env={"HOME": "/tmp/mine"}), str(job_dir / "work"))["HOME"] == "/tmp/mine"


def test_a_notebook_without_jupyterlab_installed_names_the_extra():
    from dtrain.backends.local.launch import check_tools
    from dtrain.errors import EnvironmentError_
    from dtrain.spec import JobSpec, notebook_spec

    assert notebook_spec("nb").command[0] == "jupyter-lab"
    missing = JobSpec(name="nb", command=("jupyter-lab-not-installed",), notebook=True)
    with pytest.raises(EnvironmentError_, match=r"^notebooks run JupyterLab \(jupyter-lab-not-installed\), which is "
                                                r"not installed here: pip install 'dtrain\[notebook\]'"):
        check_tools(missing, cwd="/", path="/nonexistent")


# ------------------------------------------------------------------ --idle-timeout


def test_idle_is_judged_by_kernels_and_terminals_not_requests():
    from dtrain.backends.local.notebook import idle_check_interval, last_activity

    started = 1_000.0
    assert last_activity([], [], started) == started  # nothing ran yet: idle since the start
    kernels = [{"execution_state": "idle", "last_activity": "2026-12-04T10:00:00.5Z"},
               {"execution_state": "idle", "last_activity": "2026-12-04T09:00:00Z"}]
    terminals = [{"name": "1", "last_activity": "2026-12-04T10:30:00+00:00"}]
    assert last_activity(kernels, [], started) == 1_796_378_400.5
    assert last_activity(kernels, terminals, started) == 1_796_380_200.0
    assert last_activity([*kernels, {"execution_state": "busy", "last_activity": "2026-12-04T08:00:00Z"}],
                         terminals, started) is None  # a long cell is activity
    assert last_activity([{"execution_state": "starting"}], [], started) is None
    assert last_activity(["junk", {"last_activity": "not a time"}, {"last_activity": 5}], [], started) == started
    assert idle_check_interval(60) == 15 and idle_check_interval(86400) == 60


def test_idle_timeout_flag_spec_and_api_bounds(dt: Dtrain):
    from dtrain.cli.format import parse_duration
    from dtrain.errors import SpecError
    from dtrain.spec import JobSpec, notebook_spec

    assert [parse_duration(x) for x in ("90s", "30m", "1.5h", "2d", "3600", "1.1h")] == [
        90, 1800, 5400, 172800, 3600, 3960]  # exactly: 1.1h is not 3960.0000000000005
    assert parse_duration("1e9") == 10**9  # seconds as any number flag reads them; the bound refuses it
    for bad in ("", "1w", "-5m", "5 m"):
        assert parse_duration(bad) is None
    assert notebook_spec("nb", idle_timeout=3600).idle_timeout == 3600
    for bad in (59, 30 * 86400 + 1, True, 60.5):
        with pytest.raises(SpecError, match=r"^invalid idle_timeout .*: use a whole number of seconds from 60"):
            notebook_spec("nb", idle_timeout=bad)
        with pytest.raises(SpecError, match=r"^invalid --idle-timeout .* \(seconds\): give 1m to 30d"):
            notebook_spec("nb", idle_timeout=bad, door="cli")
    with pytest.raises(SpecError, match="idle_timeout stops an idle notebook"):
        JobSpec(name="train", command=("true",), idle_timeout=600)
    refused = dt("notebook", "nb", "--idle-timeout", "10s", check=False)
    assert refused.returncode == 2 and "invalid --idle-timeout '10s': give 1m to 30d" in refused.stderr, \
        refused.stderr
    assert dt.json("notebook", "list") == []


def test_kubernetes_refuses_a_per_notebook_idle_timeout():
    from dtrain.backends.kubernetes.config import KubernetesConfig
    from dtrain.backends.kubernetes.render import resource_for
    from dtrain.errors import SpecError
    from dtrain.spec import notebook_spec

    with pytest.raises(SpecError, match="Kubeflow's notebook controller stops idle notebooks for the whole cluster"):
        resource_for(notebook_spec("nb", idle_timeout=3600), KubernetesConfig())


@pytest.mark.slow
def test_an_idle_notebook_stops_by_itself_and_frees_its_gpu(dt_gpus: Dtrain):
    """--idle-timeout 1m: a kernel runs a cell, then nothing runs; the notebook is Suspended with
    the reason, its kernel goes, and a job waiting for its GPU starts; `dtrain resume` serves it again."""
    dt = dt_gpus
    dt("project", "create", "team", "--gpu-quota", "1")
    dt("notebook", "idle", "-p", "team", "--gpu", "1", "--idle-timeout", "1m")
    dt.wait_for("idle", {"Running"})
    base, token = _opened(dt, "idle")
    _wait_serving(base, token, dt, "idle")
    code, kernel = _request(f"{base}/api/kernels", method="POST", token=token, body={"name": "python3"})
    assert code == 201, kernel
    pid, _ = _run_in_kernel(dt.home / "jobs" / "idle" / "jupyter" / f"kernel-{kernel['id']}.json",
                            "import os; print(os.getpid(), 'ran', end='')")
    kernel_start = _start_time(pid)
    ran = time.time()
    dt("submit", "waiting", "-p", "team", "--gpu", "1", "--", "true")
    for _ in range(4):  # requests alone (as an open JupyterLab tab makes) are not activity
        time.sleep(5)
        assert _request(f"{base}/api/kernels", token=token)[0] == 200
    info = dt.wait_for("idle", {"Suspended", "Succeeded", "Failed"}, timeout=180)
    assert info["status"] == "Suspended", info  # as Kubeflow's culler stops a notebook: it can start again
    assert "no kernel or terminal ran for 60 s (--idle-timeout)" in info["message"], info["message"]
    assert info["message"].endswith("'dtrain resume idle -p team' starts it again"), info["message"]
    assert time.time() - ran >= 60
    deadline = time.monotonic() + 60  # recorded first, then stopped (as `dtrain suspend` does)
    while _start_time(pid) == kernel_start and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _start_time(pid) != kernel_start  # the kernel went with it
    assert dt.wait_for("waiting", {"Succeeded", "Failed"})["status"] == "Succeeded"  # the GPU was freed
    dt("resume", "idle")
    dt.wait_for("idle", {"Running"})
    base, token = _opened(dt, "idle")
    _wait_serving(base, token, dt, "idle")  # Jupyter again, on the same folder
    dt("delete", "idle")
