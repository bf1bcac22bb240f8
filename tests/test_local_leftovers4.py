"""Local backend and CLI leftovers: a job folder removed as its launcher starts, a storage class
pointed at a folder another class uses, the snapshot a job asked for through ENABLE_SNAPSHOT, GPU
jobs submitted without DTRAIN_GPUS."""

from __future__ import annotations

import os
import shutil
import signal
import sys

from conftest import Dtrain, job_store, stored_job

from dtrain import JobSpec
from dtrain.backends.local import supervisor
from dtrain.backends.local.ranks import supervisor_token
from dtrain.procs import Ident


def _supervised_here(home, spec: JobSpec, monkeypatch) -> None:
    """`spec` stored as submitted, with this test process recorded as its supervisor."""
    (home / "jobs" / spec.name).mkdir(parents=True)
    with job_store(home) as store:
        store.insert_job(spec, cwd=str(home), node="this-host")
        store.update(spec.name, supervisor_pid=os.getpid(), supervisor_start=supervisor_token(Ident.of(os.getpid())))
    monkeypatch.setattr(supervisor, "leave_rank_cgroups", lambda: None)  # this test process stays where it is
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # nor takes the supervisor's SIGTERM handler


def test_a_job_folder_removed_as_its_launcher_starts_fails_the_job_saying_so(tmp_path, monkeypatch):
    """The supervisor's write of launcher.json met the folder `rm -r` (or a delete) had just removed,
    and the job ended 'supervisor error: [Errno 2] No such file or directory: .../launcher.json...'."""
    home = tmp_path / "home"
    _supervised_here(home, JobSpec(name="gone", command=(sys.executable, "-c", "import time; time.sleep(60)"),
                                   max_restarts=2), monkeypatch)
    write = supervisor._write_json

    def removed_first(path, data):
        shutil.rmtree(home / "jobs" / "gone")
        write(path, data)

    monkeypatch.setattr(supervisor, "_write_json", removed_first)
    assert supervisor.main([str(home), "gone"]) == 0
    row = stored_job(home, "gone")
    assert row["status"] == "Failed" and row["restarts"] == 0, (row["status"], row["restarts"], row["message"])
    assert row["message"] == (f"{home}/jobs/gone was removed (by hand?) as its processes started, so they were "
                              f"stopped: submit the job again"), row["message"]


def test_a_class_named_at_the_folder_of_a_removed_class_warns_naming_both(dt: Dtrain, tmp_path):
    """`config storage-class nvme FOLDER` where the volumes of 'fast' (removed from config.yaml) live said
    nothing; 'fast' then could not be named again there, and its volumes read NotConfigured for good."""
    folder = tmp_path / "nvme"
    dt("config", "storage-class", "fast", str(folder))
    dt("volume", "create", "v1", "--class", "fast")
    dt("config", "storage-class", "--unset", "fast")
    shared = dt("config", "storage-class", "nvme", str(folder))
    assert shared.stderr == (f"dtrain: warning: {folder} holds the 1 volume of storage class 'fast', which "
                             f"{dt.home / 'config.yaml'} no longer names: it stays in class 'fast' and keeps working, "
                             f"but 'fast' cannot be named again while 'nvme' shares its folder; to give it class 'fast' back "
                             f"instead: dtrain config storage-class --unset nvme, then dtrain config storage-class "
                             f"fast {folder}\n"), shared.stderr
    assert dt("config", "storage-class", "nvme").stdout == f"{folder}\n"  # not refused: kept as asked
    assert dt("config", "storage-class", "other", str(tmp_path / "other")).stderr == ""  # a folder of its own: quiet
    dt("config", "storage-class", "--unset", "nvme")
    dt("config", "storage-class", "fast", str(folder))  # the fix the warning names
    assert [(v["name"], v["storage_class"]) for v in dt.json("volume", "list")] == [("v1", "fast")]


def test_snapshot_describe_shows_the_snapshot_a_job_asked_for_through_the_seeds_env(dt: Dtrain):
    """A job that asked for its snapshot with -e ENABLE_SNAPSHOT=true -e PVC_NAME=VOLUME (the Run:AI seed's
    way) had it taken, and `snapshot describe` of it read 'snapshot_on_success: -' under Job spec."""
    dt("volume", "create", "data")
    dt("submit", "seeded", "-e", "ENABLE_SNAPSHOT=true", "-e", "PVC_NAME=data", "--pvc", "data:/data",
       "--", "true")
    info = dt.wait_for("seeded", {"Failed", "Succeeded"})
    assert info["status"] == "Succeeded", info["message"]
    text = dt("snapshot", "describe", info["snapshot"]).stdout
    assert "  snapshot_on_success: data (from -e ENABLE_SNAPSHOT + PVC_NAME)\n" in text, text
    assert "  env:\n    -e ENABLE_SNAPSHOT=true\n    -e PVC_NAME=data\n" in text, text
    assert "  snapshot_on_success: data (from -e ENABLE_SNAPSHOT + PVC_NAME)\n" in dt("describe", "job", "seeded").stdout


def test_a_gpu_job_submitted_without_dtrain_gpus_is_told_from_a_job_of_before(tmp_path, monkeypatch):
    """A GPU job submitted with DTRAIN_GPUS unset (the machine's own GPUs) recorded nothing, as a job of
    before the column does: a server started with DTRAIN_GPUS=2, which schedules on two stand-ins and
    not on those GPUs, said nothing of it. Now it is named; the job of before, whose setting is unknown, not."""
    from dtrain.backends.local.backend import LocalBackend

    home = tmp_path / "home"
    with job_store(home) as store:
        for name in ("old", "real", "cpu"):
            store.insert_job(JobSpec(name=name, command=("true",), gpu=0 if name == "cpu" else 1), cwd="/",
                             node="here", gpus_injected=None)  # as a submit without DTRAIN_GPUS records it
            assert store.set_status(name, "Suspended", "suspended")
        store.conn.execute("UPDATE jobs SET gpus_injected=NULL WHERE name='old'")  # as a job of before
        store.conn.commit()
        assert store.conn.execute("SELECT gpus_injected FROM jobs WHERE name='real'").fetchone()[0] == "null"
    monkeypatch.setenv("DTRAIN_GPUS", "2")
    notices = LocalBackend(home).serving_notices()
    assert [n.message for n in notices] == [
        "job real was submitted with DTRAIN_GPUS unset, but this server has DTRAIN_GPUS=2: it cannot schedule or "
        "resume it on the GPUs it was submitted with; stop it and start it as 'env -u DTRAIN_GPUS dtrain server'"]
    monkeypatch.delenv("DTRAIN_GPUS")
    assert LocalBackend(home).serving_notices() == ()
