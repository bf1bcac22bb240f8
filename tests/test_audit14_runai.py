"""A Run:AI + NetApp user on dtrain, days two and three (audit 14): cleaning up with the habits
scripts have (`--older-than`, `--json | jq | xargs`), re-running what failed, exit codes."""

from __future__ import annotations

import json
import time

import pytest
from conftest import Cli

from dtrain.cli import storage as storage_cli


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys) -> Cli:
    monkeypatch.setenv("DTRAIN_HOME", str(tmp_path / "home"))
    return Cli(capsys)


def _snapshots(cli, *names: str, volume: str = "data") -> None:
    cli.ok("volume", "create", volume, "--size", "1Gi")
    for name in names:
        cli.ok("snapshot", "create", volume, "--name", name)


def _names(cli, *argv: str) -> list[str]:
    return [r["name"] for r in cli.json(*argv)]


# ---- deleting many: `... --json | jq -r '.[].name' | xargs dtrain snapshot delete` ----------------
def test_snapshot_delete_takes_the_names_xargs_passes(cli):
    """`snapshot delete a b` was "unrecognized arguments: b": xargs passes every name at once."""
    _snapshots(cli, "s1", "s2", "s3")
    out = cli.ok("snapshot", "delete", "s1", "s2")
    assert "snapshot 's1' deleted" in out and "snapshot 's2' deleted" in out
    assert _names(cli, "snapshot", "list") == ["s3"]


def test_a_slip_among_the_snapshots_deletes_none(cli):
    _snapshots(cli, "s1", "s2")
    line = cli.refused("snapshot", "delete", "s1", "nosuch", "s2")
    assert "no snapshot named 'nosuch'; nothing was deleted" in line and "dtrain snapshot list" in line
    assert cli.refused("snapshot", "delete", "nosuch").endswith("list snapshots with 'dtrain snapshot list'")
    assert cli.refused("snapshot", "delete", "s1", "s2", "-p", "tem-b").startswith(
        "dtrain: error: no project named 'tem-b'")
    assert _names(cli, "snapshot", "list") == ["s1", "s2"]


def test_snapshot_delete_json_of_several_is_a_line_each(cli):
    """One name keeps its one JSON object; several give one per line, as `snapshot wait --json`."""
    _snapshots(cli, "s1", "s2", "s3")
    assert cli.json("snapshot", "delete", "s3")["snapshot"] == "s3"
    lines = cli.ok("snapshot", "delete", "s1", "s2", "--json").splitlines()
    assert [json.loads(line)["snapshot"] for line in lines] == ["s1", "s2"]


def test_volume_delete_takes_several_and_checks_them_first(cli):
    for name in ("a", "b", "c"):
        cli.ok("volume", "create", name, "--size", "1Gi")
    line = cli.refused("volume", "delete", "a", "nosuch")
    assert "no volume named 'nosuch'; nothing was deleted" in line and "dtrain volume list" in line
    assert cli.ok("volume", "delete", "a", "b").splitlines() == ["volume 'a' deleted", "volume 'b' deleted"]
    assert _names(cli, "volume", "list") == ["c"]


# ---- --older-than: the clean-up habit -------------------------------------------------------------
class _Later:
    """time, two days on: what `--older-than 1d` sees of a snapshot taken now."""

    @staticmethod
    def time() -> float:
        return time.time() + 2 * 86400


def test_older_than_selects_by_age(cli, monkeypatch):
    """`snapshot list --older-than 30d` (and `volume list`) was "unrecognized arguments"."""
    _snapshots(cli, "s1", "s2")
    assert cli.json("snapshot", "list", "--older-than", "1d") == []
    assert cli.ok("snapshot", "list", "--older-than", "1d").strip() == "No snapshots older than 1d"
    assert cli.json("volume", "list", "--older-than", "1d") == []
    monkeypatch.setattr(storage_cli, "time", _Later)
    assert _names(cli, "snapshot", "list", "--older-than", "1d") == ["s1", "s2"]
    assert _names(cli, "snapshot", "list", "--older-than", "3d") == []
    assert _names(cli, "volume", "list", "--older-than", "36h") == ["data"]
    names = _names(cli, "snapshot", "list", "--older-than", "1d", "--volume", "data")
    cli.ok("snapshot", "delete", *names)
    assert cli.json("snapshot", "list") == []


