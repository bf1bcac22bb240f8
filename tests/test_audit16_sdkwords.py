"""The SDK's refusals name what a notebook user gave (the argument, the field), not a CLI flag they never
typed; the CLI's words stay as they were."""

from __future__ import annotations

import pytest
from conftest import Dtrain
from dtrain.errors import SpecError
from dtrain.spec import JobSpec


def test_a_job_of_several_processes_without_a_launcher_is_named_by_its_fields_in_the_sdk(dt: Dtrain, tmp_path):
    """JobSpec(processes=2) said '--processes 2 needs a launcher: use dtrain submit-dist ...'."""
    for build in (lambda: JobSpec(name="x", command=["true"], processes=2),
                  lambda: JobSpec.from_dict({"name": "x", "command": ["true"], "processes": 2})):
        with pytest.raises(SpecError) as sdk:
            build()
        assert str(sdk.value) == "processes=2 needs a launcher: give launcher='torchrun' (or 'mpi') as well"
    assert JobSpec(name="x", command=["true"], processes=2, launcher="torchrun").processes == 2
    (tmp_path / "job.yaml").write_text("name: x\ncommand: [\"true\"]\nprocesses: 2\n")
    said = dt("submit", "-f", str(tmp_path / "job.yaml"), check=False)  # the file's field, and its fix, as written there
    assert said.returncode == 2 and said.stderr == (f"dtrain: error: job file '{tmp_path / 'job.yaml'}': processes: 2 "
                                                    f"needs a launcher: give launcher: torchrun (or launcher: mpi) as "
                                                    f"well\n"), said.stderr  # it said 'use dtrain submit-dist --launcher'
    with pytest.raises(SpecError) as cli:  # the CLI's door without a file (the HTTP API answers in its words)
        JobSpec.from_dict({"name": "x", "command": ["true"], "processes": 2}, door="cli")
    assert str(cli.value) == "--processes 2 needs a launcher: use dtrain submit-dist --launcher torchrun or dtrain submit-mpi"
    with (tmp_path / "job.yaml").open("a") as f:
        f.write("launcher: torchrun\n")  # the fix named
    assert "\nlauncher: torchrun\n" in dt("submit", "-f", str(tmp_path / "job.yaml"), "--dry-run").stdout


@pytest.mark.parametrize("given, says", [
    ({"bucket": "b"}, "invalid SageMaker bucket 'b': use a value like my-training-bucket"),
    ({"instance_type": "m5"}, "invalid SageMaker instance_type 'm5': use a value like ml.m5.xlarge"),
    ({"security_groups": ["x"]}, "invalid SageMaker security_groups x: use up to 5 ids of at most 32 characters "
                                 "like sg-0abc1234"),
    ({"subnets": ["subnet-1"]}, "a VPC needs both subnets and security_groups; give both or neither "
                                "(configure_sagemaker(unset=['subnets', 'security_groups']) removes a saved VPC)"),
    ({"bukcet": "my-bucket"}, "unknown SageMaker setting 'bukcet' (did you mean 'bucket'?): use one of role, "
                              "bucket, region, prefix, image, instance_type, subnets, security_groups, master_port; "
                              "nothing was changed"),
])
def test_configure_sagemaker_names_the_argument_given_not_the_clis_flag(dt: Dtrain, given, says):
    """configure_sagemaker(bucket='b') said "invalid SageMaker --bucket 'b'", a flag the SDK never takes (and
    bukcet= named config.yaml, which held no such key); nothing is saved."""
    from dtrain import Client

    before = (dt.home / "config.yaml").read_text() if (dt.home / "config.yaml").exists() else None
    with pytest.raises(SpecError) as sdk:
        Client(home=dt.home).configure_sagemaker(**given)
    assert str(sdk.value) == says
    assert ((dt.home / "config.yaml").read_text() if (dt.home / "config.yaml").exists() else None) == before


@pytest.mark.parametrize("flags, says", [
    (("--bucket", "b"), "invalid SageMaker --bucket 'b': use a value like my-training-bucket"),
    (("--subnets", "subnet-1"), "a VPC needs both --subnets and --security-groups; give both or neither (dtrain "
                                "config sagemaker --unset subnets security-groups removes a saved VPC)"),
])
def test_config_sagemaker_names_the_flag_as_before(dt: Dtrain, flags, says):
    said = dt("config", "sagemaker", *flags, check=False)
    assert said.returncode == 2 and said.stderr == f"dtrain: error: {says}\n", said.stderr


