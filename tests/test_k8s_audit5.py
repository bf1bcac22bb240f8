"""Fixes of the fifth Kubernetes audit: each test fails on the code before its fix."""

from __future__ import annotations

import pytest

from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig
from dtrain.backends.kubernetes.fake import CRDS, FakeCluster
from dtrain.errors import BackendError
from test_k8s_backend import IMAGE, NS, backend, cluster, make_backend, spec  # noqa: F401  (their fixtures)

CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")


def trainjob_crd(spec_fields: list[str]) -> dict:
    schema = {"type": "object", "properties": {"spec": {"type": "object",
                                                        "properties": {f: {"type": "object"} for f in spec_fields}}}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "trainjobs.trainer.kubeflow.org"},
            "spec": {"group": "trainer.kubeflow.org", "versions": [
                {"name": "v1alpha1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}]}}


# ------------------------------------------------------------------------- 1: Trainer v2 version


def test_trainjob_refused_on_a_trainer_without_runtime_patches(make_backend):
    fake = FakeCluster(crds={**CRDS, CRD_KEY: ("CustomResourceDefinition", False)})
    fake.create(trainjob_crd(["runtimeRef", "trainer", "podTemplateOverrides"]))  # v2.1.0's
    backend = make_backend(KubernetesConfig(project="lanes", image=IMAGE, trainer="v2"), fake)
    with pytest.raises(BackendError, match=r"no spec.runtimePatches .*v2\.2\.0 or later"):
        backend.submit(spec(launcher="torchrun", processes=2))
    assert fake.items("trainer.kubeflow.org", "trainjobs") == []


def test_trainjob_submitted_on_a_trainer_with_runtime_patches_or_an_unreadable_crd(make_backend, cluster):
    fake = FakeCluster(crds={**CRDS, CRD_KEY: ("CustomResourceDefinition", False)})
    fake.create(trainjob_crd(["runtimeRef", "trainer", "runtimePatches"]))
    config = KubernetesConfig(project="lanes", image=IMAGE, trainer="v2")
    make_backend(config, fake).submit(spec(launcher="torchrun", processes=2))
    assert [j["metadata"]["name"] for j in fake.items("trainer.kubeflow.org", "trainjobs")] == ["train"]
    make_backend(config).submit(spec(launcher="torchrun", processes=2))  # the CRD not served: no check
    assert [j["metadata"]["name"] for j in cluster.items("trainer.kubeflow.org", "trainjobs")] == ["train"]


def test_docs_install_the_trainer_whose_crd_has_runtime_patches():
    from pathlib import Path

    from dtrain.backends.kubernetes.objects import TRAINER_V2_HINT

    text = (Path(__file__).parent.parent / "docs" / "kubernetes.md").read_text()
    assert "ref=v2.1.0" not in text and "ref=v2.2.0" in text
    assert "ref=v2.2.0" in TRAINER_V2_HINT


# ------------------------------------------------------------------------- 2: volume delete, queued job


def test_volume_delete_refused_while_a_queued_or_suspended_job_mounts_it(backend, cluster):
    from dtrain.errors import ConflictError
    from dtrain.spec import parse_pvc

    backend.create_volume("tusimple", size="20Gi", storage_class="fast")
    backend.create_volume("other", size="1Gi", storage_class="fast")
    backend.submit(spec(volumes=(parse_pvc("tusimple:/data:ro"),)))  # no pod yet: queued
    with pytest.raises(ConflictError, match=r"volume 'tusimple' is mounted by job 'train', which is pending"):
        backend.delete_volume("tusimple")
    backend.suspend("train")
    with pytest.raises(ConflictError, match=r"job 'train', which is suspended .*--force"):
        backend.delete_volume("tusimple")
    backend.delete_volume("other")  # not mounted by any job
    cluster.transition(NS, "train", "Failed", reason="BackoffLimitExceeded")
    backend.delete_volume("tusimple")  # the job ended: its volume may go
    assert [p["metadata"]["name"] for p in cluster.items("", "persistentvolumeclaims", NS)] == []


def test_volume_delete_force_ignores_a_queued_job(backend, cluster):
    from dtrain.spec import parse_pvc

    backend.create_volume("tusimple", size="20Gi", storage_class="fast")
    backend.submit(spec(volumes=(parse_pvc("tusimple:/data:ro"),)))
    backend.delete_volume("tusimple", force=True)
    assert cluster.items("", "persistentvolumeclaims", NS) == []


# ------------------------------------------------------------------------- 3: quota in a fixed namespace


def test_a_second_projects_quota_in_a_fixed_namespace_is_refused(make_backend, cluster):
    from dtrain.errors import ConflictError

    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "runai-team"}})
    backend = make_backend(KubernetesConfig(project="lanes", image=IMAGE, namespace="runai-team"))
    backend.create_project("a", gpu_quota=4)
    backend.create_project("a", gpu_quota=6)  # its own quota may change
    with pytest.raises(ConflictError, match=r"namespace runai-team .* GPU quota of project 'a', shared by every "
                                            r"project there: change it with 'dtrain project create a --gpu-quota N'"):
        backend.create_project("b", gpu_quota=2)
    with pytest.raises(ConflictError, match="GPU quota of project 'a'"):
        backend.create_project("b", no_gpu_quota=True)
    backend.create_project("b")  # no quota asked: fine
    [quota] = cluster.items("", "resourcequotas", "runai-team")
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "6"}
    assert quota["metadata"]["labels"]["dtrain.io/project"] == "a"


