"""Labels on jobs as Run:AI's `--label` and kubectl's `-l` have them: set at submit, selected by
`dtrain list -l`, the SDK's `Client.list(selector=...)` and the API's `label_selector`."""

from __future__ import annotations

import pytest

from conftest import Dtrain, assert_usage_error
from dtrain.errors import SpecError
from dtrain.spec import parse_selector, selects


@pytest.mark.parametrize("selector, want", [
    ("team=vision", {"a"}), ("team==vision", {"a"}), ("team!=vision", {"b", "c"}), ("team", {"a", "b"}),
    ("!team", {"c"}), ("team=vision,pipeline/run-name=n1", {"a"}), ("team=vision,pipeline/run-name=n2", set()),
    (" team = nlp ", {"b"}), ("pipeline/run-name", {"a"}),
])
def test_a_selector_keeps_the_jobs_whose_labels_match_as_kubectl_does(selector, want):
    labels = {"a": {"team": "vision", "pipeline/run-name": "n1"}, "b": {"team": "nlp"}, "c": {}}
    terms = parse_selector(selector)
    assert {name for name, lab in labels.items() if selects(terms, lab)} == want


@pytest.mark.parametrize("selector", ["", " ", "team=a=b", "te am=x", "=x", "team=vi sion", "a," * 600, "!", "x!=y=z"])
def test_a_malformed_selector_is_refused_in_one_line(selector):
    with pytest.raises(SpecError) as e:
        parse_selector(selector)
    assert "\n" not in str(e.value) and "KEY=VALUE" in str(e.value)


@pytest.mark.slow
def test_submit_label_and_list_selector_through_the_cli_sdk_and_api(dt: Dtrain, tmp_path):
    import dtrain
    from server_util import ServerProcess

    dt("submit", "a", "--label", "team=vision", "--label", "pipeline/run-name=n1", "--", "true")
    dt("submit", "b", "--label", "team=nlp", "--label", "team=vision", "--", "true")  # the last value wins, as -e
    dt("submit", "c", "--", "true")
    assert dt.json("describe", "job", "a")["spec"]["labels"] == {"team": "vision", "pipeline/run-name": "n1"}
    assert dt.json("describe", "job", "b")["spec"]["labels"] == {"team": "vision"}
    assert [j["name"] for j in dt.json("list", "-l", "team=vision")] == ["a", "b"]
    assert [j["name"] for j in dt.json("list", "--selector", "!team")] == ["c"]
    table = dt("list", "-l", "pipeline/run-name=n1").stdout
    assert "a " in table and "\nb " not in table and "\nc " not in table
    assert [j.name for j in dtrain.Client(home=dt.home).list(selector="team=vision,pipeline/run-name")] == ["a"]
    assert_usage_error(dt("list", "-l", "team=a=b", check=False), "invalid label selector term", "KEY=VALUE")
    assert_usage_error(dt("submit", "d", "--label", "team", "--", "true", check=False), "invalid --label", "KEY=VALUE")
    assert_usage_error(dt("submit", "d", "--label", "dtrain.io/job=x", "--", "true", check=False), "dtrain's")
    assert_usage_error(dt("submit", "d", "--label", "team=a b", "--", "true", check=False), "invalid value")
    assert dt("describe", "job", "d", check=False).returncode != 0  # nothing stored by a refusal
    dt("delete", "b")
    server = ServerProcess(dt.home, cwd=tmp_path)
    try:
        got = server.http.get("/api/v1/jobs", params={"label_selector": "team=vision"})
        assert got.status_code == 200 and [j["name"] for j in got.json()] == ["a"]  # b is Deleted
        assert got.headers["x-total-count"] == "1"
        assert [j["name"] for j in server.http.get("/api/v1/jobs", params={
            "label_selector": "team=vision", "status": "Deleted"}).json()] == ["b"]
        paged = server.http.get("/api/v1/jobs", params={"label_selector": "!pipeline/run-name", "limit": 1})
        assert [j["name"] for j in paged.json()] == ["c"] and paged.headers["x-total-count"] == "1"
        bad = server.http.get("/api/v1/jobs", params={"label_selector": "team=a=b"})
        assert bad.status_code == 422 and "label_selector" in bad.json()["error"]  # the schema's pattern refuses it
        assert "\n" not in bad.json()["error"]
    finally:
        server.stop()


@pytest.mark.parametrize("selector", ["a", "!a", " ! a ", "a=b", "a==b", "a != b", "a=", "x.io/y=z", "a,b", "a ,b",
                                      "", " ", ":", "a,", "team=a=b", "a!=b=c", "a=b c", "a" * 64, "-a", "a=-b", "!a=b"])
def test_the_api_schemas_selector_pattern_takes_exactly_what_the_parser_takes(selector):
    """The HTTP schema's pattern for label_selector (what a client validates against) and parse_selector
    agree: a schema-valid selector is never refused by the server, nor a refused one schema-valid."""
    import re

    from dtrain.spec import SELECTOR_PATTERN
    try:
        parse_selector(selector)
        taken = True
    except SpecError:
        taken = False
    assert bool(re.match(SELECTOR_PATTERN, selector)) == taken
