"""What a new user types on the embedded default, following the docs and the habits of Run:AI and
kubectl: each mistake is one line that names the fix (exit 2), and nothing stored changes."""

from __future__ import annotations

import pytest
from conftest import assert_usage_error

from dtrain.errors import SpecError


# ---- a command given without '--' --------------------------------------------------------------
def test_a_submitted_command_without_the_dashes_is_told_where_it_goes(dt):
    proc = dt("submit", "train", "python", "train.py", check=False)
    assert_usage_error(proc, "unrecognized arguments: python train.py",
                       "the command goes after '--': dtrain submit NAME [options] -- COMMAND",
                       "(see 'dtrain submit --help')")
    proc = dt("submit-dist", "train", "--processes", "2", "python", "train.py", check=False)
    assert_usage_error(proc, "the command goes after '--': dtrain submit-dist NAME", "'dtrain submit-dist --help'")
    assert dt.json("list", "-A") == []  # nothing was submitted


def test_exec_without_the_dashes_is_told_where_the_command_goes(dt):
    proc = dt("exec", "train", "ls", "/mnt", check=False)
    assert_usage_error(proc, "unrecognized arguments: ls /mnt",
                       "the command goes after '--': dtrain exec NAME [--rank R] -- COMMAND",
                       "(see 'dtrain exec --help')")


def test_processes_on_plain_submit_points_at_submit_dist(dt):
    proc = dt("submit", "train", "--processes", "2", "--", "true", check=False)
    assert_usage_error(proc, "unrecognized arguments: --processes 2",
                       "dtrain submit-dist NAME --processes N [options] -- COMMAND", "(see 'dtrain submit --help')")


def test_an_unknown_flag_names_the_help_of_its_own_verb(dt):
    proc = dt("volume", "create", "data", "--sise", "1Gi", check=False)
    assert_usage_error(proc, "dtrain volume create: error: unrecognized arguments: --sise 1Gi",
                       "(see 'dtrain volume create --help')")
    assert "the command goes" not in proc.stderr
    assert dt.json("volume", "list") == []


def test_the_word_job_before_a_name_where_the_verb_takes_the_name_alone(dt):
    """`runai describe job X` habits reach `logs`, which takes the noun too (as `describe job X` and
    `wait job X` do): the name after it is the job's; `submit` names a new job and takes no noun."""
    assert_usage_error(dt("logs", "job", "train", check=False), "no job named 'train'")
    proc = dt("submit", "job", "train", "--", "true", check=False)
    assert_usage_error(proc, "'dtrain submit' takes the job's name alone: dtrain submit train",
                       "(see 'dtrain submit --help')")


# ---- a job verb given another kind ---------------------------------------------------------------
def test_describe_and_delete_of_a_project_name_commands_that_exist(dt):
    dt("project", "create", "team-a")
    proc = dt("describe", "project", "team-a", check=False)
    assert_usage_error(proc, "use 'dtrain project list'")
    assert "project describe" not in proc.stderr  # no such command
    proc = dt("delete", "project", "team-a", check=False)  # it said projects are not deleted
    assert_usage_error(proc, "'dtrain delete' is for jobs: use 'dtrain project delete NAME'")
    assert [p["name"] for p in dt.json("project", "list")] == ["default", "team-a"]


def test_describe_of_a_node_points_at_nodes(dt):
    proc = dt("describe", "node", "vm", check=False)
    assert_usage_error(proc, "'dtrain describe' is for jobs: use 'dtrain nodes'")


def test_describe_of_a_snapshot_names_the_snapshot_verb(dt):
    dt("volume", "create", "data")
    proc = dt("describe", "snapshots", "snap-1", check=False)
    assert_usage_error(proc, "'dtrain describe' is for jobs: use 'dtrain snapshot describe NAME'")
    assert [v["name"] for v in dt.json("volume", "list")] == ["data"]


def test_list_of_another_kind_points_at_its_list(dt):
    for kind, fix in (("volumes", "dtrain volume list"), ("snapshots", "dtrain snapshot list"),
                      ("projects", "dtrain project list"), ("nodes", "dtrain nodes"),
                      ("notebooks", "dtrain notebook list")):
        assert_usage_error(dt("list", kind, check=False), f"'dtrain list' is for jobs: use '{fix}'")
    assert_usage_error(dt("list", "gpus", check=False), "'dtrain list' lists jobs, not 'gpus'")
    assert dt("list", "jobs").returncode == 0 and dt.json("list", "job") == []


