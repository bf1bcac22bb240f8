"""The workloads' command lines (`python -m dtrain.workloads.lanes ...`, cifar10, `dtrain bench scaling`)
refuse a flag's start as the dtrain CLI does (allow_abbrev=False), with the same line naming the whole flag."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from conftest import DTRAIN


@pytest.mark.parametrize("module, func, words, fix", [
    ("dtrain.workloads.lanes.synth", "main", ["--ou", "DIR"], "give --out"),
    ("dtrain.workloads.lanes.metric", "main", ["--pre=p.json", "--gt", "g.json"], "give --pred=p.json"),  # required
    ("dtrain.workloads.lanes.predict", "main", ["--checkpoint", "m.pt", "--ou", "p.json"], "give --out"),
    ("dtrain.workloads.cifar10.data", "synth_main", ["--out", "DIR", "--n-tr", "5"], "give --n-train"),
    ("dtrain.workloads.cifar10.download", "download_main", ["--ou", "DIR"], "give --out"),
    ("dtrain.bench.scaling", "main", ["--work", "lanes", "--data-dir", "DIR"], "give --workload"),
])
def test_a_workload_flag_is_never_abbreviated(capsys, tmp_path, monkeypatch, module, func, words, fix):
    """argparse took `--ou` for --out and ran (a minute of synth for a typo's start); the CLI refuses it."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        getattr(importlib.import_module(module), func)([w.replace("DIR", str(tmp_path / "out")) for w in words])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert "unrecognized arguments: " in err and f"flags are not abbreviated: {fix}" in err, err
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []  # nothing was written


@pytest.mark.slow  # two processes, ~3 s
def test_the_same_line_by_python_m_and_by_the_cli(tmp_path):
    """`python -m dtrain.workloads.lanes synth` (plain torchrun's door) and `dtrain lanes synth` say the same."""
    by_module = subprocess.run([sys.executable, "-m", "dtrain.workloads.lanes", "synth", "--ou", str(tmp_path / "d")],
                               capture_output=True, text=True, timeout=60)
    by_cli = subprocess.run([DTRAIN, "lanes", "synth", "--ou", str(tmp_path / "d")], capture_output=True, text=True,
                            timeout=60)
    for proc in (by_module, by_cli):
        assert proc.returncode == 2 and proc.stderr == (
            f"dtrain lanes synth: error: unrecognized arguments: --ou {tmp_path / 'd'}; flags are not abbreviated: "
            f"give --out (see 'dtrain lanes synth --help')\n"), proc.stderr
    assert not (tmp_path / "d").exists()


def test_a_whole_flag_and_a_misspelt_one_are_read_as_before(capsys):
    """Only a flag's start is refused: --out works, and a typo still gets its did-you-mean."""
    from dtrain.workloads.lanes import metric
    with pytest.raises(SystemExit):
        metric.main(["--pred", "p.json", "--gt", "g.json", "--jsno"])
    assert "(did you mean --json?)" in capsys.readouterr().err


@pytest.mark.parametrize("module, func, words, said", [
    ("dtrain.workloads.lanes.train", "main", ["--recipe", "tinny"], "argument --recipe: invalid choice: 'tinny': "
                                                                    "did you mean 'tiny'?"),
    ("dtrain.workloads.lanes.predict", "main", ["--split", "tset"], "argument --split: invalid choice: 'tset': "
                                                                    "did you mean 'test'?"),
    ("dtrain.workloads.cifar10.data", "synth_main", ["--out", "DIR", "--format", "binry"],
     "argument --format: invalid choice: 'binry': did you mean 'binary'?"),
    ("dtrain.bench.scaling", "main", ["--workload", "lane", "--data-dir", "DIR"],
     "argument --workload: invalid choice: 'lane': did you mean 'lanes'?"),
])
def test_a_misspelt_choice_is_named_with_the_one_meant(capsys, tmp_path, monkeypatch, module, func, words, said):
    """`--recipe tinny` named the list of recipes; the dtrain CLI names the verb meant (`dtrain sumbit`)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        getattr(importlib.import_module(module), func)([w.replace("DIR", str(tmp_path / "out")) for w in words])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert f": error: {said} (see '" in err and "choose from" not in err, err
    assert list(tmp_path.iterdir()) == []  # nothing was written


def test_a_choice_far_from_every_one_is_refused_with_the_list(capsys):
    from dtrain.workloads.lanes import train
    with pytest.raises(SystemExit):
        train.main(["--backend", "xyz"])
    assert "invalid choice: 'xyz' (choose from 'gloo', 'nccl', 'mpi')" in capsys.readouterr().err


def test_a_misspelt_command_of_python_m_is_named_with_the_one_meant(capsys):
    """Under a plain torchrun (`python -m dtrain.workloads.lanes trian`), where dtrain's parser is not."""
    from dtrain.errors import SpecError
    from dtrain.workloads import cifar10
    from dtrain.workloads.lanes.__main__ import main as lanes_main

    assert lanes_main(["trian"]) == 2
    assert capsys.readouterr().err.startswith("error: no command 'trian' (did you mean 'train'?); usage: python -m ")
    with pytest.raises(SpecError, match=r"^unknown cifar10 command 'synht' \(did you mean 'synth'\?\); use 'train'"):
        cifar10.main(["synht"])
