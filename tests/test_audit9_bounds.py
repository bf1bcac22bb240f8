"""Audit 9 (bad input): every number a user gives is bounded, and a refusal is one line naming the
flag and its range, never argparse's "invalid int value"."""

from __future__ import annotations

import pytest

from tests.conftest import usage_line

WHOLE_FLAGS = [  # (command before the flag, flag, what comes after, the range the line names)
    (["submit-dist", "j1", "--dry-run"], "--processes", ["--", "true"], "from 1 to 4096"),
    (["submit", "j1", "--dry-run"], "--max-restarts", ["--", "true"], "from 0 to 100"),
    (["--backend", "sagemaker", "submit", "j1", "--dry-run", "--instance-type", "ml.g5.xlarge"], "--instance-count",
     ["--", "true"], "from 1 to 1000"),
    (["--backend", "sagemaker", "submit", "j1", "--dry-run", "--instance-type", "ml.g5.xlarge"], "--max-runtime",
     ["--", "true"], "from 1 to 2419200"),
    (["--backend", "sagemaker", "submit", "j1", "--dry-run", "--instance-type", "ml.g5.xlarge", "--spot"],
     "--max-wait", ["--", "true"], "from 1 to 2419200"),
    (["--backend", "sagemaker", "submit", "j1", "--dry-run", "--instance-type", "ml.g5.xlarge"], "--volume-size",
     ["--", "true"], "from 1 to 16384"),
    (["project", "create", "pq"], "--gpu-quota", [], "from 0 to 1000000"),
    (["server"], "--port", [], "1-65535"),
]


@pytest.mark.parametrize("before,flag,after,bounds", WHOLE_FLAGS, ids=[w[1] for w in WHOLE_FLAGS])
@pytest.mark.parametrize("value", ["1.5", "nan", "inf", "1e30", "-1e3"])
def test_a_whole_number_flag_names_its_range_for_any_number(dt, before, flag, after, bounds, value):
    line = usage_line(dt(*before, flag, value, *after, check=False, timeout=30))
    assert line.startswith(f"invalid {flag} "), line
    assert bounds in line, line
    assert "invalid int value" not in line


def test_a_whole_number_flag_given_a_word_says_to_give_a_number(dt):
    line = usage_line(dt("submit-dist", "j1", "--dry-run", "--processes", "two", "--", "true", check=False))
    assert "--processes" in line and "'two'" in line and "whole number" in line, line


def test_a_whole_number_flag_takes_an_exponent_that_is_whole(dt):
    out = dt("submit-dist", "j1", "--dry-run", "--processes", "2e0", "--", "true").stdout
    assert "processes: 2" in out, out


def test_a_whole_number_flag_of_thousands_of_digits_is_one_short_line(dt):
    line = usage_line(dt("submit-dist", "j1", "--dry-run", "--processes", "9" * 5000, "--", "true", check=False))
    assert line.startswith("invalid --processes ") and "from 1 to 4096" in line and len(line) < 300, line


@pytest.mark.parametrize("command", [["lanes", "synth", "--out", "SYN", "--train"],
                                     ["bench", "scaling", "--workload", "cifar10", "--data-dir", ".", "--steps"],
                                     ["cifar10", "synth", "--out", "SYN", "--n-train"]])
@pytest.mark.parametrize("value", ["1.5", "nan", "inf"])
def test_a_workload_whole_number_flag_says_a_whole_number_is_wanted(dt, tmp_path, command, value):
    command = [str(tmp_path / "syn") if c == "SYN" else c for c in command]
    line = usage_line(dt(*command, value, check=False, cwd=tmp_path))
    assert f"{command[-1]} {value} is not a whole number: give " in line and ", e.g. " in line, line
    assert not (tmp_path / "syn").exists()
