"""Issue 12: the CLI behaves like the tools its users know. One test (at least) per numbered item."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import DTRAIN, assert_usage_error


def run(*args, home=None, check=False, timeout=120, cwd=None):
    import os
    env = {**os.environ, **({"DTRAIN_HOME": str(home)} if home else {})}
    return subprocess.run([DTRAIN, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd,
                          check=check)


# ---- 2: workload groups are argparse subcommands with help -------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("group, verbs", [("lanes", ["prepare", "synth", "train", "predict", "evaluate"]),
                                          ("cifar10", ["train", "synth"]), ("bench", ["scaling"])])
def test_item02_workload_group_help_lists_its_commands(group, verbs):
    proc = run(group, "--help")
    assert proc.returncode == 0 and proc.stdout.startswith(f"usage: dtrain {group} ")
    for verb in verbs:
        assert f"    {verb} " in proc.stdout
        leaf = run(group, verb, "--help")
        assert leaf.returncode == 0, leaf.stderr
        assert leaf.stdout.startswith(f"usage: dtrain {group} {verb} "), leaf.stdout[:200]


def test_item02_cifar10_synth_runs(tmp_path):
    proc = run("cifar10", "synth", "--out", str(tmp_path), "--n-train", "20", "--n-test", "10")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "cifar-10-batches-py" / "test_batch").is_file()


def test_item02_unknown_workload_verb_is_a_one_line_error():
    proc = run("lanes", "nosuch")
    assert proc.returncode == 2 and "invalid choice: 'nosuch'" in proc.stderr and "Traceback" not in proc.stderr


# ---- 1: submit uses the configured default backend ----------------------------------------------
@pytest.mark.slow
def test_item01_submit_uses_the_configured_backend(tmp_path):
    home = tmp_path / "home"
    assert run("config", "backend", "kubernetes", home=home).returncode == 0
    proc = run("submit", "k1", "--image", "x", "--dry-run", "--", "echo", "hi", home=home)
    assert proc.returncode == 0, proc.stderr
    docs = list(__import__("yaml").safe_load_all(proc.stdout))
    assert docs[-1]["kind"] == "Job" and docs[-1]["apiVersion"] == "batch/v1"
    local = run("submit", "k1", "--backend", "local", "--dry-run", "--", "echo", "hi", home=home)
    assert "backend: local" in local.stdout and "apiVersion" not in local.stdout


def test_a_local_dry_run_refuses_what_submit_would(tmp_path):
    """More processes than the machine runs: the dry run says so, as submit does."""
    from dtrain.backends.local.backend import max_local_processes

    home = tmp_path / "home"
    too_many = str(max_local_processes()[0] + 1)
    proc = run("submit-dist", "j", "--processes", too_many, "--dry-run", "--", "echo", "hi", home=home)
    assert_usage_error(proc, f"asks for {too_many} processes")


# ---- 3: error messages name verbs that exist (also checked for every message in test_docs) ------
def test_item03_volume_in_use_names_dtrain_delete(tmp_path):
    home = tmp_path / "home"
    assert run("volume", "create", "v", "--size", "1Mi", home=home).returncode == 0
    assert run("submit", "j", "--pvc", "v:/mnt", "--", "sleep", "30", home=home).returncode == 0
    try:
        proc = run("volume", "delete", "v", home=home)
        assert proc.returncode == 2 and "('dtrain delete j')" in proc.stderr and "cancel" not in proc.stderr
    finally:
        run("delete", "j", home=home)


# ---- 7 and 8: delete checks every name first; Run:AI's nouns ------------------------------------
def test_item07_delete_checks_all_names_before_deleting_any(tmp_path):
    home = tmp_path / "home"
    for name in ("a", "b"):
        assert run("submit", name, "--", "true", home=home).returncode == 0
    proc = run("delete", "a", "nosuch", "b", "other", home=home)
    assert_usage_error(proc, "'nosuch'", "'other'", "nothing was deleted")
    statuses = {j["name"]: j["status"] for j in json.loads(run("list", "--json", home=home).stdout)}
    assert set(statuses) == {"a", "b"} and "Deleted" not in statuses.values()


def test_item08_nouns_as_runai_writes_them(tmp_path):
    home = tmp_path / "home"
    assert run("submit", "x", "--", "true", home=home).returncode == 0
    assert run("wait", "x", home=home).returncode == 0
    assert run("list", "jobs", home=home).returncode == 0
    assert json.loads(run("describe", "job", "x", "--json", home=home).stdout)["name"] == "x"
    assert json.loads(run("describe", "x", "--json", home=home).stdout)["name"] == "x"
    proc = run("delete", "job", "x", home=home)
    assert proc.returncode == 0 and "The job 'x' has been deleted" in proc.stdout
    assert_usage_error(run("delete", "volume", "x", home=home), "dtrain volume delete NAME")
    # `runai top node` (as kubectl's `top node`) names the kind: the same table as `dtrain nodes`
    nodes = json.loads(run("nodes", "--json", home=home).stdout)
    assert [n["name"] for n in nodes] and all(n["cpus"] for n in nodes)
    for words in (("top", "node"), ("top", "nodes"), ("nodes", "node")):
        assert [n["name"] for n in json.loads(run(*words, "--json", home=home).stdout)] == [n["name"] for n in nodes]
    listed = [j["name"] for j in json.loads(run("list", "--show-deleted", "--json", home=home).stdout)]
    assert listed == ["x"] and json.loads(run("top", "job", "--json", home=home).stdout) == []  # `runai top job`: `list`'s


# ---- 9: logs --rank / -t checked; wait --timeout has its own exit code --------------------------
def test_item09_logs_rank_out_of_range_and_negative_tail(tmp_path):
    home = tmp_path / "home"
    assert run("submit", "one", "--", "echo", "hi", home=home).returncode == 0
    assert run("wait", "one", home=home).returncode == 0
    assert_usage_error(run("logs", "one", "--rank", "5", home=home), "1 process, rank 0")
    assert run("logs", "one", "-t", "-1", home=home).stdout == "hi\n"  # kubectl's -1: every line
    assert_usage_error(run("logs", "one", "-t", "-2", home=home), "tail")


def test_item09_wait_timeout_exit_code_is_not_a_one_line_error(tmp_path):
    home = tmp_path / "home"
    assert run("submit", "slow", "--", "sleep", "30", home=home).returncode == 0
    try:
        proc = run("wait", "slow", "--timeout", "0.5", home=home)
        assert proc.returncode == 124 and "still" in proc.stderr
    finally:
        run("delete", "slow", home=home)
    assert run("wait", "slow", home=home).returncode == 1  # Deleted: ended, not Succeeded
    assert "124" in run("wait", "--help").stdout


# ---- 11: projects must exist before they become the default -------------------------------------
def test_item11_config_project_must_exist_and_create_twice_says_so(tmp_path):
    home = tmp_path / "home"
    assert_usage_error(run("config", "project", "nosuch", home=home), "dtrain project create nosuch")
    assert run("project", "create", "p1", home=home).stdout.strip() == "project 'p1' created"
    again = run("project", "create", "p1", home=home)
    assert again.returncode == 0 and "already exists" in again.stdout and "created" not in again.stdout
    assert run("config", "project", "p1", home=home).returncode == 0
    assert run("config", "project", "default", home=home).returncode == 0


# ---- 12: --version, help on every option, --json, shell-quoted command --------------------------
def test_item12_version():
    from dtrain import __version__
    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"dtrain {__version__}"


def _actions(parser, path="dtrain"):
    import argparse
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action._name_parser_map.items():  # every subcommand, aliases included
                yield from _actions(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def test_item12_every_option_has_help():
    from cli_words import workload_parser
    from dtrain.cli.main import WORKLOADS, build_parser
    missing = [f"{path} {a.option_strings or a.dest}" for path, a in _actions(build_parser())
               if not a.help and a.dest != "workload_argv"]
    for group, verb in WORKLOADS:  # the workloads' own parsers
        missing += [f"dtrain {group} {verb} {a.option_strings or a.dest}"
                    for _, a in _actions(workload_parser(group, verb)) if not a.help]
    assert missing == []


def test_item12_json_on_submit_wait_logs_and_quoted_command(tmp_path):
    home = tmp_path / "home"
    sub = run("submit", "q", "--json", "--", "sh", "-c", "echo 'a b'; echo second", home=home)
    assert json.loads(sub.stdout)["name"] == "q"
    waited = run("wait", "q", "--json", home=home)
    assert json.loads(waited.stdout)["status"] == "Succeeded"
    lines = [json.loads(line) for line in run("logs", "q", "--json", home=home).stdout.splitlines()]
    assert [x["text"] for x in lines] == ["a b", "second"] and all(x["rank"] == 0 for x in lines)
    described = run("describe", "job", "q", home=home).stdout
    assert "command: sh -c 'echo '\"'\"'a b'\"'\"'; echo second'" in described


# ---- 13: --dry-run YAML has no anchors ----------------------------------------------------------
def test_item13_dry_run_yaml_is_plain(tmp_path):
    import yaml
    from dtrain.backends.kubernetes.backend import KubernetesBackend
    from dtrain.backends.kubernetes.config import KubernetesConfig
    from dtrain.spec import JobSpec
    spec = JobSpec(name="k1", command=("echo", "hi"), processes=2, launcher="torchrun", image="x",
                   volumes=("local:1Gi:/mnt",), large_shm=True, backend="kubernetes",
                   project="default")  # as the CLI fills it in (an unset project is left out of the spec's record)
    docs = KubernetesBackend(KubernetesConfig()).render(spec)
    assert "&id" in yaml.safe_dump_all(docs, sort_keys=False)  # the renderer does share objects
    proc = run("submit-dist", "k1", "--backend", "kubernetes", "--processes", "2", "--image", "x", "--large-shm",
               "--pvc", "local:1Gi:/mnt", "--dry-run", "--", "echo", "hi", home=tmp_path / "home")
    assert proc.returncode == 0, proc.stderr
    assert "&id" not in proc.stdout and "*id" not in proc.stdout
    assert list(yaml.safe_load_all(proc.stdout)) == docs


# ---- 14: purge and TTL; list hides deleted jobs -------------------------------------------------
def test_item14_list_hides_deleted_and_purge_forgets(tmp_path):
    home = tmp_path / "home"
    for name in ("keep", "gone", "purged"):
        assert run("submit", name, "--", "true", home=home).returncode == 0
    assert run("delete", "gone", home=home).returncode == 0
    names = [j["name"] for j in json.loads(run("list", "--json", home=home).stdout)]
    assert names == ["keep", "purged"]
    shown = {j["name"]: j["status"] for j in json.loads(run("list", "--show-deleted", "--json", home=home).stdout)}
    assert shown["gone"] == "Deleted"
    assert run("delete", "--purge", "purged", home=home).stdout.strip() == "The job 'purged' has been purged"
    assert run("describe", "job", "purged", home=home).returncode == 2
    assert not (home / "jobs" / "purged").exists()
    assert run("submit", "purged", "--", "true", home=home).returncode == 0  # the name is free again


@pytest.mark.slow
def test_item14_deleted_job_ttl_in_config(tmp_path):
    home = tmp_path / "home"
    assert run("submit", "old", "--", "true", home=home).returncode == 0
    assert run("delete", "old", home=home).returncode == 0
    (home / "config.yaml").write_text("project: default\nbackend: local\ndeleted_job_ttl: 1h\n")
    assert "old" in run("list", "--show-deleted", home=home).stdout  # deleted just now: kept
    (home / "config.yaml").write_text("project: default\nbackend: local\ndeleted_job_ttl: 0s\n")
    import time
    time.sleep(1.1)
    assert "old" not in run("list", "--show-deleted", home=home).stdout
    assert run("describe", "job", "old", home=home).returncode == 2
    (home / "config.yaml").write_text("deleted_job_ttl: soon\n")
    assert_usage_error(run("list", home=home), "deleted_job_ttl")


# ---- 10: a Pending job says why it waits --------------------------------------------------------
def _message_when_pending(home, name, env, contains, timeout=30):
    import os
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = subprocess.run([DTRAIN, "describe", "job", name, "--json"], capture_output=True, text=True,
                              env={**os.environ, "DTRAIN_HOME": str(home), **env}, timeout=60)
        info = json.loads(proc.stdout)
        assert info["status"] == "Pending", info
        if contains in info["message"]:
            return info["message"]
        time.sleep(0.2)
    raise AssertionError(f"{name}: never said {contains!r}; last {info['message']!r}")


@pytest.mark.slow
def test_item10_pending_job_says_why(tmp_path):
    import os
    home = tmp_path / "home"
    env = {"DTRAIN_GPUS": "2"}

    def dt(*args):
        return subprocess.run([DTRAIN, *args], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "DTRAIN_HOME": str(home), **env})

    assert dt("project", "create", "team", "--gpu-quota", "1").returncode == 0
    try:
        assert dt("submit", "holder", "-p", "team", "--gpu", "1", "--", "sleep", "60").returncode == 0
        assert dt("submit", "other", "--gpu", "1", "--", "sleep", "60").returncode == 0  # project default
        assert dt("submit", "b", "-p", "team", "--gpu", "1", "--", "true").returncode == 0
        assert dt("submit", "c", "-p", "team", "--gpu", "1", "--", "true").returncode == 0
        assert dt("submit-dist", "big", "--processes", "2", "--gpu", "1", "--", "true").returncode == 0
        msg_b = _message_when_pending(home, "b", env, "project quota 1 GPU, 1 in use")
        assert msg_b.startswith("waiting: ")
        msg_c = _message_when_pending(home, "c", env, "2nd in project 'team''s queue")
        assert "project quota 1 GPU, 1 in use" in msg_c
        _message_when_pending(home, "big", env, "needs 2 GPUs, 0 free")
        assert "waiting:" in dt("describe", "job", "big").stdout
    finally:
        for name in ("holder", "other", "b", "c", "big"):
            dt("delete", name)


# ---- 6: YAML wrong types and an SDK volume given as a string: one line, exit 2 ------------------
@pytest.mark.parametrize("text, needle", [("env: [A=1]", "env"), ("volumes: 5", "volumes")])
def test_item06_yaml_wrong_types_are_one_line(tmp_path, text, needle):
    job = tmp_path / "job.yaml"
    job.write_text(f"name: j\ncommand: [echo, hi]\n{text}\n")
    assert_usage_error(run("submit", "-f", str(job), home=tmp_path / "home"), needle)


def test_item06_sdk_volume_as_a_string():
    from dtrain import JobSpec, VolumeMount
    spec = JobSpec(name="j", command=("echo",), volumes=("data:/mnt",))
    assert spec.volumes == (VolumeMount(volume="data", mount_path="/mnt"),)


# ---- 17 and 18: the README says how to try GPUs without GPUs; the docs that lied -----------------
def test_item17_readme_shows_dtrain_gpus_in_a_block_that_runs():
    import test_docs
    readme = test_docs.REPO / "README.md"
    runnable = [c.text for c in test_docs.console_commands(readme) if c.runnable]
    assert "export DTRAIN_GPUS=2" in runnable
    assert any(c.startswith("dtrain project create") and "--gpu-quota" in c for c in runnable)


def test_item18_three_ways_and_kubernetes_doc():
    import test_docs
    readme = test_docs.REPO / "README.md"
    runnable = " ".join(c.text for c in test_docs.console_commands(readme) if c.runnable)
    for needle in ("dtrain cifar10 synth", "dtrain submit-dist cifar", "dtrain submit -f job.yaml", "dtrain.JobSpec"):
        assert needle in runnable  # each door of "the same job three ways" runs in test_docs
    assert "--storage-class" not in (test_docs.REPO / "docs" / "kubernetes.md").read_text()
    assert "SHA_TRAIN=$(sha256sum" in readme.read_text() and "`SNAP` is the" in readme.read_text()


# ---- 16: the volume USED column shows the size on disk ------------------------------------------
def test_item16_volume_used_is_the_size_on_disk(tmp_path):
    import os
    home = tmp_path / "home"
    assert run("volume", "create", "v", "--size", "1Mi", home=home).returncode == 0
    empty = json.loads(run("volume", "describe", "v", "--json", home=home).stdout)
    path = empty["extra"]["path"]
    with open(os.path.join(path, "data.bin"), "wb") as f:
        f.write(os.urandom(300_000))
    os.link(os.path.join(path, "data.bin"), os.path.join(path, "same.bin"))  # a hard link counts once
    blocks = os.stat(os.path.join(path, "data.bin")).st_blocks * 512
    vols = json.loads(run("volume", "list", "--json", home=home).stdout)
    assert blocks >= 300_000 and vols[0]["used_bytes"] - empty["used_bytes"] == blocks
    table = run("volume", "list", home=home).stdout.splitlines()
    assert table[0].split()[:4] == ["NAME", "CLASS", "SIZE", "USED"]
    from dtrain.cli import format as fmt
    assert f"  {fmt.size(vols[0]['used_bytes'])}  " in table[1]


# ---- 5: storage verbs take --backend and --dry-run ---------------------------------------------
def test_item05_volume_create_dry_run_on_kubernetes_without_changing_the_default(tmp_path):
    import yaml
    home = tmp_path / "home"
    proc = run("volume", "create", "data", "--size", "5Gi", "--backend", "kubernetes", "--dry-run", home=home)
    assert proc.returncode == 0, proc.stderr
    [pvc] = list(yaml.safe_load_all(proc.stdout))
    assert pvc["kind"] == "PersistentVolumeClaim" and pvc["spec"]["resources"]["requests"]["storage"] == "5Gi"
    local = run("volume", "create", "data", "--size", "5Gi", "--dry-run", home=home)
    assert local.returncode == 0 and "backend: local" in local.stdout
    assert json.loads(run("volume", "list", "--json", home=home).stdout) == []  # nothing made
    assert_usage_error(run("volume", "create", "data", "--size", "0", "--dry-run", home=home), "volume size")
    assert run("volume", "create", "data", "--size", "1Mi", home=home).returncode == 0
    assert run("snapshot", "create", "data", "--name", "s1", "--dry-run", home=home).returncode == 0
    assert json.loads(run("snapshot", "list", "--json", home=home).stdout) == []
    assert run("volume", "delete", "data", "--dry-run", home=home).stdout.strip() == (
        "volume 'data' would be deleted (dry run)")
    assert len(json.loads(run("volume", "list", "--json", home=home).stdout)) == 1
    assert_usage_error(run("snapshot", "restore", "nosuch", "--to", "x", "--dry-run", home=home), "nosuch")
    # the verb's own --backend reaches SageMaker's one-line refusal, as the global flag does
    for verb in (("volume", "list"), ("snapshot", "list")):
        assert_usage_error(run(*verb, "--backend", "sagemaker", home=home), "does not support volumes", "--channel")


def test_item05_snapshot_and_restore_render_what_create_sends_on_kubernetes():
    from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig
    from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer
    cluster = FakeCluster()
    server = FakeKubeServer(cluster).start()
    client = server.api_client()
    try:
        backend = KubernetesBackend(KubernetesConfig(project="lanes", image="i:1"), api_client=client)
        backend.create_volume("data", size="2Gi")
        posts = len([r for r in cluster.requests if r[0] == "POST"])
        [snap] = backend.render_snapshot("data", name="s1", job=None)
        assert len([r for r in cluster.requests if r[0] == "POST"]) == posts  # a dry run sends nothing
        assert snap["kind"] == "VolumeSnapshot" and snap["spec"]["source"]["persistentVolumeClaimName"] == "data"
        made = backend.create_snapshot("data", name="s1")
        assert made.name == "s1" and cluster.get("snapshot.storage.k8s.io", "volumesnapshots", "dtrain-lanes", "s1")
        [pvc] = backend.render_restore("s1", to="copy")
        assert pvc["spec"]["dataSource"]["name"] == "s1" and pvc["metadata"]["name"] == "copy"
    finally:
        client.close()
        server.close()


# ---- the default project is a project: listed, and named in the hint of an unknown one ----------
def test_the_default_project_is_always_listed(tmp_path):
    home = tmp_path / "home"
    listed = json.loads(run("project", "list", "--json", home=home).stdout)
    assert [(p["name"], p["gpu_quota"], p["jobs"]) for p in listed] == [("default", None, 0)]
    assert "default (default)" in run("project", "list", home=home).stdout
    assert_usage_error(run("submit", "x", "-p", "nope", "--", "true", home=home),
                       "no project named 'nope'", "(projects: default)")
    assert run("submit", "one", "--", "true", home=home).returncode == 0
    assert run("project", "create", "team", home=home).returncode == 0
    assert "already exists" in run("project", "create", "default", home=home).stdout
    listed = json.loads(run("project", "list", "--json", home=home).stdout)
    assert [(p["name"], p["jobs"]) for p in listed] == [("default", 1), ("team", 0)]
    assert [p["default"] for p in listed] == [True, False]  # as GET /projects says it
    assert run("project", "create", "default", "--gpu-quota", "0", home=home).returncode == 0
    listed = json.loads(run("project", "list", "--json", home=home).stdout)
    assert [(p["name"], p["gpu_quota"]) for p in listed] == [("default", 0), ("team", None)]  # once, with its quota
    run("wait", "one", home=home)


def test_config_project_with_an_empty_name_says_it_is_empty(tmp_path):
    proc = run("config", "project", "", home=tmp_path / "home")
    assert_usage_error(proc, "empty")
    assert "project create '" not in proc.stderr and "project create  " not in proc.stderr


# ---- notebook: a slip of an action is no notebook's name; job verbs point to dtrain's --------------
@pytest.mark.parametrize("argv, needle", [
    (["lst"], "did you mean 'dtrain notebook list'?"), (["ls"], "did you mean 'dtrain notebook list'?"),
    (["opne", "nb"], "did you mean 'dtrain notebook open'?"), (["strat", "nb"], "did you mean 'dtrain notebook start'?"),
    (["delete", "nb"], "'dtrain delete nb'"), (["stop", "nb"], "'dtrain suspend nb'"),
    (["logs", "nb"], "'dtrain logs nb'")])
def test_notebook_slips_and_job_verbs_start_nothing(tmp_path, argv, needle):
    home = tmp_path / "home"
    proc = run("notebook", *argv, home=home)
    assert_usage_error(proc, needle, f"to start a notebook named {argv[0]}, use 'dtrain notebook start {argv[0]}")
    assert json.loads(run("list", "-A", "--show-deleted", "--json", home=home).stdout) == []


def test_notebook_names_that_only_share_letters_with_an_action_still_start(tmp_path):
    for name in ("mnist", "opencv", "listen", "nb"):  # --help: the start action's, nothing started
        proc = run("notebook", name, "--help", home=tmp_path / "home")
        assert proc.returncode == 0 and "--pvc" in proc.stdout, proc.stderr
    kept = "a folder of the job's own (jobs/NAME/work in the dtrain home, kept by 'dtrain delete NAME'"
    assert kept in " ".join(run("notebook", "--help").stdout.split())
    assert "--show-deleted" in run("notebook", "list", "--help").stdout
