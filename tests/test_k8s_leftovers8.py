"""The Kubernetes backend's leftovers of an eighth audit: `describe job` of a PyTorchJob, MPIJob or
TrainJob showed the spec's command, not the torchrun or mpirun line its pod runs around it; `volume
delete --force` of a claim pods use said 'deleted' while Kubernetes kept it (Terminating) until they
stopped; the pods-unread warning named the namespace, not the project, and `notebook list` said it
too; a RoleBinding of the watcher's name someone else made that did not bind the watcher went unsaid.

Each test drives the official `kubernetes` client against the shipped fake API server.
"""

from __future__ import annotations

import argparse
import shlex

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from dtrain.backends.kubernetes import KubernetesConfig  # noqa: E402
from dtrain.cli.listing import cmd_describe  # noqa: E402
from dtrain.client import Client  # noqa: E402

from test_k8s_backend import IMAGE, NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)


def _described_command(tmp_path, backend, name: str, capsys) -> str:
    client = Client(home=tmp_path, backend="kubernetes", backends={"kubernetes": backend})
    assert cmd_describe(argparse.Namespace(names=[name], json=False, project=None, verb="describe"), client) == 0
    out = capsys.readouterr().out
    return next(line.strip() for line in out.splitlines() if line.strip().startswith("command:"))


@pytest.mark.parametrize("config, kw, shown", [
    # two ranks a pod: torchrun starts them, placed by the operator's RANK and MASTER_*
    ({"gpus_per_node": 2}, {"launcher": "torchrun", "processes": 4, "gpu": 1},
     "command: torchrun --nnodes=2 --nproc-per-node=2 '--node-rank=$(RANK)' '--master-addr=$(MASTER_ADDR)' "
     "'--master-port=$(MASTER_PORT)' --tee=3 --no-python python train.py"),
    # elastic: Workers only, each a torchrun of the rendezvous
    ({"elastic_min_replicas": 1}, {"launcher": "torchrun", "processes": 2},
     "command: torchrun --nproc-per-node=1 --tee=3 --no-python python train.py"),
    # one rank a pod: the pod runs the spec's command itself
    ({}, {"launcher": "torchrun", "processes": 2}, "command: python train.py"),
    # an MPIJob's launcher runs mpirun, which starts the ranks in the workers
    ({}, {"launcher": "mpi", "processes": 2},
     f"command: mpirun -np 2 {shlex.join(KubernetesConfig().mpirun_args)} -x MASTER_ADDR -x MASTER_PORT "
     f"python train.py"),
    # a TrainJob's trainer: torchrun, in a shell that changes to --working-dir (TrainJob has no field for it)
    ({"trainer": "v2"}, {"launcher": "torchrun", "processes": 2, "working_dir": "/work"},
     "command: sh -c 'cd \"$0\" && exec \"$@\"' /work torchrun --tee=3 --no-python python train.py"),
])
def test_describe_of_a_training_job_shows_what_its_pod_runs(make_backend, cluster, tmp_path, capsys,
                                                           config, kw, shown):
    backend = make_backend(KubernetesConfig(project="lanes", image=IMAGE, **config))
    backend.submit(spec(**kw))
    assert _described_command(tmp_path, backend, "train", capsys) == shown
    # the same in --json's extra, which keeps the spec's own command
    info = backend.get("train")
    assert f"command: {info.extra['pod_command']}" == shown and info.spec.command == ("python", "train.py")


def test_describe_of_a_batch_job_shows_its_container_command(backend, cluster, tmp_path, capsys):
    backend.submit(spec())
    assert _described_command(tmp_path, backend, "train", capsys) == "command: python train.py"
    # a Job edited with kubectl to run its image's entrypoint: said, not the spec's command
    del cluster.get("batch", "jobs", NS, "train")["spec"]["template"]["spec"]["containers"][0]["command"]
    shown = _described_command(tmp_path, backend, "train", capsys)
    assert shown == f"command: (none set: the entrypoint of image {IMAGE})"


def _volume_args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"action": "delete", "names": ["tusimple"], "force": True, "dry_run": False,
                                 "project": None, "json": False, "older_than": None, **kw})


