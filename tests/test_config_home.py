"""config.yaml and the home folder as a new user sets them up: `dtrain config` keeps every change,
and a mistake in the home or the file is one line naming it and the fix."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from conftest import Dtrain, assert_usage_error

from dtrain.client import Client
from dtrain.config import UserConfig
from dtrain.errors import BackendError, SpecError


def test_two_config_changes_made_at_once_both_stay(home):
    """Two commands that loaded config.yaml before either saved (two `dtrain config` run at once):
    each keeps the other's change; the later one used to write back the file it had read at start."""
    first, second, third = Client(home=home), Client(home=home), Client(home=home)
    first.set_default_backend("kubernetes", project="team-a")
    second.set_default_backend("sagemaker")
    third.configure_sagemaker(bucket="my-bucket")
    first.set_default_project("default")
    cfg = UserConfig.load(home)
    assert cfg.project_backends == {"team-a": "kubernetes"}
    assert cfg.backend == "sagemaker"
    assert cfg.sagemaker["bucket"] == "my-bucket"
    assert third.config.backend == "sagemaker"  # a client sees what it saved together with the others'


def test_a_storage_class_whose_root_is_a_file_is_one_line(dt, home, tmp_path):
    """A class root in config.yaml that is a file, or lies under one: one line naming the class,
    the folder and config.yaml (it was a FileExistsError / NotADirectoryError traceback)."""
    plain = tmp_path / "a-file"
    plain.write_text("not a folder\n")
    dt("volume", "create", "old")
    for root in (plain, plain / "sub"):
        (home / "config.yaml").write_text(f"storage_classes: {{fast: {root}}}\n")
        for args in (("create", "work", "--class", "fast"), ("update", "old", "--class", "fast", "--dry-run"),
                     ("update", "old", "--class", "fast")):
            proc = dt("volume", *args, check=False)
            assert_usage_error(proc, "storage class 'fast'", str(root), str(home / "config.yaml"))
    assert plain.read_text() == "not a folder\n"
    assert [(v["name"], v["storage_class"]) for v in dt.json("volume", "list")] == [("old", "local")]


def test_a_home_that_is_a_dangling_link_is_named_as_one(dt, tmp_path):
    """$DTRAIN_HOME a symbolic link to a folder that does not exist: one line saying so (it said
    the home 'is a file'), and nothing is made where the link points."""
    link, target = tmp_path / "home-link", tmp_path / "gone"
    link.symlink_to(target)
    dt.env["DTRAIN_HOME"] = str(link)
    proc = dt("list", check=False)
    assert_usage_error(proc, f"the home folder {link} is a symbolic link to {target}, which does not exist",
                       "make that folder")
    assert not target.exists()
    target.mkdir()  # once it exists, the link is a home like any other
    dt("config", "backend", "kubernetes")
    assert (target / "config.yaml").is_file() and link.is_symlink()


def test_a_typo_in_the_kubernetes_settings_is_named_before_the_backend_is_chosen(dt, home):
    """A key KubernetesConfig does not know: one line naming config.yaml, the key and the likely one
    (it was Python's 'KubernetesConfig.__init__() got an unexpected keyword argument'), already at
    `dtrain config backend kubernetes`, which then changes nothing; a bad value names config.yaml too."""
    text = "backend: local\nkubernetes: {imag: 'registry.example.com/dtrain:0.1'}\n"
    (home / "config.yaml").write_text(text)
    for args in (("config", "backend", "kubernetes"), ("config", "backend", "kubernetes", "-p", "default"),
                 ("--backend", "kubernetes", "list")):
        assert_usage_error(dt(*args, check=False), f"{home / 'config.yaml'}: unknown kubernetes setting 'imag'",
                           "did you mean 'image'?")
    assert (home / "config.yaml").read_text() == text
    (home / "config.yaml").write_text("kubernetes: {image: 5}\n")
    assert_usage_error(dt("config", "backend", "kubernetes", check=False),
                       f"{home / 'config.yaml'}: invalid Kubernetes image 5: use a string")
    dt("config", "backend", "sagemaker")  # another backend's choice does not read these settings


def test_a_bad_sagemaker_setting_is_named_when_shown_or_chosen(dt, home):
    """`dtrain config sagemaker` showed a typo'd key (rol=...) as if it were a setting, and `config
    backend sagemaker` saved on top of a bad one; both now name config.yaml and the setting."""
    for text, needle in (("sagemaker: {rol: 'arn:aws:iam::123456789012:role/R'}\n", "unknown sagemaker setting rol"),
                         ("sagemaker: {region: 'us east'}\n", "invalid SageMaker --region 'us east'")):
        (home / "config.yaml").write_text(text)
        for args in (("config", "sagemaker"), ("config", "backend", "sagemaker")):
            assert_usage_error(dt(*args, check=False), f"{home / 'config.yaml'}: {needle}")
        assert (home / "config.yaml").read_text() == text
    (home / "config.yaml").write_text("sagemaker: {bucket: my-bucket}\n")
    assert dt("config", "sagemaker").stdout == "SageMaker settings: bucket=my-bucket\n"


