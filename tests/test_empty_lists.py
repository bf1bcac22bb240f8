"""`dtrain list`, `volume list` and `snapshot list` with nothing to show: one line saying so, where it
looked and the command that makes one (kubectl: "No resources found in NS namespace."), where a
header alone read as a failed listing; --json stays []."""

from __future__ import annotations

import json

from conftest import Dtrain


def test_an_empty_job_list_says_where_it_looked_and_how_to_submit(dt: Dtrain):
    assert dt("list").stdout == "No jobs yet in project 'default': submit one with 'dtrain submit NAME -- COMMAND'\n"
    assert dt("list", "-A").stdout.startswith("No jobs yet in any project: ")
    assert dt("list", "-l", "team=a").stdout == "No jobs in project 'default' match -l team=a\n"
    dt("project", "create", "team")
    # -p goes before the job's own command: after '--' it would be the command's argument
    assert dt("list", "-p", "team").stdout.endswith("submit one with 'dtrain submit NAME -p team -- COMMAND'\n")
    dt("submit", "k", "--", "true")
    dt.wait_for("k", {"Succeeded"})
    dt("delete", "k")
    assert dt("list").stdout == ("No jobs in project 'default' (1 deleted: --show-deleted lists them): submit one "
                                 "with 'dtrain submit NAME -- COMMAND'\n")
    assert "k " in dt("list", "--show-deleted").stdout
    assert json.loads(dt("list", "--json").stdout) == []


def test_empty_volume_and_snapshot_lists_name_the_command_that_makes_one(dt: Dtrain):
    assert dt("volume", "list").stdout == "No volumes yet: make one with 'dtrain volume create NAME --size 10Gi'\n"
    dt("project", "create", "team")  # (local volumes are every project's)
    assert dt("volume", "list", "-p", "team").stdout.endswith("'dtrain volume create NAME --size 10Gi -p team'\n")
    assert dt("snapshot", "list").stdout == ("No snapshots yet: take one with 'dtrain snapshot create VOLUME', or submit "
                                             "a job with --snapshot-on-success VOLUME\n")
    dt("volume", "create", "v")
    assert dt("snapshot", "list", "--volume", "v").stdout == ("No snapshots of volume 'v' yet: take one with "
                                                              "'dtrain snapshot create v'\n")
    dt("submit", "j", "--", "true")
    assert dt("snapshot", "list", "--volume", "v", "--job", "j").stdout == (
        "No snapshots of volume 'v' and linked to job 'j' yet: take one with 'dtrain snapshot create v --job j'\n")
    assert json.loads(dt("volume", "list", "--json").stdout)[0]["name"] == "v"
    assert json.loads(dt("snapshot", "list", "--json").stdout) == []
