"""The everyday job verbs as a Run:AI or kubectl user types them: exec, wait, delete, logs,
describe (audit 6, verbs)."""

from __future__ import annotations

import pytest


@pytest.fixture
def done(dt):
    """A finished one-process job named train-1."""
    dt("submit", "train-1", "--", "sh", "-c", "echo hello")
    assert dt.wait_for("train-1", {"Succeeded"})["status"] == "Succeeded"
    return dt


def test_a_missing_job_names_the_near_one(done):
    dt = done
    for verb in (["describe", "job"], ["logs"], ["wait"], ["delete"], ["exec"]):
        proc = dt(*verb, "train1", *(["--", "true"] if verb == ["exec"] else []), check=False)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert "no job named 'train1'" in proc.stderr and "did you mean 'train-1'?" in proc.stderr, proc.stderr
    far = dt("describe", "job", "zzzzzz", check=False)
    assert far.returncode == 2 and "did you mean" not in far.stderr


def test_since_takes_go_durations_as_kubectl_does(done):
    """kubectl and Run:AI read --since as a Go duration: 1h30m was refused as 'invalid --since'."""
    dt = done
    for since in ("1h30m", "2h0m0s", "1.5h", "90m", "5400000ms"):
        proc = dt("logs", "train-1", "--since", since, check=False)
        assert proc.returncode == 0 and proc.stdout == "hello\n", (since, proc.stderr)
    for bad in ("1h-30m", "-5m", "h", "1x", "99999999h"):
        proc = dt("logs", "train-1", f"--since={bad}", check=False)
        assert proc.returncode == 2 and "invalid --since" in proc.stderr and len(proc.stderr.splitlines()) == 1


@pytest.mark.slow
def test_wait_timeout_takes_a_duration_as_kubectl_wait_does(dt):
    """`kubectl wait --timeout=10m`: '10m' was 'invalid float value'; a bad value is named as typed."""
    dt("submit", "long", "--", "sleep", "60")
    proc = dt("wait", "long", "--timeout=500ms", check=False)
    assert proc.returncode == 124, proc.stderr
    for bad in ("-5", "1e400", "nan", "367d", "5 minutes"):
        proc = dt("wait", "long", "--timeout", bad, check=False)
        assert proc.returncode == 2 and f"'{bad}'" in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    dt("delete", "long")
    assert dt("wait", "long", "--timeout", "1m", check=False).returncode == 1


@pytest.mark.slow
def test_delete_all_deletes_every_job_of_the_project_as_runai_does(dt):
    """`runai delete job --all` / `-A`: was 'the following arguments are required' / 'unrecognized -A'."""
    dt("project", "create", "team")
    dt("submit", "mine-1", "--", "sleep", "60")
    dt("submit", "mine-2", "--", "true")
    dt("submit", "theirs", "-p", "team", "--", "sleep", "60")
    for wrong in (["delete"], ["delete", "mine-1", "--all"]):
        proc = dt(*wrong, check=False)
        assert proc.returncode == 2 and "--all" in proc.stderr and "nothing was deleted" in proc.stderr, proc.stderr
    assert dt.status("mine-1") == "Running"
    out = dt("delete", "job", "--all").stdout
    assert sorted(out.splitlines()) == ["The job 'mine-1' has been deleted (Deleted)",
                                        "The job 'mine-2' has been deleted (Deleted)"]
    assert dt.status("theirs") == "Running"  # another project's job is left alone
    assert dt("delete", "-A").stdout.startswith("No jobs to delete in project 'default'")
    dt("delete", "--all", "-p", "team", "--purge")
    assert [j["name"] for j in dt.json("list", "-A", "--show-deleted")] == ["mine-1", "mine-2"]


def test_exec_it_names_what_to_type(done):
    """`kubectl exec -it POD -- bash` / `runai exec JOB -it -- bash`: was only 'unrecognized arguments: -it'."""
    for flags in (["-it"], ["-i", "-t"], ["--tty"]):
        proc = done("exec", "train-1", *flags, "--", "bash", check=False)
        assert proc.returncode == 2 and "drop them: dtrain exec NAME -- bash" in proc.stderr, proc.stderr
        assert len(proc.stderr.splitlines()) == 1


@pytest.mark.parametrize("verb, names", [
    ("attach", "dtrain logs JOB -f"), ("get", "dtrain list"),
    ("stop", "dtrain suspend JOB"), ("kill", "dtrain delete JOB"), ("cp", "dtrain artifacts JOB --to DIR"),
    ("version", "dtrain --version"), ("apply", "dtrain submit -f FILE"),
])
def test_a_run_ai_or_kubectl_verb_names_the_dtrain_spelling(dt: Dtrain, verb, names):
    """`dtrain attach JOB` (Run:AI), `dtrain get jobs` (kubectl) answered argparse's list of 24 verbs
    (`dtrain bash JOB` is Run:AI's `runai bash`: tests/test_exec.py)."""
    proc = dt(verb, "x", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert f"no verb '{verb}'" in line and names in line and "invalid choice" not in line
