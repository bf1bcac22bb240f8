"""Volumes and snapshots, audit 12: a name beginning with '-' given without '--', job hints that
carry -p and --backend, class folders made on first use, and bad input to the storage verbs.
Each test failed before its fix."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import yaml

from conftest import Dtrain, _cleanup, tmpfs, usage_line
from dtrain.cli.main import main
from dtrain.errors import ConflictError
from dtrain.names import NAME_RULE
from dtrain.storage import Storage


# --- 1. a name beginning with '-' without '--' ---------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["volume", "create", "-x"], ["volume", "delete", "-x"], ["volume", "describe", "-x"],
    ["volume", "update", "-x", "--class", "fast"], ["snapshot", "create", "-x"],
    ["snapshot", "restore", "-x", "--to", "copy"], ["snapshot", "delete", "-x"], ["snapshot", "wait", "-x"],
    ["snapshot", "diff", "-x"], ["logs", "-x"], ["describe", "-x"],
])
def test_a_name_beginning_with_a_dash_is_named_with_the_naming_rule(argv, tmp_path, monkeypatch, capsys):
    """argparse said "the following arguments are required: name", as if no name had been given."""
    monkeypatch.setenv("DTRAIN_HOME", str(tmp_path / "home"))
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err.strip()
    prog = "dtrain " + " ".join(w for w in argv[:2] if w != "-x")
    assert exit_.value.code == 2 and len(err.splitlines()) == 1
    assert err == (f"{prog}: error: '-x' is neither an option of '{prog}' nor a name: names are {NAME_RULE} "
                   f"(see '{prog} --help')")
    assert not (tmp_path / "home").exists()


def test_a_missing_name_with_no_stray_word_is_still_argparses_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DTRAIN_HOME", str(tmp_path / "home"))
    for argv, said in ((["volume", "create", "--size", "1Gi"], "required: name"),
                       (["volume", "update", "work", "-x"], "required: --class/--storage-class"),
                       (["config", "-x"], "required: what")):  # a positional with choices: no name
        with pytest.raises(SystemExit):
            main(argv)
        err = capsys.readouterr().err
        assert said in err and "nor a name" not in err, err
    assert main(["volume", "create", "--si", "1Gi"]) == 2  # no abbreviation of --size: named, '1Gi' no name
    err = capsys.readouterr().err
    assert "flags are not abbreviated: give --size" in err and "nor a name" not in err, err


# --- 2. job hints carry the job's -p and --backend -------------------------------------------------
@pytest.mark.slow
def test_a_volume_in_use_names_the_delete_of_each_job_with_its_project(dt, tmp_path):
    """"stop them (dtrain delete JOB)": no job named, and no -p (a job of team-b on a backend config.yaml
    sends elsewhere is not found by a bare `dtrain delete`)."""
    dt("project", "create", "team-b")
    dt("volume", "create", "data", "-p", "team-b")
    dt("snapshot", "create", "data", "--name", "s1", "-p", "team-b")
    dt("submit", "v", "-p", "team-b", "--pvc", "data:/mnt/data", "--", "sleep", "60")
    dt("submit", "r", "--pvc", "data:/mnt/data:ro", "--", "sleep", "60")
    dt.wait_for("v", {"Running"})
    dt.wait_for("r", {"Running"})
    both = "'dtrain delete v -p team-b', 'dtrain delete r'"
    assert f"stop them ({both}), or delete with --force" in usage_line(
        dt("volume", "delete", "data", "-p", "team-b", check=False))
    assert f"or stop them ({both})" in usage_line(dt("snapshot", "restore", "s1", "--in-place", "-p", "team-b",
                                                     check=False))
    (tmp_path / "fast").mkdir()
    (tmp_path / "fast" / "keep").write_text("a disk that is there")
    dt("config", "storage-class", "fast", str(tmp_path / "fast" / "volumes"))
    line = usage_line(dt("volume", "update", "data", "--class", "fast", "-p", "team-b", check=False))
    assert "mounted read-write by job v" in line and ("suspend it for the move ('dtrain suspend v -p team-b'; "
                                                       "resume it after), or stop it ('dtrain delete v -p team-b')"
                                                       ) in line
    dt("delete", "v")
    line = usage_line(dt("volume", "update", "data", "--class", "fast", "-p", "team-b", check=False))
    assert "mounted read-only by job r" in line and "or stop it ('dtrain delete r')" in line
    assert (dt.home / "volumes" / "data" / "data").is_dir()


def test_a_volume_in_use_names_the_backend_the_job_is_on(dt):
    dt.home.mkdir(exist_ok=True)
    (dt.home / "config.yaml").write_text(yaml.safe_dump({"project": "default", "backend": "kubernetes"}))
    dt("--backend", "local", "volume", "create", "data")
    dt("--backend", "local", "submit", "v", "--pvc", "data:/mnt/data", "--", "sleep", "60")
    try:
        line = usage_line(dt("volume", "delete", "data", "--backend", "local", check=False))
        assert "wait for it to finish, stop it ('dtrain --backend local delete v')" in line
    finally:
        dt("--backend", "local", "delete", "v")


def test_the_stores_in_place_refusal_names_each_jobs_command(tmp_path):
    """Storage's own refusals (a caller of the SDK's store) name each job's command as told."""
    storage = Storage(tmp_path / "home", command=lambda words: f"dtrain {words} -p a",
                      job_command=lambda words, job: f"dtrain {words} -p {job}-project")
    storage.create_volume("data")
    storage.create_snapshot("data", name="s1")
    with pytest.raises(ConflictError, match=r"stop them \('dtrain delete j1 -p j1-project', 'dtrain delete j2 "
                                            r"-p j2-project'\) before an in-place restore"):
        storage.restore_snapshot("s1", in_place=True, in_use_by=["j1", "j2"])
    with pytest.raises(ConflictError, match=r"stop them \('dtrain delete j1 -p j1-project', 'dtrain delete j2 "
                                            r"-p j2-project', 'dtrain delete j3 -p j3-project' and 1 more\), or "):
        storage.delete_volume("data", in_use_by=["j1", "j2", "j3", "j4"])
    assert storage.get_volume("data").path.is_dir()
    storage.close()


