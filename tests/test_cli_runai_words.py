"""Run:AI's and kubectl's words on the job verbs: the noun before a job's name, --pod, -e values
shown as they are given, and one size format."""

from __future__ import annotations

import pytest
from conftest import Dtrain, assert_usage_error

from dtrain.cli import format as fmt


@pytest.mark.parametrize("words", [["logs", "job", "nosuch"], ["logs", "jobs", "nosuch", "--tail", "1"],
                                   ["exec", "job", "nosuch", "--", "true"], ["bash", "job", "nosuch"],
                                   ["artifacts", "job", "nosuch", "--to", "out"], ["describe", "job", "nosuch"],
                                   ["wait", "job", "nosuch"], ["delete", "job", "nosuch"]])
def test_every_verb_naming_one_job_takes_the_word_job_before_it(dt: Dtrain, words):
    """`runai describe job X` worked, `dtrain logs job X` was refused ("takes the job's name alone")."""
    assert_usage_error(dt(*words, check=False), "no job named 'nosuch'")


def test_logs_job_name_prints_that_jobs_lines_and_logs_job_alone_is_the_job_named_job(dt: Dtrain):
    dt("submit", "hello", "--", "echo", "hi")
    dt("wait", "hello")
    assert dt("logs", "job", "hello").stdout == "hi\n"
    assert_usage_error(dt("logs", "job", check=False), "no job named 'job'")


@pytest.mark.slow
@pytest.mark.parametrize("verb, tail", [("exec", ["--", "ls"]), ("bash", []), ("logs", [])])
def test_pod_names_the_exact_rank_to_type(dt: Dtrain, verb, tail):
    """`runai logs JOB --pod JOB-worker-0`: the hint said only "--rank R"; it names the rank that pod runs."""
    dt("submit-dist", "pair", "--processes", "2", "-p", "default", "--", "true")
    proc = dt(verb, "job", "pair", "--pod", "pair-1", *tail, check=False)  # a local job's rank R: pod NAME-R
    fix = f"dtrain {verb} pair --rank 1" + (" -- COMMAND" if verb == "exec" else "")
    assert_usage_error(proc, "pod 'pair-1' runs rank 1: " + fix)
    assert_usage_error(dt(verb, "pair", "--pod", "pair-7", *tail, check=False),
                       "'pair-7' is no pod of job 'pair'", "its pods: pair-0, pair-1", "dtrain describe job pair")


def test_logs_p_alone_names_previous_the_kubectl_habit(dt: Dtrain):
    """`dtrain logs JOB -p` (kubectl's --previous) said only "argument -p/--project: expected one argument"."""
    for words in (["logs", "job1", "-p"], ["logs", "job1", "-p", "--tail", "5"]):
        assert_usage_error(dt(*words, check=False), "expected one argument (-p names a project here",
                           "the attempt before a restart is --previous")
    assert "--previous" not in dt("describe", "job1", "-p", check=False).stderr  # describe has no --previous


@pytest.mark.parametrize("words", [["-l", "team=a"], ["--labels", "team=a"], ["--labels=team=a"]])
def test_kubectls_label_flags_on_submit_name_label(dt: Dtrain, words):
    """`dtrain submit x -l team=a -- true` (kubectl run's -l) was told that the command goes after '--'."""
    assert_usage_error(dt("submit", "x", *words, "--", "true", check=False),
                       "is kubectl's: a job's label is --label KEY=VALUE")
    assert "the command goes after" not in dt("submit", "x", *words, "--", "true", check=False).stderr


@pytest.mark.parametrize("flag", ["--all", "-A"])
def test_all_on_a_verb_without_it_names_the_verbs_that_take_it(dt: Dtrain, flag):
    """README's "--all takes every job of the project that the verb takes": `dtrain wait --all` said
    "'--all' is neither an option of 'dtrain wait' nor a name: names are 1-53 lower-case letters ..."."""
    assert_usage_error(dt("wait", flag, check=False),
                       f"'dtrain wait' takes no {flag}: name the jobs (dtrain wait NAME [NAME...]); --all is delete's")
    assert_usage_error(dt("wait", "j1", flag, check=False), f"'dtrain wait' takes no {flag}: name the jobs")
    assert_usage_error(dt("logs", flag, check=False), f"'dtrain logs' takes no {flag}: name the job (dtrain logs NAME)")


def test_shell_words_read_back_as_the_value():
    import shlex
    for value in ("", "x y", "a=b", "it's", "$HOME", "plain", "-x"):
        assert shlex.split(fmt.shell_word(value)) == [value]
    assert fmt.shell_word("l1\nl2\\'") == "$'l1\\nl2\\\\\\''"  # bash's $'...': one line


@pytest.mark.parametrize("n, shown", [(None, "-"), (0, "0B"), (1023, "1023B"), (1024, "1Ki"), (1536, "1.5Ki"),
                                      (3 << 20, "3Mi"), (1 << 30, "1Gi"), ((1 << 30) - 1, "1Gi"),
                                      (5 << 40, "5Ti"), (3 << 60, "3Ei")])
def test_sizes_read_as_volume_sizes_are_given(n, shown):
    """`snapshot describe` said 1.0 GiB where `volume describe` said 1Gi."""
    assert fmt.size(n) == shown


def test_snapshot_and_volume_describe_give_sizes_alike(dt: Dtrain):
    dt("volume", "create", "data", "--size", "1Mi")
    path = dt.json("volume", "describe", "data")["extra"]["path"]
    with open(f"{path}/f", "wb") as f:
        f.write(b"x" * 3072)
    dt("snapshot", "create", "data", "--name", "s1")
    assert "Size: 3Ki" in dt("snapshot", "describe", "s1").stdout.splitlines()
    assert "Size: 1Mi" in dt("volume", "describe", "data").stdout.splitlines()
    assert dt.json("snapshot", "describe", "s1")["bytes"] == 3072  # --json keeps the bytes


@pytest.mark.parametrize("words, given, fix", [
    (["volume", "update", "x", "--ti", "5"], "--ti", "give --tier or --timeout"),
    (["list", "--show-del"], "--show-del", "give --show-deleted"),
    (["logs", "x", "--ta=2"], "--ta=2", "give --tail=2"),
    (["--back", "local", "list"], "--back", "give --backend")])
def test_a_flag_is_never_abbreviated_and_its_start_names_the_whole_flag(dt: Dtrain, words, given, fix):
    """argparse took `--ti` for whichever flag it began, and refused it as ambiguous once two did
    (--timeout, --tier); kubectl's and runai's flags are never abbreviated."""
    proc = dt(*words, check=False)
    assert_usage_error(proc, f"unrecognized arguments: {given}", f"flags are not abbreviated: {fix}")


def test_a_flag_given_a_value_is_not_taken_for_the_start_of_a_switch(dt: Dtrain):
    """`artifacts J --out d` said "(flags are not abbreviated: give --output-data)", a switch that takes no
    folder, where the flag missing is --to."""
    proc = dt("artifacts", "j", "--out", "d", check=False)
    assert_usage_error(proc, "unrecognized arguments: --out; the following arguments are required: --to")
    assert "--output-data" not in proc.stderr
    # without a value it may be the switch's start
    assert "give --output-data" in dt("artifacts", "j", "--out", check=False).stderr
    assert "ambiguous" not in proc.stderr and "invalid choice" not in proc.stderr
