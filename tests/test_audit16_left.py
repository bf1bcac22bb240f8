"""Day-two defects: `logs` of a purged job names the snapshot that kept its logs (not a near job's
name), `snapshot list` marks a deleted job, refusals count their jobs, `top` in --help, `exec --rank`
checked before the job, a job file's `volumes:` named as written."""

from __future__ import annotations

import pytest
from conftest import Dtrain
from dtrain.errors import ConflictError, SpecError
from dtrain.names import them
from dtrain.storage import Storage


def test_logs_of_a_purged_job_names_the_snapshot_that_kept_them_not_a_near_job(dt: Dtrain):
    dt("volume", "create", "v2", "--size", "1Gi")
    dt("submit", "c-train", "--", "true")
    dt("submit", "c-trai2", "--pvc", "v2:/mnt", "--snapshot-on-success", "v2", "--", "bash", "-c", "echo kept-line")
    info = dt.wait_for("c-trai2", {"Succeeded", "Failed"})
    assert info["status"] == "Succeeded", info["message"]
    dt("delete", "c-trai2", "--purge")
    said = dt("logs", "c-trai2", check=False)
    assert said.returncode != 0 and len(said.stderr.strip().splitlines()) == 1
    assert "did you mean" not in said.stderr
    snap = info["snapshot"]
    assert f"kept in snapshot '{snap}' at .dtrain/logs/c-trai2/" in said.stderr
    assert f"dtrain snapshot restore {snap} --to NEW_VOLUME" in said.stderr
    # the way it names works: the restored volume holds the lines
    dt("snapshot", "restore", snap, "--to", "back")
    assert "kept-line" in (dt.home / "volumes/back/data/.dtrain/logs/c-trai2/rank-0.log").read_text()
    # a name no snapshot records still gets the near name
    assert "did you mean 'c-train'?" in dt("logs", "c-trai3", check=False).stderr


def test_logs_of_a_deleted_job_whose_snapshot_holds_no_logs_says_so(dt: Dtrain):
    dt("volume", "create", "v", "--size", "1Gi")
    dt("submit", "c-train", "--", "true")
    dt("submit", "c-trai4", "--pvc", "v:/mnt", "--", "true")
    assert dt.wait_for("c-trai4", {"Succeeded", "Failed"})["status"] == "Succeeded"
    (dt.home / "volumes/v/data/.dtrain").mkdir()
    (dt.home / "volumes/v/data/.dtrain/logs").symlink_to("/nonexistent")  # the copy is refused: no logs in it
    dt("snapshot", "create", "v", "--job", "c-trai4", "--name", "s4")
    dt("delete", "c-trai4", "--purge")
    said = dt("logs", "c-trai4", check=False).stderr
    assert "did you mean" not in said
    assert "snapshot 's4' of its volume holds its results, not its logs" in said


def test_snapshot_list_marks_a_purged_jobs_name_deleted_as_describe_does(dt: Dtrain):
    dt("volume", "create", "v", "--size", "1Gi")
    for job in ("gone", "kept"):
        dt("submit", job, "--pvc", "v:/mnt", "--snapshot-on-success", "v", "--", "true")
        assert dt.wait_for(job, {"Succeeded", "Failed"})["status"] == "Succeeded"
    dt("delete", "gone", "--purge")
    rows = {line.split()[2]: line for line in dt("snapshot", "list").stdout.splitlines()[1:]}
    assert "gone (deleted)" in rows["gone"] and "(deleted)" not in rows["kept"]
    marked = {s["job"]: s["job_deleted"] for s in dt.json("snapshot", "list")}
    assert marked == {"gone": True, "kept": False}
    gone = next(s["name"] for s in dt.json("snapshot", "list") if s["job"] == "gone")
    assert "Job: gone (deleted)" in dt("snapshot", "describe", gone).stdout


