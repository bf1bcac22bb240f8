"""Audit 6, stored data and the job sandbox: what a careless or hostile job can reach."""

from __future__ import annotations

import os
import sys

from conftest import Dtrain
from dtrain.backends.local.launch import Mount, hidden_roots, sandbox_prefix


def test_the_sandbox_covers_the_volume_roots_before_binding_the_jobs_volumes(tmp_path):
    root = tmp_path / "volumes"
    (root / "v" / "data").mkdir(parents=True)
    mounts = [Mount(source=root / "v" / "data", target="/data", read_only=True)]
    hidden = hidden_roots([root, root, tmp_path / "missing"], cwd="/", mounts=mounts)
    assert hidden == [str(root)]  # once, and never one that is not there (bubblewrap would make it)
    argv = sandbox_prefix(mounts, large_shm=False, cwd="/", hidden=hidden)
    assert argv.index("--tmpfs") < argv.index("--ro-bind") and argv[argv.index("--tmpfs") + 1] == str(root)
    # a root the job's working folder (outside its volumes) or dtrain's Python lies in stays visible
    assert hidden_roots([root], cwd=str(root / "v"), mounts=mounts) == []
    assert hidden_roots([root], cwd=str(root / "v"), mounts=[Mount(source=root, target=str(root / "v"))]) == [str(root)]
    assert hidden_roots([sys.prefix], cwd="/", mounts=mounts) == []


def test_a_job_sees_only_its_volumes_and_cannot_write_one_mounted_read_only(dt: Dtrain):
    dt("volume", "create", "ro")
    dt("volume", "create", "other")
    ro = dt.home / "volumes" / "ro" / "data"
    (ro / "f").write_text("kept\n")
    (dt.home / "volumes" / "other" / "data" / "secret").write_text("other's\n")
    dt("snapshot", "create", "other", "--name", "other-v1")  # its content is in the store now
    assert any((dt.home / "store").rglob("*"))
    script = (f'echo x >> /data/f; echo x >> "{ro}/f"; ls "{dt.home}/volumes"; cat "{dt.home}/volumes/other/data/secret"; '
              f'echo store: $(find "{dt.home}/store" | wc -l); cat /data/f; echo x > /w/new')
    dt("submit", "peek", "--pvc", "ro:/data:ro", "--pvc", "other:/w", "--", "sh", "-c", script)
    dt.wait_for("peek", {"Succeeded", "Failed"})
    logs = dt("logs", "peek").stdout
    assert (ro / "f").read_text() == "kept\n"  # neither through /data nor through its host folder
    assert "other's" not in logs and "kept" in logs  # the job reads its :ro volume, not others'
    assert "store: 1\n" in logs  # the snapshot store is an empty folder to it: no volume's snapshotted content
    assert (dt.home / "volumes" / "other" / "data" / "new").exists()  # its read-write volume works


def test_artifacts_never_follows_a_linked_model_folder_nor_waits_on_a_fifo(dt: Dtrain, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "private.txt").write_text("not the model's\n")
    dt("submit", "linked", "--", "sh", "-c", f'ln -s {outside} "$DTRAIN_MODEL_DIR"')
    dt("submit", "odd", "--", "sh", "-c", 'mkdir "$DTRAIN_MODEL_DIR"; echo w > "$DTRAIN_MODEL_DIR/w.pt"; '
                                          'mkfifo "$DTRAIN_MODEL_DIR/pipe"; ln -s w.pt "$DTRAIN_MODEL_DIR/last.pt"')
    for job in ("linked", "odd"):
        assert dt.wait_for(job, {"Succeeded", "Failed"})["status"] == "Succeeded"
    proc = dt("artifacts", "linked", "--to", str(tmp_path / "a"), check=False, timeout=30)
    assert proc.returncode != 0 and "symbolic link" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert not (tmp_path / "a").exists()
    proc = dt("artifacts", "odd", "--to", str(tmp_path / "b"), timeout=30)  # a fifo: left out, said, not waited on
    assert (tmp_path / "b" / "w.pt").read_text() == "w\n" and os.readlink(tmp_path / "b" / "last.pt") == "w.pt"
    assert not os.path.lexists(tmp_path / "b" / "pipe") and "pipe" in proc.stderr