def test_exec_names_the_sdks_rank_and_command_and_the_cli_its_own(dt: Dtrain):
    """Client.exec(rank=-1) said 'invalid --rank -1', and exec(name, 5) "exec needs a command after '--', e.g.
    dtrain exec JOB -- ls /mnt": the CLI's flag and separator, which a notebook never typed."""
    from dtrain import Client

    client = Client(home=dt.home)
    with pytest.raises(SpecError) as form:  # refused before the job is read
        client.exec("nosuch", ["true"], rank=-1)
    assert str(form.value) == "invalid rank -1: use a process rank such as 0 (at most 4095); exec runs in one process"
    dt("submit", "sleeper", "--", "sleep", "60")
    try:
        with pytest.raises(SpecError) as past:
            client.exec("sleeper", ["true"], rank=1, running_timeout=60)
        assert str(past.value) == ("invalid rank 1: exec runs in one process; job 'sleeper' has 1 process, "
                                   "rank 0")
        with pytest.raises(SpecError) as command:
            client.exec("sleeper", 5, running_timeout=60)
        assert str(command.value) == ("invalid command 5: exec needs a command as a list of its words, e.g. "
                                      "exec('sleeper', ['ls', '/mnt'])")
        said = dt("exec", "sleeper", "--rank", "1", "--", "true", check=False)  # the CLI's words, as before
        assert said.returncode == 2 and said.stderr == ("dtrain: error: invalid --rank 1: exec runs in one process; "
                                                        "job 'sleeper' has 1 process, rank 0\n"), said.stderr
        said = dt("exec", "nosuch", "--rank", "-1", "--", "true", check=False)
        assert said.stderr == ("dtrain: error: invalid --rank -1: use a process rank such as 0 (at most 4095); exec "
                               "runs in one process\n"), said.stderr
    finally:
        dt("delete", "sleeper")


def test_a_jobs_sagemaker_options_are_named_as_the_sdks_fields(dt: Dtrain, tmp_path):
    """JobSpec(sagemaker={'instance_count': 0}) said 'invalid --instance-count 0: ..., e.g. --instance-count 2',
    and max_wait without spot 'add --spot or drop --max-wait'."""
    job = {"name": "x", "command": ["true"]}
    for options, says in (
            ({"instance_count": 0}, "invalid instance_count 0: use a whole number from 1 to 1000, e.g. instance_count=2"),
            ({"max_wait": 600}, "max_wait applies to spot training only: add spot=True or drop max_wait"),
            ({"spot": True, "max_runtime": 3600, "max_wait": 600}, "max_wait 600 is below max_runtime 3600: SageMaker "
             "needs the spot wait to cover the run; raise max_wait to at least 3600, or give max_runtime=600 or less"),
            ({"checkpoint_uri": "x"}, "invalid checkpoint_uri 'x': use s3://BUCKET/PREFIX, e.g. "
                                      "checkpoint_uri='s3://my-bucket/checkpoints'")):
        for build in (lambda: JobSpec(**job, sagemaker=options), lambda: JobSpec.from_dict({**job, "sagemaker": options})):
            with pytest.raises(SpecError) as sdk:
                build()
            assert str(sdk.value) == says
    (tmp_path / "job.yaml").write_text("name: x\ncommand: [\"true\"]\nbackend: sagemaker\nsagemaker: {instance_count: 0}\n")
    said = dt("submit", "-f", str(tmp_path / "job.yaml"), check=False)  # the file's words: its option as written
    assert said.returncode == 2 and said.stderr == (f"dtrain: error: job file '{tmp_path / 'job.yaml'}': invalid "
                                                    f"sagemaker: instance_count: 0: use a whole number from 1 to "
                                                    f"1000, e.g. sagemaker: {{instance_count: 2}}\n"), said.stderr
    said = dt("submit", "x", "--backend", "sagemaker", "--instance-count", "0", "--", "true", check=False)  # a flag
    assert said.returncode == 2 and said.stderr == ("dtrain: error: invalid --instance-count 0: use a whole number "
                                                    "from 1 to 1000, e.g. --instance-count 2\n"), said.stderr


@pytest.fixture
def cli(home, monkeypatch, capsys):
    """dtrain's main() in this process on the test's home: (exit code, stderr) of a command line."""
    from conftest import Cli

    monkeypatch.setenv("DTRAIN_HOME", str(home))
    run = Cli(capsys)
    return lambda *argv: (lambda said: (said[0], said[2]))(run(*argv))


