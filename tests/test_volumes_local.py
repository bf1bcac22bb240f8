"""Volumes and snapshots through the real CLI: mounts in a private namespace, snapshots linked to jobs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from conftest import Dtrain, gated
from test_jobs_local import dump_state

WRITE_RANK_FILE = "import os; open(f\"/mnt/rank-{os.environ['RANK']}.txt\", 'w').write(os.environ['RANK'])"


def volume_path(dt: Dtrain, name: str) -> Path:
    return Path(dt.json("volume", "describe", name)["extra"]["path"])


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_two_process_job_shares_a_volume_at_mnt(dt: Dtrain):
    dt("volume", "create", "shared", "--size", "1Gi")
    dt("submit-dist", "writers", "--processes", "2", "--pvc", "shared:/mnt", "--", "python", "-c", WRITE_RANK_FILE)
    assert dt.wait_for("writers", {"Succeeded", "Failed"})["status"] == "Succeeded"
    assert tree(volume_path(dt, "shared")) == {"rank-0.txt": b"0", "rank-1.txt": b"1"}
    assert not Path("/mnt/rank-0.txt").exists()  # the host's /mnt was never touched


def test_read_only_mount_refuses_writes(dt: Dtrain):
    dt("volume", "create", "data")
    (volume_path(dt, "data") / "labels.json").write_text("{}")
    code = "print(open('/mnt/labels.json').read()); open('/mnt/new.txt', 'w').write('x')"
    dt("submit", "reader", "--pvc", "data:/mnt:ro", "--", "python", "-c", code)
    info = dt.wait_for("reader", {"Succeeded", "Failed"})
    assert info["status"] == "Failed"
    logs = dt("logs", "reader").stdout
    assert logs.startswith("{}") and "Read-only file system" in logs
    assert tree(volume_path(dt, "data")) == {"labels.json": b"{}"}


def test_new_volume_is_named_after_the_job_and_large_shm_is_private(dt: Dtrain):
    code = ("import os; s = os.statvfs('/dev/shm'); open('/dev/shm/probe', 'w').write('x'); "
            "open('/mnt/shm.txt', 'w').write(str(s.f_blocks * s.f_frsize))")
    dt("submit", "maker", "--pvc", "local:5Gi:/mnt", "--large-shm", "--", "python", "-c", code)
    assert dt.wait_for("maker", {"Succeeded", "Failed"})["status"] == "Succeeded"
    vol = dt.json("volume", "describe", "pvc-maker-0")
    assert vol["size"] == "5Gi" and vol["storage_class"] == "local"
    shm = int((Path(vol["extra"]["path"]) / "shm.txt").read_text())
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert shm >= total // 2 * 0.9  # half the machine's memory, not Docker's 64 MiB
    assert not Path("/dev/shm/probe").exists()  # the job's /dev/shm is its own


@pytest.mark.slow
def test_snapshot_on_success_links_job_and_lineage(dt: Dtrain):
    dt("volume", "create", "exp")
    data = volume_path(dt, "exp")
    (data / "dataset.txt").write_text("frames")
    dt("snapshot", "create", "exp", "--name", "data-v1")
    code = "open('/mnt/model.pt', 'w').write('weights'); print('trained')"
    dt("submit", "train", "--pvc", "exp:/mnt", "--snapshot-on-success", "exp", "--", "python", "-c", code)
    info = dt.wait_for("train", {"Succeeded", "Failed"})
    assert info["status"] == "Succeeded" and info["snapshot"]
    snap = dt.json("snapshot", "describe", info["snapshot"])
    assert snap["job"] == "train" and snap["source_snapshot"] == "data-v1" and snap["volume"] == "exp"
    assert snap["job_spec"]["command"] == ["python", "-c", code]
    assert info["snapshot"] in dt("describe", "job", "train").stdout
    assert [s["name"] for s in dt.json("snapshot", "list", "--job", "train")] == [info["snapshot"]]
    # the seed's variables do the same
    dt("submit", "train2", "--pvc", "exp:/mnt", "-e", "ENABLE_SNAPSHOT=true", "-e", "PVC_NAME=exp", "--",
       "python", "-c", "open('/mnt/model.pt', 'w').write('weights v2')")
    info2 = dt.wait_for("train2", {"Succeeded", "Failed"})
    assert info2["status"] == "Succeeded" and info2["snapshot"] and info2["snapshot"] != info["snapshot"]
    # restore the first result into a new volume, change it, and nothing else moves
    dt("snapshot", "restore", info["snapshot"], "--to", "restored")
    restored = volume_path(dt, "restored")
    files = tree(restored)  # data + model + the job's logs (.dtrain/logs/<job>/), versioned together
    assert b"trained" in files.pop(".dtrain/logs/train/rank-0.log")
    assert {p for p in files if p.startswith(".dtrain/")} == {".dtrain/logs/train/launcher.log",
                                                                ".dtrain/logs/train/attempts.json"}
    assert {p: b for p, b in files.items() if not p.startswith(".dtrain/")} == {"dataset.txt": b"frames",
                                                                                 "model.pt": b"weights"}
    assert dt.json("volume", "describe", "restored")["origin_snapshot"] == info["snapshot"]
    dt("submit", "retrain", "--pvc", "restored:/mnt", "--", "python", "-c",
       "open('/mnt/model.pt', 'a').write(' + more')")
    dt.wait_for("retrain", {"Succeeded"})
    assert (restored / "model.pt").read_text() == "weights + more"
    assert (data / "model.pt").read_text() == "weights v2"
    verify = dt("snapshot", "verify", "--json")
    assert verify.returncode == 0
    diff = dt.json("snapshot", "diff", info["snapshot"], info2["snapshot"])
    assert [c["path"] for c in diff if not c["path"].startswith(".dtrain/")] == ["model.pt"]  # + train2's logs


def test_snapshot_failure_fails_the_job_and_keeps_the_results(dt: Dtrain, tmp_path):
    dt("volume", "create", "keep")
    dt("volume", "create", "gone")
    hold, gate = gated(tmp_path)
    code = f"{hold}\nopen('/mnt/out.txt','w').write('result')"
    dt("submit", "nosnap", "--pvc", "keep:/mnt", "-e", "ENABLE_SNAPSHOT=true", "-e", "PVC_NAME=gone", "--",
       "python", "-c", code)
    dt.wait_for("nosnap", {"Running"})
    dt("volume", "delete", "gone", "--force")  # not mounted by the job, so only --force matters for in-use
    gate.write_text("x")
    info = dt.wait_for("nosnap", {"Succeeded", "Failed"})
    assert info["status"] == "Failed" and info["snapshot"] is None
    assert "training succeeded but the snapshot of volume gone failed" in info["message"]
    assert "dtrain snapshot create gone --job nosnap" in info["message"]
    assert (volume_path(dt, "keep") / "out.txt").read_text() == "result"


@pytest.mark.parametrize("args,needle", [
    (["volume", "create", "busy"], "already exists"),
    (["volume", "describe", "nope"], "nope"),
    (["volume", "delete", "busy"], "in use"),
    (["volume", "create", "Bad_Name"], "invalid volume name"),
    (["volume", "create", "v2", "--size", "huge"], "invalid"),
    (["snapshot", "create", "nope"], "nope"),
    (["snapshot", "describe", "ghost-snap"], "ghost-snap"),
    (["snapshot", "restore", "ghost-snap", "--to", "x"], "ghost-snap"),
    (["snapshot", "restore", "busy-v1", "--to", "busy"], "already exists"),
    (["snapshot", "restore", "busy-v1"], "--to NEW_VOLUME"),
    (["snapshot", "restore", "busy-v1", "--in-place"], "while job holder uses the volume"),
    (["snapshot", "create", "busy", "--name", "busy-v1"], "already exists"),
    (["snapshot", "delete", "ghost-snap"], "ghost-snap"),
    (["submit", "j", "--pvc", "nope:/mnt", "--", "true"], "nope"),
    (["submit", "j", "--pvc", "busy:/proc", "--", "true"], "/proc is the kernel's"),
    (["submit", "j", "--pvc", "busy:/dev", "--", "true"], "/dev is the kernel's"),
    (["submit", "j", "--pvc", "busy:/sys/x", "--", "true"], "/sys is the kernel's"),
    (["submit", "j", "--pvc", "busy:/" + "x" * 256, "--", "true"], "at most 255 bytes a folder name"),
    (["submit", "j", "--pvc", "busy:/mnt:bogus", "--", "true"], "after the mount path comes ro or rw"),
    (["submit", "j", "--pvc", "busy:/a/../a", "--", "true"], "'..' is not allowed"),
    (["submit", "j", "--pvc", "busy:" + sys.prefix, "--", "true"], "would hide dtrain's Python environment"),
    (["submit", "j", "--pvc", "busy:/mnt", "--", "/mnt/missing.sh"], "looked in the volume mounted at /mnt"),
    (["submit", "j", "--pvc", "busy:/mnt", "--working-dir", "/mnt/nope", "--", "true"],
     "is not a folder in the volume mounted at /mnt"),
    (["submit", "j", "--pvc", "local:1Gi:/mnt", "--", "/mnt/run.sh"], "looked in the volume mounted at /mnt"),
])
def test_storage_bad_input_is_clear_and_changes_nothing(dt: Dtrain, tmp_path, args, needle):
    dt("volume", "create", "busy")
    (volume_path(dt, "busy") / "a.txt").write_text("a")
    dt("snapshot", "create", "busy", "--name", "busy-v1")
    hold, gate = gated(tmp_path)
    dt("submit", "holder", "--pvc", "busy:/mnt", "--", "python", "-c", hold)
    dt.wait_for("holder", {"Running"})
    before = (dump_state(dt.home), tree(volume_path(dt, "busy")), sorted(os.listdir(dt.home / "volumes")))
    proc = dt(*args, check=False)
    after = (dump_state(dt.home), tree(volume_path(dt, "busy")), sorted(os.listdir(dt.home / "volumes")))
    gate.write_text("x")
    assert proc.returncode == 2, proc
    assert needle in proc.stderr and proc.stderr.startswith("dtrain: error: "), proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert after == before


def test_a_volume_over_the_home_is_refused(dt: Dtrain):
    dt("volume", "create", "data")
    for target in (dt.home, dt.home.parent):
        proc = dt("submit", "hide", "--pvc", f"data:{target}", "--", "true", check=False)
        assert proc.returncode == 2 and "would hide the dtrain home" in proc.stderr, proc.stderr
    assert dt.json("list", "-A") == [] and tree(volume_path(dt, "data")) == {}


@pytest.mark.slow
def test_a_mount_the_job_could_not_start_with_is_refused_at_submit(dt: Dtrain, tmp_path):
    """A place bubblewrap cannot mount over (a symbolic link, a file, anything below either), or
    one that would hide the Python the job runs on or the system's programs: one line at submit,
    no job and no volume made, rather than a job that fails at start ("launcher exited with code
    1") leaving its new volume behind."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "afile").write_text("x")
    python_home = Path(sys.base_prefix)
    for target, says in [
        (tmp_path / "link", f"{tmp_path / 'link'} is a symbolic link (to {tmp_path / 'real'})"),
        (tmp_path / "link" / "deeper", f"{tmp_path / 'link'} is a symbolic link"),
        (tmp_path / "afile", f"{tmp_path / 'afile'} is a file, not a folder"),
        (tmp_path / "afile" / "sub", f"{tmp_path / 'afile'} is a file, not a folder"),
        (python_home.parent, f"would hide the Python installation under dtrain's environment ({python_home})"),
        ("/usr", "would hide the system's programs and libraries (/usr)"),
    ]:
        for pvc in (f"local:1Gi:{target}", f"data:{target}"):
            if pvc.startswith("data:") and not (dt.home / "volumes").exists():
                dt("volume", "create", "data")
            proc = dt("submit", "j", "--pvc", pvc, "--", "true", check=False)
            assert proc.returncode == 2 and says in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert dt.json("list", "-A") == [] and [v["name"] for v in dt.json("volume", "list")] == ["data"]
    # inside another of the job's volumes, the place is that volume's, not this machine's
    (volume_path(dt, "data") / "sub").mkdir()
    dt("submit", "nested", "--pvc", "data:/mnt", "--pvc", "local:1Gi:/mnt/sub", "--", "true")
    assert dt.wait_for("nested", {"Succeeded"})


