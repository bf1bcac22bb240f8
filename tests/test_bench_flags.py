"""The bench scripts take their flags whole, as the dtrain CLI and the workloads do: `--rep 3` is
refused in one line naming --repeats (argparse ran it as --repeats). tests/test_docs.py holds the
commands docs/benchmarks.md shows to their scripts' whole option strings."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO

BENCH = REPO / "bench"


def test_every_bench_script_builds_the_whole_flags_parser():
    direct = [p.name for p in sorted(BENCH.glob("*.py")) if "argparse.ArgumentParser(" in p.read_text()]
    assert direct == []


@pytest.mark.parametrize("script, given, whole", [
    ("startup.py", ["--rep", "3"], "--repeats"),
    ("sparse.py", ["--work", "/nonexistent-dtrain-bench"], "--workdir"),  # a required flag's start, too
])
def test_a_flag_start_is_refused_naming_the_flag(script, given, whole):
    proc = subprocess.run([sys.executable, str(BENCH / script), *given], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [proc.stderr.strip()] and f"flags are not abbreviated: give {whole}" in proc.stderr