@pytest.mark.parametrize("fields, says, cli_said", [
    ({"command": []}, "job 'x' has no command: give command=['python', 'train.py'], a list of strings, one per word",
     "job 'x' has no command (a list of strings): put it after '--', e.g. dtrain submit x -- python train.py"),
    ({"command": 5}, "invalid command 5 of job 'x': must be a list of strings, one per word, e.g. "
                     "command=['python', 'train.py']",
     "job 'x' has no command (a list of strings): put it after '--', e.g. dtrain submit x -- python train.py"),
    ({"command": ["python", "train.py", "--epochs", 2]}, "invalid command word 2: must be a string, e.g. '2', as in "
                                                          "command=['python', 'train.py', '--epochs', '2']",
     "invalid command word 2: must be a string (quote it in YAML)"),
    ({"env": {"A": 1}}, "invalid env A 1: must be a string, e.g. env={'A': '1'}",
     "invalid env A 1: must be a string (quote it in YAML)"),
    ({"env": {"DEBUG": True}}, "invalid env DEBUG True: must be a string, e.g. env={'DEBUG': 'true'}",
     "invalid env DEBUG True: must be a string (quote it in YAML)"),
    ({"env": {"A": None}}, "invalid env A None: must be a string, e.g. env={'A': ''} for an empty value, or leave A out",
     "invalid env A None: must be a string (quote it in YAML)"),
])
def test_a_jobspecs_command_and_env_are_refused_in_pythons_words(fields, says, cli_said):
    """JobSpec(command=[]) said "put it after '--', e.g. dtrain submit x -- python train.py", and env={'A': 1}
    "(quote it in YAML)": the CLI's and a job file's fixes, for a notebook user who wrote Python."""
    with pytest.raises(SpecError) as sdk:
        JobSpec(**{"name": "x", "command": ["true"], **fields})
    assert str(sdk.value) == says
    assert str(sdk.value.in_words("cli")) == cli_said  # the words the CLI's door keeps


def test_a_job_files_command_and_env_keep_the_yaml_words(cli, tmp_path):
    (tmp_path / "job.yaml").write_text("name: x\ncommand: [\"true\"]\nenv: {DEBUG: yes}\n")
    assert cli("submit", "-f", str(tmp_path / "job.yaml")) == (2, "dtrain: error: invalid env DEBUG value True: must "
                                                                  "be a string (quote it in YAML, e.g. 'yes')\n")
    assert cli("submit", "x") == (2, "dtrain: error: the job has no command: use dtrain submit NAME [options] -- "
                                     "COMMAND, or set 'command:' in the job file\n")


CHANNEL_WORDS = [  # built from Python, then as the CLI's --channel and a job file (the HTTP body answers so) say it
    ("training", "invalid channel 'training': use 'NAME=URI', e.g. channels=['training=s3://bucket/cifar10'] (or "
                 "Channel(name='training', uri='s3://bucket/cifar10'))",
     "invalid --channel 'training': use NAME=URI, e.g. --channel training=s3://bucket/cifar10"),
    ("a b=s3://bkt/x", "invalid channel name 'a b': use 1-64 letters, digits, '.', '-' or '_', e.g. 'training' "
                       "(channels=['training=s3://bucket/cifar10'])",
     "invalid channel name 'a b': use 1-64 letters, digits, '.', '-' or '_', e.g. --channel "
     "training=s3://bucket/cifar10"),
    ("t=http://x", "invalid channel 't'='http://x': use s3://BUCKET/PREFIX, efs://FS-ID/PATH, fsx://FS-ID/MOUNTNAME/"
                   "PATH or (with local=True) file:///PATH",
     "invalid channel 't'='http://x': use s3://BUCKET/PREFIX, efs://FS-ID/PATH, fsx://FS-ID/MOUNTNAME/PATH or (with "
     "--local) file:///PATH"),
]


@pytest.mark.parametrize("text, says, cli_said", CHANNEL_WORDS)
def test_a_channel_built_in_python_is_refused_in_pythons_words(text, says, cli_said):
    """Channel(...), parse_channel(...) and JobSpec(sagemaker={'channels': [...]}) named --channel and --local."""
    from dtrain.spec_sagemaker import Channel, parse_channel

    name, sep, uri = text.partition("=")
    builds = [lambda: parse_channel(text), lambda: JobSpec(name="x", command=["t"], sagemaker={"channels": [text]}),
              lambda: JobSpec.from_dict({"name": "x", "command": ["t"], "sagemaker": {"channels": [text]}})]
    for build in builds + ([lambda: Channel(name=name, uri=uri)] if sep else []):
        with pytest.raises(SpecError) as sdk:
            build()
        assert str(sdk.value) == says
    for build in (lambda: parse_channel(text, door="cli"), lambda: JobSpec.from_dict(
            {"name": "x", "command": ["t"], "sagemaker": {"channels": [text]}}, door="http")):
        with pytest.raises(SpecError) as flag:
            build()
        assert str(flag.value) == cli_said