def test_delete_notebook_name_deletes_that_notebook_job(dt):
    """A notebook is a job (docs/storage.md): `delete notebook NB` is `delete job NB`."""
    dt("submit", "nb", "--", "sleep", "60")
    proc = dt("delete", "notebook", "nb")
    assert "The job 'nb' has been deleted" in proc.stdout
    assert dt.status("nb") == "Deleted"


# ---- a mistyped project ----------------------------------------------------------------------------
def test_list_of_an_unknown_project_says_so_instead_of_an_empty_table(dt):
    dt("project", "create", "team-a")
    dt("submit", "one", "-p", "team-a", "--", "true")
    proc = dt("list", "-p", "team-b", check=False)
    assert_usage_error(proc, "no project named 'team-b' (did you mean 'team-a'? projects: default, team-a)", "'dtrain list -A'")
    assert proc.stdout == ""
    assert [j["name"] for j in dt.json("list", "-p", "team-a")] == ["one"]
    dt("project", "create", "empty")
    assert dt.json("list", "-p", "empty") == []  # a project without jobs is just empty
    assert dt.json("list") == []  # 'default' always exists


# ---- restore: where to --------------------------------------------------------------------------------
def test_restore_given_both_to_and_in_place_says_they_exclude_each_other(dt):
    dt("volume", "create", "data")
    dt("snapshot", "create", "data", "--name", "s1")
    proc = dt("snapshot", "restore", "s1", "--to", "copy", "--in-place", check=False)
    assert_usage_error(proc, "argument --in-place: not allowed with argument --to")
    assert "say where" not in proc.stderr
    assert [v["name"] for v in dt.json("volume", "list")] == ["data"]


def test_in_place_restore_of_a_deleted_volume_names_the_restore_that_works(dt):
    dt("volume", "create", "data")
    dt("snapshot", "create", "data", "--name", "s1")
    dt("volume", "delete", "data")
    for dry in ((), ("--dry-run",)):
        proc = dt("snapshot", "restore", "s1", "--in-place", *dry, check=False)
        assert_usage_error(proc, "volume 'data' of snapshot 's1' was deleted", "restore it to a new volume with --to NAME")
    assert dt.json("volume", "list") == []
    dt("snapshot", "restore", "s1", "--to", "data-again")
    assert [v["name"] for v in dt.json("volume", "list")] == ["data-again"]


# ---- logs of a job that printed a lot ----------------------------------------------------------------
def test_logs_tail_reads_the_end_of_a_huge_log_not_all_of_it(dt):
    """`dtrain logs JOB -t 10` (and the dashboard's tail of 500) on a job that logged for days: the
    last lines come from the end of the file; the whole file is never read into memory (8 GiB of
    earlier output here, in a process allowed 1 GiB of memory)."""
    import resource
    import subprocess

    from conftest import DTRAIN

    dt("submit", "chatty", "--", "sh", "-c", "echo first; echo second; echo third")
    dt("wait", "chatty")
    log = dt.home / "jobs" / "chatty" / "logs" / "rank-0.log"
    records = log.read_bytes()
    with open(log, "r+b") as f:  # the same records after 8 GiB of earlier output: a hole, no disk
        f.truncate(0)
        f.seek(8 << 30)
        f.write(b"\n" + records)

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    for args in (("-t", "2"), ("-f", "-t", "2"), ("--rank", "0", "-t", "2")):
        proc = subprocess.run([DTRAIN, "logs", "chatty", *args], env=dt.env, capture_output=True, text=True,
                              timeout=120, preexec_fn=limited)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "second\nthird\n", ""), args


