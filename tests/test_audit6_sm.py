"""Audit 6, SageMaker backend: what a new SageMaker user still hit."""

from __future__ import annotations

import shlex

import pytest

from conftest import Dtrain


def test_the_submit_hint_names_the_backend_the_job_went_to(dt: Dtrain, tmp_path):
    """`submit --backend sagemaker` with local as the default: the printed `describe` command must
    find the job (it used to ask the local backend, which answers 'no job named ...')."""
    (tmp_path / "t.py").write_text("print('ok')\n")
    out = dt("submit", "hint", "--backend", "sagemaker", "--local", "--", "python", "t.py", cwd=tmp_path).stdout
    hint = out.split("`")[1]
    assert hint.startswith("dtrain ")
    shown = dt(*shlex.split(hint)[1:], check=False)
    assert shown.returncode == 0, shown.stderr
    assert "Name: hint" in shown.stdout
    dt("--backend", "sagemaker", "wait", "hint", "--timeout", "60")


def test_the_submit_hint_stays_plain_on_the_default_backend(dt: Dtrain, tmp_path):
    out = dt("submit", "plain", "--", "python", "-c", "print(1)", cwd=tmp_path).stdout
    assert "`dtrain describe job plain`" in out
    dt("wait", "plain", "--timeout", "60")
