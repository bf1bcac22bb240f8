"""A job's uid on Kubernetes: the job object's metadata.uid, kept on a VolumeSnapshot linked to it
(annotation dtrain.io/job-uid); a job deleted and submitted again is a new object, and the
snapshots the earlier one left are marked as an earlier run's (`snapshot list --job`)."""

from __future__ import annotations

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from test_k8s_backend import NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)
from test_k8s_leftovers6 import _ttl_delete  # noqa: E402

from dtrain.backends.kubernetes.objects import ANN_JOB_UID  # noqa: E402


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