def test_config_yamls_unknown_sagemaker_setting_names_the_near_one(dt, home):
    """config.yaml's `sagemaker: {rol: ...}` was 'unknown sagemaker setting rol; known: ...' with no near name,
    where Client(sagemaker={'rol': ...}) and configure_sagemaker(rol=...) said "did you mean 'role'?"; one
    check (SageMakerConfig.unknown_settings) serves every door, each in its own words."""
    from dtrain.backends.sagemaker.config import SageMakerConfig

    known = "role, bucket, region, prefix, image, instance_type, subnets, security_groups, master_port"
    (home / "config.yaml").write_text("sagemaker: {rol: 'arn:aws:iam::123456789012:role/R'}\n")
    said = dt("config", "sagemaker", check=False)
    assert said.returncode == 2 and said.stderr == (f"dtrain: error: {home / 'config.yaml'}: unknown sagemaker setting "
                                                    f"rol (did you mean 'role'?); known: {known}\n"), said.stderr
    with pytest.raises(SpecError) as two:
        SageMakerConfig.from_dict({"zzz": 1, "bukcet": "b", 3: "x"})
    assert str(two.value) == (f"config.yaml: unknown sagemaker settings 3, bukcet (did you mean 'bucket'?), zzz; "
                              f"known: {known}")
    assert SageMakerConfig.unknown_settings(["role", "rgion", "qq"]) == {"rgion": "region", "qq": None}


@pytest.mark.parametrize("var, value", [("AWS_MAX_ATTEMPTS", "abc"), ("AWS_METADATA_SERVICE_TIMEOUT", "x"),
                                        ("AWS_ENDPOINT_URL", "notaurl")])
def test_a_malformed_aws_setting_in_the_environment_is_one_line(monkeypatch, tmp_path, var, value):
    """botocore reads these when the clients are made and raises a plain ValueError for a value it
    cannot convert; every SageMaker command printed that traceback."""
    pytest.importorskip("boto3")
    from dtrain.backends.sagemaker.clients import aws_clients
    from dtrain.backends.sagemaker.config import SageMakerConfig

    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv(var, value)
    with pytest.raises(BackendError, match=r"^AWS setup: a setting botocore reads from the environment \(AWS_\*\) "
                                           r"or the AWS config file is not valid \(.*" + re.escape(value)):
        aws_clients(SageMakerConfig())


def test_a_home_the_user_may_not_write_says_so(home, tmp_path):
    """A home folder of another user (here: root without the right to override permissions): a
    command that writes said only 'the disk ... is probably full or read-only; free space there',
    sending the user to free space on a disk that had plenty."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv, to give the home to another user and drop the right to override")
    from conftest import DTRAIN
    Dtrain(home)("list")  # state.db made
    os.chown(home, 1000, 1000)
    for path in home.iterdir():
        os.chown(path, 1000, 1000)
    env = {**os.environ, "DTRAIN_HOME": str(home)}
    proc = subprocess.run(["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner,-chown", DTRAIN,
                           "project", "create", "team-a"], env=env, capture_output=True, text=True, timeout=120)
    assert_usage_error(proc, "is not yours to write", "set DTRAIN_HOME to a folder you can write")


def test_a_huge_or_impossible_config_value_is_one_short_line(dt, home):
    """`dtrain config` repeated the whole value it refused (200 KB for a 100 KB project name), and
    offered 'dtrain project create Foo_Bar' for a name no project can have."""
    huge = "a" * 100_000
    for args in (("config", "project", huge), ("config", "backend", huge), ("config", "sagemaker", "--role", huge),
                 ("config", "sagemaker", "--subnets", huge)):
        proc = dt(*args, check=False)
        assert_usage_error(proc)
        assert len(proc.stderr) < 400, len(proc.stderr)
    proc = dt("config", "project", "Foo_Bar", check=False)
    assert_usage_error(proc, "invalid project name 'Foo_Bar'")
    assert "project create" not in proc.stderr
    assert not (home / "config.yaml").exists()


def test_a_config_file_that_is_a_link_is_never_replaced(tmp_path):
    """config.yaml linked to a dotfiles copy: `dtrain config` replaced the link with a file of its
    own, so the dotfiles copy went stale without a word. It is refused, and both stay as they were."""
    home = tmp_path / "home"
    home.mkdir()
    dotfiles = tmp_path / "dotfiles.yaml"
    dotfiles.write_text("# mine\nbackend: local\n")
    (home / "config.yaml").symlink_to(dotfiles)
    dt = Dtrain(home)
    assert dt("list").returncode == 0  # read through it, as before
    proc = dt("config", "backend", "kubernetes", check=False)
    assert proc.returncode == 2 and "is a symbolic link" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert (home / "config.yaml").is_symlink() and dotfiles.read_text() == "# mine\nbackend: local\n"


def test_config_yamls_unquoted_1e3_in_a_number_field_is_the_number(dt, home):
    """config.yaml's `master_port: 1e3` (text to YAML 1.1, as a job file's) is read as the flag reads
    it, so is `--set master_port=1e3`; a quoted '1e3' and a string field keep the text."""
    (home / "config.yaml").write_text("kubernetes:\n  master_port: 2e3\n  request_timeout: 1.5e1\n"
                                      "  namespace: 1e3\nsagemaker:\n  master_port: 7.777e3\n")
    cfg = UserConfig.load(home)
    assert cfg.kubernetes == {"master_port": 2000, "request_timeout": 15.0, "namespace": "1e3"}
    assert cfg.sagemaker == {"master_port": 7777}
    dt("config", "kubernetes", "--set", "master_port=1e3", "--set", "ttl_seconds_after_finished=36e2")
    assert UserConfig.load(home).kubernetes["master_port"] == 1000
    assert "ttl_seconds_after_finished: 3600\n" in (home / "config.yaml").read_text()
    assert_usage_error(dt("config", "kubernetes", "--set", "master_port='1e3'", check=False),
                       "invalid Kubernetes master_port '1e3': use a whole number from 1 to 65535")
    assert UserConfig.load(home).kubernetes["master_port"] == 1000  # the refusal kept what was stored
