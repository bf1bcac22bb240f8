"""The SDK's pipeline calls (`dtrain.pipelines.list_pipelines`, `compile_pipeline`, `run_pipeline`): what
`dtrain pipeline list|compile|run` do, with typed parameters held to the command line's rules.
A run itself goes through KFP's local runner (docs/pipelines.md's Python block runs one in the slow
suite; tests/test_pipelines.py runs the shipped pipelines end to end)."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from dtrain import pipelines
from dtrain.errors import NotFoundError, SpecError
from dtrain.pipelines import runner

pytest.importorskip("kfp", reason="pipelines need the KFP SDK: pip install 'dtrain[pipelines]'")


def test_list_and_compile_match_the_cli(tmp_path):
    infos = pipelines.list_pipelines()
    assert [i.name for i in infos] == list(runner.SHIPPED)
    hybrid = next(i for i in infos if i.name == "hybrid-cifar10")
    assert {p.name: p.type for p in hybrid.params}["epochs"] == "Integer"
    out = pipelines.compile_pipeline("hybrid-cifar10", to=tmp_path / "ir" / "hybrid.yaml")
    ir = yaml.safe_load(out.read_text())
    assert ir["pipelineInfo"]["name"] == "hybrid-cifar10"
    assert "training_runtime" in ir["root"]["inputDefinitions"]["parameters"]
    with pytest.raises(NotFoundError, match="no pipeline 'nope'"):
        pipelines.compile_pipeline("nope", to=tmp_path / "x.yaml")


def test_typed_params_are_checked_then_completed_with_defaults(tmp_path):
    module = tmp_path / "typed.py"
    module.write_text(textwrap.dedent("""
        from typing import List
        from kfp import dsl

        @dsl.component
        def echo(n: int, x: float, flag: bool, words: List[str], opts: dict) -> str:
            return f"{n} {x} {flag} {words} {opts}"

        @dsl.pipeline(name="typed")
        def typed(n: int, x: float = 0.5, flag: bool = False, words: List[str] = ["a"], opts: dict = {}):
            echo(n=n, x=x, flag=flag, words=words, opts=opts)
    """))
    pipeline = runner.load(module=f"{module}:typed")
    values = runner.check_params(pipeline, {"n": 3, "x": 2})
    assert values == {"n": 3, "x": 2.0, "flag": False, "words": ["a"], "opts": {}}
    assert isinstance(values["x"], float)
    # what the command line refuses, the SDK refuses with the same kind of line, before anything runs
    for params, needle in [
        ({"n": "3"}, "parameter n='3': use a whole number (an Integer parameter), not a str"),
        ({"n": True}, "parameter n=True: use a whole number"),
        ({"n": 2.0}, "parameter n=2.0: use a whole number"),
        ({"n": 1, "x": "0.1"}, "parameter x='0.1': use a number (a Float parameter)"),
        ({"n": 1, "flag": 1}, "parameter flag=1: use True or False (a Boolean parameter), not a int"),
        ({"n": 1, "words": "a"}, "parameter words='a': use a JSON list"),
        ({"n": 1, "words": [{1, 2}]}, "parameter words: use a JSON list of JSON values"),
        ({"n": 1, "x": float("nan")}, "use a finite number"),
        ({"n": 2**60}, "use a whole number from"),
        ({"n": 1, "opts": {"a": float("inf")}}, "parameter opts: use a JSON object of JSON values"),
        ({"n": 1, "nope": 1}, "pipeline 'typed' has no parameter 'nope': use one of n, x, flag, words, opts"),
        ({}, "pipeline 'typed' needs --param n=VALUE"),
        ([("n", 1)], "params must be a dict"),
    ]:
        with pytest.raises(SpecError) as err:
            runner.check_params(pipeline, params)
        assert needle in str(err.value), (params, str(err.value))
        assert "\n" not in str(err.value)


def test_a_shipped_pipelines_own_rules_apply_before_any_step(tmp_path):
    with pytest.raises(SpecError, match="training_runtime"):
        pipelines.run_pipeline("hybrid-cifar10", params={"training_runtime": "mars"}, home=tmp_path / "home",
                               root=tmp_path / "root")
    assert not (tmp_path / "root").exists()  # refused before KFP made anything
