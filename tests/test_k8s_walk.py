"""docs/kubernetes.md walked as a new user against the fake API server: what the walk found.

`wait` rides through an API server that sheds load or restarts for a while; a missing namespace
with `create_namespace: false` is one line naming how to make it; a name taken between the
check and the create names the fix; every object dtrain sends validates against the schemas.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_k8s_backend import IMAGE, NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)

from dtrain.backends import waiting  # noqa: E402
from dtrain.backends.base import JobStatus  # noqa: E402
from dtrain.backends.kubernetes import KubernetesConfig  # noqa: E402
from dtrain.backends.kubernetes.fake import DROP, FakeCluster  # noqa: E402
from dtrain.errors import ConflictError, NotFoundError, UnavailableError  # noqa: E402
from dtrain.spec import parse_pvc  # noqa: E402

JOB_PATH = f"/apis/batch/v1/namespaces/{NS}/jobs/train"


class Outage(FakeCluster):
    """Once armed, answers the reads of batch Job 'train' after the first with `failures` (an HTTP
    status, or DROP: the connection closes), one each, then marks the job Complete."""

    def __init__(self, failures: list[int]):
        super().__init__()
        self.failures, self.reads, self.armed = list(failures), 0, False

    def handle(self, method: str, url: str, body: bytes):
        if self.armed and method == "GET" and url.split("?")[0] == JOB_PATH:
            self.reads += 1
            with self.lock:
                self.faults.clear()
                if self.reads > 1 and self.failures:
                    self.fail("GET", JOB_PATH, self.failures.pop(0))
                elif self.reads > 1:
                    self.transition(NS, "train", "Complete")
        return super().handle(method, url, body)


@pytest.mark.parametrize("failures", [[429, 503], [DROP, 500, 429]])
def test_wait_rides_through_an_api_server_that_does_not_answer_for_a_while(make_backend, failures):
    fake = Outage(failures)
    backend = make_backend(fake=fake)
    backend.submit(spec())
    fake.armed = True
    info = backend.wait("train", poll=0)
    assert info.status is JobStatus.SUCCEEDED
    assert fake.failures == [] and fake.reads == len(failures) + 2


def test_wait_reports_an_outage_longer_than_its_bound(make_backend, monkeypatch):
    monkeypatch.setattr(waiting, "WAIT_OUTAGE", 0.0)
    fake = Outage([503, 503])
    backend = make_backend(fake=fake)
    backend.submit(spec())
    fake.armed = True
    with pytest.raises(UnavailableError, match="HTTP 503 .*retry in a minute"):
        backend.wait("train", poll=0)
    assert fake.failures == [503]  # gave up at the first unanswered poll, the bound being 0


def test_a_missing_namespace_without_create_namespace_names_how_to_make_it(make_backend, cluster):
    backend = make_backend(KubernetesConfig(project="lanes", image=IMAGE, create_namespace=False))
    for verb in (lambda: backend.submit(spec()), lambda: backend.create_volume("data", size="1Gi")):
        with pytest.raises(NotFoundError) as err:
            verb()
        assert str(err.value) == (f"namespace {NS} does not exist and the kubernetes setting create_namespace is "
                                  f"false: create it with 'dtrain project create lanes' (or kubectl create "
                                  f"namespace {NS})")
    assert [m for m, _ in cluster.requests if m != "GET"] == []  # nothing made
    backend.create_project("lanes")  # as the message says
    assert backend.submit(spec()).status is JobStatus.PENDING


def test_a_job_made_by_another_request_meanwhile_names_the_fix(backend, cluster):
    cluster.fail("POST", "/jobs", 409, 'jobs.batch "train" already exists')
    with pytest.raises(ConflictError) as err:
        backend.submit(spec(volumes=(parse_pvc("fast:1Gi:/mnt"),)))
    assert str(err.value) == (f"cannot create Job 'train' in namespace {NS}: jobs.batch \"train\" already exists "
                              f"(made meanwhile by another request): delete it with 'dtrain delete train' or "
                              f"choose another name")
    assert cluster.items("", "persistentvolumeclaims", NS) == []  # the new volume was rolled back


def _as_sent(obj: dict) -> dict:
    """An object as dtrain wrote it: without what the API server adds (uid, times, version) and
    without status, which is the controllers' (played here)."""
    server = ("uid", "creationTimestamp", "resourceVersion", "generation")
    meta = {k: v for k, v in obj["metadata"].items() if k not in server}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}


