"""Small CLI frictions a new-user audit found: an environment variable given twice, the seed's
snapshot request in `describe`'s spec, Run:AI's `top job`, NetApp's --tier, `notebook -x`, and
SageMaker options on a local project."""

from __future__ import annotations

import json

import yaml
from conftest import assert_usage_error


# ---- 1: a variable given two values ------------------------------------------------------------
def test_an_env_variable_given_twice_keeps_the_last_with_a_warning(dt):
    """As a pod does (Kubernetes keeps the last of a name, and warns that it hides the first) and
    `docker run -e`: the last -e wins, and one line says so, naming the variable and both values."""
    proc = dt("submit", "e1", "-e", "A=1", "-e", "A=2", "-e", "B=x", "-e", "B=x", "--dry-run", "--", "env")
    assert yaml.safe_load(proc.stdout)["env"] == {"A": "2", "B": "x"}
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr  # B was given the same value twice: nothing to say
    assert lines[0].startswith("dtrain: warning: -e A given twice ('1', then '2')"), lines[0]
    assert "'2', is used" in lines[0]


def test_an_env_flag_over_the_job_files_variable_says_the_flag_wins(dt, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: e2\ncommand: [env]\nenv:\n  A: '1'\n  C: '3'\n")
    proc = dt("submit", "-f", str(job), "-e", "A=2", "-e", "C=3", "--dry-run")
    assert yaml.safe_load(proc.stdout)["env"] == {"A": "2", "C": "3"}
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "-e A='2' overrides env A: '1' of the job file" in lines[0] and "a flag wins over the file" in lines[0]
    assert dt.json("list") == []  # a dry run: nothing submitted


# ---- 2: the seed's ENABLE_SNAPSHOT + PVC_NAME in describe's spec ---------------------------------
def test_describe_shows_the_seeds_snapshot_request_in_the_spec(dt):
    dt("volume", "create", "data", "--size", "1Gi")
    dt("submit", "snap", "-e", "ENABLE_SNAPSHOT=true", "-e", "PVC_NAME=data", "--pvc", "data:/mnt", "--", "true")
    dt("wait", "snap")
    text = dt("describe", "job", "snap").stdout
    snapshot = next(line for line in text.splitlines() if line.startswith("Snapshot:")).split()[1]
    assert snapshot.startswith("data-")
    assert "  snapshot_on_success: data (from -e ENABLE_SNAPSHOT + PVC_NAME)" in text.splitlines()
    assert dt.json("describe", "job", "snap")["spec"]["snapshot_on_success"] is None  # stored as given


# ---- 3: Run:AI's `top job` ------------------------------------------------------------------------
def test_top_job_lists_the_jobs_as_list_does(dt):
    dt("submit", "t1", "--", "true")
    dt("wait", "t1")
    for words in (("top", "job"), ("top", "jobs")):
        assert [j["name"] for j in dt.json(*words)] == [j["name"] for j in dt.json("list")] == ["t1"]
    table = dt("top", "job").stdout
    assert table.splitlines()[0].split()[:2] == ["NAME", "STATUS"] and "GPUs Allocated (Requested)" in table
    assert [n["name"] for n in dt.json("top", "node")] == [n["name"] for n in dt.json("nodes")]
    assert_usage_error(dt("nodes", "job", check=False), "invalid choice: 'job'")  # `nodes` is the nodes only


# ---- 4: NetApp's --tier ------------------------------------------------------------------------------
def test_netapps_tier_is_pointed_at_class(dt):
    dt("volume", "create", "work", "--size", "1Gi")
    for words in (("volume", "update", "work", "--tier", "fast"), ("volume", "create", "w2", "--tier", "fast"),
                  ("volume", "update", "work", "--tier=fast")):
        proc = dt(*words, check=False)
        assert_usage_error(proc, "--tier is NetApp's: a volume's performance tier is its storage class here: "
                                 "--class fast", f"(see 'dtrain volume {words[1]} --help')")
    assert dt.json("volume", "describe", "work")["storage_class"] == "local"
    assert [v["name"] for v in dt.json("volume", "list")] == ["work"]


# ---- 5: `notebook -x` --------------------------------------------------------------------------------
def test_notebook_with_a_dashed_word_meets_the_naming_rule(dt):
    proc = dt("notebook", "-x", check=False)
    assert_usage_error(proc, "'-x' is neither an option of 'dtrain notebook' nor a name: names are",
                       "(see 'dtrain notebook --help')")
    assert "{NAME,list,open}" not in proc.stderr
    # nothing given at all is still argparse's "required" line
    assert_usage_error(dt("notebook", check=False), "the following arguments are required: {NAME,list,open}")


# ---- 6: SageMaker options on a project whose backend is local ----------------------------------------
def test_sagemaker_options_on_a_local_project_name_the_backend_they_need(dt, tmp_path):
    job = tmp_path / "sm.yaml"
    job.write_text("name: smj\ncommand: [python, -c, 'print(1)']\nsagemaker:\n  instance_type: ml.m5.large\n")
    for words in (("submit", "-f", str(job)), ("submit", "-f", str(job), "--dry-run")):
        assert_usage_error(dt(*words, check=False),
                           "the job file's sagemaker: options (instance_type) need --backend sagemaker (this "
                           "project's backend is local), and SageMaker is not configured",
                           "dtrain config sagemaker --role", "or leave them out to run on backend local")
    assert_usage_error(dt("submit", "smk", "--instance-type", "ml.m5.large", "--", "true", check=False),
                       "the SageMaker options (instance_type) need --backend sagemaker")
    # asked for by name, the backend's own line stays; --local needs no AWS
    proc = dt("submit", "-f", str(job), "--backend", "sagemaker", check=False)
    assert_usage_error(proc, "SageMaker is not configured")
    assert "need --backend sagemaker" not in proc.stderr
    assert json.loads(dt("submit", "-f", str(job), "--local", "--dry-run").stdout)
    assert dt.json("list", "-A") == []
