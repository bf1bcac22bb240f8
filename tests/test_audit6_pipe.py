"""Pipelines, as a Kubeflow user meets them: an interrupted run's steps, the words of a refusal."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import DTRAIN
from dtrain.errors import SpecError
from dtrain.pipelines import steps

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


@pytest.mark.parametrize("uri, why", [
    ("s3://My_Bucket/cifar10", "the S3 URI's bucket name must be 3-63 lower-case letters"),
    ("efs://data/cifar10", "name the file system by its id"),
    ("file://data", "use an absolute path"),
    ("http://x/y", "use s3://BUCKET/PREFIX"),
])
def test_a_bad_data_uri_says_what_is_wrong_with_it(uri, why):
    """A data_uri of the right form whose bucket name S3 refuses was answered 'use
    s3://BUCKET/PREFIX', which is what the user had given: the channel's reason was dropped."""
    with pytest.raises(SpecError) as err:
        steps.cifar10_spec(runtime="sagemaker", job_name="j", processes=1, epochs=1, batch_size=1, lr=0.1,
                           backend="gloo", data_volume="", data_uri=uri)
    assert str(err.value).startswith(f"invalid data_uri '{uri}': ") and why in str(err.value)
    assert "channel" not in str(err.value)  # the pipeline's parameter, not the channel it becomes


@pytest.mark.slow
def test_the_run_refuses_a_bad_data_uri_in_one_line(dt):
    proc = dt("pipeline", "run", "hybrid-cifar10", "--param", "training_runtime=sagemaker", "--param",
              "data_uri=s3://My_Bucket/cifar10", check=False)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["dtrain: error: invalid data_uri 's3://My_Bucket/cifar10': the S3 URI's "
                                        "bucket name must be 3-63 lower-case letters, digits, '.' or '-', e.g. "
                                        "s3://my-bucket/cifar10"]


FAILING = '''
from kfp import dsl


@dsl.component(install_kfp_package=False)
def check(n: int) -> int:
    print("checking", n)
    if n > 3:
        raise ValueError(f"n={n} is too large: use at most 3")
    return n


@dsl.pipeline(name="failing")
def failing(n: int = 1):
    check(n=check(n=n).output)
'''


def test_a_failed_run_names_what_its_step_raised(home, capsys, tmp_path):
    """A failed step failed the run with 'the step's log above ends with why': the run's one line
    (the last one a CI log shows) said nothing of the reason, which sat in the step's traceback."""
    from test_pipelines import cli

    module = tmp_path / "failing.py"
    module.write_text(FAILING)
    code, _out, err = cli(home, capsys, "run", "--module", f"{module}:failing", "--param", "n=7")
    last = err.strip().splitlines()[-1]
    assert code == 1
    assert last.startswith("dtrain: error: pipeline 'failing' failed at step 'check': ValueError: n=7 is too "
                           "large: use at most 3; "), err
    code, out, err = cli(home, capsys, "run", "--module", f"{module}:failing", "--param", "n=2")
    assert code == 0, err