def test_log_files_read_across_block_edges_as_a_whole_read_would(tmp_path, monkeypatch):
    """The block reader gives every line once, whole, in order, whatever the block size, also on a
    file read again while it grows (logs -f) and with a half-written line at its end."""
    import random

    from dtrain.backends.local import logfiles
    from dtrain.backends.local.rankrun import format_line

    rng = random.Random(7)
    logs = tmp_path / "logs"
    logs.mkdir()
    texts = ["".join(rng.choice("ab \r\u00e9") for _ in range(rng.randrange(0, 30))) for _ in range(300)]
    lines = [format_line(t, 1_000_000 + i).encode() for i, t in enumerate(texts)]
    for block in (1, 2, 7, 64, 1 << 20):
        monkeypatch.setattr(logfiles, "BLOCK", block)
        path = logs / "rank-0.log"
        path.write_bytes(b"".join(lines[:100]) + lines[100][:5])  # a line still being written
        for n in (0, 1, 3, 100, 1000):
            tail = [ln.text for ln in logfiles.LogFiles(logs, rank=None, since=None).read(last=n)]
            assert tail == texts[:100][len(texts[:100]) - min(n, 100):], (block, n)
        files = logfiles.LogFiles(logs, rank=0, since=None)
        got = [ln.text for ln in files.read()]
        path.write_bytes(b"".join(lines))  # the rest, the half line completed
        got += [ln.text for ln in files.read()]
        assert got == texts, block
        assert list(files.read()) == []
        since = [ln.text for ln in logfiles.LogFiles(logs, rank=None, since=1_000_250).read(last=100)]
        assert since == texts[250:], block


def test_a_storage_class_given_as_a_volume_shows_the_new_volume_form(dt):
    """`--pvc local:/mnt` reads as the volume 'local'; a new volume of that class was meant."""
    proc = dt("submit", "prep", "--pvc", "local:/mnt", "--", "true", check=False)
    assert_usage_error(proc, "no volume named 'local'", "'local' is a storage class",
                       "--pvc local:SIZE:/mnt, e.g. local:10Gi:/mnt")
    assert dt.json("list", "-A") == [] and dt.json("volume", "list") == []
    proc = dt("submit", "prep", "--pvc", "data:/mnt", "--", "true", check=False)
    assert_usage_error(proc, "no volume named 'data'")
    assert "storage class" not in proc.stderr


# ---- --json on the storage verbs that make or change something --------------------------------------
def test_storage_verbs_that_make_or_change_print_json_on_request(dt):
    """A script needs the name `snapshot create` made (VOLUME-<time>) without parsing a sentence."""
    assert dt.json("volume", "create", "data")["name"] == "data"
    snap = dt.json("snapshot", "create", "data")
    assert snap["volume"] == "data" and snap["name"].startswith("data-")
    assert [s["name"] for s in dt.json("snapshot", "list")] == [snap["name"]]
    clone = dt.json("snapshot", "restore", snap["name"], "--to", "copy")
    assert clone["name"] == "copy" and clone["origin_snapshot"] == snap["name"]
    assert dt.json("snapshot", "restore", snap["name"], "--in-place")["name"] == "data"
    assert dt.json("volume", "update", "copy", "--class", "local")["storage_class"] == "local"
    freed = dt.json("snapshot", "delete", snap["name"])
    assert freed["snapshot"] == snap["name"] and freed["pending"] is False
    assert dt.json("snapshot", "list") == []


# ---- the backend a command names, or the configured one --------------------------------------------
def test_the_global_backend_flag_reaches_submit(dt):
    """`dtrain --backend kubernetes submit ...` is "backend for this command" (dtrain --help): the
    job must go to Kubernetes, not quietly run on this machine."""
    proc = dt("--backend", "kubernetes", "submit", "train", "--image", "pytorch/pytorch:2", "--dry-run", "--",
              "python", "train.py")
    assert "kind: Job" in proc.stdout and "apiVersion: batch/v1" in proc.stdout, proc.stdout
    proc = dt("--backend", "kubernetes", "submit", "train", "--backend", "local", "--dry-run", "--", "true")
    assert "backend: local" in proc.stdout  # the verb's own flag is nearer
    assert dt.json("list", "-A") == []


def test_a_notebook_goes_to_the_configured_backend(dt, tmp_path):
    """`dtrain config backend kubernetes`, then `dtrain notebook nb`: a Kubeflow Notebook is meant
    (docs/storage.md), and `notebook open` and `delete` look there; it must not start here."""
    dt.env["KUBECONFIG"] = str(tmp_path / "no-kubeconfig")
    dt("config", "backend", "kubernetes")
    try:
        proc = dt("notebook", "nb", check=False)
        assert_usage_error(proc, "notebook 'nb' needs a container image on Kubernetes",
                           "--image kubeflownotebookswg/jupyter-pytorch-full:")
    finally:
        dt("--backend", "local", "delete", "nb", check=False)  # the old code started one here
    assert dt.json("--backend", "local", "list", "-A", "--show-deleted") == []


