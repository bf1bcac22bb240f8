"""A number as the user typed it, in one module; and one rule for every number flag (audit 11)."""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections import OrderedDict, namedtuple

import pytest

from dtrain import names, spec
from dtrain.bench import scaling
from dtrain.cli import format as fmt
from dtrain.cli import jobs, watch
from dtrain.cli.main import build_parser
from dtrain.errors import SpecError
from dtrain.numbers import TypedFloat, TypedInt, exact, plain_numbers, typed
from dtrain.spec import JobSpec, check_idle_timeout
from dtrain.workloads import inputs
from dtrain.workloads.cifar10 import train as cifar10_train
from dtrain.workloads.lanes import train as lanes_train


# 1. One class pair and one walk


def test_every_part_keeps_a_typed_number_in_the_same_class():
    assert names.WrittenInt is TypedInt and names.WrittenFloat is TypedFloat
    assert type(inputs.whole_number("1e3")) is TypedInt and type(inputs.real_number("5e-2")) is TypedFloat
    assert type(jobs.whole_number("1e3")) is TypedInt
    assert type(spec.yaml_mapping(b"cpu: 0.50", "job.yaml", "cpu: 2")["cpu"]) is TypedFloat
    assert names.shown(inputs.whole_number("1e3")) == "1e3" and inputs._num(jobs.whole_number("1e3")) == "1e3"


def test_a_typed_number_pickles_as_the_plain_number():
    for number, plain in ((typed(1000, "1e3"), 1000), (TypedFloat(0.05, "5e-2"), 0.05)):
        back = pickle.loads(pickle.dumps(number))
        assert back == plain and type(back) is type(plain)


def test_the_walk_makes_every_number_plain():
    Pair = namedtuple("Pair", "a b")
    value = {TypedInt(1, "01"): [TypedFloat(0.5, ".5"), (TypedInt(2, "+2"), "x")], "p": Pair(TypedInt(3, "3."), None),
             "t": True}
    out = plain_numbers(value)
    assert out == {1: [0.5, (2, "x")], "p": Pair(3, None), "t": True}
    assert type(out["p"]) is Pair and type(out["t"]) is bool
    assert all(type(n) in (int, float) for n in (next(iter(out)), out[1][0], out[1][1][0], out["p"].a))
    assert type(next(iter(value))) is TypedInt  # a copy: the value given is unchanged


def test_the_walk_in_place_keeps_a_state_dicts_metadata_and_leaves_other_objects():
    state = OrderedDict(lr=TypedFloat(0.05, "5e-2"))
    state._metadata = {"": {"version": 1}}
    other = object()  # a tensor is no number: left as it is
    groups = [{"params": [other], "lr": TypedFloat(0.05, "5e-2")}]
    assert plain_numbers(state, in_place=True) is state and state._metadata == {"": {"version": 1}}
    assert type(state["lr"]) is float
    assert plain_numbers(groups, in_place=True) is groups and groups[0]["params"][0] is other
    assert type(groups[0]["lr"]) is float


def test_the_numbers_module_needs_neither_torch_nor_the_platform():
    code = ("import sys, dtrain.numbers\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or (m.startswith('dtrain.') and m not in "
            "('dtrain.numbers', 'dtrain.errors'))))")  # dtrain/__init__ names the errors
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# 2. A workload's whole-number flag given a fraction or nan names the range and an example


@pytest.mark.parametrize("typed_text", ["1.5", "nan", "x", "2.0000000000000001"])
@pytest.mark.parametrize("flag, bounds", [("--max-steps", "give 1 to 10000000"), ("--batch-size", "give 1 to 65536"),
                                          ("--num-workers", "give 0 to 64"), ("--seed", "give 0 to 4294967295")])
def test_a_lanes_whole_number_flag_refuses_a_fraction_naming_its_range(flag, bounds, typed_text):
    with pytest.raises(SpecError) as e:
        lanes_train.parse_config([flag, typed_text], {})
    assert str(e.value).startswith(f"{flag} {typed_text} is not a whole number: {bounds}, e.g. {flag} ")