def test_volume_delete_force_of_a_claim_pods_use_says_it_is_kept_until_they_stop(backend, cluster, tmp_path,
                                                                                capsys):
    from dtrain.cli.storage import cmd_volume
    from dtrain.errors import NotFoundError
    from dtrain.spec import parse_pvc

    client = Client(home=tmp_path, backend="kubernetes", backends={"kubernetes": backend})
    backend.create_volume("tusimple", size="20Gi", storage_class="fast")
    cluster.bind_volumes()
    backend.submit(spec(launcher="torchrun", processes=2, volumes=(parse_pvc("tusimple:/data:ro"),)))
    pods = sorted(p["metadata"]["name"] for p in cluster.run_pods(NS, "train"))
    assert cmd_volume(_volume_args(), client) == 0
    # the API server keeps the claim (its pvc-protection finalizer) until the pods that mount it stop
    assert capsys.readouterr().out == (f"volume 'tusimple' deleting (Terminating: Kubernetes keeps it until pods "
                                       f"{', '.join(pods)} stop)\n")
    assert backend.get_volume("tusimple").status == "Terminating"  # as kubectl get pvc shows it
    assert cmd_volume(_volume_args(action="list", names=None), client) == 0
    assert "Terminating" in capsys.readouterr().out.splitlines()[1].split()
    cluster.set_pod_phase(NS, pods[0], "Succeeded")
    assert backend.get_volume("tusimple").status == "Terminating"  # one pod still runs
    cluster.set_pod_phase(NS, pods[1], "Failed")
    with pytest.raises(NotFoundError, match="volume 'tusimple' not found"):
        backend.get_volume("tusimple")
    # a claim no pod uses goes at once: 'deleted', as before
    backend.create_volume("tusimple", size="1Gi", storage_class="fast")
    assert cmd_volume(_volume_args(), client) == 0
    assert capsys.readouterr().out == "volume 'tusimple' deleted\n"
    assert cluster.items("", "persistentvolumeclaims", NS) == []


def test_pods_unread_warning_names_the_project_and_notebook_list_leaves_it_out(backend, cluster, tmp_path,
                                                                              capsys):
    from dtrain.cli import notebook as notebook_cli
    from dtrain.cli.listing import cmd_list
    from dtrain.spec import notebook_spec

    cluster.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "work", "namespace": NS},
                    "spec": {"resources": {"requests": {"storage": "5Gi"}}, "accessModes": ["ReadWriteMany"]}})
    backend.submit(spec())
    backend.submit(notebook_spec("nb", volumes=["work:/home/jovyan"], project="lanes"))
    cluster.run_pods(NS, "nb")
    # the notebook controller counts its StatefulSet's ready pods on the Notebook
    cluster.get("kubeflow.org", "notebooks", NS, "nb")["status"] = {"readyReplicas": 1}
    cluster.forbidden.add(("", "pods"))
    client = Client(home=tmp_path, backend="kubernetes", backends={"kubernetes": backend})
    base = {"project": "lanes", "all_projects": False, "show_deleted": False, "json": False}
    assert cmd_list(argparse.Namespace(what="jobs", selector=None, status=None, **base), client) == 0
    (said,) = capsys.readouterr().err.splitlines()
    assert said.startswith(f"dtrain: warning: jobs of project lanes (namespace {NS}): pods not shown")
    # notebook list shows nothing read from pods: no warning, and the notebook's status from its Notebook
    assert notebook_cli.cmd_list(argparse.Namespace(**base), client) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.splitlines()[1].split()[:2] == ["nb", "Running"]
    assert not client.list_notebooks(project="lanes").notices


RBAC = "rbac.authorization.k8s.io"


def _binding(cluster, subjects: list[dict], role: str = "dtrain-snapshotter") -> dict:
    return cluster.create({"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding",
                           "metadata": {"name": "dtrain-snapshotter", "namespace": NS, "labels": {"team": "vision"}},
                           "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": role}, "subjects": subjects})


def _warned(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "RoleBinding" in r.getMessage()]