@pytest.mark.parametrize("text, says, cli_said", CHANNEL_WORDS)
def test_the_clis_channel_keeps_its_words(cli, tmp_path, text, says, cli_said):
    assert cli("submit", "x", "--channel", text, "--", "true") == (2, f"dtrain: error: {cli_said}\n")
    (tmp_path / "job.yaml").write_text(f"name: x\ncommand: [\"true\"]\nsagemaker: {{channels: ['{text}']}}\n")
    assert cli("submit", "-f", str(tmp_path / "job.yaml")) == (2, f"dtrain: error: {cli_said}\n")


def test_a_clients_sagemaker_settings_are_named_as_given(home):
    """Client(sagemaker={'bucket': 'b'}) said "invalid SageMaker --bucket 'b'" (a flag the SDK never takes) at its
    first SageMaker call, and {'bukcet': ...} 'Client(sagemaker=...): unknown sagemaker setting bukcet' there too."""
    from dtrain import Client

    with pytest.raises(SpecError) as unknown:  # at once
        Client(home=home, sagemaker={"bukcet": "my-bucket"})
    assert str(unknown.value) == ("unknown SageMaker setting 'bukcet' in Client(sagemaker=...) (did you mean "
                                  "'bucket'?): use one of role, bucket, region, prefix, image, instance_type, subnets, "
                                  "security_groups, master_port")
    for given, says in (({"bucket": "b"}, "invalid SageMaker bucket 'b': use a value like my-training-bucket"),
                        ({"instance_type": "m5"}, "invalid SageMaker instance_type 'm5': use a value like ml.m5.xlarge"),
                        ({"subnets": ["subnet-1"]}, "a VPC needs both subnets and security_groups; give both or "
                         "neither (configure_sagemaker(unset=['subnets', 'security_groups']) removes a saved VPC)")):
        with pytest.raises(SpecError) as bad:
            Client(home=home, sagemaker=given).sagemaker_config()
        assert str(bad.value) == f"SageMaker settings given to this client: {says}"
    assert Client(home=home, sagemaker={"bucket": "my-bucket"}).sagemaker_config().bucket == "my-bucket"


def test_an_unknown_sagemaker_key_is_refused_where_it_was_written(home, monkeypatch):
    """The settings a client reads merge config.yaml's and the client's own, whose keys were each checked before
    (config.yaml's first, the client's when it was made): a refusal naming 'Client(sagemaker=...):' at the merge
    could not show, and the merge takes the known keys as they are."""
    from dtrain import Client

    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    (home / "config.yaml").write_text("sagemaker: {bukcet: my-bucket}\n")
    with pytest.raises(SpecError) as saved:  # config.yaml's key, whatever the client gives
        Client(home=home, sagemaker={"bucket": "my-bucket"}).sagemaker_config()
    assert str(saved.value).startswith(f"{home / 'config.yaml'}: unknown sagemaker setting bukcet"), saved.value
    (home / "config.yaml").write_text("sagemaker: {prefix: runs}\n")
    with pytest.raises(SpecError, match=r"in Client\(sagemaker=\.\.\.\)"):  # the client's, when it is made
        Client(home=home, sagemaker={"bukcet": "my-bucket"})
    merged = Client(home=home, sagemaker={"bucket": "my-bucket"}).sagemaker_config()
    assert (merged.bucket, merged.prefix, merged.region) == ("my-bucket", "runs", "eu-west-1")

def test_a_waits_timeout_has_a_public_name(home):
    """A traceback said 'dtrain.errors.TimeoutError_: ...': a trailing '_' reads as private, or as the built-in
    misspelt. WaitTimeoutError is its name; TimeoutError_ is the same class, so old code still catches it."""
    import traceback

    from dtrain import Client, errors

    assert errors.TimeoutError_ is errors.WaitTimeoutError and issubclass(errors.WaitTimeoutError, TimeoutError)
    client = Client(home=home)
    client.submit(JobSpec(name="slow", command=["sleep", "30"]))
    try:
        with pytest.raises(errors.TimeoutError_) as caught:
            client.wait("slow", timeout=0)
        said = traceback.format_exception_only(type(caught.value), caught.value)[-1]
        assert said.startswith("dtrain.errors.WaitTimeoutError: job 'slow' is still "), said
    finally:
        client.delete("slow", purge=True)


def test_the_http_api_names_a_waits_timeout_as_it_did_before_the_rename():
    """The HTTP API's error body names the class as `kind`: the rename must not change what a client matches."""
    from dtrain import errors

    assert errors.kind_of(errors.WaitTimeoutError("late")) == "TimeoutError"
    assert errors.kind_of(errors.EnvironmentError_("no")) == "EnvironmentError"
    assert errors.kind_of(errors.NotFoundError("gone")) == "NotFoundError"