def test_a_job_posted_without_a_backend_goes_where_the_server_lists_jobs(home):
    """The HTTP API (and the dashboard's form) as `dtrain submit`: a body without `backend` goes to
    the server's backend, the one `GET /jobs` lists, not always to this machine."""
    import httpx
    import pytest

    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")
    from server_util import ThreadServer

    from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig
    from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer
    from dtrain.client import Client
    from dtrain.server.app import create_app

    cluster = FakeCluster()
    cluster.add_node("node-1", gpus=2)
    fake = FakeKubeServer(cluster).start()
    apis = []

    def make_client() -> Client:
        apis.append(fake.api_client())
        backend = KubernetesBackend(KubernetesConfig(project="lanes", image="ghcr.io/example/lanes:1"),
                                    api_client=apis[-1])
        return Client(home=home, backend="kubernetes", backends={"kubernetes": backend})

    server = ThreadServer(create_app(make_client, sample_every=3600))
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            r = http.post("/api/v1/jobs", json={"name": "train", "command": ["python", "train.py"],
                                                "project": "lanes"})
            assert r.status_code == 201, r.text
            assert r.json()["backend"] == "kubernetes"
            assert [j["name"] for j in http.get("/api/v1/jobs").json()] == ["train"]
    finally:
        server.stop()
        for api in apis:
            api.close()
        fake.close()
    assert not (home / "jobs" / "train").exists()  # nothing started on this machine


# ---- a volume whose folder is gone -------------------------------------------------------------------
def test_a_volume_whose_folder_is_gone_is_lost_and_refused_at_submit(dt):
    """Its folder removed by hand (or the disk of its storage class not mounted after a reboot):
    `volume list` says Lost, as Kubernetes says of a PVC whose volume is gone, and a job mounting
    it is refused at submit with the folder named, not started to fail in bubblewrap."""
    import shutil

    dt("volume", "create", "data")
    dt("volume", "create", "kept")
    shutil.rmtree(dt.home / "volumes" / "data")
    status = {v["name"]: v["status"] for v in dt.json("volume", "list")}
    assert status == {"data": "Lost", "kept": "Bound"}
    assert dt.json("volume", "describe", "data")["status"] == "Lost"
    proc = dt("submit", "train", "--pvc", "data:/mnt", "--", "ls", "/mnt", check=False)
    assert_usage_error(proc, "volume 'data' has lost its folder", str(dt.home / "volumes" / "data" / "data"),
                       "'dtrain snapshot list --volume data'")
    assert dt.json("list", "-A", "--show-deleted") == []
    dt("volume", "delete", "data")  # and it can go
    assert [v["name"] for v in dt.json("volume", "list")] == ["kept"]


def test_the_sdk_refuses_a_restore_given_both_targets_in_one_line(tmp_path):
    from dtrain.client import Client

    client = Client(home=tmp_path / "home")
    client.create_volume("data", size="1Mi")
    client.create_snapshot("data", name="s1")
    with pytest.raises(SpecError, match=r"^restore snapshot 's1' into a new volume \(--to NEW_VOLUME\) or in place "
                                        r"\(--in-place\), not both$"):
        client.restore_snapshot("s1", to="copy", in_place=True)
    assert [v.name for v in client.list_volumes()] == ["data"]


def test_readme_names_the_verbs_json_leaves_out_as_they_are(dt):
    """README.md said --json was not on dry runs; every dry run prints one JSON object with it."""
    import json
    import re
    from pathlib import Path

    text = re.sub(r"\s+", " ", (Path(__file__).resolve().parent.parent / "README.md").read_text())
    left_out = re.search(r"as it does on the `volume` and `snapshot` verbs \(.*?\) but (.*?), and on a `--dry-run`",
                         text)
    assert left_out is not None and left_out.group(1) == "`volume delete`"
    dt("volume", "create", "data", "--size", "1Gi")
    assert_usage_error(dt("volume", "delete", "data", "--json", check=False), "unrecognized arguments: --json")
    for words in (["submit", "j", "--dry-run", "--json", "--", "true"],
                  ["volume", "create", "d2", "--size", "1Gi", "--dry-run", "--json"],
                  ["snapshot", "create", "data", "--dry-run", "--json"]):
        assert isinstance(json.loads(dt(*words).stdout), dict)