# ------------------------------------------------------------------------- 4: VolumeAttributesClass dropped


class GateOff(FakeCluster):
    """An API server whose VolumeAttributesClass feature gate is off: it drops the field, answers 200."""

    def _patch(self, group, plural, namespace, name, patch):
        patch = [op for op in patch if op.get("path") != "/spec/volumeAttributesClassName"]
        return super()._patch(group, plural, namespace, name, patch)


def test_volume_update_says_when_the_cluster_dropped_the_volume_attributes_class(make_backend):
    fake = GateOff()
    backend = make_backend(fake=fake)
    backend.create_volume("work", size="5Gi", storage_class="ontap-nas")
    with pytest.raises(BackendError, match=r"the cluster ignored the VolumeAttributesClass of volume 'work'.*"
                                           r"feature gate VolumeAttributesClass"):
        backend.update_volume("work", storage_class="premium")


def test_volume_update_message_names_the_volume_attributes_class(backend, tmp_path, capsys):
    from argparse import Namespace

    from dtrain.cli.storage import cmd_volume
    from dtrain.client import Client

    backend.create_volume("work", size="5Gi", storage_class="ontap-nas")
    client = Client(home=tmp_path, backend="kubernetes", backends={"kubernetes": backend})
    cmd_volume(Namespace(action="update", name="work", storage_class="premium", dry_run=False, json=False, wait=False,
                         timeout=None, project=None), client)
    out = capsys.readouterr().out
    assert out.startswith("volume 'work' now has VolumeAttributesClass 'premium' (its storage class stays")
    assert "is now in storage class" not in out
    # the patch is a request the CSI driver carries out later (or not: Infeasible): describe shows what is in effect
    assert "'dtrain --backend kubernetes volume describe work' shows the class in effect" in out


# ------------------------------------------------------------------------- 5: config names


@pytest.mark.parametrize("field,value,said", [
    ("scheduler_name", "Bad Scheduler", "invalid Kubernetes scheduler_name 'Bad Scheduler': .*DNS-1123 subdomain"),
    ("snapshot_class", "snap_class", "invalid Kubernetes snapshot_class 'snap_class'"),
    ("storage_class", "Fast NVMe", r"invalid storage class 'Fast NVMe'.*\(Kubernetes setting storage_class\)"),
    ("watcher_image", "bitnami/kubectl latest", "invalid Kubernetes watcher_image 'bitnami/kubectl latest'"),
    ("image_pull_secrets", ["regcred", "Reg Cred"], "invalid Kubernetes image_pull_secrets secret name 'Reg Cred'"),
    ("snapshot_driver", "csi driver", "invalid Kubernetes snapshot_driver 'csi driver'"),
    ("snapshot_driver", "a" * 64, "snapshot_driver .*at most 63"),
])
def test_config_names_sent_into_manifests_are_checked_at_load(field, value, said):
    from dtrain.errors import SpecError

    with pytest.raises(SpecError, match=said) as err:
        KubernetesConfig(**{field: value})
    assert "\n" not in str(err.value)


def test_config_names_kubernetes_accepts_load():
    config = KubernetesConfig(scheduler_name="runai-scheduler", snapshot_class="trident.snapshots",
                              storage_class="ontap-nas", watcher_image="registry.example.com:5000/kubectl:1.30",
                              image_pull_secrets=("regcred",), snapshot_driver="EBS.csi.aws.com")
    assert config.scheduler_name == "runai-scheduler"


# ------------------------------------------------------------------------- 6: success snapshot of a PVC