def test_a_bad_older_than_is_one_line(cli):
    line = cli.refused("snapshot", "list", "--older-than", "a week")
    assert "invalid --older-than 'a week'" in line and "30d" in line


def test_an_older_than_past_its_bound_names_the_bound(cli):
    """'--older-than 99999999999d' was refused as 'use a duration such as 30d', a form it had used."""
    line = cli.refused("volume", "list", "--older-than", "36501d")
    assert "invalid --older-than '36501d': use a duration of at most 36500d" in line
    assert cli.json("volume", "list", "--older-than", "36500d") == []


# ---- restoring over a volume in use -----------------------------------------------------------------
def _running(cli, name: str) -> None:
    deadline = time.monotonic() + 60
    while cli.json("describe", "job", name)["status"] != "Running":
        assert time.monotonic() < deadline, cli.json("describe", "job", name)
        time.sleep(0.1)


@pytest.mark.slow
def test_an_in_place_restore_under_a_job_names_suspend_which_keeps_it(cli):
    """The refusal named only `dtrain delete J` (the job is gone); a Suspended job holds no mount and
    resumes on the restored folder, so suspending it for the restore is what keeps it."""
    _snapshots(cli, "before")
    cli.ok("submit", "trainer", "--cpu", "1", "--pvc", "data:/mnt", "--", "sleep", "300")
    try:
        _running(cli, "trainer")
        line = cli.refused("snapshot", "restore", "before", "--in-place")
        assert "wait for it, suspend it for the restore ('dtrain suspend trainer'; resume it after)" in line, line
        assert "stop it ('dtrain delete trainer')" in line, line
        cli.ok("suspend", "trainer")
        assert "restored in place" in cli.ok("snapshot", "restore", "before", "--in-place")
        assert cli.json("describe", "job", "trainer")["status"] == "Suspended"
    finally:
        cli("delete", "trainer")


# ---- a job that failed, run again -------------------------------------------------------------------
@pytest.mark.slow
def test_resuming_a_failed_job_names_the_way_to_run_it_again_and_that_way_works(cli, tmp_path, monkeypatch):
    """`dtrain resume` of a Failed job said only that it takes a Suspended one; the day-two habit (run the
    job that failed half-way again, as Run:AI's delete + submit) had no path short of retyping it."""
    cli.ok("volume", "create", "data", "--size", "1Gi")
    cli.ok("submit", "half", "--cpu", "1", "--pvc", "data:/mnt", "-e", "TRY=1", "--",
           "sh", "-c", "echo $TRY >> /mnt/tries; test -s /mnt/fixed")
    assert cli("wait", "half")[0] == 1
    line = cli.refused("resume", "half")
    steps = line.split("; to run it again: ")[1].split(", then ")
    assert steps == ["'dtrain describe job half --json' > half.json", "'dtrain delete half'",
                     "'dtrain submit -f half.json'"], line
    monkeypatch.chdir(tmp_path)
    (tmp_path / "half.json").write_text(cli.ok("describe", "job", "half", "--json"))
    first = json.loads((tmp_path / "half.json").read_text())["spec"]
    cli.ok("delete", "half")
    cli.ok("submit", "-f", "half.json")
    assert cli("wait", "half")[0] == 1
    assert cli.json("describe", "job", "half")["spec"] == first  # the same job: its volume, env, command
    assert first["env"] == {"TRY": "1"} and first["volumes"]
    assert "to run it again" not in cli.refused("suspend", "half")


# ---- exit codes and words scripts read ----------------------------------------------------------------
@pytest.mark.slow
def test_waiting_on_a_suspended_job_says_it_waits_for_a_resume(cli):
    """A script's `dtrain wait train`, after a teammate suspended it, hung without a word, and its
    --timeout said "check 'dtrain logs train'" (a Suspended job has no process to log)."""
    cli.ok("submit", "paused", "--cpu", "1", "--", "sleep", "300")
    try:
        _running(cli, "paused")
        cli.ok("suspend", "paused")
        rc, out, err = cli("wait", "paused", "--timeout", "0.2")
        assert rc == 124 and out == "", (rc, out, err)
        assert err.splitlines() == [
            "dtrain: job 'paused' is Suspended: waiting until it is resumed ('dtrain resume paused') and ends",
            "dtrain: job 'paused' is still Suspended after 0.2s: it ends only once resumed ('dtrain resume paused')"]
    finally:
        cli("delete", "paused")