def test_a_new_volumes_mount_point_is_a_working_folder(dt: Dtrain):
    dt("submit", "w", "--pvc", "local:1Gi:/code", "--working-dir", "/code", "--", "pwd")
    assert dt.wait_for("w", {"Succeeded"}) and dt("logs", "w").stdout == "/code\n"
    proc = dt("submit", "deeper", "--pvc", "local:1Gi:/code2", "--working-dir", "/code2/src", "--", "pwd",
              check=False)  # a new volume is empty: nothing below its mount point yet
    assert proc.returncode == 2 and "is not a folder in the volume mounted at /code2" in proc.stderr


def test_command_and_working_folder_inside_a_volume(dt: Dtrain):
    """As with `kubectl` / `runai submit --pvc data:/mnt -- /mnt/train.sh`: the command and the
    working folder are looked up where the job sees them, in its volumes."""
    dt("volume", "create", "code")
    (volume_path(dt, "code") / "sub").mkdir()
    script = volume_path(dt, "code") / "sub" / "run.sh"
    script.write_text("#!/bin/sh\necho ran in $(pwd)\n")
    script.chmod(0o755)
    dt("submit", "inside", "--pvc", "code:/data", "--working-dir", "/data/sub", "--", "/data/sub/run.sh")
    assert dt.wait_for("inside", {"Succeeded", "Failed"})["status"] == "Succeeded"
    assert dt("logs", "inside").stdout.strip() == "ran in /data/sub"
    dt("submit", "relative", "--pvc", "code:/data", "--working-dir", "/data/sub", "--", "./run.sh")
    assert dt.wait_for("relative", {"Succeeded", "Failed"})["status"] == "Succeeded"


def test_nested_volumes_mount_parents_first_whatever_the_flag_order(dt: Dtrain):
    for name in ("outer", "inner"):
        dt("volume", "create", name)
        (volume_path(dt, name) / f"{name}.txt").write_text(name + "\n")
    for job, flags in (("inner-first", ["--pvc", "inner:/a/b", "--pvc", "outer:/a"]),
                       ("outer-first", ["--pvc", "outer:/a", "--pvc", "inner:/a/b"])):
        dt("submit", job, *flags, "--", "sh", "-c", "cat /a/outer.txt /a/b/inner.txt")
        assert dt.wait_for(job, {"Succeeded", "Failed"})["status"] == "Succeeded", dt("logs", job).stdout
        assert dt("logs", job).stdout.split() == ["outer", "inner"]


def test_missing_bubblewrap_is_a_clear_error(home):
    dt = Dtrain(home, env={"PATH": str(Path(sys.executable).parent)})  # no /usr/bin: no bwrap
    dt("volume", "create", "v")
    proc = dt("submit", "j", "--pvc", "v:/mnt", "--", "python", "-c", "pass", check=False)
    assert proc.returncode == 2 and "apt-get install bubblewrap" in proc.stderr
    assert json.loads(dt("list", "--json").stdout) == []