def test_kubernetes_names_the_delete_of_the_job_using_a_volume(tmp_path):
    from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig
    from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer
    from dtrain.spec import JobSpec, parse_pvc

    cluster = FakeCluster()
    server = FakeKubeServer(cluster).start()
    client = server.api_client()
    try:
        backend = KubernetesBackend(KubernetesConfig(project="lanes", image="img:1"), api_client=client,
                                    command=lambda words: f"dtrain {words} -p lanes")
        backend.create_volume("data", size="1Gi", storage_class="fast")
        backend.submit(JobSpec(name="train", command=("python", "t.py"), project="lanes",
                               volumes=(parse_pvc("data:/data"),)))
        with pytest.raises(ConflictError, match=r"mounted by job 'train'.*delete the job \('dtrain delete train "
                                                r"-p lanes'\), or pass --force"):
            backend.delete_volume("data")
        cluster.run_pods("dtrain-lanes", "train")
        with pytest.raises(ConflictError, match=r"in use by job 'train'.*delete the job \('dtrain delete train "
                                                r"-p lanes'\), or pass --force"):
            backend.delete_volume("data")
    finally:
        client.close()
        server.close()


# --- 3. a class folder is made only where a move would make it -----------------------------------
GONE = "does not exist (removed, or its disk is not mounted)"


@pytest.fixture
def unmounted(tmp_path):
    """A home with one volume and snapshot s1, and class 'fast' whose folder lies below an empty
    folder that is no mount point (a disk not mounted): the folder every path must not make."""
    dt = Dtrain(tmp_path / "home")
    (tmp_path / "nvme").mkdir()
    root = tmp_path / "nvme" / "volumes"
    dt("config", "storage-class", "fast", str(root))
    dt("volume", "create", "data")
    (dt.home / "volumes" / "data" / "data" / "a.txt").write_text("kept")
    dt("snapshot", "create", "data", "--name", "s1")
    yield dt, root
    _cleanup(dt)


@pytest.mark.parametrize("argv", [
    ["volume", "create", "new", "--class", "fast"],
    ["volume", "create", "new", "--class", "fast", "--dry-run"],
    ["snapshot", "restore", "s1", "--to", "new", "--class", "fast"],
    ["snapshot", "restore", "s1", "--to", "new", "--class", "fast", "--dry-run"],
    ["submit", "j", "--pvc", "fast:1Gi:/mnt/out", "--", "true"],
    ["submit", "j", "--pvc", "fast:1Gi:/mnt/out", "--dry-run", "--", "true"],
])
def test_every_path_refuses_a_class_folder_below_an_unmounted_disk(unmounted, argv):
    """`volume create --class` and `snapshot restore --to --class` (and a job's new volume) made the
    folder on the disk beneath the mount point, silently, where a move into the class was refused."""
    dt, root = unmounted
    line = usage_line(dt(*argv, check=False))
    assert f"storage class 'fast': its folder {root} {GONE}" in line and f"mkdir -p {root}" in line
    assert "at another folder with 'dtrain config storage-class fast FOLDER', and retry" in line  # quoted
    assert os.listdir(root.parent) == []
    assert [v["name"] for v in dt.json("volume", "list")] == ["data"]
    assert json.loads(dt("list", "-A", "--json").stdout) == []
    root.mkdir()  # the disk mounted (or the folder made on purpose): the same command goes ahead
    dt(*argv)


def test_every_path_refuses_a_class_folder_that_was_removed(unmounted):
    """A class folder dtrain used, removed since: create made it again (and then refused it, the
    mark gone, leaving the folder behind on the wrong disk)."""
    dt, root = unmounted
    root.mkdir()
    dt("volume", "create", "first", "--class", "fast")
    dt("volume", "delete", "first")
    shutil.rmtree(root)
    for argv in (["volume", "create", "new", "--class", "fast"], ["snapshot", "restore", "s1", "--to", "new",
                                                                  "--class", "fast"]):
        assert f"its folder {root} {GONE}" in usage_line(dt(*argv, check=False))
        assert not root.exists()