# ---- lineage after a delete: FROM SNAPSHOT names what is gone -------------------------------------
def test_a_deleted_origin_snapshot_is_marked_where_volumes_name_it(cli, tmp_path):
    """`volume list` showed FROM SNAPSHOT 'a' for a snapshot deleted since, and `snapshot describe a`
    then said there was none; `describe job` and `snapshot list`'s JOB column marked theirs."""
    from dtrain.storage.volumes import Storage

    _snapshots(cli, "a")
    cli.ok("snapshot", "restore", "a", "--to", "b")
    assert cli.json("volume", "describe", "b")["extra"]["origin_snapshot_deleted"] is False
    assert "(deleted)" not in cli.ok("volume", "list") + cli.ok("volume", "describe", "b")
    cli.ok("snapshot", "delete", "a")
    assert [line.split()[5:7] for line in cli.ok("volume", "list").splitlines() if line.startswith("b ")] == [
        ["a", "(deleted)"]]
    assert "From snapshot: a (deleted)" in cli.ok("volume", "describe", "b")
    assert "origin_snapshot_deleted" not in cli.ok("volume", "describe", "b")  # its Details: said once
    assert cli.json("volume", "describe", "b")["extra"]["origin_snapshot_deleted"] is True
    cli.ok("snapshot", "create", "data", "--name", "a")  # the name again: another snapshot
    storage = Storage(tmp_path / "home")
    try:  # a record made 2 s before it was taken came from the deleted one (1 s slack: a volume's time is whole seconds)
        again = storage.get_snapshot("a").created
        assert storage.source_there("a", again) and not storage.source_there("a", again - 2)
    finally:
        storage.close()


@pytest.mark.slow
def test_a_deleted_source_snapshot_is_marked_where_snapshots_name_it(cli):
    """A job's snapshot showed FROM SNAPSHOT 'a' (and `From snapshot: a`) once 'a' was deleted."""
    _snapshots(cli, "a")
    cli.ok("snapshot", "restore", "a", "--to", "b")
    cli.ok("submit", "j", "--pvc", "b:/mnt", "--snapshot-on-success", "b", "--", "true")
    assert cli.json("wait", "j")["status"] == "Succeeded"  # its snapshot records where its data came from
    b1 = cli.json("snapshot", "list", "--job", "j")[0]["name"]
    assert cli.json("snapshot", "describe", b1)["extra"]["source_snapshot_deleted"] is False
    assert "(deleted)" not in cli.ok("snapshot", "list") + cli.ok("snapshot", "describe", b1)
    cli.ok("snapshot", "delete", "a")
    assert [r.split()[:5] for r in cli.ok("snapshot", "list").splitlines()[1:]] == [[b1, "b", "j", "a", "(deleted)"]]
    assert "From snapshot: a (deleted)" in cli.ok("snapshot", "describe", b1)
    assert cli.json("snapshot", "describe", b1)["extra"]["source_snapshot_deleted"] is True
    assert cli.json("snapshot", "describe", b1)["source_snapshot_deleted"] is True  # the record's field


def test_a_deleted_volume_is_marked_where_its_snapshots_name_it(cli):
    """`snapshot list` showed VOLUME 'data' for a volume deleted since (restore --in-place then had
    nothing to roll back); one made again with the name is another volume."""
    _snapshots(cli, "a")
    assert cli.json("snapshot", "describe", "a")["extra"]["volume_deleted"] is False
    assert "(deleted)" not in cli.ok("snapshot", "list") + cli.ok("snapshot", "describe", "a")
    cli.ok("volume", "delete", "data")
    assert [r.split()[:3] for r in cli.ok("snapshot", "list").splitlines()[1:]] == [["a", "data", "(deleted)"]]
    assert "Volume: data (deleted)" in cli.ok("snapshot", "describe", "a")
    assert "volume_deleted" not in cli.ok("snapshot", "describe", "a")  # its Details: said once
    cli.ok("volume", "create", "data", "--size", "1Gi")
    assert cli.json("snapshot", "describe", "a")["extra"]["volume_deleted"] is True
