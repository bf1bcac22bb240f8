"""Leftovers of the job uid: Kubernetes `describe job`'s "Snapshot: NAME (deleted)" told by the job
uid the snapshot records, a dry run that names the snapshot a real run would take, and the
`--pvc ./folder` hint that carries the -p and --backend the user gave."""

from __future__ import annotations

import json

import pytest

from conftest import Dtrain
from dtrain.spec import parse_pvc

try:  # the local and CLI tests run without the 'kubernetes' extra
    import kubernetes  # noqa: F401
except ImportError:
    HAVE_K8S = False
else:
    HAVE_K8S = True
    from test_k8s_backend import NS, backend, cluster, make_backend, spec  # noqa: F401  (their fixtures)
    from test_job_uid_k8s import _dry_run_submit, _run_watcher
    from test_k8s_leftovers6 import _ttl_delete

    from dtrain.backends.kubernetes.fake_wire import rfc3339
    from dtrain.backends.kubernetes.objects import ANN_JOB_UID, ANN_SUCCESS_SNAPSHOT

k8s = pytest.mark.skipif(not HAVE_K8S, reason="the 'kubernetes' extra is not installed")
SNAPSHOTS = ("snapshot.storage.k8s.io", "volumesnapshots")


def _watched():
    return spec(name="train", snapshot_on_success="data", volumes=(parse_pvc("data:/mnt"),))


def _run_to_success(backend, cluster):
    backend.submit(_watched())
    cluster.transition(NS, "train", "Succeeded")
    return backend.get("train")


def _taken(cluster) -> dict[str, str | None]:
    return {s["metadata"]["name"]: (s["metadata"].get("annotations") or {}).get(ANN_JOB_UID)
            for s in cluster.items(*SNAPSHOTS)}


@k8s
def test_k8s_describe_says_a_deleted_success_snapshot_deleted_and_takes_no_other(backend, cluster):
    """Reproduced: after `snapshot delete` of a job's success snapshot, the next look at the job (a
    describe, a list) took another of that name from what the volume holds now and named it as the
    job's; after a run deleted and submitted again, the new run's deleted snapshot was taken again.
    The job object records its snapshot once taken; a look after says "(deleted)" and takes none."""
    backend.create_volume("data", size="1Gi")
    first = _run_to_success(backend, cluster)
    assert (first.snapshot, first.extra["snapshot_deleted"]) == ("train-success", False)
    _ttl_delete(cluster, "train")

    second = _run_to_success(backend, cluster)
    own = f"train-success-{second.uid[:8]}"
    assert (second.snapshot, second.extra["snapshot_deleted"]) == (own, False)
    backend.delete_snapshot(own)
    info = backend.get("train")
    assert (info.snapshot, info.extra["snapshot_deleted"]) == (own, True)  # not the earlier run's train-success
    assert _taken(cluster) == {"train-success": first.uid}
    assert [i.extra["snapshot_deleted"] for i in backend.list()] == [True]
    backend.delete_snapshot("train-success")  # the name free: still none taken in the deleted one's place
    assert backend.get("train").extra["snapshot_deleted"] is True and _taken(cluster) == {}


@k8s
def test_k8s_describe_tells_the_jobs_snapshot_by_its_uid_then_by_age(backend, cluster):
    """Another run's snapshot that took the name is said deleted whatever its time; the job's own,
    its clock stepped back, is there. Without a recorded uid (an older watcher's), age decides."""
    backend.create_volume("data", size="1Gi")
    info = _run_to_success(backend, cluster)
    snap = cluster.get(*SNAPSHOTS, NS, "train-success")["metadata"]
    snap["creationTimestamp"] = rfc3339(0.0)  # before the job: its uid still says it is the job's
    assert backend.get("train").extra["snapshot_deleted"] is False
    snap["annotations"][ANN_JOB_UID] = "another-run"
    snap["creationTimestamp"] = rfc3339(info.created + 60)  # after the job, yet another run's
    assert backend.get("train").extra["snapshot_deleted"] is True
    del snap["annotations"][ANN_JOB_UID]
    assert backend.get("train").extra["snapshot_deleted"] is False
    snap["creationTimestamp"] = rfc3339(0.0)
    assert backend.get("train").extra["snapshot_deleted"] is True


def _submits_watcher(backend, cluster) -> str:
    """Submit's watcher script (as the container gets it), the job made."""
    backend.submit(_watched())
    pod = cluster.get("batch", "jobs", NS, "train-snap")["spec"]["template"]["spec"]
    return pod["containers"][0]["command"][2].replace("$$", "$")


