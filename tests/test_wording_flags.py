"""wording.FLAGS names every argument a refusal words by door, and each flag it names is one the CLI takes:
logs' previous and follow, exec's rank, wait's timeout and the SageMaker options look their words up there
(they each spelled them in their own `door ==` test, spec_sagemaker in a table of its own)."""

from __future__ import annotations

import argparse

import pytest

from dtrain import wording
from dtrain.cli.main import build_parser


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    flags = set()
    for action in parser._actions:
        flags.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action._name_parser_map.values():
                flags |= _flags(sub)
    return flags


def test_every_flag_the_table_names_is_one_the_cli_takes():
    taken = _flags(build_parser())
    assert [flag for flag in wording.FLAGS.values() if flag not in taken] == []
    for option in ("instance_type", "instance_count", "max_runtime", "max_wait", "volume_size", "output_path"):
        assert wording.named(option, "cli") in taken  # the rest are their flags with dashes


@pytest.mark.parametrize("door, says", [
    ("sdk", "previous=True cannot be followed: the previous attempt has ended; drop follow=True to read its lines, "
            "or drop previous=True to follow the current attempt"),
    ("cli", "--previous cannot be followed: the previous attempt has ended; drop -f to print its lines, or drop "
            "--previous to follow the current attempt"),
])
def test_logs_previous_and_follow_are_named_from_the_table(door, says, monkeypatch):
    from dtrain.backends.logstream import check_logs_args
    from dtrain.errors import SpecError

    with pytest.raises(SpecError) as refused:
        check_logs_args(rank=None, tail=None, since=None, follow=True, previous=True, limit_bytes=None, door=door)
    assert str(refused.value) == says
    monkeypatch.setitem(wording.FLAGS, "follow", "--follow")  # the words come from the table, not the line
    with pytest.raises(SpecError) as renamed:
        check_logs_args(rank=None, tail=None, since=None, follow=True, previous=True, limit_bytes=None, door="cli")
    assert "drop --follow to print" in str(renamed.value)


def test_exec_wait_and_sagemaker_options_take_their_flags_from_the_table(monkeypatch):
    from dtrain.names import exec_rank_named, wait_refusal
    from dtrain.spec_sagemaker import option_named

    for arg in ("rank", "timeout", "checkpoint_uri", "channels"):
        monkeypatch.setitem(wording.FLAGS, arg, f"--renamed-{arg}")
    assert exec_rank_named("cli") == "--renamed-rank" and exec_rank_named("sdk") == "rank"
    assert str(wait_refusal("1e9", "cli")).startswith("invalid --renamed-timeout '1e9'")
    assert str(wait_refusal("1e9", "sdk")).startswith("invalid timeout '1e9'")
    assert option_named("checkpoint_uri", "cli") == "--renamed-checkpoint_uri"
    assert option_named("checkpoint_uri", "sdk") == "checkpoint_uri"
    assert option_named("channels", "http") == "--renamed-channels"


def test_a_notebooks_one_process_refusal_names_the_tables_flags(monkeypatch):
    from dtrain.errors import SpecError
    from dtrain.spec import JobSpec

    data = {"name": "nb", "notebook": True, "command": ["jupyter"], "processes": 2, "launcher": "torchrun"}
    with pytest.raises(SpecError) as cli:
        JobSpec.from_dict(data, door="cli")
    assert str(cli.value) == ("notebook 'nb' is one interactive process: drop --processes, --launcher, --max-restarts "
                              "and --snapshot-on-success")
    monkeypatch.setitem(wording.FLAGS, "max_restarts", "--renamed")
    with pytest.raises(SpecError) as renamed:
        JobSpec.from_dict(data, door="http")
    assert "--launcher, --renamed and" in str(renamed.value)
    with pytest.raises(SpecError) as sdk:
        JobSpec(**data)
    assert str(sdk.value) == "notebook 'nb' is one interactive process: drop launcher='torchrun' and processes=2"


# ---- the spec's refusals decide their words in wording (named, given_as, switched, door_words) ----------------
WORDED_MODULES = ("dtrain/spec/job.py", "dtrain/spec_sagemaker.py", "dtrain/backends/local/backend.py")