def test_snapshot_on_success_of_an_existing_volume_records_its_size_and_class(backend, cluster):
    import json

    from dtrain.spec import parse_pvc

    backend.create_volume("data", size="7Gi", storage_class="fast")
    backend.submit(spec(snapshot_on_success="data", volumes=(parse_pvc("data:/mnt"),)))
    watcher = cluster.get("batch", "jobs", NS, "train-snap")
    script = watcher["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    manifest = json.loads("{" + script.split("\n{", 1)[1].split("\nEOF", 1)[0])
    annotations = manifest["metadata"]["annotations"]
    assert json.loads(annotations.pop("dtrain.io/spec"))["snapshot_on_success"] == "data"  # the job's spec too
    assert annotations.pop("dtrain.io/job-uid") == cluster.find_job(NS, "train")["metadata"]["uid"]  # and its uid
    assert annotations == {"dtrain.io/source-size": "7Gi", "dtrain.io/source-storage-class": "fast"}
    cluster.transition(NS, "train", "Complete")
    assert backend.get("train").snapshot == "train-success"
    [snap] = cluster.items("snapshot.storage.k8s.io", "volumesnapshots", NS)
    assert snap["metadata"]["annotations"]["dtrain.io/source-size"] == "7Gi"
    info = backend.get_snapshot("train-success")
    assert (info.volume_size, info.storage_class) == ("7Gi", "fast")


# ------------------------------------------------------------------------- 7: a plain web server


def test_a_plain_web_server_answering_404_and_501_is_named_not_kubernetes():
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from kubernetes import client

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)  # python -m http.server: 404 for GET, 501 for POST
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    config.proxy, config.no_proxy, config.retries = None, "*", 0
    api_client = client.ApiClient(config)
    try:
        backend = KubernetesBackend(KubernetesConfig(project="lanes", image=IMAGE), api_client=api_client)
        verbs = {"get": lambda: backend.get("train"), "list": backend.list,
                 "snapshot list": backend.list_snapshots,
                 "volume create": lambda: backend.create_volume("d", size="1Gi"),
                 "submit": lambda: backend.submit(spec())}
        for name, verb in verbs.items():
            with pytest.raises(BackendError, match=r"does not look like a Kubernetes API server: .*HTTP (404|501)") \
                    as err:
                verb()
            text = str(err.value)
            assert "\n" not in text, name
            assert not any(w in text for w in ("CSI snapshot", "not found in namespace", "overloaded")), (name, text)
    finally:
        api_client.close()
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------------------- 8: label values, pod names


def test_a_snapshot_of_a_volume_with_a_long_name_carries_no_over_long_label(backend, cluster):
    long = "imported-" + "x" * 60  # 69 characters: a PVC made outside dtrain
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    cluster.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": long, "namespace": NS},
                    "spec": {"resources": {"requests": {"storage": "5Gi"}}, "accessModes": ["ReadWriteMany"]}})
    info = backend.create_snapshot(long, name="imported-v1", job=None)
    assert info.volume == long
    [snap] = cluster.items("snapshot.storage.k8s.io", "volumesnapshots", NS)
    labels = snap["metadata"]["labels"]
    assert "dtrain.io/volume" not in labels and all(len(v) <= 63 for v in labels.values())
    assert snap["spec"]["source"]["persistentVolumeClaimName"] == long


def test_restore_of_a_snapshot_with_a_long_name_carries_no_over_long_label():
    from dtrain.backends.kubernetes.render_storage import render_restore

    long = "s" * 70
    pvc = render_restore(long, "back", project="lanes", size="1Gi", storage_class=None, config=KubernetesConfig())
    assert "dtrain.io/source-snapshot" not in pvc["metadata"]["labels"]
    assert pvc["spec"]["dataSource"]["name"] == long
    short = render_restore("snap-1", "back", project="lanes", size="1Gi", storage_class=None,
                           config=KubernetesConfig())
    assert short["metadata"]["labels"]["dtrain.io/source-snapshot"] == "snap-1"


def test_a_pytorchjob_whose_last_worker_name_is_over_63_is_refused_at_render():
    from dtrain.backends.kubernetes.render import render_job
    from dtrain.errors import SpecError

    name = "n" * 53
    config = KubernetesConfig(image=IMAGE)
    render_job(spec(name=name, launcher="torchrun", processes=101), config)  # a master, workers 0..99: 63 fits
    with pytest.raises(SpecError, match=rf"job name '{name}' is 53 characters: with 101 workers its last pod "
                                        rf"'{name}-worker-100' is 64, over Kubernetes' 63; shorten the name to "
                                        rf"at most 52 characters or run fewer pods") as err:
        render_job(spec(name=name, launcher="torchrun", processes=102), config)
    assert "\n" not in str(err.value)


def test_volume_delete_by_an_account_that_may_not_read_jobs_says_to_force(backend, cluster):
    from dtrain.backends.kubernetes.client import Forbidden

    backend.create_volume("tusimple", size="20Gi", storage_class="fast")
    cluster.forbidden |= {("batch", "jobs"), ("kubeflow.org", "pytorchjobs"), ("kubeflow.org", "mpijobs"),
                          ("trainer.kubeflow.org", "trainjobs"), ("kubeflow.org", "notebooks")}
    with pytest.raises(Forbidden, match=r"no telling whether a queued one will mount volume 'tusimple': pass "
                                        r"--force") as err:
        backend.delete_volume("tusimple")
    assert "\n" not in str(err.value)
    backend.delete_volume("tusimple", force=True)
    assert cluster.items("", "persistentvolumeclaims", NS) == []
