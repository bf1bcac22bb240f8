"""Pipelines beside other runs and other files: a second run in the same root, a link at -o."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from dtrain.cli.main import main

kfp = pytest.importorskip("kfp", reason="pipelines need the KFP SDK: pip install 'dtrain[pipelines]'")


def cli(home: Path, capsys, *args: str) -> tuple[int, str, str]:
    code = main(["--home", str(home), "pipeline", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_compile_replaces_a_link_at_the_output_instead_of_writing_through_it(home, capsys, tmp_path):
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text("mine: keep\n")
    out = tmp_path / "pipeline.yaml"
    out.symlink_to(elsewhere)
    code, _out, err = cli(home, capsys, "compile", "hybrid-cifar10", "-o", str(out))
    assert code == 0, err
    assert elsewhere.read_text() == "mine: keep\n"  # KFP's compiler wrote through the link
    assert not out.is_symlink()
    assert kfp.components.load_component_from_file(str(out)).name == "hybrid-cifar10"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no scratch file left


# A step that does what a second `dtrain pipeline run` of the same pipeline in the same root does
# while this one runs: it makes its own run folder, named as kfp.local names them, with a task's outputs,
# and goes on writing there after this run ends.
MEANWHILE = textwrap.dedent('''
    from kfp import dsl

    @dsl.component(base_image="python:3.11")
    def meanwhile() -> str:
        import datetime, json, os, pathlib
        stamp = (datetime.datetime.now() + datetime.timedelta(seconds=1)).strftime("%Y-%m-%d-%H-%M-%S-%f")
        other = pathlib.Path(os.environ["DTRAIN_HOME"]) / "pipelines" / f"mine-{stamp}" / "meanwhile"
        other.mkdir(parents=True)
        (other / "executor_output.json").write_text(json.dumps({"parameterValues": {"Output": "theirs"}}))
        later = datetime.datetime.now().timestamp() + 60  # that run still writes its folder when this one ends
        os.utime(other.parent, (later, later))
        return "ours"

    @dsl.pipeline(name="mine")
    def mine():
        meanwhile().set_caching_options(False)
''')


def test_a_run_reports_its_own_folder_when_another_run_makes_one_meanwhile(home, capsys, tmp_path):
    """The run's folder was taken to be the newest new folder of the root: another run's, when
    that one began while this one ran (it said that run's outputs were this one's)."""
    module = tmp_path / "meanwhile.py"
    module.write_text(MEANWHILE)
    code, out, err = cli(home, capsys, "run", "--module", f"{module}:mine")
    assert code == 0, err
    folders = sorted(p.name for p in (home / "pipelines").iterdir() if not p.name.startswith("."))
    assert len(folders) == 2 and all(f.startswith("mine-") for f in folders)
    ours = home / "pipelines" / folders[0]  # the first begun: the other run's is a second later
    assert f"outputs in {ours}\n" in out
    outputs = json.loads((ours / "meanwhile" / "executor_output.json").read_text())
    assert outputs["parameterValues"] == {"Output": "ours"}
    assert '{"Output": "ours"}' in out and "theirs" not in out