@pytest.mark.parametrize("module", WORDED_MODULES)
def test_a_refusal_words_its_door_through_the_table_not_a_door_test_of_its_own(module):
    """The ENABLE_SNAPSHOT lines, the Channel's, the notebook's one-process line (and their neighbours: max_wait's,
    the launcher's, an S3 URI's example) each chose their words with a `door ==` (or `door in`) test of their own."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).resolve().parents[1] / module).read_text())
    tests = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Compare)
             and any(isinstance(x, ast.Name) and x.id == "door" for x in [node.left, *node.comparators])]
    assert tests == [], f"{module}: say a name with wording.named/given_as/switched, a sentence with door_words"


def _said(make, door: str) -> str:
    from dtrain.errors import Worded

    with pytest.raises(Worded) as refused:
        make()
    return str(refused.value.in_words(door))


SNAPSHOT_VALUE = ({"ENABLE_SNAPSHOT": "maybe"}, {
    "sdk": "invalid env ENABLE_SNAPSHOT 'maybe': use 'true' or 'false', with PVC_NAME the volume snapshotted when "
           "the job succeeds, e.g. env={'ENABLE_SNAPSHOT': 'true', 'PVC_NAME': 'data'}",
    "cli": "invalid -e ENABLE_SNAPSHOT='maybe': use true or false (with -e PVC_NAME=VOLUME, the volume snapshotted "
           "when the job succeeds)"})
SNAPSHOT_NO_VOLUME = ({"ENABLE_SNAPSHOT": "true"}, {
    "sdk": "env ENABLE_SNAPSHOT='true' names no volume to snapshot: add 'PVC_NAME': 'VOLUME' to env (or give "
           "snapshot_on_success='VOLUME')",
    "cli": "-e ENABLE_SNAPSHOT=true names no volume to snapshot: add -e PVC_NAME=VOLUME (or give "
           "--snapshot-on-success VOLUME)"})


@pytest.mark.parametrize("env, says", [SNAPSHOT_VALUE, SNAPSHOT_NO_VOLUME])
def test_the_enable_snapshot_lines_say_what_they_said_at_each_door(env, says, monkeypatch):
    from dtrain.spec import JobSpec

    make = lambda: JobSpec(name="j", command=["python", "t.py"], env=env)  # noqa: E731
    assert {door: _said(make, door) for door in ("sdk", "cli", "http")} == {**says, "http": says["cli"]}
    if "give" in says["cli"]:
        monkeypatch.setitem(wording.FLAGS, "snapshot_on_success", "--renamed")
        assert _said(make, "cli").endswith("(or give --renamed VOLUME)")


def test_the_channels_and_spot_lines_take_their_names_from_the_table(monkeypatch):
    from dtrain.spec_sagemaker import Channel, SageMakerOptions, parse_channel

    assert _said(lambda: Channel(name="t", uri="http://x"), "sdk").endswith("(with local=True) file:///PATH")
    assert _said(lambda: Channel(name="t", uri="http://x"), "http").endswith("(with --local) file:///PATH")
    assert _said(lambda: parse_channel("x"), "cli") == ("invalid --channel 'x': use NAME=URI, e.g. --channel "
                                                        "training=s3://bucket/cifar10")
    assert _said(lambda: parse_channel("x"), "sdk") == (
        "invalid channel 'x': use 'NAME=URI', e.g. channels=['training=s3://bucket/cifar10'] (or "
        "Channel(name='training', uri='s3://bucket/cifar10'))")
    twice = lambda: SageMakerOptions(channels=["a=s3://bucket/x", "a=s3://bucket/y"])  # noqa: E731
    assert _said(twice, "sdk").endswith("give each channel its own name")
    assert _said(twice, "cli").endswith("give each --channel its own name")
    assert _said(lambda: SageMakerOptions(max_wait=100), "sdk") == ("max_wait applies to spot training only: add "
                                                                    "spot=True or drop max_wait")
    assert _said(lambda: SageMakerOptions(max_wait=100), "cli") == ("--max-wait applies to spot training only: add "
                                                                    "--spot or drop --max-wait")
    for arg in ("local", "spot", "channel", "max_runtime"):
        monkeypatch.setitem(wording.FLAGS, arg, f"--renamed-{arg}")
    assert _said(lambda: Channel(name="t", uri="http://x"), "cli").endswith("(with --renamed-local) file:///PATH")
    assert _said(twice, "cli").endswith("give each --renamed-channel its own name")
    assert "add --renamed-spot or drop" in _said(lambda: SageMakerOptions(max_wait=100), "cli")
    short = _said(lambda: SageMakerOptions(spot=True, max_wait=100, max_runtime=200), "cli")
    assert short.endswith("or pass --renamed-max_runtime 100 or less"), short


def test_door_words_and_a_quoted_example():
    assert wording.door_words("sdk", cli="a flag", sdk="an argument") == "an argument"
    assert wording.door_words("cli", cli="a flag", sdk="an argument") == wording.door_words(
        "http", cli="a flag", sdk="an argument") == "a flag"
    assert wording.given_as("memory", "3Gi", "sdk", quoted=True) == "memory='3Gi'"
    assert wording.given_as("memory", "3Gi", "cli", quoted=True) == "--memory 3Gi"
