"""`dtrain completion bash|zsh`: a real bash (and zsh) sources the script, and the completion function
fills COMPREPLY from the argparse tree and from the names `dtrain ... list --json` gives."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import DTRAIN, REPO, Dtrain
from dtrain.cli.main import build_parser, main
from dtrain.cli import completion
from dtrain.cli.completion import script
from dtrain.cli.workload_flags import WORKLOAD_FLAGS

BIN = os.path.dirname(DTRAIN)


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory):
    path = tmp_path_factory.mktemp("completion") / "dtrain.bash"
    path.write_text(script(build_parser(), "bash"))
    return path


def complete(path, line: str, home=None, shell: str = "bash", bin_dir=None) -> list[str]:
    """COMPREPLY for `line` (the cursor at its end), from a real shell that sourced `path`."""
    words = shlex.split(line) + ([""] if line.endswith(" ") else [])
    array = " ".join(shlex.quote(w) for w in words)
    code = (f"source {shlex.quote(str(path))}; COMP_WORDS=({array}); COMP_CWORD={len(words) - 1}; "
            f"COMP_LINE={shlex.quote(line)}; _dtrain; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    if shell == "zsh":  # bashcompinit's compgen and complete outside a completion widget
        code = "emulate -L zsh; setopt ksharrays; " + code
    env = {**os.environ, "PATH": f"{bin_dir or BIN}:{os.environ['PATH']}", **({"DTRAIN_HOME": str(home)} if home else {})}
    out = subprocess.run([shell, "-c", code], capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    return [w for w in out.stdout.split("\n") if w]


def test_the_cli_prints_a_script_for_each_shell(home, monkeypatch, capsys):
    out = subprocess.run([DTRAIN, "completion", "bash"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.rstrip().endswith("complete -o default -F _dtrain dtrain"), out.stderr
    monkeypatch.setenv("DTRAIN_HOME", str(home))
    assert main(["completion", "zsh"]) == 0
    assert "autoload -U +X bashcompinit && bashcompinit\n" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["completion", "fish"])
    assert "invalid choice: 'fish'" in capsys.readouterr().err


@pytest.mark.parametrize("line, expected", [
    ("dtrain ", {"submit", "list", "describe", "volume", "snapshot", "completion", "lanes"}),
    ("dtrain sn", {"snapshot"}),
    ("dtrain volume ", {"create", "update", "list", "describe", "delete", "classes"}),
    ("dtrain --backend local volume cr", {"create"}),
    ("dtrain config ", {"project", "backend", "kubernetes", "storage-class"}),
    ("dtrain --backend ", {"local", "kubernetes", "sagemaker"}),
    ("dtrain lanes ", {"prepare", "synth", "train", "predict", "evaluate"}),
])
def test_verbs_and_nouns(bash_script, line, expected):
    got = set(complete(bash_script, line))
    assert expected <= got, got
    assert all(w.startswith(shlex.split(line + "x")[-1][:-1]) for w in got)


def test_each_verbs_own_flags_come_from_the_parser(bash_script):
    """Not a list kept by hand: every long flag of `volume create`'s parser, and only its shown ones."""
    parser = build_parser("volume")
    sub = next(a for a in parser._actions if a.dest == "verb").choices["volume"]
    create = next(a for a in sub._actions if a.dest == "action").choices["create"]
    flags = {o for o, a in create._option_string_actions.items() if o.startswith("--") and a.help != "==SUPPRESS=="}
    assert flags and "--tier" not in flags  # a hidden flag (an old spelling) is not offered
    assert set(complete(bash_script, "dtrain volume create data --")) == flags
    assert complete(bash_script, "dtrain logs x --fo") == ["--follow"]
    assert complete(bash_script, "dtrain config kubernetes --name") == ["--namespace"]
    assert complete(bash_script, "dtrain submit j --gpu 1 -- python --") == []  # the command's own words


def test_a_workloads_own_flags_and_their_choices_are_completed(bash_script):
    """`dtrain lanes train --<TAB>`: the workload's parser reads those words, not dtrain's."""
    assert complete(bash_script, "dtrain lanes train --rec") == ["--recipe"]
    assert set(complete(bash_script, "dtrain lanes train --recipe ")) == {"demo", "paper", "tiny"}
    assert set(complete(bash_script, "dtrain lanes train --no-b")) == {"--no-bf16"}
    assert set(complete(bash_script, "dtrain cifar10 train --model")) == {"--model-dir"}  # one spelling (below)
    assert set(complete(bash_script, "dtrain cifar10 synth --format ")) == {"python", "binary"}
    assert set(complete(bash_script, "dtrain bench scaling --workload ")) == {"cifar10", "lanes"}
    assert complete(bash_script, "dtrain lanes train --data-dir ") == []  # a folder: the shell's file names


