"""A Run:AI, kubectl or AWS CLI user on dtrain (audit 18): the flags their hands type by habit on the job
verbs, each either taken as dtrain's own or refused in one line naming dtrain's word."""

from __future__ import annotations

import json

import pytest
from conftest import assert_usage_error


# ---- -o json, as kubectl get, runai describe job and the AWS CLI print it -------------------------
def test_dash_o_json_is_json_and_wide_is_the_table(dt):
    """`dtrain describe job X -o json` was "'-o' is neither an option ... nor a name", `list -o json`
    "unrecognized arguments"."""
    dt("submit", "hello", "--", "true")
    dt("wait", "hello")
    for words in (["list", "-A"], ["describe", "job", "hello"], ["nodes"], ["top", "node"], ["project", "list"]):
        assert json.loads(dt(*words, "-o", "json").stdout) == json.loads(dt(*words, "--json").stdout), words
        assert json.loads(dt(*words, "--output=json").stdout) == json.loads(dt(*words, "--json").stdout), words
        assert dt(*words, "-o", "wide").stdout == dt(*words).stdout, words


@pytest.mark.parametrize("words", [["describe", "job", "hello"], ["list"]])
def test_another_output_format_is_one_line_naming_the_two(dt, words):
    dt("submit", "hello", "--", "true")
    proc = dt(*words, "-o", "yaml", check=False)
    assert_usage_error(proc, "-o 'yaml': the formats here are json (as --json) and wide (the table, the default)",
                       f"(see 'dtrain {words[0]} --help')")
