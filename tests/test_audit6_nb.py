"""Notebook defects found by the sixth audit (local backend; the real jupyter-server where one runs)."""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path

import pytest

from conftest import Dtrain
from dtrain.backends.local.notebook import taken_by_another


def test_a_port_is_taken_by_another_only_while_something_outside_the_job_holds_it(tmp_path):
    job_dir = tmp_path / "jobs" / "nb"
    job_dir.mkdir(parents=True)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        assert taken_by_another(job_dir, port)  # the job has no process: the listener is another program's
    assert not taken_by_another(job_dir, port)  # closed: free again


def test_notebook_list_names_the_volume_a_notebook_created_as_training_jobs_mount_it(dt: Dtrain):
    """It showed `local:1Gi:/home/jovyan/work`, the flag, not the volume (pvc-NAME-0) to mount elsewhere."""
    dt("volume", "create", "data")
    dt("notebook", "made", "--pvc", "local:1Gi:/home/jovyan/work", "--pvc", "data:/data:ro")
    try:
        created = [v["name"] for v in dt.json("volume", "list")]
        (row,) = [line for line in dt("notebook", "list").stdout.splitlines() if line.startswith("made ")]
        new = next(name for name in created if name != "data")
        assert f"{new}:/home/jovyan/work, data:/data:ro" in row, row
    finally:
        dt("delete", "made")


def test_a_suspended_notebook_says_what_resume_brings_back_not_a_checkpoint(dt: Dtrain):
    """It said "'dtrain resume nb' starts it again from its last checkpoint": a notebook has none."""
    dt("notebook", "paused")
    try:
        dt("suspend", "paused")
        info = dt.json("describe", "job", "paused")
        assert info["status"] == "Suspended" and "checkpoint" not in info["message"], info["message"]
        assert "'dtrain resume paused' starts it again" in info["message"] and "files are kept" in info["message"]
    finally:
        dt("delete", "paused")


@pytest.mark.slow
def test_open_of_a_resumed_notebook_waiting_for_gpus_says_it_waits(dt_gpus: Dtrain):
    """It read the last start's port and said "not serving on port N yet (Jupyter is starting, or another
    program holds the port): see 'dtrain logs q'", whose log was the last start's too."""
    dt = dt_gpus
    dt("notebook", "q", "--gpu", "1")
    try:
        dt.wait_for("q", {"Running"})
        deadline = time.monotonic() + 60
        while not (dt.home / "jobs" / "q" / "notebook.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        dt("suspend", "q")
        dt("notebook", "big", "--gpu", "2")
        dt.wait_for("big", {"Running"})
        dt("resume", "q")
        assert dt.status("q") == "Pending"
        opened = dt("notebook", "open", "q", check=False)
        assert opened.returncode == 2 and opened.stdout == "", opened
        assert opened.stderr.startswith("dtrain: error: notebook 'q' is Pending (") and "port" not in opened.stderr
        assert "once it is Running" in opened.stderr and len(opened.stderr.splitlines()) == 1
    finally:
        dt("delete", "q", "big", check=False)


@pytest.mark.slow  # JupyterLab and a browser: about 20-40 s
@pytest.mark.skipif(not (shutil.which("chromium") and shutil.which("chromedriver")),
                    reason="chromium and chromedriver are not installed (scripts/setup.sh installs them)")
def test_a_file_made_in_jupyterlab_in_a_browser_is_what_a_training_job_and_a_snapshot_read(dt: Dtrain, tmp_path):
    """The Kubeflow notebooks flow, in a real browser: the URL `notebook open` prints opens JupyterLab;
    a file the page saves (as its editor does: a contents API PUT with the page's _xsrf cookie) lands
    on the volume, shows in the page's file browser, a snapshot taken while the notebook runs holds
    it, and a training job mounting the same volume reads it."""
    pytest.importorskip("jupyter_server", reason="notebooks need jupyter-server: pip install 'dtrain[notebook]'")
    from test_dashboard_browser import chrome

    from selenium.webdriver.support.ui import WebDriverWait

    dt("volume", "create", "shared")
    dt("notebook", "lab", "--pvc", "shared:/home/jovyan/work")
    try:
        deadline = time.monotonic() + 90
        while (opened := dt("notebook", "open", "lab", check=False)).returncode != 0:
            assert time.monotonic() < deadline and dt.status("lab") in ("Pending", "Running"), opened.stderr
            time.sleep(0.3)
        url = opened.stdout.strip()
        assert url.startswith("http://127.0.0.1:") and "token=" in url
        with chrome() as driver:
            driver.get(url)
            WebDriverWait(driver, 60).until(lambda d: d.execute_script(
                "return !!document.querySelector('.jp-DirListing-content')"))
            assert "/lab" in driver.current_url and "JupyterLab" in driver.title
            saved = driver.execute_async_script(
                "const done = arguments[arguments.length - 1];"
                "const xsrf = decodeURIComponent((document.cookie.match(/_xsrf=([^;]+)/) || [, ''])[1]);"
                "fetch('/api/contents/notes.txt', {method: 'PUT', headers: {'Content-Type': 'application/json',"
                " 'X-XSRFToken': xsrf}, body: JSON.stringify({type: 'file', format: 'text',"
                " content: 'written in the browser\\n'})}).then(r => done(r.status), e => done(String(e)));")
            assert saved == 201, saved
            driver.refresh()  # the file browser lists the volume's folder
            WebDriverWait(driver, 60).until(lambda d: "notes.txt" in d.execute_script(
                "return Array.from(document.querySelectorAll('.jp-DirListing-itemName'))"
                ".map(e => e.innerText.trim())"))
        snap = dt.json("snapshot", "create", "shared", "--name", "while-open")
        assert snap["name"] == "while-open" and dt.status("lab") == "Running"
        dt("submit", "reader", "--pvc", "shared:/data:ro", "--", "cat", "/data/notes.txt")
        assert dt.wait_for("reader", {"Succeeded", "Failed"})["status"] == "Succeeded"
        assert "written in the browser" in dt("logs", "reader").stdout
        dt("snapshot", "restore", "while-open", "--to", "copy")
        restored = dt.json("volume", "describe", "copy")
        assert (Path(restored["extra"]["path"]) / "notes.txt").read_text() == "written in the browser\n"
    finally:
        dt("delete", "lab", check=False)


@pytest.mark.slow
def test_a_notebook_whose_supervisor_was_killed_names_a_way_back_it_takes(dt: Dtrain):
    """It said "no restarts left (--max-restarts 0)": `dtrain notebook` takes no --max-restarts."""
    import signal

    from test_fault_tolerance import supervisor_pid

    dt("notebook", "crashed")
    try:
        dt.wait_for("crashed", {"Running"})
        os.kill(supervisor_pid(dt.home, "crashed"), signal.SIGKILL)  # Jupyter dies with it (bwrap --die-with-parent)
        deadline = time.monotonic() + 30
        while "Failed" not in dt("notebook", "list").stdout:  # `notebook list` finds it lost, as `list` does
            assert time.monotonic() < deadline
            time.sleep(0.2)
        message = dt.json("describe", "job", "crashed")["message"]
        assert message.startswith("lost: ") and "--max-restarts" not in message, message
        assert "'dtrain delete crashed'" in message and "'dtrain notebook crashed ...'" in message
        dt("delete", "crashed")
        dt("notebook", "crashed")  # as the message says
        dt.wait_for("crashed", {"Running"})
    finally:
        dt("delete", "crashed", check=False)
