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
