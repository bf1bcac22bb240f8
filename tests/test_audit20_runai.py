"""A Run:AI, kubectl or AWS CLI user on dtrain (audit 20): `-o yaml`, the Run:AI submit flags dtrain answers
otherwise, and kubectl's KIND/NAME of a kind that is no job, each taken or refused in one line naming dtrain's form."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import assert_usage_error


# ---- kubectl's and Run:AI's -o yaml, the AWS CLI's --output yaml ----------------------------------
def _block_yaml(text: str):
    """The one YAML document `text` holds, written as YAML is (JSON is YAML too: it must not pass as it;
    an empty list is '[]' in both)."""
    value = yaml.safe_load(text)
    assert not value or not text.lstrip().startswith(("{", "[")), text
    return value


def test_dash_o_yaml_is_the_json_record_as_yaml(dt):
    """`dtrain describe job X -o yaml` was "-o 'yaml': the formats here are json (as --json) and wide"."""
    dt("submit", "hello", "--", "echo", "hi")
    dt("wait", "hello")
    dt("volume", "create", "data", "--size", "1Gi")
    for words in (["list", "-A"], ["describe", "job", "hello"], ["project", "list"], ["volume", "list"],
                  ["volume", "describe", "data"], ["notebook", "list"]):
        want = json.loads(dt(*words, "--json").stdout)
        for given in (["-o", "yaml"], ["--output=yaml"]):
            assert _block_yaml(dt(*words, *given).stdout) == want, words
    assert isinstance(_block_yaml(dt("list", "-o", "yaml").stdout), list)  # a list stays a list
    assert _block_yaml(dt("submit", "again", "-o", "yaml", "--", "true").stdout)["name"] == "again"


@pytest.mark.parametrize("words", [["wait", "hello"], ["logs", "hello"], ["submit", "other", "--dry-run"]])
def test_dash_o_yaml_where_json_is_a_line_each_is_a_document_each(dt, words):
    """`wait`, `logs` and a dry run print one JSON object a line: as YAML, one document each."""
    dt("submit", "hello", "--", "echo", "hi")
    dt("wait", "hello")
    command = ["--", "true"] if words[0] == "submit" else []
    want = [json.loads(line) for line in dt(*words, "--json", *command).stdout.splitlines()]
    shown = dt(*words, "-o", "yaml", *command).stdout
    assert not shown.lstrip().startswith("{"), shown
    assert list(yaml.safe_load_all(shown)) == want and want


# ---- Run:AI's submit flags that dtrain answers otherwise -----------------------------------------
@pytest.mark.parametrize("words, needle", [
    (["--ttl-after-finish", "1h"], "an ended job is kept until 'dtrain delete NAME'"),
    (["--completions", "3"], "or N processes of one run with dtrain submit-dist NAME --processes N -- COMMAND"),
    (["--parallelism", "2"], "or N processes of one run with dtrain submit-dist NAME --processes N -- COMMAND"),
    (["--annotation", "team=vision"], "a job's own KEY=VALUE is a label: --label KEY=VALUE"),
    (["--node-pools", "a100"], "nodes are picked by their labels: --node-selector KEY=VALUE"),
    (["--service-type", "nodeport"], "a notebook's is: dtrain notebook NAME"),
    (["--port", "8080"], "'dtrain notebook open NAME' prints its URL"),
    (["--git-sync", "source=https://example.com/r.git"], "no repository is cloned for a job here"),
    (["--run-as-user"], "a job runs as its image's user"),
    (["--create-home-dir"], "a home folder is a volume: --pvc VOLUME:MOUNT with -e HOME=MOUNT"),
    (["--template", "train"], "settings kept in a file are a job file: dtrain submit NAME -f FILE"),
    (["--mig-profile", "1g.10gb"], "GPUs are whole here: --gpu N per process"),
])
def test_a_runai_flag_dtrain_answers_otherwise_is_named(dt, words, needle):
    """Each was argparse's "unrecognized arguments" alone."""
    proc = dt("submit", "train", *words, "--", "true", check=False)
    assert_usage_error(proc, f"{words[0]} is Run:AI's: ", needle, "(see 'dtrain submit --help')")
    assert "the command goes after" not in proc.stderr
    assert dt.json("list", "-A") == []


# ---- kubectl's KIND/NAME of a kind that is no job -------------------------------------------------
@pytest.mark.parametrize("words, fix", [
    (["describe", "volume/data"], "use 'dtrain volume describe data'"),
    (["delete", "volume/data"], "use 'dtrain volume delete data'"),
    (["describe", "snapshot/s1"], "use 'dtrain snapshot describe s1'"),
    (["wait", "snapshot/s1"], "use 'dtrain snapshot wait s1'"),
    (["suspend", "snapshot/s1"], "use 'dtrain snapshot describe s1'"),
    (["logs", "volume/data"], "use 'dtrain volume describe data'"),
    (["describe", "project/team"], "use 'dtrain project list'"),
    (["delete", "project/team"], "use 'dtrain project delete team'"),
    (["describe", "node/n1"], "use 'dtrain nodes'"),
    (["describe", "job", "volume/data"], "use 'dtrain volume describe data'"),
])
def test_another_kinds_kind_slash_name_points_at_its_command(dt, words, fix):
    """`dtrain describe volume/data` was "invalid job name 'volume/data'"."""
    dt("volume", "create", "data", "--size", "1Gi")
    assert_usage_error(dt(*words, check=False), f"'dtrain {words[0]}' is for jobs: {fix}")
    assert [v["name"] for v in dt.json("volume", "list")] == ["data"]


def test_a_job_verb_of_another_kind_names_an_action_that_exists(dt):
    """`dtrain wait volume data` named 'dtrain volume wait NAME', which is no command."""
    assert_usage_error(dt("wait", "volume", "data", check=False),
                       "'dtrain wait' is for jobs: use 'dtrain volume describe NAME'")


def test_a_notebooks_kind_slash_name_is_the_job(dt):
    dt("submit", "hello", "--", "true")
    assert dt.json("describe", "notebook/hello")["name"] == "hello"