def test_a_jobspec_shows_the_fields_given_and_to_dict_keeps_them_all():
    """repr(JobSpec) showed all 23 fields, defaults and all, in a notebook cell."""
    import dataclasses

    spec = JobSpec(name="train", command=["python", "train.py"], gpu=1, env={"SEED": "1"}, backend="sagemaker",
                   sagemaker={"spot": True, "channels": ["training=s3://bkt/cifar10"]})
    assert repr(spec) == ("JobSpec(name='train', command=('python', 'train.py'), gpu=1, env={'SEED': '1'}, "
                          "backend='sagemaker', sagemaker=SageMakerOptions(channels=(Channel(name='training', "
                          "uri='s3://bkt/cifar10'),), spot=True))")
    assert repr(JobSpec(name="x", command=["true"], project="default", backend="local")) == (
        "JobSpec(name='x', command=('true',), project='default', backend='local')")  # named, though the default's
    assert repr(JobSpec(name="x", command=["true"]).replace(large_shm=True)) == (
        "JobSpec(name='x', command=('true',), large_shm=True)")
    assert set(spec.to_dict()) == {f.name for f in dataclasses.fields(JobSpec)} - {"project"}  # left unset: left out
    assert JobSpec.from_dict(spec.to_dict()) == spec


def test_sagemaker_options_on_another_backend_name_what_was_given_in_pythons_words():
    """JobSpec(sagemaker={'spot': True}) said 'SageMaker options (max_runtime, spot, volume_size) need backend
    sagemaker, not 'local': use --backend sagemaker (backend: sagemaker), ...': two options it never gave (their
    defaults), the CLI's flag and a job file's key."""
    with pytest.raises(SpecError) as unset:
        JobSpec(name="j", command=["true"], sagemaker={"spot": True})
    assert str(unset.value) == ("SageMaker options (spot) need backend sagemaker, not 'local' (the default): give "
                                "backend='sagemaker' as well, or leave them out")
    with pytest.raises(SpecError) as named:
        JobSpec.from_dict({"name": "j", "command": ["true"], "backend": "kubernetes",
                           "sagemaker": {"instance_type": "ml.m5.xlarge", "max_runtime": 3600}})
    assert str(named.value) == ("SageMaker options (instance_type, max_runtime) need backend sagemaker, not "
                                "'kubernetes': give backend='sagemaker' as well, or leave them out")
    assert str(named.value.in_words("cli")) == ("SageMaker options (instance_type, max_runtime) need backend "
                                                "sagemaker, not 'kubernetes': use --backend sagemaker (backend: "
                                                "sagemaker), or leave them out")
    assert JobSpec(name="j", command=["true"], backend="sagemaker", sagemaker={"spot": True}).sagemaker.spot


def test_a_missing_tool_is_a_setuperror_and_the_http_api_still_names_it_environmenterror(tmp_path):
    """A tool this machine lacks raised `dtrain.errors.EnvironmentError_: ...`: a trailing '_' that reads as
    private, and a stand-in for the built-in EnvironmentError (an OSError, which it is not). It is SetupError
    now; EnvironmentError_ is the same class (old excepts still catch it), and the HTTP body's kind stays."""
    import traceback

    from dtrain import errors
    from dtrain.procs import spawn_detached

    assert errors.EnvironmentError_ is errors.SetupError and not issubclass(errors.SetupError, OSError)
    with pytest.raises(errors.EnvironmentError_) as caught:
        spawn_detached([str(tmp_path / "missing-python")], log=tmp_path / "x.log", cwd=str(tmp_path))
    said = traceback.format_exception_only(type(caught.value), caught.value)[-1]
    assert said.startswith("dtrain.errors.SetupError: the process could not be started: "), said
    assert errors.kind_of(caught.value) == "EnvironmentError"


