"""A Run:AI, kubectl or AWS CLI user on dtrain (audit 18): the flags their hands type by habit on the job
verbs, each either taken as dtrain's own or refused in one line naming dtrain's word."""

from __future__ import annotations

import json
import re

import pytest
from conftest import assert_usage_error


# ---- Run:AI's submit flags, old CLI and new -----------------------------------------------------
@pytest.mark.parametrize("words, needle", [
    (["--job-name-prefix", "train"], "a job is named in full, as the first word: dtrain submit NAME"),
    (["--name-prefix", "train"], "a job is named in full, as the first word: dtrain submit NAME"),
    (["--args", "--epochs=3"], "the words after '--' are the command and its arguments"),
    (["--gpu-devices-request", "1"], "whole GPUs per process are --gpu N"),
    (["--cpu-core-request", "2"], "CPU threads per process are --cpu N"),
    (["--cpu-core-limit", "2"], "the CPU limit per process is --cpu"),
    (["--cpu-memory-request", "8Gi"], "memory per process is --memory"),
    (["--cpu-memory-limit", "8Gi"], "the memory limit per process is --memory"),
    (["--host-ipc"], "is --large-shm"),
    (["--stdin"], "dtrain notebook NAME"),
    (["--tty"], "dtrain notebook NAME"),
])
def test_a_runai_submit_flag_is_named_with_ours(dt, words, needle):
    """Each was "unrecognized arguments" alone, or (a flag with a value) "the command goes after '--'",
    which the command already did."""
    proc = dt("submit", "train", *words, "--", "true", check=False)
    assert_usage_error(proc, f"{words[0]} is Run:AI's: ", needle, "(see 'dtrain submit --help')")
    assert "the command goes after" not in proc.stderr
    assert dt.json("list", "-A") == []


@pytest.mark.parametrize("verb", ["submit", "submit-mpi", "exec"])
def test_an_unknown_flags_value_is_not_taken_for_a_command_missing_its_dashes(dt, verb):
    """`--frobnicate 1h -- true` said "the command goes after '--'" (the '1h'), the command being
    after '--' already; a command given without '--' is still told so."""
    proc = dt(verb, "train", "--frobnicate", "1h", "--", "true", check=False)
    assert_usage_error(proc, "unrecognized arguments: --frobnicate 1h", f"(see 'dtrain {verb} --help')")
    assert "the command goes after" not in proc.stderr
    proc = dt(verb, "train", "--frobnicate", "1h", "python", "train.py", check=False)
    assert_usage_error(proc, "the command goes after '--'")
    assert dt.json("list", "-A") == []


# ---- -o json, as kubectl get, runai describe job and the AWS CLI print it -------------------------
def test_dash_o_json_is_json_and_wide_is_the_table(dt):
    """`dtrain describe job X -o json` was "'-o' is neither an option ... nor a name", `list -o json`
    "unrecognized arguments"."""
    dt("submit", "hello", "--", "true")
    dt("wait", "hello")
    # Two runs of one verb differ where time passes between them (an age, a node's load): those numbers are
    # compared as numbers, and the still verbs' JSON as is.
    def still(text: str) -> str:
        return re.sub(r"\s+", " ", re.sub(r"\d+(\.\d+)?", "N", text))

    for words in (["list", "-A"], ["describe", "job", "hello"], ["nodes"], ["top", "node"], ["project", "list"]):
        for given in (["-o", "json"], ["--output=json"]):
            shown, want = dt(*words, *given).stdout, dt(*words, "--json").stdout
            if words[0] in ("nodes", "top"):
                assert still(json.dumps(json.loads(shown))) == still(json.dumps(json.loads(want))), words
            else:
                assert json.loads(shown) == json.loads(want), words
        assert still(dt(*words, "-o", "wide").stdout) == still(dt(*words).stdout), words


@pytest.mark.parametrize("words", [["describe", "job", "hello"], ["list"]])
def test_another_output_format_is_one_line_naming_the_three(dt, words):
    dt("submit", "hello", "--", "true")
    proc = dt(*words, "-o", "xml", check=False)
    assert_usage_error(proc, "-o 'xml': the formats here are json (as --json), yaml (the same record as YAML) "
                             "and wide (the table, the default)",
                       f"(see 'dtrain {words[0]} --help')")