@k8s
@pytest.mark.parametrize("rendered", [_submits_watcher, lambda backend, cluster: _dry_run_submit(backend)],
                         ids=["submit", "dry-run"])
def test_k8s_a_watchers_snapshot_deleted_before_any_look_is_said_deleted(backend, cluster, tmp_path, rendered):
    """Reproduced: the in-cluster watcher took the snapshot, the user deleted it before any dtrain look
    at the job, and the next look took another of what the volume held by then. The watcher (submit's
    and a dry run's) records the snapshot on the job object as the backend's look does."""
    backend.create_volume("data", size="1Gi")
    script = rendered(backend, cluster)
    cluster.transition(NS, "train", "Complete")
    _run_watcher(script, backend, tmp_path)
    job = cluster.get("batch", "jobs", NS, "train")["metadata"]
    assert job["annotations"][ANN_SUCCESS_SNAPSHOT] == "train-success"
    assert _taken(cluster) == {"train-success": job["uid"]}
    backend.delete_snapshot("train-success")
    info = backend.get("train")
    assert (info.snapshot, info.extra["snapshot_deleted"]) == ("train-success", True)
    assert _taken(cluster) == {} and [i.extra["snapshot_deleted"] for i in backend.list()] == [True]


@k8s
def test_k8s_a_watcher_whose_role_may_not_patch_the_job_takes_the_snapshot_and_says_so(backend, cluster, tmp_path):
    """A Role made before the watcher recorded its snapshot lacks `patch` on the job kinds: the watcher
    still takes the snapshot and ends well, says it is unrecorded, and the backend's look records it."""
    backend.create_volume("data", size="1Gi")
    script = _submits_watcher(backend, cluster)
    cluster.transition(NS, "train", "Complete")
    cluster.fail("PATCH", f"/namespaces/{NS}/jobs/train", 403, "cannot patch resource jobs")
    said = _run_watcher(script, backend, tmp_path)
    assert "snapshot train-success taken but not recorded on jobs.batch train: dtrain's next look at the job " \
           f"records it (for this watcher to record it, grant Role dtrain-snapshotter patch on jobs.batch in " \
           f"namespace {NS})" in said
    assert _taken(cluster) == {"train-success": backend.get("train").uid}  # the look, still refused, reads it
    assert ANN_SUCCESS_SNAPSHOT not in cluster.get("batch", "jobs", NS, "train")["metadata"].get("annotations", {})
    cluster.faults.clear()
    assert backend.get("train").snapshot == "train-success"  # this look records it
    assert cluster.get("batch", "jobs", NS, "train")["metadata"]["annotations"][ANN_SUCCESS_SNAPSHOT] == \
        "train-success"
    backend.delete_snapshot("train-success")
    assert backend.get("train").extra["snapshot_deleted"] is True and _taken(cluster) == {}


# ------------------------------------------------------------------------- a dry run names the snapshot


@k8s
def test_k8s_dry_run_names_the_snapshot_a_real_run_takes(backend, cluster):
    """Reproduced: the dry run said `train-success, or train-success-<uid8> where an earlier run left
    train-success` without looking; it now looks, as submit's watcher does, and names the one."""
    backend.create_volume("data", size="1Gi")
    assert backend.planned_snapshot(spec(name="train")) is None  # no --snapshot-on-success
    assert backend.planned_snapshot(_watched()) == f"train-success (none of that name in namespace {NS} now)"
    first = _run_to_success(backend, cluster)
    _ttl_delete(cluster, "train")
    planned = backend.planned_snapshot(_watched())
    assert planned == (f"train-success-<first 8 characters of the job's uid> (an earlier run of train left "
                       f"train-success in namespace {NS})")
    second = _run_to_success(backend, cluster)
    assert first.snapshot == "train-success" and second.snapshot == f"train-success-{second.uid[:8]}"


@k8s
def test_k8s_dry_run_says_it_did_not_look_where_it_may_not(backend, cluster):
    backend.create_volume("data", size="1Gi")
    cluster.fail("GET", "/volumesnapshots/train-success", 403)
    planned = backend.planned_snapshot(_watched())
    assert planned.startswith("train-success, or train-success-<first 8 characters of the job's uid> where a "
                              "snapshot train-success exists when it is taken (not looked up: ")
    assert "403" in planned or "forbidden" in planned.lower()


