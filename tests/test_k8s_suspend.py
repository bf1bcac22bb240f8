"""`dtrain suspend` / `dtrain resume` on Kubernetes: the JSON Patch each kind takes (the Training
Operator's runPolicy.suspend, batch/v1's and Trainer v2's spec.suspend, Kubeflow's stop annotation
on a Notebook), sent through the official client to the shipped fake API server, the patched object
checked against the CRD schemas, and the status read back. The fake plays the controller's part: a
suspended job's pods are deleted with their grace period (Terminating until `finish_deletions`) and the
job gets a Suspended condition."""

from __future__ import annotations

import pytest

from dtrain.backends.base import JobStatus
from dtrain.backends.kubernetes import KubernetesConfig
from dtrain.backends.kubernetes.objects import ANN_NOTEBOOK_STOPPED, ANN_SUSPENDED
from dtrain.errors import ConflictError, NotFoundError
from dtrain.spec import notebook_spec
from test_k8s_backend import IMAGE, NS, backend, cluster, make_backend, spec  # noqa: F401 (fixtures)
from test_k8s_render import validate

KINDS = [  # (how the job is submitted, its kind, its plural, where the flag is)
    (dict(launcher="none"), "Job", ("batch", "jobs"), ("spec", "suspend")),
    (dict(launcher="torchrun", processes=2), "PyTorchJob", ("kubeflow.org", "pytorchjobs"), ("runPolicy", "suspend")),
    (dict(launcher="mpi", processes=2), "MPIJob", ("kubeflow.org", "mpijobs"), ("runPolicy", "suspend")),
    (dict(launcher="torchrun", processes=2, trainer="v2"), "TrainJob", ("trainer.kubeflow.org", "trainjobs"),
     ("spec", "suspend")),
]


def _sent(obj: dict) -> dict:
    """The object without its status, which is the controller's (played here), not dtrain's."""
    return {k: v for k, v in obj.items() if k != "status"}


def _flag(obj: dict, where: tuple[str, str]) -> bool | None:
    holder = obj["spec"] if where[0] == "spec" else obj["spec"].get(where[0], {})
    return holder.get(where[1])


@pytest.mark.parametrize("how,kind,plural,where", KINDS, ids=[k[1] for k in KINDS])
def test_suspend_and_resume_patch_the_kinds_flag(make_backend, cluster, how, kind, plural, where):
    how = dict(how)
    config = KubernetesConfig(project="lanes", image=IMAGE, **({"trainer": how.pop("trainer")} if "trainer" in how else {}))
    backend = make_backend(config)
    backend.submit(spec(**how))
    cluster.run_pods(NS, "train")
    if kind in ("PyTorchJob", "MPIJob"):
        cluster.transition(NS, "train", "Running")
    assert backend.get("train").status is JobStatus.RUNNING

    info = backend.suspend("train")
    obj = cluster.get(*plural, NS, "train")
    assert obj["kind"] == kind and _flag(obj, where) is True
    assert obj["metadata"]["annotations"][ANN_SUSPENDED].endswith("Z")
    validate(_sent(obj))  # what the API server stores passes the CRD's schema
    assert info.status is JobStatus.SUSPENDED and info.message.startswith("suspended at ")
    assert [m for m, _ in cluster.requests if m == "PATCH"] == ["PATCH"]
    with pytest.raises(ConflictError, match="only a Pending or Running job can be suspended"):
        backend.suspend("train")

    # the controller deleted the pods of the suspended job: each has its grace period to checkpoint, then goes
    pods = cluster.items("", "pods", NS)
    assert pods and all(p["metadata"]["deletionTimestamp"] for p in pods)
    assert {p.status for p in backend.get("train").processes} == {"Terminating"}
    cluster.finish_deletions()
    assert cluster.items("", "pods", NS) == []
    [cond] = [c for c in cluster.get(*plural, NS, "train")["status"]["conditions"] if c["type"] == "Suspended"]
    assert cond["status"] == "True" and cond["reason"].endswith("Suspended")  # as the controller writes it
    info = backend.get("train")
    assert info.status is JobStatus.SUSPENDED
    assert [e.status for e in info.events if e.message.startswith("Suspended")] == ["Suspended"]
    with pytest.raises(NotFoundError, match="is suspended and its pods are gone .*'dtrain resume train' starts new"):
        list(backend.logs("train"))

    info = backend.resume("train")
    obj = cluster.get(*plural, NS, "train")
    assert _flag(obj, where) is False and ANN_SUSPENDED not in obj["metadata"]["annotations"]
    validate(_sent(obj))
    assert info.status is JobStatus.PENDING
    with pytest.raises(ConflictError, match="only a Suspended job can be resumed"):
        backend.resume("train")


def test_a_queues_suspension_is_pending_not_suspended(backend, cluster):
    """Kueue creates jobs suspended and lifts the flag when it admits them: without dtrain's
    annotation, a Suspended condition is a job waiting in a queue, which `resume` does not touch."""
    backend.submit(spec(launcher="torchrun", processes=2))
    cluster.transition(NS, "train", "Suspended", reason="JobSuspended", message="queued by Kueue")
    info = backend.get("train")
    assert info.status is JobStatus.PENDING and "queued by Kueue" in info.message
    with pytest.raises(ConflictError, match="is Pending: only a Suspended job can be resumed"):
        backend.resume("train")


def test_a_notebook_is_stopped_and_started_as_kubeflow_does(backend, cluster):
    """A Notebook has no suspend flag: Kubeflow's UI and its idle culler stop one with the
    kubeflow-resource-stopped annotation (the controller scales it to zero), and so does dtrain;
    one the culler stopped reads Suspended and resumes the same way."""
    cluster.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "work", "namespace": NS},
                    "spec": {"resources": {"requests": {"storage": "5Gi"}}, "accessModes": ["ReadWriteMany"]}})
    backend.submit(notebook_spec("nb", volumes=["work:/home/jovyan/work"], project="lanes"))
    cluster.run_pods(NS, "nb")
    info = backend.suspend("nb")
    obj = cluster.get("kubeflow.org", "notebooks", NS, "nb")
    validate(_sent(obj))
    assert ANN_NOTEBOOK_STOPPED in obj["metadata"]["annotations"] and ANN_SUSPENDED not in obj["metadata"]["annotations"]
    assert info.status is JobStatus.SUSPENDED and info.message.endswith(f"({ANN_NOTEBOOK_STOPPED})")
    with pytest.raises(ConflictError, match="notebook 'nb' is Suspended: start it again with 'dtrain resume nb'"):
        backend.notebook_url("nb")
    assert backend.resume("nb").status is not JobStatus.SUSPENDED
    assert ANN_NOTEBOOK_STOPPED not in cluster.get("kubeflow.org", "notebooks", NS, "nb")["metadata"]["annotations"]

    # stopped by the culler (or Kubeflow's UI), not by dtrain
    with cluster.lock:
        cluster.get("kubeflow.org", "notebooks", NS, "nb")["metadata"]["annotations"][ANN_NOTEBOOK_STOPPED] = \
            "2026-12-04T10:00:00Z"
    assert backend.get("nb").status is JobStatus.SUSPENDED
    backend.resume("nb")
    assert ANN_NOTEBOOK_STOPPED not in cluster.get("kubeflow.org", "notebooks", NS, "nb")["metadata"]["annotations"]