@pytest.mark.parametrize("flag, bounds", [("--batch-size", "give 1 to 65536"), ("--epochs", "give 1 to 10000"),
                                          ("--num-workers", "give 0 to 64"), ("--seed", "give 0 to 4294967295")])
def test_a_cifar10_whole_number_flag_refuses_a_fraction_naming_its_range(flag, bounds):
    for typed_text in ("1.5", "nan"):
        with pytest.raises(SpecError) as e:
            cifar10_train.parse_args([flag, typed_text])
        assert str(e.value).startswith(f"{flag} {typed_text} is not a whole number: {bounds}, e.g. {flag} ")


def test_a_refusal_gives_the_nearest_value_in_range_as_its_example():
    for value, example in (("1.5", "2"), ("0", "1"), ("1e9", "100"), ("nan", "1")):
        with pytest.raises(SpecError, match=f"give 1 to 100, e.g. --n {example}$"):
            inputs.in_range("--n", inputs.whole_number(value), 1, 100)


# 3. dtrain bench scaling's numbers: each refusal names an example


@pytest.mark.parametrize("flags, says", [
    (["--steps", "0"], "--steps 0 is out of range: give 2 to 10000000, e.g. --steps 2"),
    (["--steps", "6"], "--steps 6 leaves no steps to time after --warmup 5: give --steps 7 or more"),
    (["--repeats", "0"], "--repeats 0 is out of range: give 1 to 100, e.g. --repeats 1"),
    (["--warmup", "-1"], "--warmup -1 is out of range: give 0 to 1000000, e.g. --warmup 0"),
    (["--batch", "1.5"], "--batch 1.5 is not a whole number: give 1 to 65536, e.g. --batch 2"),
    (["--cpu-per-process", "0"], "--cpu-per-process 0 is out of range: give 0.01 to 1024, e.g. --cpu-per-process 0.01"),
])
def test_bench_scalings_refusals_name_an_example(tmp_path, flags, says):
    with pytest.raises(SpecError) as e:
        scaling.parse(["--workload", "lanes", "--data-dir", str(tmp_path), "--out", str(tmp_path / "o"), *flags])
    assert str(e.value).startswith(says) and "e.g." in str(e.value)


# 4. A bound is checked on the number as typed, not as float() rounds it


def test_cpu_just_over_its_bound_is_refused_as_typed():
    with pytest.raises(SpecError, match=r"^invalid cpu 1024\.0000000000001: use a number of CPU threads"):
        JobSpec(name="x", command=["true"], cpu=jobs.real("1024.0000000000001"))
    with pytest.raises(SpecError, match=r"^invalid cpu 0\.0099999999999999999:"):
        JobSpec(name="x", command=["true"], cpu=jobs.real("0.0099999999999999999"))
    with pytest.raises(SpecError, match=r"^invalid --cpu 1024\.0000000000001: use a number of CPU threads"):
        JobSpec.from_dict(  # as submit -f reads its file
            spec.yaml_mapping(b"name: x\ncommand: [\"true\"]\ncpu: 1024.0000000000001", "j.yaml", ""), door="cli")
    assert JobSpec(name="x", command=["true"], cpu=jobs.real("1024")).cpu == 1024
    assert JobSpec(name="x", command=["true"], cpu=jobs.real("0.01")).cpu == 0.01
    assert JobSpec(name="x", command=["true"], cpu=0.01).cpu == 0.01  # the SDK's float, as Python writes it


def test_a_whole_number_just_off_a_whole_one_is_a_fraction():
    with pytest.raises(SpecError, match=r"^gpu=1\.0000000000000001 is a fraction of a GPU"):
        JobSpec(name="x", command=["true"], gpu=jobs.gpu_count("1.0000000000000001"))
    with pytest.raises(SpecError, match=r"^invalid processes 2\.0000000000000001: use a whole number"):
        JobSpec(name="x", command=["true"], launcher="torchrun", processes=jobs.whole_number("2.0000000000000001"))


