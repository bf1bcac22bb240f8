"""A job's uid on Kubernetes: the job object's metadata.uid, kept on a VolumeSnapshot linked to it
(annotation dtrain.io/job-uid); a job deleted and submitted again is a new object, and the
snapshots the earlier one left are marked as an earlier run's (`snapshot list --job`)."""

from __future__ import annotations

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from test_k8s_backend import NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)
from test_k8s_leftovers6 import _ttl_delete  # noqa: E402

from dtrain.backends.kubernetes.fake_wire import rfc3339  # noqa: E402
from dtrain.backends.kubernetes.objects import ANN_JOB_UID  # noqa: E402
from dtrain.spec import parse_pvc  # noqa: E402

SNAPSHOTS = ("snapshot.storage.k8s.io", "volumesnapshots")


def test_a_snapshot_records_its_jobs_uid_and_a_later_job_of_the_name_marks_it(backend, cluster):
    backend.create_volume("data", size="1Gi")
    backend.submit(spec(name="train"))
    first_uid = backend.get("train").uid
    first = backend.create_snapshot("data", name="data-first", job="train")
    assert first_uid and first.job_uid == first_uid
    stored = cluster.objects[next(k for k in cluster.objects if k[-1] == "data-first")]
    assert stored["metadata"]["annotations"][ANN_JOB_UID] == first_uid

    _ttl_delete(cluster, "train")  # the job object goes (a purge, or the cluster's TTL)
    backend.submit(spec(name="train"))
    second_uid = backend.get("train").uid
    assert second_uid and second_uid != first_uid
    backend.create_snapshot("data", name="data-second", job="train")
    marked = {s.name: s.earlier_run for s in backend.list_snapshots(job="train")}
    assert marked == {"data-first": True, "data-second": False}


def test_plain_snapshot_list_marks_an_earlier_run_reading_only_the_jobs_it_names(backend, cluster):
    """`snapshot list --job train` marked the first run's snapshot; plain `snapshot list` (and
    `snapshot describe`) did not. Each job a snapshot names is read once, and no other job."""
    backend.create_volume("data", size="1Gi")
    backend.submit(spec(name="train"))
    backend.create_snapshot("data", name="data-first", job="train")
    _ttl_delete(cluster, "train")
    backend.submit(spec(name="train"))
    backend.create_snapshot("data", name="data-second", job="train")
    backend.submit(spec(name="other"))  # named by no snapshot: not read
    backend.create_snapshot("data", name="data-plain")

    cluster.requests.clear()
    marked = {s.name: s.earlier_run for s in backend.list_snapshots()}
    assert marked == {"data-first": True, "data-second": False, "data-plain": False}
    reads = [path.split("?")[0] for method, path in cluster.requests if method == "GET"]
    assert not [p for p in reads if p.endswith("/other")]
    train = [p for p in reads if p.endswith("/train")]  # its object, looked for among the job kinds
    assert train and len(train) == len(set(train)) and len(reads) == 1 + len(train)  # + the snapshots' list
    assert backend.get_snapshot("data-first").earlier_run and not backend.get_snapshot("data-second").earlier_run



def _watcher_script(cluster) -> str:
    [container] = cluster.get("batch", "jobs", NS, "train-snap")["spec"]["template"]["spec"]["containers"]
    return " ".join(container["command"])


def _run_to_success(backend, cluster) -> tuple[str, str]:
    """Submit train with --snapshot-on-success data, let it succeed: (its uid, its snapshot as `get` says)."""
    backend.submit(spec(name="train", snapshot_on_success="data", volumes=(parse_pvc("data:/mnt"),)))
    uid = backend.get("train").uid
    cluster.transition(NS, "train", "Succeeded")
    return uid, backend.get("train").snapshot


def test_a_job_submitted_again_under_its_name_takes_its_own_success_snapshot(backend, cluster):
    """The success snapshot was `<job>-success` for every run of a name: after a purge or the TTL and
    a submit again, the new run found the earlier run's, took none (the 409 ignored) and said it had."""
    backend.create_volume("data", size="1Gi")
    first_uid, first = _run_to_success(backend, cluster)
    assert first == "train-success" and first_uid in _watcher_script(cluster)  # the watcher records the uid
    _ttl_delete(cluster, "train")

    second_uid, second = _run_to_success(backend, cluster)
    assert second == f"train-success-{second_uid[:8]}"
    watcher = _watcher_script(cluster)  # the watcher takes the same one, whichever acts first
    assert f'"name": "{second}"' in watcher and second_uid in watcher
    taken = {s["metadata"]["name"]: s["metadata"]["annotations"][ANN_JOB_UID] for s in cluster.items(*SNAPSHOTS)}
    assert taken == {"train-success": first_uid, second: second_uid}
    marked = {s.name: s.earlier_run for s in backend.list_snapshots(job="train")}
    assert marked == {"train-success": True, second: False}
    assert backend.get("train").snapshot == second and len(cluster.items(*SNAPSHOTS)) == 2  # taken once


def test_an_earlier_runs_success_snapshot_without_a_uid_is_told_apart_by_its_age(backend, cluster):
    """A `<job>-success` an older watcher took records no job uid: older than the job, it is an earlier run's."""
    backend.create_volume("data", size="1Gi")
    _run_to_success(backend, cluster)
    _ttl_delete(cluster, "train")
    old = cluster.get(*SNAPSHOTS, NS, "train-success")["metadata"]
    del old["annotations"][ANN_JOB_UID]
    old["creationTimestamp"] = rfc3339(0.0)
    uid, taken = _run_to_success(backend, cluster)
    assert taken == f"train-success-{uid[:8]}"


