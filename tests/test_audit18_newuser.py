"""A new user's mistakes with the README, docs and CLI reference (audit 18, `newuser`)."""

from __future__ import annotations

import pytest
from test_audit15_fresh import cli  # noqa: F401  (dtrain's main() in this process: the fixture's own test file's)

from dtrain.errors import SpecError


@pytest.mark.parametrize("words, meant", [
    (["--proceses", "2"], "--processes"), (["--proceses=2"], "--processes"), (["--lanucher", "mpi"], "--launcher"),
])
def test_submit_with_a_misspelt_process_flag_names_submit_dist(cli, words, meant):
    """`submit x --proceses 2` was told that the command goes after '--' (`--proceses=2`: nothing), though
    `--processes 2` names submit-dist: submit has no such flag to be near."""
    code, _, err = cli("submit", "x", *words, "--", "true")
    [line] = err.strip().splitlines()
    assert code == 2 and f"did you mean {meant}? a job of several processes is submitted with dtrain submit-dist" in line
    assert "goes after" not in line, line
    assert cli("list", "-A", "--json")[1].strip() == "[]"


def test_submit_with_a_flag_near_its_own_keeps_that_hint(cli):
    code, _, err = cli("submit", "x", "--gpuu", "1", "--", "true")
    assert code == 2 and "did you mean --gpu?" in err and "submit-dist" not in err


@pytest.mark.parametrize("verb", ["submit", "submit-dist", "submit-mpi"])
@pytest.mark.parametrize("flag", ["--follow", "--wait", "--stream", "--logs"])
def test_submit_told_to_follow_or_wait_names_logs_f_and_wait(cli, verb, flag):
    """`submit x --wait` was answered 'did you mean --max-wait?' (SageMaker spot's), `--follow` nothing."""
    code, _, err = cli(verb, "x", flag, "--", "true")
    [line] = err.strip().splitlines()
    assert code == 2 and "returns once the job is stored: follow it with 'dtrain logs NAME -f'" in line, line
    assert "'dtrain wait NAME'" in line and "did you mean" not in line
    assert cli("list", "-A", "--json")[1].strip() == "[]"


def test_submit_dash_f_without_a_file_says_it_is_the_job_file(cli):
    """`submit x -f -- CMD` (logs' -f) said only 'argument -f/--file: expected one argument'."""
    code, _, err = cli("submit", "x", "-f", "--", "true")
    [line] = err.strip().splitlines()
    assert code == 2 and "-f names a YAML job file here" in line and "'dtrain logs NAME -f'" in line, line


@pytest.mark.parametrize("name, said", [
    ("Fast", "storage class 'Fast': invalid name: use a lower-case name"),
    ("fast_x", "storage class 'fast_x': invalid name: use a lower-case name"),
    ("local", "storage class 'local' is the dtrain home's own (its volumes/ folder): use a name other than 'local'"),
])
def test_config_storage_class_with_a_bad_name_names_only_the_name(cli, tmp_path, name, said):
    """`config storage-class Fast disk` was 'CONFIG.YAML: storage class 'Fast': '/.../disk': use a lower-case
    name other than 'local' ... and an absolute folder': the folder, absolute and fine, named as at fault,
    and config.yaml, which held nothing wrong."""
    code, _, err = cli("config", "storage-class", name, str(tmp_path / "disk"))
    [line] = err.strip().splitlines()
    assert code == 2 and said in line and line.endswith("nothing was changed"), line
    assert "absolute" not in line and "config.yaml" not in line, line
    assert not (tmp_path / "home" / "config.yaml").exists()