@pytest.mark.slow
def test_local_dry_run_names_the_snapshot_by_the_time_it_is_taken(home, tmp_path):
    """Locally a snapshot is named by the time it is taken (`<volume>-<UTC time>`), never `<job>-success`:
    an earlier run's cannot hold the name, and the dry run says so, as a comment above the job file."""
    dt = Dtrain(home)
    dt("volume", "create", "v", "--size", "1Mi")
    out = dt("submit", "t", "--pvc", "v:/mnt", "--snapshot-on-success", "v", "--dry-run", "--", "true",
             cwd=tmp_path).stdout
    first, rest = out.split("\n", 1)
    assert first == ("# --snapshot-on-success takes snapshot v-<UTC time it is taken, YYYYMMDD-HHMMSS>, a name of "
                     "its own whatever earlier runs of t left")
    assert rest.startswith("name: t\n")
    job = tmp_path / "job.yaml"
    job.write_text(out)  # still a job file
    assert dt("submit", "-f", str(job), "--dry-run", cwd=tmp_path).stdout == out
    plain = dt("submit", "u", "--dry-run", "--", "true", cwd=tmp_path).stdout
    assert not plain.startswith("#")
    # with --json the note goes to stderr: stdout stays one JSON object a line, as scripts read it
    done = dt("submit", "t", "--pvc", "v:/mnt", "--snapshot-on-success", "v", "--dry-run", "--json", "--", "true",
              cwd=tmp_path)
    assert json.loads(done.stdout)["name"] == "t" and done.stderr.startswith("# --snapshot-on-success takes snapshot v-")


# ------------------------------------------------------------------------- the --pvc ./folder hint


@pytest.mark.parametrize(("flags", "hint"), [
    ((), "dtrain submit copy-in --pvc local:10Gi:/mnt -- cp -r ./data /mnt/"),
    (("-p", "team-a"), "dtrain submit copy-in --pvc local:10Gi:/mnt -p team-a -- cp -r ./data /mnt/"),
    (("--backend", "kubernetes", "-p", "team-a"),
     "dtrain --backend kubernetes submit copy-in --pvc local:10Gi:/mnt -p team-a -- cp -r ./data /mnt/"),
])
def test_the_pvc_folder_hint_carries_the_project_and_backend_given(home, tmp_path, flags, hint):
    """Reproduced: `submit t -p team-a --pvc ./data:/mnt` hinted `dtrain submit copy-in ...` without
    -p team-a, which would make the copy-in job (and its volume) in the default project."""
    proc = Dtrain(home)("submit", "t", *flags, "--pvc", "./data:/mnt", "--", "true", cwd=tmp_path, check=False)
    assert proc.returncode != 0 and proc.stderr.strip().endswith(f"copy it into a new volume: {hint}")
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("flags", "hint"), [
    ((), "dtrain submit copy-in --pvc local:10Gi:/mnt -- cp -r ./data /mnt/"),
    (("-p", "team-a"), "dtrain submit copy-in --pvc local:10Gi:/mnt -p team-a -- cp -r ./data /mnt/"),
    (("--backend", "kubernetes", "-p", "team-a"),
     "dtrain --backend kubernetes submit copy-in --pvc local:10Gi:/mnt -p team-a -- cp -r ./data /mnt/"),
])
@pytest.mark.parametrize("key", ["volumes", "pvc"])
def test_the_job_files_folder_hint_carries_the_project_and_backend_given(home, tmp_path, flags, hint, key):
    """Reproduced: a job file's `volumes: [./data:/mnt]` with -p team-a hinted `dtrain submit copy-in
    ...` without -p team-a (the --pvc flag's hint carried it)."""
    (tmp_path / "job.yaml").write_text(f"name: t\ncommand: [\"true\"]\n{key}: [./data:/mnt]\n")
    proc = Dtrain(home)("submit", "-f", "job.yaml", *flags, cwd=tmp_path, check=False)
    assert proc.returncode == 2 and proc.stderr.strip().endswith(f"copy it into a new volume: {hint}"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_the_job_files_project_and_backend_reach_its_folder_hint(home, tmp_path):
    (tmp_path / "job.yaml").write_text("name: t\nproject: team-a\nbackend: kubernetes\ncommand: [\"true\"]\n"
                                       "volumes: [./data:/mnt]\n")
    proc = Dtrain(home)("submit", "-f", "job.yaml", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and proc.stderr.strip().endswith(
        "dtrain --backend kubernetes submit copy-in --pvc local:10Gi:/mnt -p team-a -- cp -r ./data /mnt/"), proc.stderr


def test_the_notebooks_pvc_folder_hint_carries_the_project(home, tmp_path):
    proc = Dtrain(home)("notebook", "start", "nb", "-p", "team-a", "--pvc", "./data:/mnt", cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert proc.stderr.strip().endswith("dtrain submit copy-in --pvc local:10Gi:/mnt -p team-a -- cp -r ./data /mnt/")
