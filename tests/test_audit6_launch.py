"""Audit 6, the local launchers (submit-dist, submit-mpi): what a job submitted from inside another
job inherits, and what mpirun is told to pass on."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dtrain.backends.local import launch
from dtrain.backends.local.cgroups import outside_rank
from dtrain.spec import JobSpec


def test_a_job_submitted_from_a_job_does_not_inherit_its_limits_or_its_launchers_variables():
    outer = {"HOME": "/root", "SEED": "1", "DTRAIN_MEMORY": "2Gi", "DTRAIN_CPU": "1.0", "DTRAIN_RANK_CPUS": "0",
             "RANK": "1", "JUPYTER_TOKEN": "secret", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1",
             "OMPI_MCA_orte_hnp_uri": "x", "PMIX_RANK": "1", "TORCHELASTIC_RUN_ID": "none", "GROUP_RANK": "0",
             "ROLE_RANK": "1", "TORCHELASTIC_RESTART_COUNT": "0"}
    assert launch.inherited_env(outer) == {"HOME": "/root", "SEED": "1"}
    # outside any launcher's rank, a user's own OpenMPI settings and variables go through
    shell = {"OMPI_MCA_btl": "self,vader", "OMPI_ALLOW_RUN_AS_ROOT": "1", "PMIX_MCA_gds": "hash", "ROLE_X": "y"}
    assert launch.inherited_env(shell) == shell


def test_the_cgroup_above_a_rank_cgroup():
    assert outside_rank("/process_api/ab/dtrain-nb-1-a0-r0-123") == "/process_api/ab"
    assert outside_rank("/dtrain-nb-a2-r10-9/dtrain-kid-a0-r1-10") == "/"
    assert outside_rank("/user.slice/dtrain-notes") is None  # no rank's name: left alone
    assert outside_rank("/") is None


def test_mpirun_passes_on_only_the_variables_the_job_has(tmp_path):
    spec = JobSpec(name="m", command=("true",), processes=2, launcher="mpi", env={"BATCH_SIZE": "33"})
    env = launch.job_env(spec, devices=[[], []], master_port=1234, attempt=0, available=[])
    argv = launch.launcher_argv(spec, job_dir=tmp_path, master_port=1234, env=env)
    exported = {argv[i + 1] for i, a in enumerate(argv) if a == "-x"}
    assert {"BATCH_SIZE", "MASTER_ADDR", "MASTER_PORT", "DTRAIN_ATTEMPT"} <= exported
    assert not exported & {"DTRAIN_MEMORY", "DTRAIN_CPU", "DTRAIN_RANK_CPUS"} - set(env)


@pytest.mark.slow
def test_an_mpi_job_submitted_from_an_mpi_rank_with_limits_runs_on_its_own(dt, home):
    """From inside a rank of an MPI job with --memory (as from a notebook's terminal): the new job's
    ranks saw the outer rank's DTRAIN_MEMORY (held to its limit), mpirun refused to start ("does not
    support recursive calls"), and where cgroups are enforced its supervisor sat in the outer rank's
    cgroup, killed when that rank ended (here while the new job runs): the job was 'lost'."""
    inner = ("dtrain submit-mpi inner --processes 2 -- sh -c "
             "'sleep 4; echo \"mem=[$DTRAIN_MEMORY] cpu=[$DTRAIN_CPU] $RANK/$WORLD_SIZE\"'; sleep 3")
    dt("submit-mpi", "outer", "--processes", "1", "--memory", "300Mi", "--cpu", "1", "--", "sh", "-c", inner)
    assert dt.wait_for("outer", {"Succeeded", "Failed"}, timeout=60)["status"] == "Succeeded"
    info = dt.wait_for("inner", {"Succeeded", "Failed"}, timeout=90)
    assert info["status"] == "Succeeded", (info["message"], (home / "jobs/inner/launcher.log").read_text())
    lines = [json.loads(x)["text"] for x in dt("logs", "inner", "--json").stdout.splitlines()]
    assert sorted(lines) == ["mem=[] cpu=[] 0/2", "mem=[] cpu=[] 1/2"]
    assert "could not find environment variable" not in Path(home / "jobs/inner/launcher.log").read_text()


@pytest.mark.slow
def test_a_job_with_its_own_path_still_gets_its_large_shm(dt):
    """-e PATH without bubblewrap's folder: the launch ran `bwrap` through the job's PATH and the job
    failed 'the launcher exited with code 127' (cannot start the launcher: No such file 'bwrap')."""
    own = str(Path(sys.executable).parent)
    dt("submit-dist", "shm", "--processes", "2", "--large-shm", "-e", f"PATH={own}", "--",
       "python", "-c", "import os; print(os.statvfs('/dev/shm').f_blocks > 0)")
    info = dt.wait_for("shm", {"Succeeded", "Failed"}, timeout=90)
    assert info["status"] == "Succeeded", info["message"]


def test_submit_mpi_names_the_path_given_with_e_when_mpirun_is_not_in_it(dt):
    own = str(Path(sys.executable).parent)
    proc = dt("submit-mpi", "m", "--processes", "2", "-e", f"PATH={own}", "--", "python", "-c", "1", check=False)
    assert proc.returncode == 2 and "not in the PATH given with -e PATH" in proc.stderr
    assert "not installed" not in proc.stderr and "--launcher" not in proc.stderr