@pytest.mark.parametrize("fields, says, cli_said", [
    ({"working_dir": "src"}, "invalid working_dir 'src': use an absolute path",
     "invalid --working-dir 'src': use an absolute path"),
    ({"working_dir": 5}, "invalid working_dir 5: must be a string", "invalid --working-dir 5: must be a string"),
    ({"image": "Reg/X:1"}, "invalid image 'Reg/X:1': use an image reference such as ",
     "invalid --image 'Reg/X:1': use an image reference such as "),
    ({"image_pull_policy": "always"}, "invalid image_pull_policy 'always': use 'Always', 'IfNotPresent' or 'Never'",
     "invalid --image-pull-policy 'always': use Always, IfNotPresent or Never"),
    ({"env": {"ENABLE_SNAPSHOT": "treu", "PVC_NAME": "data"}},
     "invalid env ENABLE_SNAPSHOT 'treu': use 'true' or 'false', with PVC_NAME the volume snapshotted when the job "
     "succeeds, e.g. env={'ENABLE_SNAPSHOT': 'true', 'PVC_NAME': 'data'}",
     "invalid -e ENABLE_SNAPSHOT='treu': use true or false (with -e PVC_NAME=VOLUME, the volume snapshotted when "
     "the job succeeds)"),
    ({"env": {"ENABLE_SNAPSHOT": "true"}}, "env ENABLE_SNAPSHOT='true' names no volume to snapshot: add 'PVC_NAME': "
                                           "'VOLUME' to env (or give snapshot_on_success='VOLUME')",
     "-e ENABLE_SNAPSHOT=true names no volume to snapshot: add -e PVC_NAME=VOLUME (or give --snapshot-on-success "
     "VOLUME)"),
])
def test_a_jobspecs_working_dir_image_and_snapshot_env_are_named_as_its_arguments(fields, says, cli_said):
    """JobSpec(working_dir='src') said "invalid --working-dir 'src'", image= '--image', image_pull_policy=
    '--image-pull-policy', env={'ENABLE_SNAPSHOT': 'true'} '-e ENABLE_SNAPSHOT=true ... add -e PVC_NAME=VOLUME':
    flags a Python caller never typed. The CLI's door (a flag, a job file) and the HTTP body's say what they said."""
    for build in (lambda: JobSpec(**{"name": "x", "command": ["true"], **fields}),
                  lambda: JobSpec.from_dict({"name": "x", "command": ["true"], **fields})):
        with pytest.raises(SpecError) as sdk:
            build()
        assert str(sdk.value).startswith(says), str(sdk.value)
    for door in ("cli", "http"):
        with pytest.raises(SpecError) as other:
            JobSpec.from_dict({"name": "x", "command": ["true"], **fields}, door=door)
        assert str(other.value).startswith(cli_said), str(other.value)


@pytest.mark.parametrize("fields, drop", [
    ({"max_restarts": 2}, "max_restarts=2"),
    ({"launcher": "torchrun", "processes": 2}, "launcher='torchrun' and processes=2"),
    ({"launcher": "mpi", "max_restarts": 1, "snapshot_on_success": "data"},
     "launcher='mpi', max_restarts=1 and snapshot_on_success='data'"),
    ({"env": {"ENABLE_SNAPSHOT": "true", "PVC_NAME": "data"}}, "env's ENABLE_SNAPSHOT and PVC_NAME"),
])
def test_a_notebook_of_several_processes_names_the_arguments_given(fields, drop):
    """Client.notebook('nb', max_restarts=2) said 'drop --processes, --launcher, --max-restarts and
    --snapshot-on-success': four flags, three of them never given, none of them Python's."""
    from dtrain.spec import notebook_spec

    with pytest.raises(SpecError) as sdk:
        notebook_spec("nb", **fields)
    assert str(sdk.value) == f"notebook 'nb' is one interactive process: drop {drop}"
    with pytest.raises(SpecError) as cli_said:
        notebook_spec("nb", door="cli", **fields)
    assert str(cli_said.value) == ("notebook 'nb' is one interactive process: drop --processes, --launcher, "
                                   "--max-restarts and --snapshot-on-success")


def test_the_clis_notebook_keeps_the_flags_words_and_a_job_file_its_fields(cli, tmp_path):
    code, said = cli("notebook", "nb", "--image", "Reg/X:1")
    assert code == 2 and said.startswith("dtrain: error: invalid --image 'Reg/X:1': use an image reference "), said
    code, said = cli("notebook", "nb", "--image", "Reg/X:1", "--dry-run")
    assert code == 2 and said.startswith("dtrain: error: invalid --image 'Reg/X:1': use an image reference "), said
    (tmp_path / "job.yaml").write_text("name: x\ncommand: [\"true\"]\nworking_dir: src\n")
    assert cli("submit", "-f", str(tmp_path / "job.yaml")) == (
        2, f"dtrain: error: job file '{tmp_path / 'job.yaml'}': invalid working_dir: 'src': use an absolute path\n")


