"""Pipelines, as a Kubeflow user meets them: an interrupted run's steps, the words of a refusal."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import DTRAIN

QUIET = '''
from kfp import dsl


@dsl.component(install_kfp_package=False)
def quiet(started: str) -> str:
    import time
    open(started, "w").close()
    time.sleep(300)  # prints nothing: no closed pipe ends it
    return "done"


@dsl.pipeline(name="quiet")
def quiet_pipeline(started: str):
    quiet(started=started)
'''


def _with_tmpdir_under(folder: Path) -> list[int]:
    """The live processes whose $TMPDIR is in FOLDER (a run's steps have ROOT/.tmp/run-*)."""
    inside, found = os.fsencode(os.path.abspath(folder)) + b"/", []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if any(item.startswith(b"TMPDIR=" + inside) for item in environ.split(b"\0")):
            found.append(int(pid))
    return found


@pytest.mark.slow
def test_sigterm_ends_the_steps_of_the_run(home, tmp_path):
    """SIGTERM to `dtrain pipeline run` alone (a CI timeout, `kill PID`) ended the runner but not
    its step: KFP's local runner leaves a step's process running after an interrupt, and a step
    that printed nothing more went on, unseen, until its job or its sleep ended."""
    (tmp_path / "quiet.py").write_text(QUIET)
    started = tmp_path / "started"
    root = tmp_path / "root"
    proc = subprocess.Popen([DTRAIN, "pipeline", "run", "--module", f"{tmp_path / 'quiet.py'}:quiet_pipeline",
                             "--param", f"started={started}", "--root", str(root)],
                            env={**os.environ, "DTRAIN_HOME": str(home)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the step never started"
            time.sleep(0.2)
        assert _with_tmpdir_under(root / ".tmp")  # the step's processes: KFP's `sh -ec` and its Python
        proc.send_signal(signal.SIGTERM)  # to the runner alone, not its process group
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130
        assert "interrupted" in err.splitlines()[-1]
        deadline = time.monotonic() + 10
        while _with_tmpdir_under(root / ".tmp") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _with_tmpdir_under(root / ".tmp") == []
    finally:
        for pid in _with_tmpdir_under(root / ".tmp"):
            os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait()
