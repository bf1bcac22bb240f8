"""Issue 18, H and I: type errors and out-of-range values are one line naming the field, exit 2.

The checks live in the spec layer (JobSpec / VolumeMount / NewVolume / the YAML loader), so the
CLI, YAML files, the SDK and the HTTP API all get them; the CLI tests show the door's behaviour.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import DTRAIN, assert_usage_error
from dtrain.errors import SpecError
from dtrain.spec import JobSpec, NewVolume, VolumeMount, parse_pvc, yaml_mapping

BASE = {"name": "j", "command": ["echo", "hi"]}


def cli(home, *args, cwd=None, timeout=60):
    env = {**os.environ, "DTRAIN_HOME": str(home)}
    return subprocess.run([DTRAIN, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def submit_file(tmp_path, text: str | bytes, *extra):
    path = tmp_path / "job.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return cli(tmp_path / "home", "submit", "-f", str(path), "--dry-run", *extra)


# ---- H: types in YAML job files and config.yaml -------------------------------------------------
def test_h_yaml_command_not_a_list(tmp_path):
    assert_usage_error(submit_file(tmp_path, "name: j\ncommand: 5\n"), "command", "5")


def test_h_yaml_command_word_a_boolean(tmp_path):
    assert_usage_error(submit_file(tmp_path, "name: j\ncommand: [echo, yes]\n"), "command", "True")


def test_h_yaml_env_a_list(tmp_path):
    assert_usage_error(submit_file(tmp_path, "name: j\ncommand: [echo]\nenv: [A, B]\n"), "env", "mapping")
    assert_usage_error(submit_file(tmp_path, "name: j\ncommand: [echo]\nenv: [A=1]\n"), "env")


def test_h_yaml_env_value_a_boolean(tmp_path):
    assert_usage_error(submit_file(tmp_path, "name: j\ncommand: [echo]\nenv: {DEBUG: no}\n"),
                       "env DEBUG", "quote")


def test_h_yaml_pvc_a_number(tmp_path):
    assert_usage_error(submit_file(tmp_path, "name: j\ncommand: [echo]\npvc: 5\n"), "pvc", "list")
    assert_usage_error(submit_file(tmp_path, "name: j\ncommand: [echo]\nvolumes: 5\n"), "volumes", "list")


def test_h_yaml_unknown_key_in_a_pvc_entry(tmp_path):
    text = "name: j\ncommand: [echo]\npvc:\n  - {volume: data, mount_path: /mnt, readonly: true}\n"
    assert_usage_error(submit_file(tmp_path, text), "unknown key readonly")
    text = "name: j\ncommand: [echo]\npvc:\n  - {volume: data}\n"
    assert_usage_error(submit_file(tmp_path, text), "missing mount_path")


def test_h_yaml_binary_file(tmp_path):
    assert_usage_error(submit_file(tmp_path, bytes(range(256)) * 4), "not a text file")
    assert_usage_error(submit_file(tmp_path, b"name: j\0\ncommand: [echo]\n"), "not a text file")


def test_h_yaml_invalid_yaml_is_one_line_with_its_position(tmp_path):
    proc = submit_file(tmp_path, "name: j\ncommand: [echo\nenv: {\n")
    assert_usage_error(proc, "not valid YAML", "line ")


def test_h_yaml_not_a_mapping(tmp_path):
    assert_usage_error(submit_file(tmp_path, "- a\n- b\n"), "mapping")


def test_h_yaml_good_file_still_works(tmp_path):
    assert cli(tmp_path / "home", "volume", "create", "data").returncode == 0  # a dry run looks it up, as submit
    proc = submit_file(tmp_path, "name: j\ncommand: [python, train.py, --epochs, 2]\nenv: {SEED: 1}\n"
                                 "pvc: ['data:/mnt:ro']\nlarge_shm: true\n")
    assert proc.returncode == 0, proc.stderr
    assert "--epochs" in proc.stdout and "SEED: '1'" in proc.stdout


@pytest.mark.parametrize("text, needle", [
    ("project: 5\n", "project"),
    ("backend: [local]\n", "backend"),
    ("project_backends: 5\n", "project_backends"),
    ("project_backends: {a: nosuch}\n", "nosuch"),
    ("kubernetes: [a]\n", "kubernetes"),
    ("project: [\n", "not valid YAML"),
    ("colour: red\n", "unknown key colour; known: project, "),  # nothing near it: no guess
    ("default_project: a\n", "unknown key default_project (did you mean 'project'?); known: "),
    ("colour: red\nbackends: {}\n", "unknown keys backends (did you mean 'backend'?), colour; known: "),
])
def test_h_config_yaml_types(tmp_path, text, needle):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(text)
    assert_usage_error(cli(home, "list"), "config.yaml", needle)


def test_h_config_yaml_binary(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_bytes(os.urandom(512) + b"\0")
    assert_usage_error(cli(home, "list"), "config.yaml", "not a text file")


def test_h_config_yaml_that_is_a_fifo_or_too_big_is_one_line_and_no_hang(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    os.mkfifo(home / "config.yaml")  # nobody writes it: reading it would wait forever
    assert_usage_error(cli(home, "list", timeout=30), "config.yaml", "is a named pipe, not a file")
    (home / "config.yaml").unlink()
    (home / "config.yaml").write_bytes(b"# " + b"x" * (2 << 20) + b"\n")
    assert_usage_error(cli(home, "list", timeout=30), "config.yaml", "larger than")


def test_h_config_is_never_written_through_a_link_at_a_temporary_name(tmp_path):
    """`dtrain config` wrote config.tmp, then renamed it: a link planted at that name was followed."""
    home, target = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    target.write_text("untouched\n")
    (home / "config.tmp").symlink_to(target)
    assert cli(home, "config", "backend", "kubernetes").returncode == 0
    assert target.read_text() == "untouched\n"
    assert "backend: kubernetes" in (home / "config.yaml").read_text()
    assert sorted(p.name for p in home.iterdir() if p.name.startswith(".")) == []  # no temporary file left


def test_h_yaml_loader_is_pure_and_names_the_source():
    with pytest.raises(SpecError, match="^X is not valid YAML: .* at line 3"):
        yaml_mapping(b"a: 1\nb: [\nc: }\n", "X", "a: 1")
    assert yaml_mapping(b"", "X", "a: 1") == {}


# ---- I: values accepted that should be refused --------------------------------------------------
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "1e9"])
def test_i_cpu_nan_inf_and_out_of_range(tmp_path, value):
    proc = cli(tmp_path / "home", "submit", "j", f"--cpu={value}", "--dry-run", "--", "echo")
    assert_usage_error(proc, "--cpu")
    with pytest.raises(SpecError, match=r"^invalid cpu .* e\.g\. cpu=2"):  # the SDK's argument, not the flag
        JobSpec(**BASE, cpu=float(value))


def test_i_nul_byte_in_env_value_or_command():
    with pytest.raises(SpecError, match="NUL"):
        JobSpec(name="j", command=("echo", "a\0b"))
    with pytest.raises(SpecError, match="NUL"):
        JobSpec(**BASE, env={"A": "x\0y"})
    with pytest.raises(SpecError, match="NUL"):
        JobSpec(**BASE, working_dir="/tmp\0/x")


def test_i_nul_byte_from_the_cli(tmp_path):
    # argv cannot hold a NUL, but a YAML file can spell one
    proc = submit_file(tmp_path, 'name: j\ncommand: [echo]\nenv: {A: "x\\0y"}\n')
    assert_usage_error(proc, "NUL")


def test_i_read_only_string_is_not_a_boolean(tmp_path):
    with pytest.raises(SpecError, match="read_only"):
        VolumeMount(volume="data", mount_path="/mnt", read_only="false")
    text = "name: j\ncommand: [echo]\npvc:\n  - {volume: data, mount_path: /mnt, read_only: 'false'}\n"
    assert_usage_error(submit_file(tmp_path, text), "read_only", "'false'")


def test_i_large_shm_string_is_not_a_boolean(tmp_path):
    with pytest.raises(SpecError, match="large_shm"):
        JobSpec(**BASE, large_shm="no")
    assert_usage_error(submit_file(tmp_path, "name: j\ncommand: [echo]\nlarge_shm: 'no'\n"), "large_shm")


def test_i_volume_create_size_zero(tmp_path):
    for size in ("0", "0Gi", "0.0", "9" * 400, "-5x10", "-1Gi", "-.5"):  # '-...': a value, never a flag
        assert_usage_error(cli(tmp_path / "home", "volume", "create", "v", "--size", size), "volume size")
    with pytest.raises(SpecError, match="volume size"):
        NewVolume(storage_class="local", size="0", mount_path="/mnt")


@pytest.mark.parametrize("flag", ["vol:/.", "vol:/./", "vol://", "vol:/mnt/..", "local:1Gi:/."])
def test_i_pvc_mount_path_root(flag):
    with pytest.raises(SpecError, match="mount path"):
        parse_pvc(flag)


def test_i_pvc_mode_is_read_the_same_for_an_existing_and_a_new_volume(tmp_path):
    # ':rw' (the default) is taken by both forms, as Run:AI's --pvc reads them; a mode neither knows
    # is refused by both in the same line; ':ro' on a new (empty) volume stays refused
    assert parse_pvc("vol:/mnt:rw") == VolumeMount(volume="vol", mount_path="/mnt")
    assert parse_pvc("local:1Gi:/mnt:rw") == parse_pvc("local:1Gi:/mnt") == NewVolume(
        storage_class="local", size="1Gi", mount_path="/mnt")
    for flag in ("vol:/mnt:bogus", "local:1Gi:/mnt:bogus"):
        with pytest.raises(SpecError, match="after the mount path comes ro or rw, not 'bogus'"):
            parse_pvc(flag)
    with pytest.raises(SpecError, match="a new volume .* starts empty.*drop ':ro'"):
        parse_pvc("local:1Gi:/mnt:ro")
    proc = cli(tmp_path / "home", "submit", "j", "--pvc", "local:10Mi:/mnt:rw", "--dry-run", "--", "echo")
    assert proc.returncode == 0, proc.stderr


def test_i_pvc_mode_is_the_same_at_every_door(tmp_path):
    # --pvc's help and the HTTP schema named only ':ro', and a job file's new-volume mapping refused
    # read_only (an unknown key) where --pvc takes CLASS:SIZE:MOUNT:rw
    from dtrain.server.wire.jobs import SpecIn
    from dtrain.server.wire.notebooks import NotebookIn

    helped = " ".join(cli(tmp_path / "home", "submit", "--help").stdout.split())
    assert "VOLUME:MOUNT[:ro|:rw]" in helped and "CLASS:SIZE:MOUNT[:rw]" in helped, helped
    for model in (SpecIn, NotebookIn):
        described = model.model_json_schema()["properties"]["volumes"]["description"]
        assert "VOLUME:MOUNT[:ro|:rw]" in described and "CLASS:SIZE:MOUNT[:rw]" in described, described
    new = {"storage_class": "local", "size": "1Gi", "mount_path": "/mnt"}
    spec = JobSpec.from_dict({**BASE, "volumes": [{**new, "read_only": False}]})
    assert spec.volumes == (NewVolume(**new),) == JobSpec.from_dict({**BASE, "volumes": ["local:1Gi:/mnt:rw"]}).volumes
    with pytest.raises(SpecError, match="a new volume .* starts empty.*drop read_only"):
        JobSpec.from_dict({**BASE, "volumes": [{**new, "read_only": True}]})
    with pytest.raises(SpecError, match="invalid read_only 'no': must be true or false"):
        JobSpec.from_dict({**BASE, "volumes": [{**new, "read_only": "no"}]})
    proc = submit_file(tmp_path, "name: j\ncommand: [echo]\nvolumes:\n- {storage_class: local, size: 10Mi, "
                                 "mount_path: /mnt, read_only: false}\n")
    assert proc.returncode == 0, proc.stderr
    # the SDK's NewVolume took no read_only (an unknown field) where the other doors take it: False, or
    # the same refusal of True in one line of its own words, and the same bound on a value not a bool
    assert NewVolume(**new, read_only=False) == NewVolume("local", "1Gi", "/mnt", False) == spec.volumes[0]
    assert JobSpec(**BASE, volumes=[NewVolume(**new, read_only=False)]).volumes == spec.volumes
    with pytest.raises(SpecError) as refused:
        NewVolume(**new, read_only=True)
    said = str(refused.value)
    assert "starts empty" in said and "drop read_only" in said and "\n" not in said, said
    assert "VolumeMount(volume='data', mount_path='/mnt', read_only=True)" in said, said
    with pytest.raises(SpecError, match="invalid read_only 'no': must be true or false"):
        NewVolume(**new, read_only="no")


def test_i_two_mounts_of_the_same_path(tmp_path):
    with pytest.raises(SpecError, match="two volumes are mounted at /mnt"):
        JobSpec(**BASE, volumes=("a:/mnt", "b:/mnt/"))
    with pytest.raises(SpecError, match="two volumes are mounted at /mnt"):
        JobSpec(**BASE, volumes=("a:/mnt", "local:1Gi://mnt/."))
    proc = cli(tmp_path / "home", "submit", "j", "--pvc", "a:/data", "--pvc", "b:/data/.", "--dry-run", "--", "echo")
    assert_usage_error(proc, "two volumes")
    # a dry run refuses a job name that leaves no room for its new volume's name, as submit does
    proc = cli(tmp_path / "home", "submit", "a" * 50, "--pvc", "local:10Mi:/mnt", "--dry-run", "--", "echo")
    assert_usage_error(proc, "may have at most 47")


def test_i_working_dir_nonexistent_refused_at_submit(tmp_path):
    home = tmp_path / "home"
    proc = cli(home, "submit", "j", "--working-dir", str(tmp_path / "nonexistent"), "--", "true")
    assert_usage_error(proc, "--working-dir", "nonexistent")
    listed = cli(home, "list", "-A")
    assert listed.returncode == 0 and " j " not in listed.stdout  # nothing stored


def test_i_logs_tail_negative_refused(tmp_path):
    home = tmp_path / "home"
    assert cli(home, "submit", "j", "--", "echo", "hi").returncode == 0
    assert cli(home, "wait", "j", "--timeout", "60").returncode == 0
    assert_usage_error(cli(home, "logs", "j", "--tail", "-3"), "tail")
    assert_usage_error(cli(home, "logs", "j", "--tail", str(10**23)), "tail", "from 0 to 1000000000")
    assert_usage_error(cli(home, "logs", "j", "--rank", "5"), "rank", "1 process")
    assert cli(home, "logs", "j", "--tail", "0").stdout == ""
    assert cli(home, "logs", "j", "--tail", "1").stdout == "hi\n"


@pytest.mark.parametrize("field, value", [
    ("processes", 10**9), ("processes", 0), ("gpu", 10**6), ("gpu", -1), ("max_restarts", 10**9),
    ("max_restarts", -1), ("processes", True), ("gpu", 1.5), ("memory", "0"), ("memory", "9" * 400),
])
def test_i_bounds_on_every_numeric_field(field, value):
    extra = {"launcher": "torchrun"} if field == "processes" else {}
    with pytest.raises(SpecError, match=f"(?<!-){field}") as refused:  # the SDK's argument, not the flag
        JobSpec(**BASE, **extra, **{field: value})
    assert f"--{field.replace('_', '-')}" not in str(refused.value)


def test_i_wait_timeout_negative_refused(tmp_path):
    home = tmp_path / "home"
    assert cli(home, "submit", "j", "--", "true").returncode == 0
    assert_usage_error(cli(home, "wait", "j", "--timeout", "-1"), "timeout")
    assert_usage_error(cli(home, "wait", "j", "--timeout", "nan"), "timeout")


def test_i_sdk_volume_given_as_a_string_is_parsed_and_a_bare_string_refused():
    spec = JobSpec(**BASE, volumes=["data:/mnt:ro"])
    assert spec.volumes == (VolumeMount(volume="data", mount_path="/mnt", read_only=True),)
    with pytest.raises(SpecError, match="volumes"):
        JobSpec(**BASE, volumes="data:/mnt")
    with pytest.raises(SpecError, match="invalid volume 5"):
        JobSpec(**BASE, volumes=[5])


def test_i_zip_with_a_symlink_entry_is_refused(tmp_path):
    import stat
    import zipfile

    from dtrain.errors import DataError
    from dtrain.workloads.lanes import prepare
    archive = tmp_path / "train_set.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("clips/a/1/20.jpg", b"jpg")
        link = zipfile.ZipInfo("clips/a/2/20.jpg")
        link.create_system = 3  # Unix, as `zip -y` writes it
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "/etc/passwd")
    out = tmp_path / "out"
    with pytest.raises(DataError, match="symlink 'clips/a/2/20.jpg'"):
        prepare.extract(archive, out)
    assert not (out / "clips" / "a" / "2" / "20.jpg").exists()