# ---- kubectl get pytorchjob NAME ----------------------------------------------------------------
def test_list_with_a_jobs_name_points_at_describe(dt):
    """`dtrain list jobs hello` (kubectl's `get pytorchjobs hello`) said only "unrecognized arguments: hello"."""
    proc = dt("list", "jobs", "hello", check=False)
    assert_usage_error(proc, "unrecognized arguments: hello",
                       "'dtrain list' takes no job's name: see one job with 'dtrain describe job hello'")


def test_list_of_a_jobs_name_alone_points_at_describe(dt):
    """`dtrain list hello` said "'dtrain list' lists jobs, not 'hello'", hello being a job; a word that
    names no job still gets that line."""
    dt("submit", "hello", "--", "true")
    assert_usage_error(dt("list", "hello", check=False),
                       "'dtrain list' takes no job's name: see one job with 'dtrain describe job hello'")
    assert_usage_error(dt("list", "gpus", check=False), "'dtrain list' lists jobs, not 'gpus'")


# ---- aws sagemaker list-training-jobs --status-equals, kubectl's --field-selector status.phase -----
def test_list_keeps_the_jobs_of_one_status(dt):
    """The client and the HTTP API filtered the list by status; the CLI had no flag for it ("unrecognized
    arguments: --status Running"), and the AWS CLI's --status-equals was "unrecognized" alone."""
    dt("submit", "done", "--", "true")
    dt("wait", "done")
    dt("submit", "broken", "--", "false")
    dt("wait", "broken", check=False)
    assert [j["name"] for j in dt.json("list", "--status", "Succeeded")] == ["done"]
    assert [j["name"] for j in dt.json("list", "-A", "--status-equals", "Failed")] == ["broken"]
    assert "broken" in dt("list", "--status", "Failed").stdout and "done" not in dt("list", "--status", "Failed").stdout
    assert dt("list", "--status", "Running").stdout == "No jobs in project 'default' match --status Running\n"
    dt("delete", "done")
    assert [j["name"] for j in dt.json("list", "--status", "Deleted")] == ["done"]  # without --show-deleted
    proc = dt("list", "--status-equals", "Done", check=False)
    assert_usage_error(proc, "invalid status 'Done': use one of Pending, Running, Succeeded, Failed")


# ---- submit -f with a Kubeflow PyTorchJob or a SageMaker request ---------------------------------
@pytest.mark.parametrize("text, needle", [
    ("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: train}\nspec:\n  pytorchReplicaSpecs:\n"
     "    Worker: {replicas: 2}\n", "a Kubernetes manifest (kind: 'PyTorchJob') is no job file (kubectl apply -f takes it)"),
    ('{"TrainingJobName": "train", "AlgorithmSpecification": {"TrainingInputMode": "File"}}',
     "a SageMaker CreateTrainingJob request is no job file (its settings go in the sagemaker: field)"),
])
def test_another_tools_job_file_is_named_as_such(dt, tmp_path, text, needle):
    """`submit -f pytorchjob.yaml` said "unknown job fields apiVersion, kind, metadata, spec", as if four
    fields were misspelt."""
    path = tmp_path / "job.yaml"
    path.write_text(text)
    proc = dt("submit", "-f", str(path), check=False)
    assert_usage_error(proc, needle, "a job file holds dtrain's fields (name, command, processes, gpu, ...; known "
                                     "fields are backend, command")
    assert dt.json("list", "-A") == []


# ---- kubectl describe pytorchjob X ---------------------------------------------------------------
@pytest.mark.parametrize("noun", ["pytorchjob", "mpijobs"])
def test_kubeflows_kind_before_a_jobs_name_is_taken_as_runais_job(dt, noun):
    """`describe pytorchjob hello` said "describe one job", `logs mpijobs hello` "unrecognized arguments:
    hello", `delete pytorchjob hello` "no job named 'pytorchjob'"."""
    dt("submit", "hello", "--", "echo", "hi")
    assert dt("wait", noun, "hello").returncode == 0
    assert dt.json("describe", noun, "hello")["name"] == "hello"
    assert dt("logs", noun, "hello").stdout == "hi\n"
    dt("delete", noun, "hello")
    assert dt.json("list", "-A") == []