def test_every_object_the_walk_writes_validates_against_the_schemas(make_backend, cluster):
    """docs/kubernetes.md's verbs, end to end, each create, replace and patch checked as the API
    server stored it (test_k8s_render checks the renderers; this checks what reaches the wire,
    patches and the objects the backend adds on its own included)."""
    from test_k8s_render import validate

    from dtrain.spec import notebook_spec

    config = dict(project="lanes", image=IMAGE, gpus_per_node=8, image_pull_secrets=("regcred",), shm_size="8Gi")
    backend = make_backend(KubernetesConfig(**config))
    v2 = make_backend(KubernetesConfig(**config, trainer="v2"))
    backend.create_project("lanes", gpu_quota=8)
    backend.create_project("lanes", gpu_quota=16)
    backend.create_volume("tusimple", size="10Gi", storage_class="fast")
    cluster.bind_volumes()
    backend.submit(spec(name="prep", volumes=(parse_pvc("fast:1Gi:/mnt"),), snapshot_on_success="pvc-prep-0"))
    backend.submit(spec(name="lanes", launcher="mpi", processes=16, gpu=1, large_shm=True, snapshot_on_success="tusimple",
                        volumes=(parse_pvc("tusimple:/data:ro"), parse_pvc("fast:5Gi:/out"))))
    backend.submit(spec(name="dist", launcher="torchrun", processes=2, cpu=2))
    v2.submit(spec(name="tj", launcher="torchrun", processes=2, gpu=1))
    backend.submit(notebook_spec("nb", volumes=("tusimple:/home/jovyan/work",), image=IMAGE, project="lanes"))
    for name in ("prep", "lanes", "dist", "tj", "nb"):
        backend.suspend(name)
        backend.resume(name)
    backend.update_volume("tusimple", storage_class="premium")
    backend.create_snapshot("tusimple", name="v1", job="prep")
    cluster.ready_snapshots()
    backend.restore_snapshot("v1", to="copy", storage_class="other")
    cluster.bind_volumes()
    cluster.run_pods(NS, "prep", phase="Succeeded")
    cluster.transition(NS, "prep", "Complete")
    assert backend.get("prep").snapshot == "prep-success"  # the backend took it
    backend.create_project("lanes", no_gpu_quota=True)

    patches = [m for m, _ in cluster.requests if m == "PATCH"]
    # suspend and resume of five jobs, the volume's class (checked below as stored), prep's record of its snapshot
    assert len(patches) == 12
    kinds = set()
    for obj in cluster.written:
        validate(_as_sent(obj))
        kinds.add(obj["kind"])
    assert kinds >= {"Namespace", "ResourceQuota", "PersistentVolumeClaim", "Job", "MPIJob", "PyTorchJob",
                     "TrainJob", "Notebook", "Service", "ServiceAccount", "Role", "RoleBinding", "VolumeSnapshot"}


def test_a_volume_pending_for_good_says_why(backend, cluster):
    backend.create_volume("stuck", size="1Gi", storage_class="nosuch")
    assert backend.get_volume("stuck").extra["pending_reason"] is None  # nothing said yet
    pvc = cluster.get("", "persistentvolumeclaims", NS, "stuck")
    for at, reason, message in (("2026-01-01T00:00:00Z", "ExternalProvisioning", "waiting for a volume"),
                                ("2026-01-01T00:00:09Z", "ProvisioningFailed",
                                 'storageclass.storage.k8s.io "nosuch" not found')):
        cluster.create({"apiVersion": "v1", "kind": "Event",
                        "metadata": {"name": f"stuck.{reason.lower()}", "namespace": NS},
                        "involvedObject": {"kind": "PersistentVolumeClaim", "name": "stuck",
                                           "uid": pvc["metadata"]["uid"]},
                        "reason": reason, "message": message, "lastTimestamp": at})
    info = backend.get_volume("stuck")
    assert info.status == "Pending"
    assert info.extra["pending_reason"] == 'ProvisioningFailed: storageclass.storage.k8s.io "nosuch" not found'
    cluster.bind_volumes()
    assert "pending_reason" not in backend.get_volume("stuck").extra
