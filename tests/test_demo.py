"""The main job: the README's walk-through is the demo script, and the demo runs end to end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def demo_commands() -> list[str]:
    text = re.sub(r"\\\n\s*", " ", (REPO / "scripts" / "demo.sh").read_text())
    return [re.sub(r"\s+", " ", line.strip()[4:]) for line in text.splitlines() if line.strip().startswith("run ")]


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = text.split("<!-- walkthrough:start -->")[1].split("<!-- walkthrough:end -->")[0]
    block = re.sub(r"\\\n\s*", " ", block)
    return [re.sub(r"\s+", " ", line[2:].strip()) for line in block.splitlines() if line.startswith("$ ")]


def test_readme_walkthrough_is_exactly_what_the_demo_runs():
    assert readme_commands() == demo_commands()
    assert len(demo_commands()) >= 20


def test_readme_starts_with_the_two_commands():
    first_block = (REPO / "README.md").read_text().split("```")[1]
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()[1:] if line.strip()]
    assert commands == ["make demo", "make test"]
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo: setup$", makefile, re.M) and re.search(r"^test: setup$", makefile, re.M)
    assert "make test" in (REPO / ".ci" / "run").read_text()


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_demo_tiny_end_to_end_and_rerun(tmp_path):
    env = {**os.environ, "DEMO_RECIPE": "tiny", "DEMO_OUT": str(tmp_path / "out"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("DTRAIN_HOME", None)
    for run in (1, 2):  # the second run must cleanly replace what the first made
        proc = subprocess.run(["bash", str(REPO / "scripts" / "demo.sh")], env=env, capture_output=True, text=True,
                              timeout=1500)
        assert proc.returncode == 0, f"run {run}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    out = tmp_path / "out"
    assert "dtrain demo (tiny recipe) finished" in proc.stdout
    evaluation = json.loads((out / "report" / "evaluation.json").read_text())
    assert evaluation["frames"] == 40 and 0.0 <= evaluation["accuracy"] <= 1.0
    assert len(list((out / "report" / "overlays").glob("*.png"))) == 12
    scaling = (out / "report" / "scaling.md").read_text()
    assert re.search(r"^\| 1 \|", scaling, re.M) and re.search(r"^\| 2 \|", scaling, re.M)
    snaps = {s["name"]: s for s in json.loads((out / "report" / "snapshots.json").read_text())}
    trained = [s for s in snaps.values() if s.get("job") == "train-lane-detection"]
    assert len(trained) == 1 and trained[0]["source_snapshot"] == "tusimple-prepared"
    assert snaps["tusimple-prepared"]["job"] == "download-tusimple-data"
    envd = {**env, "DTRAIN_HOME": str(out / "dtrain-home")}
    dt = [str(Path(sys.executable).parent / "dtrain")]
    jobs = json.loads(subprocess.run(dt + ["list", "-A", "--json"], env=envd, capture_output=True, text=True,
                                     check=True).stdout)
    assert {j["name"]: j["status"] for j in jobs if not j["name"].startswith("scaling-")} == {
        "download-tusimple-data": "Succeeded", "train-lane-detection": "Succeeded",
        "retrain-lane-detection": "Succeeded", "predict-lanes": "Succeeded"}
    restored = json.loads(subprocess.run(dt + ["volume", "describe", "restored-tusimple", "--json"], env=envd,
                                         capture_output=True, text=True, check=True).stdout)
    assert restored["origin_snapshot"] == trained[0]["name"]
    logs = subprocess.run(dt + ["logs", "retrain-lane-detection"], env=envd, capture_output=True, text=True).stdout
    assert re.search(r"resumed from /mnt/runs/lanes/ckpt-\d+\.pt", logs)