@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
def test_a_restore_out_of_a_lost_volumes_class_names_another_class(unmounted, dry):
    """A lost volume's refusal says to restore a snapshot into a new volume; without --class that restore
    goes to the snapshot's class, whose folder is gone too, and its refusal named no way out but the disk."""
    dt, root = unmounted
    root.mkdir()
    dt("volume", "create", "work", "--class", "fast")
    dt("snapshot", "create", "work", "--name", "w1")
    shutil.rmtree(root)
    assert "restore one of its snapshots into a new volume" in usage_line(
        dt("snapshot", "restore", "w1", "--in-place", check=False))
    line = usage_line(dt("snapshot", "restore", "w1", "--to", "back", *dry, check=False))
    assert f"its folder {root} {GONE}" in line
    assert line.endswith("; or restore into another class: 'dtrain snapshot restore w1 --to back --class local'")
    assert not root.exists()
    dt("snapshot", "restore", "w1", "--to", "back", "--class", "local", *dry)  # the named way out works
    # a class given by hand is the user's choice: its refusal stays the disk's alone
    assert "another class" not in usage_line(dt("snapshot", "restore", "w1", "--to", "b2", "--class", "fast",
                                                 check=False))


def test_volume_classes_shows_such_a_class_as_not_mounted(unmounted):
    dt, root = unmounted
    fast = next(c for c in dt.json("volume", "classes") if c["name"] == "fast")
    assert fast["status"] == "NotMounted" and GONE in fast["message"]
    assert os.listdir(root.parent) == []


def test_a_class_on_a_disk_that_is_there_is_still_made_by_its_first_volume(tmp_path):
    dt = Dtrain(tmp_path / "home")
    (tmp_path / "disk").mkdir()
    (tmp_path / "disk" / "other").write_text("a disk in use")
    dt("config", "storage-class", "fast", str(tmp_path / "disk" / "volumes"))
    dt("volume", "create", "new", "--class", "fast")
    assert (tmp_path / "disk" / "volumes" / "new" / "data").is_dir()


# --- 4. bad input to the storage verbs --------------------------------------------------------------
@pytest.mark.parametrize("argv, option, word", [
    (["snapshot", "create", "data", "--name", "-x"], "--name", "-x"),
    (["snapshot", "restore", "s1", "--to", "-x"], "--to", "-x"),
    (["volume", "create", "data", "--class", "-fast"], "--class", "-fast"),
    (["snapshot", "list", "--volume", "-v"], "--volume", "-v"),
])
def test_an_option_value_beginning_with_a_dash_says_how_to_give_it(argv, option, word, tmp_path, monkeypatch,
                                                                    capsys):
    """argparse said "argument --name: expected one argument" of `--name -x`, as if no value had been given."""
    monkeypatch.setenv("DTRAIN_HOME", str(tmp_path / "home"))
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1
    assert f"expected one argument ('{word}' begins with '-', so it was read as an option: give it as {option}={word})" in err
    assert not (tmp_path / "home").exists()


def test_an_option_missing_its_value_before_another_option_is_argparses_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DTRAIN_HOME", str(tmp_path / "home"))
    with pytest.raises(SystemExit):
        main(["snapshot", "create", "data", "--name", "--json"])  # --json is an option: the value is missing
    err = capsys.readouterr().err
    assert "argument --name: expected one argument (see 'dtrain snapshot create --help')" in err, err


def test_a_name_given_as_option_equals_value_meets_the_naming_rule(tmp_path):
    dt = Dtrain(tmp_path / "home")
    dt("volume", "create", "data")
    line = usage_line(dt("snapshot", "create", "data", "--name=-x", check=False))
    assert line == f"invalid snapshot name '-x': use {NAME_RULE}"
    assert dt.json("snapshot", "list") == []


def test_a_class_folder_on_a_disk_mounted_behind_a_link_is_made_by_its_first_volume(tmp_path):
    """A class named through a symbolic link to a mounted, empty disk (/data/fast -> /mnt/nvme) was
    taken for a disk not mounted (os.path.ismount of a link is False): its first volume was refused."""
    with tmpfs(tmp_path / "mnt", "size=4m") as mnt:
        (tmp_path / "link").symlink_to(mnt)
        dt = Dtrain(tmp_path / "home")
        dt("config", "storage-class", "fast", str(tmp_path / "link" / "volumes"))
        fast = next(c for c in dt.json("volume", "classes") if c["name"] == "fast")
        assert fast["status"] == "Ready", fast
        dt("volume", "create", "old")
        dt("volume", "update", "old", "--class", "fast", "--dry-run")  # a move was refused so before audit 12
        dt("volume", "create", "new", "--class", "fast", "--dry-run")
        dt("volume", "create", "new", "--class", "fast")
        assert (mnt / "volumes" / "new" / "data").is_dir()
        dt("volume", "delete", "new")