@pytest.mark.parametrize("fields, says, cli_said", [
    ({"cpu": 0}, "invalid cpu 0: use a number of CPU threads from 0.01 to 1024, e.g. cpu=2 or cpu=0.5",
     "invalid --cpu 0: use a number of CPU threads from 0.01 to 1024, e.g. --cpu 2 or --cpu 0.5"),
    ({"cpu": "2"}, "invalid cpu '2': use a number of CPU threads from 0.01 to 1024, e.g. cpu=2 or cpu=0.5",
     "invalid --cpu '2': use a number of CPU threads from 0.01 to 1024, e.g. --cpu 2 or --cpu 0.5"),
    ({"memory": "4"}, "invalid memory '4': a number without a unit is bytes (4 bytes); use a quantity from 4Mi to "
                      "1Ei: write the unit, e.g. 4Gi",
     "invalid --memory '4': a number without a unit is bytes (4 bytes); use a quantity from 4Mi to 1Ei: write the "
     "unit, e.g. 4Gi"),
    ({"memory": 512}, "invalid memory 512: must be a string such as '512Mi'",
     "invalid --memory 512: must be a string such as 512Mi"),
    ({"notebook": True, "idle_timeout": 5}, "invalid idle_timeout 5: use a whole number of seconds from 60 (1m) to "
                                            "2592000 (30d), e.g. idle_timeout=3600 (1h)",
     "invalid --idle-timeout 5 (seconds): give 1m to 30d, i.e. a whole number of seconds from 60 to 2592000, e.g. "
     "3600 (1h)"),
    ({"processes": 0, "launcher": "torchrun"}, "invalid processes 0: use a whole number from 1 to 4096, e.g. "
                                               "processes=4",
     "invalid --processes 0: use a whole number from 1 to 4096, e.g. --processes 4"),
    ({"gpu": 17}, "invalid gpu 17: use a whole number from 0 to 16, e.g. gpu=1",
     "invalid --gpu 17: use a whole number from 0 to 16, e.g. --gpu 1"),
    ({"gpu": 0.5}, "gpu=0.5 is a fraction of a GPU, and GPUs are not shared between jobs here: give whole GPUs per "
                   "process (gpu=1), or leave gpu out to run on CPUs",
     "--gpu 0.5 is a fraction of a GPU, and GPUs are not shared between jobs here: give whole GPUs per process "
     "(--gpu 1), or leave --gpu out to run on CPUs"),
    ({"max_restarts": -1}, "invalid max_restarts -1: use a whole number from 0 to 100, e.g. max_restarts=3",
     "invalid --max-restarts -1: use a whole number from 0 to 100, e.g. --max-restarts 3"),
    ({"idle_timeout": 3600}, "job 'x': idle_timeout stops an idle notebook; a training job ends by itself: drop it "
                             "(or start a notebook: Client.notebook(NAME, idle_timeout=3600))",
     "job 'x': --idle-timeout stops an idle notebook; a training job ends by itself: drop it (or start a notebook: "
     "dtrain notebook NAME --idle-timeout 1h)"),
])
def test_a_jobspecs_cpu_memory_and_idle_timeout_are_named_as_its_arguments(fields, says, cli_said):
    """JobSpec(cpu=0) said 'invalid --cpu 0 ... e.g. --cpu 2', memory='4' 'invalid --memory', idle_timeout=5
    'invalid --idle-timeout', processes=0, gpu=17 and max_restarts=-1 '--processes', '--gpu', '--max-restarts':
    flags a Python caller never typed. A flag, a job file and the HTTP body keep them."""
    for build in (lambda: JobSpec(**{"name": "x", "command": ["true"], **fields}),
                  lambda: JobSpec.from_dict({"name": "x", "command": ["true"], **fields})):
        with pytest.raises(SpecError) as sdk:
            build()
        assert str(sdk.value) == says
    for door in ("cli", "http"):
        with pytest.raises(SpecError) as other:
            JobSpec.from_dict({"name": "x", "command": ["true"], **fields}, door=door)
        assert str(other.value) == cli_said


def test_client_notebook_and_logs_name_idle_timeout_and_limit_bytes_as_arguments(cli, home):
    """Client.notebook('nb', idle_timeout=5) said 'invalid --idle-timeout 5', Client.logs(limit_bytes=0)
    'invalid --limit-bytes 0 ... e.g. --limit-bytes 10000'; `dtrain notebook` and `dtrain logs` keep the flags."""
    from dtrain import Client

    client = Client(home=home)
    with pytest.raises(SpecError) as said:
        client.notebook("nb", idle_timeout=5)
    assert str(said.value).startswith("invalid idle_timeout 5: use a whole number of seconds from 60 (1m)")
    with pytest.raises(SpecError) as said:
        client.logs("nope", limit_bytes=0)
    assert str(said.value) == ("invalid limit_bytes 0: use a number of bytes from 1 to 1152921504606846976 (None, "
                               "the default, for the whole log), e.g. limit_bytes=10000")
    code, said = cli("notebook", "nb", "--idle-timeout", "5")
    assert code == 2 and said.startswith("dtrain: error: invalid --idle-timeout 5 (seconds): give 1m to 30d"), said
    assert cli("logs", "nope", "--limit-bytes", "0") == (2, "dtrain: error: invalid --limit-bytes 0: use a number of "
                                                            "bytes from 1 to 1152921504606846976 (leave it out for the "
                                                            "whole log), e.g. --limit-bytes 10000\n")
    assert client.list() == []  # nothing made


