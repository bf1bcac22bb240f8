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


@pytest.mark.slow
def test_notebook_writes_to_the_volume_a_job_then_reads(dt: Dtrain):
    dt("volume", "create", "work")
    out = dt("notebook", "nb", "--pvc", "work:/home/jovyan/work", "--cpu", "1").stdout
    assert "dtrain notebook open nb" in out
    dt.wait_for("nb", {"Running"})
    deadline = time.monotonic() + 30
    while (opened := dt("notebook", "open", "nb", check=False)).returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    url = urlsplit(opened.stdout.strip())
    token = parse_qs(url.query)["token"][0]
    base = f"{url.scheme}://{url.netloc}"
    assert url.hostname == "127.0.0.1" and len(token) >= 32

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

    dt("submit", "reader", "--pvc", "work:/mnt:ro", "--", "python", "-c", "print(open('/mnt/notes.txt').read(), end='')")
    assert dt.wait_for("reader", {"Succeeded", "Failed"})["status"] == "Succeeded"
    assert dt("logs", "reader").stdout == "written in jupyter\n"

    dt("delete", "nb")
    assert dt.status("nb") == "Deleted"
    with pytest.raises(OSError):
        _request(f"{base}/api/status", token=token)
    refused = dt("notebook", "open", "nb", check=False)
    assert refused.returncode == 2 and "Deleted" in refused.stderr


def test_open_refuses_a_training_job_and_the_notebook_flags_it_cannot_take(dt: Dtrain):
    dt("submit", "train", "--", "python", "-c", "pass")
    refused = dt("notebook", "open", "train", check=False)
    assert refused.returncode == 2 and "is not a notebook" in refused.stderr
    missing = dt("notebook", "nb", "--pvc", "nothere:/home/jovyan/work", check=False)
    assert missing.returncode == 2 and "nothere" in missing.stderr
    assert dt.json("notebook", "list") == []


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


def test_a_notebook_without_a_volume_serves_an_empty_folder_of_its_own_not_the_callers(dt: Dtrain, tmp_path):
    caller = tmp_path / "caller"
    caller.mkdir()
    (caller / "private.txt").write_text("not for jupyter\n")
    dt("notebook", "bare", cwd=caller)
    dt.wait_for("bare", {"Running"})
    try:
        deadline = time.monotonic() + 30
        while (opened := dt("notebook", "open", "bare", check=False)).returncode != 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        url = urlsplit(opened.stdout.strip())
        token, base = parse_qs(url.query)["token"][0], f"{url.scheme}://{url.netloc}"
        _wait_serving(base, token, dt, "bare")
        code, root = _request(f"{base}/api/contents/", token=token)
        assert code == 200 and root["content"] == []  # a new, empty folder: nothing of the caller's
        work = dt.home / "jobs" / "bare" / "work"
        assert work.is_dir() and dt.json("describe", "job", "bare")["extra"]["cwd"] == str(work)
    finally:
        dt("delete", "bare")
