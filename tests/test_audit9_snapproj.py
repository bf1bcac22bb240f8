"""A project's volumes and snapshots at each door (audit 9): `snapshot describe/restore/delete`, the
volume verbs and the rest took no project (no -p, no project=, no ?project=), only --backend, which on
Kubernetes looks in the configured project's namespace: a Kubernetes project's snapshot (team-b's
namespace) could be listed with -p team-b but not described, restored nor deleted."""

from __future__ import annotations

import re
import shlex

import pytest

import dtrain
from conftest import Dtrain, assert_usage_error
from test_audit9_allproj import cluster, http  # noqa: F401  (fixtures: team-b on the fake Kubernetes API)

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

B = {"project": "team-b"}


@pytest.fixture
def team_b(cluster, home):  # noqa: F811
    """Volume data and its snapshot snap-b in team-b's namespace on the fake cluster."""
    client = dtrain.Client(home=home)
    client.backend(project="team-b").create_volume("data", size="1Gi")
    client.backend(project="team-b").create_snapshot("data", name="snap-b")
    return cluster


def _run_hint(dt: Dtrain, hint: str, **kw):
    words = shlex.split(hint)
    assert words[0] == "dtrain", hint
    return dt(*words[1:], **kw)


def test_the_sdk_reaches_a_projects_volumes_and_snapshots(team_b, home):
    client = dtrain.Client(home=home)
    with pytest.raises(dtrain.errors.NotFoundError, match="no snapshot named 'snap-b'"):
        client.get_snapshot("snap-b")  # the default project's backend: local
    snap = client.get_snapshot("snap-b", **B)
    assert (snap.backend, snap.volume, snap.extra["namespace"]) == ("kubernetes", "data", "dtrain-team-b")
    assert [v.name for v in client.list_volumes(**B)] == ["data"]
    assert client.get_volume("data", **B).backend == "kubernetes"
    assert client.restore_snapshot("snap-b", to="data2", **B).extra["namespace"] == "dtrain-team-b"
    assert client.render_restore("snap-b", to="data3", **B)[0]["metadata"]["namespace"] == "dtrain-team-b"
    assert client.update_volume("data2", storage_class="fast", **B).extra["volume_attributes_class"] == "fast"
    client.create_volume("more", size="1Gi", **B)
    client.create_snapshot("more", name="snap-m", **B)
    assert sorted(s.name for s in client.list_snapshots(**B)) == ["snap-b", "snap-m"]
    client.delete_snapshot("snap-m", **B)
    client.delete_volume("data2", **B)
    assert sorted(v.name for v in client.list_volumes(**B)) == ["data", "more"]
    assert client.list_volumes() == []  # local: untouched
    with pytest.raises(dtrain.errors.NotFoundError, match=r"see 'dtrain snapshot list -p team-b'$"):
        client.get_snapshot("nope", **B)  # the hint names the namespace it looked in
    with pytest.raises(dtrain.errors.NotFoundError, match="no project named 'tem-b'"):
        client.delete_snapshot("snap-b", project="tem-b")
    with pytest.raises(dtrain.errors.SpecError, match="invalid project name 'Team_B'"):
        client.get_volume("data", project="Team_B")