@pytest.mark.parametrize("field, value, says", [
    ("labels", 1, "invalid value 1 of label k: must be a string, e.g. labels={'k': '1'}"),
    ("node_selector", True, "invalid value True of node selector k: must be a string, e.g. node_selector={'k': "
                            "'true'}"),
    ("labels", "-x", "invalid value '-x' of label k: use 63 letters, digits, '-', '_' or '.' at most, alphanumeric "
                     "at both ends"),
    ("node_selector", "a b", "invalid value 'a b' of node selector k: use 63 letters, digits, '-', '_' or '.' at "
                             "most, alphanumeric at both ends"),
])
def test_a_label_or_node_selector_value_from_python_is_not_told_to_quote_it_in_yaml(field, value, says):
    """JobSpec(labels={'k': 1}) and node_selector={'k': True} said '(quote it in YAML)', a job file's fix, to a
    Python caller; a string's refusal said it too, at every door, though no quoting makes '-x' a label value."""
    with pytest.raises(SpecError) as sdk:
        JobSpec(name="x", command=["true"], **{field: {"k": value}})
    assert str(sdk.value) == says


def test_a_job_files_label_that_yaml_read_as_no_string_is_still_told_to_quote_it(cli, tmp_path):
    (tmp_path / "job.yaml").write_text("name: x\ncommand: [\"true\"]\nnode_selector: {gpu: yes}\n")
    assert cli("submit", "-f", str(tmp_path / "job.yaml")) == (2, "dtrain: error: invalid value True of node selector "
                                                                  "gpu: use 63 letters, digits, '-', '_' or '.' at "
                                                                  "most, alphanumeric at both ends (quote it in "
                                                                  "YAML)\n")
    code, said = cli("submit", "x", "--label", "team=-x", "--", "true")
    assert code == 2 and said == ("dtrain: error: invalid value '-x' of label team: use 63 letters, digits, '-', "
                                  "'_' or '.' at most, alphanumeric at both ends\n"), said


@pytest.mark.parametrize("given, says", [
    ({"key": "a", "value": 1}, "invalid value 1 of toleration a: must be a string, e.g. Toleration(key='a', value='1')"),
    ({"key": "a", "value": True}, "invalid value True of toleration a: must be a string, e.g. Toleration(key='a', "
                                  "value='true')"),
    ({"key": "a", "value": "-x"}, "invalid value '-x' of toleration a: use 63 letters, digits, '-', '_' or '.' at "
                                  "most, alphanumeric at both ends"),
])
def test_a_toleration_value_from_python_is_not_told_to_quote_it_in_yaml(given, says):
    """JobSpec(tolerations=[{'key': 'a', 'value': 1}]) and Toleration(key='a', value=1) said '(quote it in YAML)',
    a job file's fix, to a Python caller; a string's refusal ('-x', a --toleration flag's too) said it at every
    door, though no quoting makes '-x' a taint's value. Labels and node selectors say it so already."""
    from dtrain.spec import Toleration

    with pytest.raises(SpecError) as sdk:
        JobSpec(name="x", command=["true"], tolerations=[given])
    assert str(sdk.value) == says
    with pytest.raises(SpecError) as made:
        Toleration(**given)
    assert str(made.value) == says


def test_a_job_files_toleration_that_yaml_read_as_no_string_is_still_told_to_quote_it(cli, tmp_path):
    (tmp_path / "job.yaml").write_text("name: x\ncommand: [\"true\"]\ntolerations: [{key: a, value: yes}]\n")
    assert cli("submit", "-f", str(tmp_path / "job.yaml")) == (2, "dtrain: error: invalid value True of toleration "
                                                                  "a: use 63 letters, digits, '-', '_' or '.' at "
                                                                  "most, alphanumeric at both ends (quote it in "
                                                                  "YAML)\n")
    code, said = cli("submit", "x", "--toleration", "key=a,value=-x", "--", "true")
    assert code == 2 and said == ("dtrain: error: invalid value '-x' of toleration a: use 63 letters, digits, '-', "
                                  "'_' or '.' at most, alphanumeric at both ends\n"), said