def test_config_yaml_with_a_relative_class_folder_names_the_folder(cli, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("storage_classes:\n  slow: rel/dir\n")
    code, _, err = cli("volume", "classes")
    [line] = err.strip().splitlines()
    assert code == 2 and "storage class 'slow': folder 'rel/dir' is not absolute: give an absolute folder" in line
    assert "lower-case name" not in line, line


@pytest.mark.parametrize("pipeline, item, said", [
    ("hybrid-cifar10", "batch_size", "give its value, batch_size=VALUE (default 16;"),
    ("lane-detection", "urls", "give its value, urls=VALUE (required;"),
])
def test_pipeline_param_without_a_value_asks_for_the_value(pipeline, item, said):
    """`pipeline run hybrid-cifar10 --param batch_size` was answered 'did you mean 'batch_size'?'."""
    pytest.importorskip("kfp")
    from dtrain.pipelines import runner

    with pytest.raises(SpecError) as refused:
        runner.parse_params(runner.load(pipeline), [item])
    assert said in str(refused.value) and "did you mean" not in str(refused.value), refused.value


@pytest.mark.parametrize("given, meant", [
    ("10GB", "10Gi or 10G"), ("1.5GiB", "1.5Gi"), ("100gi", "100Gi"), ("5mb", "5Mi or 5M"), ("1KB", "1Ki or 1k"),
    ("10g", "10Gi or 10G"),
])
def test_a_size_with_another_tools_unit_names_the_quantity_meant(cli, given, meant):
    """`volume create w --size 10GB` (df's and docker's unit) was told only what a quantity looks like."""
    code, _, err = cli("volume", "create", "w", "--size", given)
    [line] = err.strip().splitlines()
    assert code == 2 and line.endswith(f"(did you mean {meant}?)"), line
    assert cli("volume", "list", "--json")[1].strip() == "[]"  # nothing was created


@pytest.mark.parametrize("given", ["10x", "GB", "1.2.3G"])
def test_a_size_near_no_unit_gets_no_guess(cli, given):
    code, _, err = cli("volume", "create", "w", "--size", given)
    assert code == 2 and "did you mean" not in err and "Kubernetes quantity" in err


@pytest.mark.parametrize("make, again", [
    (["volume", "create", "w", "--size", "1Mi"], "volume delete w"),
    (["snapshot", "create", "w", "--name", "s"], "snapshot delete s"),
])
def test_a_volume_or_snapshot_name_in_use_quotes_the_delete_command(cli, make, again):
    """'already exists: ... delete it first (dtrain volume delete w)' was the one refusal of a name in use
    whose command was not quoted, as a job's ('... first with 'dtrain delete x'') and dtrain's other hints are."""
    assert cli("volume", "create", "w", "--size", "1Mi")[0] == 0
    if make[0] == "snapshot":
        assert cli(*make)[0] == 0
    code, _, err = cli(*make)
    [line] = err.strip().splitlines()
    assert code == 2 and line.endswith(f"delete it first with 'dtrain {again}'"), line


def test_a_kubernetes_volume_name_in_use_quotes_the_delete_command():
    from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig
    from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer
    from dtrain.errors import ConflictError

    server = FakeKubeServer(FakeCluster()).start()
    client = server.api_client()
    try:
        backend = KubernetesBackend(KubernetesConfig(project="lanes", image="i:1"), api_client=client)
        backend.create_volume("w", size="1Gi")
        with pytest.raises(ConflictError) as taken:
            backend.create_volume("w", size="1Gi")
        said = str(taken.value)
        assert "delete it first with 'dtrain " in said and said.endswith("'") and "first (" not in said, said
        assert "volume delete w" in said.rsplit("with '", 1)[-1], said
    finally:
        client.close()
        server.close()


def test_dtrain_help_names_the_help_flag(cli):
    """`dtrain help` answered argparse's list of 26 verbs, 'invalid choice'."""
    code, _, err = cli("help")
    [line] = err.strip().splitlines()
    assert code == 2 and "help is the --help flag" in line and "invalid choice" not in line, line


def test_config_storage_class_set_quotes_the_command_it_names(cli, tmp_path):
    """Setting a class printed '(dtrain volume classes shows ...)', the command bare, where every other hint
    quotes the one it names."""
    code, out, _ = cli("config", "storage-class", "fast", str(tmp_path / "disk"))
    assert code == 0 and out == (f"storage class 'fast' is {tmp_path / 'disk'}; "
                                 "'dtrain volume classes' shows whether volumes can go there\n"), out


def test_notebook_open_of_no_such_name_names_the_notebook_and_its_listing(cli):
    """`notebook open nosuch` said "no job named 'nosuch'; see 'dtrain list jobs'", a listing of jobs."""
    code, _, err = cli("notebook", "open", "nosuch")
    [line] = err.strip().splitlines()
    assert code == 2 and line.endswith("no notebook named 'nosuch'; see 'dtrain notebook list' for the notebooks "
                                       "there are"), line


def test_notebook_open_of_a_job_that_is_not_a_notebook_names_the_listing_too(cli):
    assert cli("submit", "train", "--", "true")[0] == 0
    code, _, err = cli("notebook", "open", "train")
    [line] = err.strip().splitlines()
    assert code == 2 and line.endswith("job 'train' is not a notebook: see 'dtrain notebook list' for the notebooks "
                                       "there are, or start one with 'dtrain notebook NAME --pvc VOLUME:/home/jovyan'")
