"""Issue 12: the CLI behaves like the tools its users know. One test (at least) per numbered item."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import DTRAIN


def run(*args, home=None, check=False, timeout=120, cwd=None):
    import os
    env = {**os.environ, **({"DTRAIN_HOME": str(home)} if home else {})}
    return subprocess.run([DTRAIN, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd,
                          check=check)


# ---- 2: workload groups are argparse subcommands with help -------------------------------------
@pytest.mark.parametrize("group, verbs", [("lanes", ["prepare", "synth", "train", "predict", "evaluate"]),
                                          ("cifar10", ["train", "synth"]), ("bench", ["scaling"])])
def test_item02_workload_group_help_lists_its_commands(group, verbs):
    proc = run(group, "--help")
    assert proc.returncode == 0 and proc.stdout.startswith(f"usage: dtrain {group} ")
    for verb in verbs:
        assert f"    {verb} " in proc.stdout
        leaf = run(group, verb, "--help")
        assert leaf.returncode == 0, leaf.stderr
        assert leaf.stdout.startswith(f"usage: dtrain {group} {verb} "), leaf.stdout[:200]


def test_item02_cifar10_synth_runs(tmp_path):
    proc = run("cifar10", "synth", "--out", str(tmp_path), "--n-train", "20", "--n-test", "10")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "cifar-10-batches-py" / "test_batch").is_file()


def test_item02_unknown_workload_verb_is_a_usage_error():
    proc = run("lanes", "nosuch")
    assert proc.returncode == 2 and "invalid choice: 'nosuch'" in proc.stderr and "Traceback" not in proc.stderr