@pytest.mark.slow  # CLI runs: about 20 s
def test_the_cli_takes_the_project_on_every_storage_verb(team_b, home):
    dt = Dtrain(home)
    assert_usage_error(dt("snapshot", "describe", "snap-b", check=False), "no snapshot named 'snap-b'")
    assert dt.json("snapshot", "describe", "snap-b", "-p", "team-b", "--json")["volume"] == "data"
    said = dt("snapshot", "restore", "snap-b", "--to", "data2", "--project", "team-b").stdout
    assert "restored into new volume 'data2'" in said
    assert [v["name"] for v in dt.json("volume", "list", "-p", "team-b", "--json")] == ["data", "data2"]
    assert "data2" not in dt("volume", "list").stdout
    updated = dt("volume", "update", "data2", "--class", "fast", "-p", "team-b").stdout
    hint = re.search(r"'(dtrain [^']*)'", updated).group(1)
    assert hint == "dtrain volume describe data2 -p team-b", updated
    assert "fast" in _run_hint(dt, hint).stdout
    missing = dt("snapshot", "describe", "nope", "-p", "team-b", check=False)
    assert_usage_error(missing)
    assert "snap-b" in _run_hint(dt, missing.stderr.split("'")[-2]).stdout  # snapshot list -p team-b
    assert "deleted" in dt("snapshot", "delete", "snap-b", "-p", "team-b").stdout
    assert "deleted" in dt("volume", "delete", "data2", "-p", "team-b").stdout
    assert [v["name"] for v in dt.json("volume", "list", "-p", "team-b", "--json")] == ["data"]


def test_the_http_api_takes_the_project_on_every_storage_route(team_b, http):  # noqa: F811
    assert http.get("/snapshots/snap-b").status_code == 404
    assert http.get("/snapshots/snap-b", params=B).json()["volume"] == "data"
    made = http.post("/snapshots/snap-b/restore", params=B, json={"to": "data2"})
    assert made.status_code == 201, made.text
    assert [v["name"] for v in http.get("/volumes", params=B).json()] == ["data", "data2"]
    assert http.get("/volumes").json() == []
    assert http.get("/volumes/data2", params=B).json()["backend"] == "kubernetes"
    assert http.patch("/volumes/data2", params=B, json={"storage_class": "fast"}).status_code == 200
    assert http.post("/volumes", params=B, json={"name": "more", "size": "1Gi"}).status_code == 201
    assert http.post("/snapshots", params=B, json={"volume": "more", "name": "snap-m"}).status_code == 201
    assert http.delete("/snapshots/snap-m", params=B).status_code == 200
    assert http.delete("/snapshots/snap-b", params=B).status_code == 200
    assert http.delete("/volumes/data2", params=B).status_code == 204
    assert [v["name"] for v in http.get("/volumes", params=B).json()] == ["data", "more"]
    assert http.get("/snapshots", params=B).json() == []


# (CLI words, HTTP method and path, SDK call) of one verb on volume data / snapshot snap-b
VERBS = [
    (["snapshot", "describe", "snap-b"], ("GET", "/snapshots/snap-b", None), lambda c, p: c.get_snapshot("snap-b", project=p)),
    (["snapshot", "restore", "snap-b", "--to", "data2"], ("POST", "/snapshots/snap-b/restore", {"to": "data2"}),
     lambda c, p: c.restore_snapshot("snap-b", to="data2", project=p)),
    (["snapshot", "delete", "snap-b"], ("DELETE", "/snapshots/snap-b", None), lambda c, p: c.delete_snapshot("snap-b", project=p)),
    (["volume", "list"], ("GET", "/volumes", None), lambda c, p: c.list_volumes(project=p)),
    (["volume", "delete", "data"], ("DELETE", "/volumes/data", None), lambda c, p: c.delete_volume("data", project=p)),
]


@pytest.mark.parametrize("project", ["tem-b", "Team_B"])
def test_a_wrong_project_is_one_line_the_same_at_each_door(team_b, home, http, project):  # noqa: F811
    dt = Dtrain(home)
    client = dtrain.Client(home=home)
    for argv, (method, path, body), call in VERBS:
        said = dt(*argv, "-p", project, check=False)
        assert_usage_error(said)
        line = said.stderr.strip().removeprefix("dtrain: error: ")
        assert project in line and "project" in line, line
        answer = http.request(method, path, params={"project": project}, json=body)
        assert answer.status_code in (404, 422), answer.text
        assert answer.json()["error"] == line, (argv, answer.text)
        with pytest.raises(dtrain.DtrainError) as err:
            call(client, project)
        assert str(err.value) == line
    assert dtrain.Client(home=home).get_snapshot("snap-b", **B).volume == "data"  # nothing was done