def test_a_refusal_over_one_job_says_it_not_them(tmp_path):
    storage = Storage(tmp_path / "home")
    storage.create_volume("data")
    storage.create_snapshot("data", name="s1")
    with pytest.raises(ConflictError) as one:
        storage.restore_snapshot("s1", in_place=True, in_use_by=["j1"])
    assert "in use by job j1: wait for it to finish or stop it (" in str(one.value)
    with pytest.raises(ConflictError) as one:
        storage.delete_volume("data", in_use_by=["j1"])
    assert "in use by job j1: wait for it to finish, stop it (" in str(one.value)
    with pytest.raises(ConflictError) as two:
        storage.delete_volume("data", in_use_by=["j1", "j2"])
    assert "in use by jobs j1, j2: wait for them to finish, stop them (" in str(two.value)
    assert storage.get_volume("data").path.is_dir()
    storage.close()


def test_them_follows_the_count():
    assert [them(["a"]), them(["a"], "their"), them(["a"], "they")] == ["it", "its", "it"]
    assert [them(["a", "b"]), them(["a", "b"], "their"), them([], "they")] == ["them", "their", "they"]


def test_help_says_top_lists_nodes_and_with_job_the_jobs(dt: Dtrain):
    line = " ".join(dt("--help").stdout.split("\n    top", 1)[1].split("\n    lanes", 1)[0].split())
    assert "alias of 'nodes'" not in line and "the nodes" in line and "'top job': the jobs" in line
    dt("submit", "listed", "--", "true")
    assert "listed" in dt("top", "job").stdout and "listed" not in dt("top").stdout


@pytest.mark.parametrize("verb", [("exec", "nosuch", "--rank", "-1", "--", "true"), ("bash", "nosuch", "--rank", "-1")])
def test_exec_and_bash_check_the_ranks_form_before_the_job_in_logs_words(dt: Dtrain, verb):
    said = dt(*verb, check=False)
    assert said.returncode == 2 and said.stderr == ("dtrain: error: invalid --rank -1: use a process rank such as 0 "
                                                    "(at most 4095); exec runs in one process\n"), said.stderr
    assert "use a process rank such as 0 (at most 4095)" in dt("logs", "nosuch", "--rank", "-1", check=False).stderr
    from dtrain import Client
    with pytest.raises(SpecError, match=r"^invalid rank -1: use a process rank such as 0 \(at most 4095\); exec"):
        Client(home=dt.home).exec("nosuch", ["true"], rank=-1)


def test_a_job_files_volumes_entry_is_named_as_written_there_not_as_pvc(dt: Dtrain, tmp_path):
    (tmp_path / "job.yaml").write_text("name: fj\ncommand: [\"true\"]\nvolumes: [./data:/mnt]\n")
    said = dt("submit", "-f", str(tmp_path / "job.yaml"), check=False)
    assert said.returncode == 2 and len(said.stderr.splitlines()) == 1, said.stderr
    assert said.stderr.startswith(f"dtrain: error: invalid volumes: entry './data:/mnt' in job file "
                                  f"'{tmp_path / 'job.yaml'}': './data' is a folder, and a volumes: entry mounts a "
                                  f"volume;"), said.stderr
    assert "--pvc './data" not in said.stderr
    (tmp_path / "pvc.yaml").write_text("name: fj\ncommand: [\"true\"]\npvc: [\"data:/mnt:xx\"]\n")
    said = dt("submit", "-f", str(tmp_path / "pvc.yaml"), check=False).stderr
    assert f"invalid pvc: entry 'data:/mnt:xx' in job file '{tmp_path / 'pvc.yaml'}': after the mount" in said
    assert "use VOLUME:MOUNT[:ro] for an existing volume" in said
    # the flag is still named as the flag
    assert "invalid --pvc './data:/mnt': './data' is a folder, and --pvc mounts a volume" in dt(
        "submit", "x", "--pvc", "./data:/mnt", "--", "true", check=False).stderr
    assert dt("list", "-A", "--json", check=False).stdout.strip() in ("", "[]")
