"""Leftovers of the job uid: Kubernetes `describe job`'s "Snapshot: NAME (deleted)" told by the job
uid the snapshot records, a dry run that names the snapshot a real run would take, and the
`--pvc ./folder` hint that carries the -p and --backend the user gave."""

from __future__ import annotations

import pytest

from dtrain.spec import parse_pvc

try:  # the local and CLI tests run without the 'kubernetes' extra
    import kubernetes  # noqa: F401
except ImportError:
    HAVE_K8S = False
else:
    HAVE_K8S = True
    from test_k8s_backend import NS, backend, cluster, make_backend, spec  # noqa: F401  (their fixtures)
    from test_k8s_leftovers6 import _ttl_delete

    from dtrain.backends.kubernetes.fake_wire import rfc3339
    from dtrain.backends.kubernetes.objects import ANN_JOB_UID

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

