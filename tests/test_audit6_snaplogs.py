"""A job's snapshot holds its logs: --snapshot-on-success (and `snapshot create --job` of an ended job)
copy them into the volume at .dtrain/logs/<job>/ first, never through a link, and a copy that fails
(a full disk, a link in the way) is said in one event while the snapshot is taken all the same."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import Dtrain, tmpfs


def _events(info: dict) -> str:
    return "\n".join(e["message"] for e in info["events"])


def _restored(dt: Dtrain, snap: str, to: str) -> Path:
    dt("snapshot", "restore", snap, "--to", to, "--class", "local")
    return dt.home / "volumes" / to / "data"


def test_snapshot_on_success_holds_the_logs_and_a_restore_brings_them_back(dt: Dtrain):
    dt("volume", "create", "v2", "--size", "1Gi")
    dt("submit", "j1", "--pvc", "v2:/mnt", "--snapshot-on-success", "v2", "--",
       "bash", "-c", "echo step-one-line; echo m > /mnt/model.pt")
    info = dt.wait_for("j1", {"Succeeded", "Failed"})
    assert info["status"] == "Succeeded", info["message"]
    assert "logs were not copied" not in _events(info)
    data = _restored(dt, info["snapshot"], "back")
    assert (data / "model.pt").read_text() == "m\n"
    logs = data / ".dtrain" / "logs" / "j1"
    assert "step-one-line" in (logs / "rank-0.log").read_text()
    assert (logs / "launcher.log").read_text() == (dt.home / "jobs" / "j1" / "launcher.log").read_text()
    assert (logs / "attempts.json").read_bytes() == (dt.home / "jobs" / "j1" / "attempts.json").read_bytes()
    assert not (logs / "ranks").exists()  # state, not logs

    # kept after the job and its folder are purged
    dt("delete", "j1", "--purge")
    assert "step-one-line" in (_restored(dt, info["snapshot"], "back2") / ".dtrain/logs/j1/rank-0.log").read_text()


def test_manual_snapshot_of_an_ended_job_holds_its_logs(dt: Dtrain):
    dt("volume", "create", "v", "--size", "1Gi")
    dt("submit", "j2", "--pvc", "v:/mnt", "--", "bash", "-c", "echo manual-line")
    assert dt.wait_for("j2", {"Succeeded", "Failed"})["status"] == "Succeeded"
    dt("snapshot", "create", "v", "--job", "j2", "--name", "s2")
    data = _restored(dt, "s2", "back")
    assert "manual-line" in (data / ".dtrain/logs/j2/rank-0.log").read_text()


@pytest.mark.parametrize("link_at", [".dtrain", ".dtrain/logs/j3"])
def test_a_link_in_the_way_is_not_followed_and_the_snapshot_is_taken(dt: Dtrain, tmp_path: Path, link_at: str):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("mine")
    dt("volume", "create", "v", "--size", "1Gi")
    dt("submit", "j3", "--pvc", "v:/mnt", "--snapshot-on-success", "v", "--", "bash", "-c",
       f"echo hi; mkdir -p /mnt/$(dirname {link_at}) && ln -s {outside} /mnt/{link_at} && echo m > /mnt/model.pt")
    info = dt.wait_for("j3", {"Succeeded", "Failed"})
    assert info["status"] == "Succeeded", info["message"]
    assert info["snapshot"]
    assert sorted(p.name for p in outside.rglob("*")) == ["keep"]  # nothing written through the link
    assert (outside / "keep").read_text() == "mine"
    events = _events(info)
    assert "logs were not copied" in events and f"{link_at} in the volume is a symbolic link" in events
    data = _restored(dt, info["snapshot"], "back")
    assert (data / "model.pt").exists() and (data / link_at).is_symlink()


def test_a_full_volume_disk_still_succeeds_with_the_snapshot_and_says_why(dt: Dtrain, tmp_path: Path):
    with tmpfs(tmp_path / "small", "size=1m") as mnt:
        (dt.home / "config.yaml").write_text(yaml.safe_dump({"storage_classes": {"small": str(mnt / "c")}}))
        dt("volume", "create", "v", "--size", "1Mi", "--class", "small")
        dt("submit", "j4", "--pvc", "v:/mnt", "--snapshot-on-success", "v", "--", "bash", "-c",
           "for i in $(seq 200); do echo a-long-enough-log-line-$i; done; echo m > /mnt/model.pt; "
           "head -c 4M /dev/zero > /mnt/fill 2>/dev/null; true")
        info = dt.wait_for("j4", {"Succeeded", "Failed"})
        assert info["status"] == "Succeeded", info["message"]
        assert info["snapshot"]
        events = _events(info)
        assert "logs were not copied" in events and "No space left on device" in events
        data = mnt / "c" / "v" / "data"
        assert [p.name for p in (data / ".dtrain" / "logs").iterdir()] == []  # the partial copy is removed
        assert (_restored(dt, info["snapshot"], "back") / "model.pt").read_text() == "m\n"
        dt("volume", "delete", "v")