def test_other_bounds_are_checked_as_typed():
    with pytest.raises(SpecError, match=r"^invalid --timeout '31622400\.0000000001'"):
        watch.wait_timeout("31622400.0000000001")
    assert watch.wait_timeout("31622400") == 31622400
    with pytest.raises(SpecError, match=r"^--cpu-per-process 1024\.0000000000001 is out of range: give 0\.01 to 1024"):
        inputs.in_range("--cpu-per-process", inputs.real_number("1024.0000000000001"), 0.01, 1024)
    assert exact(TypedFloat(1024.0, "1024.0000000000001")) > 1024 and exact(0.01) == exact(inputs.real_number("0.01"))


# 5. One rule for every number flag: what Python's int() or float() takes


def _underscored(number: int) -> str:
    return f"{str(number)[0]}_{str(number)[1:]}"


def _cli(*argv):
    return build_parser().parse_args(list(argv))


# (how to read a flag's number from its text, the number to type): each through the check that refuses it
FLAGS = {
    "submit --processes": (lambda t: JobSpec(name="x", command=["t"], launcher="torchrun",
                                             processes=_cli("submit-dist", "x", "--processes", t).processes
                                             ).processes, 12),
    "submit --gpu": (lambda t: JobSpec(name="x", command=["t"], gpu=_cli("submit", "x", "--gpu", t).gpu).gpu, 12),
    "submit --cpu": (lambda t: JobSpec(name="x", command=["t"], cpu=_cli("submit", "x", "--cpu", t).cpu).cpu, 12),
    "submit --max-restarts": (lambda t: JobSpec(name="x", command=["t"], max_restarts=_cli(
        "submit", "x", "--max-restarts", t).max_restarts).max_restarts, 12),
    "logs --tail": (lambda t: names.check_tail(_cli("logs", "x", "--tail", t).tail, "cli"), 12),
    "logs --limit-bytes": (lambda t: names.check_limit_bytes(_cli("logs", "x", "--limit-bytes", t).limit_bytes, "cli"), 12),
    "logs --rank": (lambda t: watch._rank(_cli("logs", "x", "--rank", t).rank), 12),
    "exec --rank": (lambda t: watch._exec_rank(t), 12),
    "wait --timeout": (lambda t: watch.wait_timeout(_cli("wait", "x", "--timeout", t).timeout), 12),
    "project create --gpu-quota": (lambda t: names.check_gpu_quota(
        _cli("project", "create", "p", "--gpu-quota", t).gpu_quota), 12),
    "server --port": (lambda t: names.check_port(_cli("server", "--port", t).port), 8500),
    "notebook --idle-timeout": (lambda t: check_idle_timeout(fmt.parse_duration(t), t), 3600),
    "notebook open --wait": (lambda t: fmt.parse_duration(t), 12),
    "lanes train --max-steps": (lambda t: lanes_train.parse_config(["--max-steps", t], {}).recipe.max_steps, 12),
    "cifar10 train --batch-size": (lambda t: cifar10_train.parse_args(["--batch-size", t, "--data-dir", "d"]).batch_size,
                                   12),
}


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("spelling", [" {} ", "{_}", "{}.", "+{}"])
def test_every_number_flag_takes_what_int_and_float_take(flag, spelling):
    read, number = FLAGS[flag]
    text = spelling.format(number, _=_underscored(number))
    assert read(text) == read(str(number)) == number, text


@pytest.mark.parametrize("spelling", [" 12 ", "1_2", "12.", "+12"])
def test_bench_scaling_numbers_take_what_int_and_float_take(tmp_path, spelling):
    args = scaling.parse(["--workload", "lanes", "--data-dir", str(tmp_path), "--out", str(tmp_path / "o"),
                          "--steps", spelling, "--batch", spelling, "--cpu-per-process", spelling,
                          "--processes", f"1,{spelling}"])
    assert (args.steps, args.batch, args.cpu_per_process, args.sizes) == (12, 12, 12, [1, 12])
