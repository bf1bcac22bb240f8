"""The snapshot benchmark script runs end to end on a small volume and reports paired ratios."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_snapshot_benchmark_runs_rounds_and_reports_ratios(tmp_path):
    out = tmp_path / "figures.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(REPO / "bench/snapshots.py"), "--files", "60", "--size-mb", "4",
                           "--checkpoints", "0", "--tools", "dtrain,nosync", "--repeats", "2",
                           "--workdir", str(tmp_path), "--json", str(out)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert len(figures["rounds"]) == 2
    steps = ["first", "unchanged", "1% changed", "restore", "verify"]
    assert all(s in figures["ratios"] for s in steps)
    first = figures["rounds"][1]["first"]
    assert first["dtrain"][1] >= 4 * 2**20 * 0.9  # the first snapshot stored the volume
    assert figures["rounds"][1]["unchanged"]["dtrain"][1] == 0  # an unchanged volume adds nothing
    median, lo, hi = figures["ratios"]["first"]["cp -a"]
    assert lo <= median <= hi and median > 0
    assert "median of 2 round(s)" in proc.stdout
    assert [p for p in tmp_path.iterdir() if p.name.startswith("dtrain-bench-")] == []  # cleaned up


def test_the_a_b_script_compares_two_checkouts(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(REPO / "bench/snapshots_ab.py"), "--old", str(REPO), "--new", str(REPO),
                           "--workdir", str(tmp_path), "--repeats", "2", "--files", "40", "--size-mb", "2",
                           "--checkpoints", "0"], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "old / new (median wall):" in proc.stdout
    for k in ("old", "new"):  # each took its base and two more of its own unchanged volume
        names = subprocess.run([sys.executable, "-c", "import sys; from dtrain.storage import Storage; "
                                "print(len(Storage(sys.argv[1]).list_snapshots()))", str(tmp_path / f"home-{k}")],
                               capture_output=True, text=True, env=env, check=True).stdout
        assert names.strip() == "3"
