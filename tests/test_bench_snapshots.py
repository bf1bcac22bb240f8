"""The snapshot benchmark script runs end to end on a small volume and reports paired ratios."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_snapshot_benchmark_runs_rounds_and_reports_ratios(tmp_path):
    out = tmp_path / "figures.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(REPO / "bench/snapshots.py"), "--files", "60", "--size-mb", "4",
                           "--checkpoints", "0", "--tools", "dtrain,nosync,cpsync,disk", "--repeats", "2",
                           "--workdir", str(tmp_path), "--json", str(out)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert len(figures["rounds"]) == 2
    steps = ["first", "unchanged", "1% changed", "restore", "verify"]
    assert all(s in figures["ratios"] for s in steps)
    first = figures["rounds"][1]["first"]
    assert first["dtrain"][1] >= 4 * 2**20 * 0.9  # the first snapshot stored the volume
    assert first["cp+sync"][1] >= 4 * 2**20 * 0.9
    assert 4 * 2**20 * 0.9 <= first["disk"][1] <= 4.2 * 2**20  # the floor wrote the volume's bytes
    assert {"cp+sync", "disk"} <= set(figures["ratios"]["first"]) and "disk" in figures["ratios"]["restore"]
    assert figures["rounds"][1]["unchanged"]["dtrain"][1] == 0  # an unchanged volume adds nothing
    median, lo, hi = figures["ratios"]["first"]["cp -a"]
    assert lo <= median <= hi and median > 0
    assert "median of 2 rounds:" in proc.stdout
    assert [p for p in tmp_path.iterdir() if p.name.startswith("dtrain-bench-")] == []  # cleaned up


@pytest.mark.slow
def test_the_api_column_goes_through_a_running_server(tmp_path):
    out = tmp_path / "figures.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(REPO / "bench/snapshots.py"), "--files", "40", "--size-mb", "2",
                           "--checkpoints", "0", "--tools", "dtrain,api,cli", "--repeats", "1", "--keep",
                           "--workdir", str(tmp_path), "--json", str(out)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["rounds"][0]
    assert rows["first"]["api"][1] >= 2 * 2**20 * 0.9  # the server's own store took the whole volume
    assert rows["unchanged"]["api"][1] == 0
    assert "api" not in rows["verify"]  # no such verb over HTTP
    assert rows["first"]["cli"][1] >= 2 * 2**20 * 0.9 and rows["unchanged"]["cli"][1] == 0  # the command's store
    assert "cli" in rows["verify"] and "cli" in rows["restore"]
    ratios = json.loads(out.read_text())["ratios_api"]
    assert set(ratios) == {"first", "unchanged", "1% changed", "restore"}  # verify has no api row
    assert ratios["first"]["cp -a"][0] == round(rows["first"]["cp -a"][0] / rows["first"]["api"][0], 2)
    assert "other tool's time / api's time" in proc.stdout
    (work,) = [p for p in tmp_path.iterdir() if p.name.startswith("dtrain-bench-")]
    listed = subprocess.run([sys.executable, "-c", "import sys; from dtrain.storage import Storage; "
                             "s = Storage(sys.argv[1]); print(sorted(x.name for x in s.list_snapshots()), "
                             "sorted(v.name for v in s.list_volumes()))", str(work / "api")],
                            capture_output=True, text=True, env=env, check=True).stdout
    assert listed.split() == ["['changed',", "'first',", "'unchanged']", "['bench',", "'restored']"]
    restored, source = work / "api/volumes/restored/data", work / "dtrain/volumes/bench/data"
    assert sorted(p.relative_to(restored) for p in restored.rglob("*")) == sorted(
        p.relative_to(source) for p in source.rglob("*"))  # the request restored the snapshot through the server


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


def test_the_a_b_script_times_first_snapshots_on_an_emptied_store(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(REPO / "bench/snapshots_ab.py"), "--old", str(REPO), "--new", str(REPO),
                           "--workdir", str(tmp_path), "--repeats", "2", "--files", "40", "--size-mb", "2",
                           "--checkpoints", "0", "--first"], capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert "old / new (median wall):" in proc.stdout
    count = ("import sys; from dtrain.storage import Storage; s = Storage(sys.argv[1]); "
             "snaps = s.list_snapshots(); print(len(snaps), snaps[0].added_bytes)")
    for k in ("old", "new"):  # the store was emptied before each: one snapshot left, and it stored every byte
        left, added = subprocess.run([sys.executable, "-c", count, str(tmp_path / f"home-{k}")], capture_output=True,
                                     text=True, env=env, check=True).stdout.split()
        assert left == "1" and int(added) > 2_000_000
    bad = subprocess.run([sys.executable, str(REPO / "bench/snapshots_ab.py"), "--old", str(REPO), "--new", str(REPO),
                          "--workdir", str(tmp_path), "--first", "--cli", "restore"], capture_output=True, text=True,
                         env=env, check=False)
    assert bad.returncode == 2 and "--first times snapshots" in bad.stderr


def test_the_start_up_bench_times_every_case_and_bounds_its_repeats(tmp_path):
    out = tmp_path / "startup.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(REPO / "bench/startup.py"), "--repeats", "2", "--json", str(out)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    seconds = json.loads(out.read_text())["seconds"]
    assert "import dtrain.storage" in seconds and "python -c pass" in seconds
    assert all(len(xs) == 2 and all(0 < x < 60 for x in xs) for xs in seconds.values())
    assert proc.stdout.count(" ms") == 2 * len(seconds)
    bad = subprocess.run([sys.executable, str(REPO / "bench/startup.py"), "--repeats", "0"],
                         capture_output=True, text=True, env=env, check=False)
    assert bad.returncode == 2 and "--repeats 0 is out of range: give 1 to 1000" in bad.stderr


def test_the_a_b_script_times_the_command_a_user_types(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(REPO / "bench/snapshots_ab.py"), "--old", str(REPO), "--new", str(REPO),
                           "--workdir", str(tmp_path), "--repeats", "2", "--files", "40", "--size-mb", "2",
                           "--checkpoints", "0", "--cli", "restore"], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "old / new (median wall):" in proc.stdout and "in process" not in proc.stdout
    for k in ("old", "new"):  # each restored its base twice, into new volumes, through the CLI
        names = subprocess.run([sys.executable, "-m", "dtrain.cli.main", "--home", str(tmp_path / f"home-{k}"),
                                "volume", "list", "--json"], capture_output=True, text=True, env=env, check=True).stdout
        assert sorted(v["origin_snapshot"] or "" for v in json.loads(names)) == ["", "base", "base"]


def test_the_command_a_b_script_runs_both_checkouts_and_reports_errors(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    home = tmp_path / "home"
    subprocess.run([sys.executable, "-m", "dtrain.cli.main", "--home", str(home), "volume", "create", "v"],
                   env=env, check=True, capture_output=True)
    base = [sys.executable, str(REPO / "bench/cli_ab.py"), "--old", str(REPO), "--new", str(REPO), "--home", str(home)]
    proc = subprocess.run([*base, "--repeats", "2", "--", "volume", "list"], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("median wall") == 3 and "old / new (median wall):" in proc.stdout  # old, new, ratio
    bad = subprocess.run([*base, "--repeats", "1", "--", "volume", "describe", "nope"], capture_output=True,
                         text=True, env=env, timeout=300, check=False)
    assert bad.returncode != 0 and "old: dtrain volume describe nope exited 2" in bad.stderr
    assert "nope" in bad.stderr.split("exited 2:")[1]  # the command's own error, passed on


def test_the_capture_floor_bench_times_the_plain_loop_beside_the_engine(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(REPO / "bench/capture_floor.py"), "--workdir", str(tmp_path),
                           "--files", "40", "--size-mb", "2", "--checkpoints", "0", "--repeats", "2"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "plain loop, 2 threads: median wall" in proc.stdout and "engine capture: median wall" in proc.stdout
    assert "engine / plain loop (median wall):" in proc.stdout
    volume = tmp_path / "volume-40-2-0"
    assert sum(1 for _, _, names in os.walk(volume) for _ in names) == 40  # kept for the next run
    assert not (tmp_path / "store").exists()  # the engine's store is removed
    one = subprocess.run([sys.executable, str(REPO / "bench/capture_floor.py"), "--workdir", str(tmp_path),
                          "--files", "40", "--size-mb", "2", "--checkpoints", "0", "--repeats", "1", "--only", "engine"],
                         capture_output=True, text=True, env=env, timeout=300, check=True).stdout
    assert "engine capture" in one and "plain loop" not in one
    for flag in (["--repeats", "0"], ["--threads", "65"], ["--checkpoints", "-1"]):
        bad = subprocess.run([sys.executable, str(REPO / "bench/capture_floor.py"), "--workdir", str(tmp_path), *flag],
                             capture_output=True, text=True, env=env, check=False)
        assert bad.returncode == 2 and f"{flag[0]} {flag[1]} is out of range" in bad.stderr


def test_the_snapshot_benches_bound_the_volume_they_generate(tmp_path):
    """--files/--size-mb/--checkpoints/--repeats out of range: one line and exit 2, before anything is made."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    scripts = {"snapshots.py": ["--workdir", str(tmp_path)],
               "snapshots_ab.py": ["--old", str(REPO), "--new", str(REPO), "--workdir", str(tmp_path)],
               "capture_floor.py": ["--workdir", str(tmp_path)]}
    cases = [(["--files", "0"], "--files 0 is out of range: give 2 to 10000000"),
             (["--size-mb", "2000000"], "--size-mb 2000000 is out of range: give 1 to 1048576"),
             (["--checkpoints", "1001"], "--checkpoints 1001 is out of range: give 0 to 1000"),
             (["--files", "4", "--checkpoints", "3"], "--files 4 cannot hold 3 checkpoints and a clip: give --files 5")]
    for script, base in scripts.items():
        for flags, message in cases + ([(["--repeats", "0"], "--repeats 0 is out of range: give 1 to 1000")]
                                       if script == "snapshots.py" else []):
            bad = subprocess.run([sys.executable, str(REPO / "bench" / script), *base, *flags],
                                 capture_output=True, text=True, env=env, timeout=60, check=False)
            assert bad.returncode == 2 and message in bad.stderr.splitlines()[-1], (script, flags, bad.stderr)
    assert list(tmp_path.iterdir()) == []  # refused before making anything