def test_an_underscore_alias_is_accepted_but_one_spelling_is_offered(bash_script):
    """cifar10 train takes SageMaker's `--batch_size` for `--batch-size`: TAB offers the one spelling,
    as completion tools offer an argparse alias; the table still reads its parser (test below)."""
    got = complete(bash_script, "dtrain cifar10 train --")
    assert "--batch-size" in got and "--no-resume" in got and not [f for f in got if "_" in f], got
    assert complete(bash_script, "dtrain cifar10 train --batch") == ["--batch-size"]
    assert complete(bash_script, "dtrain cifar10 train --max") == ["--max-steps"]
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", "--batch_size", type=int)
    p.add_argument("--b_c", "-x")  # an underscore spelling with no dashed twin is the flag's own
    assert completion.flags_of(p) == {"-h": None, "--help": None, "--batch-size": "", "--b_c": "", "-x": ""}
    assert p.parse_args(["--batch_size", "8"]).batch_size == 8  # still accepted


def test_printing_the_script_loads_no_workload():
    """The script is printed at every shell start (~/.bashrc): building the workloads' parsers there
    would import torch (seconds); their flags come from a table (test below: it is their parsers')."""
    code = ("import contextlib, io, sys\nfrom dtrain.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n    main(['completion', 'bash'])\n"
            "assert \"'dtrain lanes train --recipe'\" in out.getvalue()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'PIL')"
            " or m.startswith('dtrain.workloads.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.slow  # imports every workload (torch): ~7 s on 2 busy cores
def test_the_workload_flags_table_is_their_parsers():
    """dtrain/cli/workload_flags.py is written from the workloads' parsers; a flag added to one without
    rewriting the table fails here."""
    path = REPO / "scripts" / "workload_flags.py"
    spec = importlib.util.spec_from_file_location("workload_flags_script", path)
    writer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(writer)
    assert (REPO / "dtrain" / "cli" / "workload_flags.py").read_text() == writer.text(), \
        "the workloads' flags changed: run 'python scripts/workload_flags.py'"
    assert WORKLOAD_FLAGS["lanes train"]["--recipe"] == "demo paper tiny"


@pytest.mark.slow  # dtrain runs 6 times, ~13 s on 2 busy cores
def test_job_volume_and_snapshot_names_are_completed(bash_script, dt: Dtrain, home):
    dt("volume", "create", "data", "--size", "1Mi")
    dt("volume", "create", "dogs", "--size", "1Mi")
    dt("snapshot", "create", "data", "--name", "data-s1")
    assert complete(bash_script, "dtrain volume describe d", home) == ["data", "dogs"]
    assert complete(bash_script, "dtrain snapshot create do", home) == ["dogs"]
    assert complete(bash_script, "dtrain snapshot describe ", home) == ["data-s1"]
    assert complete(bash_script, "dtrain describe job ", home) == []  # no job yet: nothing, quietly
    assert complete(bash_script, "dtrain volume describe data ", home) == []  # one name is enough


SHIM = """#!/bin/sh
echo "$*" >> "$0.calls"
if [ -e "$0.hangs" ]; then exec sleep 60; fi  # a cluster that does not answer
cat "$0.answer"
"""


@pytest.mark.parametrize("shell", ["bash", pytest.param("zsh", marks=pytest.mark.slow)])  # zsh: ~2 s
def test_a_backend_that_does_not_answer_costs_one_wait_not_one_a_tab(tmp_path, monkeypatch, shell):
    """A name lookup waited COMPLETION_TIMEOUT at every TAB and offered nothing while a cluster was down;
    now the names it gave last (kept under the home) come back, and for COMPLETION_RETRY seconds at once."""
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    monkeypatch.setattr(completion, "COMPLETION_TIMEOUT", 0.3)  # GNU timeout takes a fraction
    path = tmp_path / "dtrain.sh"
    path.write_text(script(build_parser(), shell))
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    home.mkdir()
    bin_dir.mkdir()
    dtrain = bin_dir / "dtrain"  # in dtrain's place: answers as `volume list --json` does, then hangs
    dtrain.write_text(SHIM)
    dtrain.chmod(0o755)
    (bin_dir / "dtrain.answer").write_text(json.dumps([{"name": "data", "size": 1}, {"name": "dogs", "size": 1}],
                                                      indent=2))
    calls = bin_dir / "dtrain.calls"
    line = "dtrain --backend kubernetes volume describe d"
    assert complete(path, line, home, shell, bin_dir) == ["data", "dogs"]
    (bin_dir / "dtrain.hangs").touch()
    assert complete(path, line, home, shell, bin_dir) == ["data", "dogs"]  # after one wait: the last answer
    assert calls.read_text().splitlines() == ["--backend kubernetes volume list --json"] * 2
    assert complete(path, line, home, shell, bin_dir) == ["data", "dogs"]
    assert len(calls.read_text().splitlines()) == 2  # not asked again: no wait at this TAB
    assert complete(path, "dtrain --backend kubernetes snapshot describe ", home, shell, bin_dir) == []  # never answered
    assert complete(path, "dtrain --backend local volume describe d", home, shell, bin_dir) == []  # another lookup's
    assert [p.parent for p in home.rglob("*")][-1] == home / "completion"  # kept under the home


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (Debian: apt-get install zsh)")
def test_zsh_runs_the_same_script(tmp_path):
    path = tmp_path / "dtrain.zsh"
    path.write_text(script(build_parser(), "zsh"))
    assert {"create", "list"} <= set(complete(path, "dtrain volume ", shell="zsh"))
    flags = complete(path, "dtrain logs x --fo", shell="zsh")  # zsh keeps those starting --fo itself
    assert "--follow" in flags and "--tail" in flags and "create" not in flags


def test_the_kept_names_are_never_written_through_a_link_planted_there(tmp_path, monkeypatch):
    """The cache under the home was written with `>`, which follows a link someone put at its name: each
    file is now a new one of its own, renamed over the name (the link replaced, its target untouched)."""
    monkeypatch.setattr(completion, "COMPLETION_TIMEOUT", 0.3)
    monkeypatch.setattr(completion, "COMPLETION_RETRY", 0)  # each TAB asks again
    path = tmp_path / "dtrain.sh"
    path.write_text(script(build_parser(), "bash"))
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    home.mkdir()
    bin_dir.mkdir()
    dtrain = bin_dir / "dtrain"
    dtrain.write_text(SHIM)
    dtrain.chmod(0o755)
    (bin_dir / "dtrain.answer").write_text(json.dumps([{"name": "data", "size": 1}], indent=2))
    line = "dtrain volume describe d"
    assert complete(path, line, home, "bash", bin_dir) == ["data"]
    [kept] = (home / "completion").iterdir()
    names, stalled = tmp_path / "names-victim", tmp_path / "stalled-victim"
    names.write_text("dogs\n")
    stalled.write_text("precious\n")
    kept.unlink()
    kept.symlink_to(names)
    kept.with_name(kept.name + ".stalled").symlink_to(stalled)
    (bin_dir / "dtrain.hangs").touch()
    assert complete(path, line, home, "bash", bin_dir) == ["dogs"]  # the last names, read (a read follows)
    assert stalled.read_text() == "precious\n" and not kept.with_name(kept.name + ".stalled").is_symlink()
    (bin_dir / "dtrain.hangs").unlink()
    assert complete(path, line, home, "bash", bin_dir) == ["data"]
    assert names.read_text() == "dogs\n" and not kept.is_symlink() and kept.read_text() == "data\n"


def test_cifar10_resume_offers_the_words_it_takes(bash_script):
    """`dtrain cifar10 train --resume <TAB>` offered nothing but the shell's file names, though the flag
    takes true or false (a SageMaker hyperparameter's form; its checkpoint is the newest one in
    --checkpoint-dir, never a file named here). Its value is optional: a flag may follow it."""
    assert set(complete(bash_script, "dtrain cifar10 train --resume ")) == {"true", "false"}
    assert complete(bash_script, "dtrain cifar10 train --no-resume f") == ["false"]
    assert complete(bash_script, "dtrain cifar10 train --resume --ep") == ["--epochs"]
    assert complete(bash_script, "dtrain cifar10 train --data-dir --ep") == []  # a value of its own: as typed