# A kubectl for the watcher's script that asks the fake API server: the few calls the script makes
_KUBECTL = '''#!{python}
import json, sys, urllib.error, urllib.request
args, url = sys.argv[1:], "{url}"
paths = {{"jobs.batch": "/apis/batch/v1", "volumesnapshot": "/apis/snapshot.storage.k8s.io/v1"}}
plural = {{"jobs.batch": "jobs", "volumesnapshot": "volumesnapshots"}}
if args[0] == "create":
    body = sys.stdin.read()
    ns = json.loads(body)["metadata"]["namespace"]
    req = urllib.request.Request(url + paths["volumesnapshot"] + "/namespaces/" + ns + "/volumesnapshots",
                                 data=body.encode(), headers={{"Content-Type": "application/json"}})
    urllib.request.urlopen(req)
    sys.exit(0)
if args[0] == "annotate":  # annotate --overwrite KIND NAME -n NS KEY=VALUE: a merge patch, as kubectl sends
    kind, name, ns = args[2], args[3], args[args.index("-n") + 1]
    key, value = args[-1].split("=", 1)
    body = json.dumps({{"metadata": {{"annotations": {{key: value}}}}}}).encode()
    req = urllib.request.Request(url + paths[kind] + "/namespaces/" + ns + "/" + plural[kind] + "/" + name, data=body,
                                 method="PATCH", headers={{"Content-Type": "application/merge-patch+json"}})
    try:
        urllib.request.urlopen(req)
    except urllib.error.HTTPError as err:
        sys.exit("Error from server (" + json.load(err)["reason"] + "): " + name)
    print(kind + "/" + name + " annotated")
    sys.exit(0)
kind, name, ns, path = args[1], args[2], args[args.index("-n") + 1], args[args.index("-o") + 1]
try:
    obj = json.load(urllib.request.urlopen(url + paths[kind] + "/namespaces/" + ns + "/" + plural[kind] + "/" + name))
except urllib.error.HTTPError:
    sys.exit("Error from server (NotFound): " + name + " not found")
if "conditions" in path:
    print(" ".join(c["type"] for c in obj.get("status", {{}}).get("conditions", []) if c["status"] == "True"), "")
elif "metadata.uid" in path:
    print(obj["metadata"]["uid"], end="")
else:
    print(obj["metadata"].get("annotations", {{}}).get("dtrain.io/job-uid", ""), end="")
'''


def _dry_run_submit(backend) -> str:
    """`submit --dry-run`'s manifests applied by hand: the job made, its watcher's script (as the
    container gets it) returned, rendered before the job existed."""
    watcher = next(o for o in backend.render(_watched()) if o["metadata"]["name"] == "train-snap")
    backend.submit(_watched())
    return watcher["spec"]["template"]["spec"]["containers"][0]["command"][2].replace("$$", "$")


def _run_watcher(script: str, backend, tmp_path) -> str:
    """The watcher's script run once the job succeeded, with a kubectl that asks the fake API server;
    what it printed."""
    import os
    import subprocess
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(_KUBECTL.format(python=sys.executable, url=backend.api.api_client.configuration.host))
    kubectl.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def _watched():
    return spec(name="train", snapshot_on_success="data", volumes=(parse_pvc("data:/mnt"),))


@pytest.mark.slow
def test_a_dry_runs_watcher_records_the_jobs_uid_read_from_its_object(backend, cluster, tmp_path):
    """A watcher rendered before its job existed (a dry run's) took the snapshot without the job's
    uid, and `<job>-success` though an earlier run of the name had left that one: it reads the uid
    from the job's object and names the snapshot as submit's watcher would."""
    backend.create_volume("data", size="1Gi")
    script = _dry_run_submit(backend)
    first = cluster.get("batch", "jobs", NS, "train")["metadata"]["uid"]
    cluster.transition(NS, "train", "Complete")
    _run_watcher(script, backend, tmp_path)
    assert cluster.get(*SNAPSHOTS, NS, "train-success")["metadata"]["annotations"][ANN_JOB_UID] == first

    _ttl_delete(cluster, "train")
    script = _dry_run_submit(backend)
    second = cluster.get("batch", "jobs", NS, "train")["metadata"]["uid"]
    cluster.transition(NS, "train", "Complete")
    _run_watcher(script, backend, tmp_path)
    taken = {s.name: (s.job_uid, s.earlier_run) for s in backend.list_snapshots(job="train")}
    assert taken == {"train-success": (first, True), f"train-success-{second[:8]}": (second, False)}


def test_a_snapshot_whose_job_is_gone_is_marked_deleted_from_the_same_one_read(backend, cluster):
    """`snapshot list` marks a job deleted since as 'JOB (deleted)' from the one read of each job it names, the
    read that tells an earlier run: it had listed every job of every kind as well."""
    backend.create_volume("data", size="1Gi")
    backend.submit(spec(name="train"))
    backend.create_snapshot("data", name="data-first", job="train")
    backend.submit(spec(name="kept"))
    backend.create_snapshot("data", name="data-kept", job="kept")
    _ttl_delete(cluster, "train")

    cluster.requests.clear()
    marked = {s.name: (s.job_deleted, s.earlier_run) for s in backend.list_snapshots()}
    assert marked == {"data-first": (True, False), "data-kept": (False, False)}
    reads = [path.split("?")[0] for method, path in cluster.requests if method == "GET"]
    assert not [p for p in reads if "?" not in p and p.rstrip("/").endswith(("/jobs", "/pytorchjobs", "/mpijobs"))]
    assert len(reads) == 1 + len({p for p in reads if p.endswith(("/train", "/kept"))})