def test_a_rolebinding_someone_else_made_that_binds_not_the_watcher_is_warned_of_and_left(backend, cluster, caplog,
                                                                                        tmp_path, capsys):
    """Reproduced: an admin's RoleBinding of the watcher's name binding another account only was left
    without a word: the watcher could not read its job nor take the snapshot."""
    import json
    import logging
    import shlex

    from dtrain.backends.kubernetes.render_storage import binding_lacks, render_snapshot_rbac
    from test_k8s_snapshotter_role import _dry_run_watched, _submit_watched

    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    editor = {"kind": "ServiceAccount", "name": "default-editor", "namespace": NS}
    _binding(cluster, [editor])
    with caplog.at_level(logging.WARNING):
        _submit_watched(backend)
    (said,) = _warned(caplog)
    assert said.startswith(f"dtrain: warning: RoleBinding dtrain-snapshotter in namespace {NS}, not made by dtrain "
                           f"(no label app.kubernetes.io/managed-by=dtrain), does not bind ServiceAccount "
                           f"dtrain-snapshotter, so the snapshot watcher may not read the job") and "\n" not in said
    made = cluster.get(RBAC, "rolebindings", NS, "dtrain-snapshotter")
    assert made["subjects"] == [editor] and [m for m, p in cluster.requests if "rolebindings/" in p] == ["GET"]
    assert cluster.get("batch", "jobs", NS, "train-snap")  # the job runs all the same
    # the patch it names makes the binding bind the watcher, the admin's subject kept
    words = shlex.split(said[said.index("kubectl patch"):said.index("; the job runs")])
    assert words[:6] == ["kubectl", "patch", "rolebinding", "dtrain-snapshotter", "-n", NS]
    want = next(o for o in render_snapshot_rbac(NS, "lanes", backend.config) if o["kind"] == "RoleBinding")
    ops = json.loads(words[words.index("-p") + 1])
    assert {(op["op"], op["path"]) for op in ops} == {("add", "/subjects/-")}  # appended, as RFC 6902 says
    patched = {**made, "subjects": [*made["subjects"], *(op["value"] for op in ops)]}
    assert binding_lacks(patched, want) is None and patched["subjects"][0] == editor
    # a dry run says the same of it
    out, _ = _dry_run_watched(backend, tmp_path, capsys, name="again", new_volume=False)
    (note,) = [line for line in out.splitlines() if line.startswith("# RoleBinding ")]
    assert note.startswith(f"# {said.removeprefix('dtrain: warning: ')}; it is left out of the manifests below")
    # one that binds another Role: its roleRef cannot change, so it is made anew
    cluster.objects.pop((RBAC, "rolebindings", NS, "dtrain-snapshotter"))
    _binding(cluster, [want["subjects"][0]], role="view")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        backend.submit(spec(name="third", snapshot_on_success="data", volumes=_data_volume()))
    (said,) = _warned(caplog)
    assert (f"binds Role view, not Role dtrain-snapshotter, so the snapshot watcher may not read the job" in said
            and f"kubectl delete rolebinding dtrain-snapshotter -n {NS}, then kubectl create rolebinding "
                f"dtrain-snapshotter -n {NS} --role=dtrain-snapshotter --serviceaccount={NS}:dtrain-snapshotter"
            in said)
    # one that binds the watcher's account to its Role (an admin's, with more subjects): no word
    cluster.objects.pop((RBAC, "rolebindings", NS, "dtrain-snapshotter"))
    _binding(cluster, [editor, {"kind": "ServiceAccount", "name": "dtrain-snapshotter"}])
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        backend.submit(spec(name="fourth", snapshot_on_success="data", volumes=_data_volume()))
    assert _warned(caplog) == []


def _data_volume():
    from dtrain.spec import parse_pvc

    return (parse_pvc("data:/mnt"),)


def test_http_delete_of_a_claim_pods_use_answers_202_saying_it_is_kept(backend, cluster, tmp_path):
    """DELETE /volumes/{name} answered 204, no body, while Kubernetes kept the claim (Terminating) until its pods
    stopped; the CLI said so. Now a 202 with what keeps it; a volume that is gone still answers 204."""
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from fastapi.testclient import TestClient

    from dtrain.server.app import create_app
    from dtrain.spec import parse_pvc

    http = TestClient(create_app(lambda: Client(home=tmp_path, backend="kubernetes", backends={"kubernetes": backend}),
                                 sample_every=3600), base_url="http://127.0.0.1:8000")
    backend.create_volume("tusimple", size="20Gi", storage_class="fast")
    cluster.bind_volumes()
    backend.submit(spec(launcher="torchrun", processes=2, volumes=(parse_pvc("tusimple:/data:ro"),)))
    pods = sorted(p["metadata"]["name"] for p in cluster.run_pods(NS, "train"))
    kept = http.delete("/api/v1/volumes/tusimple", params={"force": "true"})
    assert kept.status_code == 202, kept.text
    assert kept.json() == {"name": "tusimple", "status": "Terminating",
                           "kept": f"Terminating: Kubernetes keeps it until pods {', '.join(pods)} stop"}
    backend.create_volume("other", size="1Gi", storage_class="fast")
    gone = http.delete("/api/v1/volumes/other")
    assert (gone.status_code, gone.content) == (204, b"")
    answers = http.get("/api/v1/openapi.json").json()["paths"]["/api/v1/volumes/{name}"]["delete"]["responses"]
    assert answers["202"]["content"]["application/json"]["schema"]["$ref"].endswith("/VolumeDeleting")
    assert "204" in answers
