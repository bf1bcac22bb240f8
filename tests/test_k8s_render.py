"""Every manifest the Kubernetes backend renders, checked against the real API schemas.

Custom resources (PyTorchJob, MPIJob, TrainJob, VolumeSnapshot, VolumeSnapshotClass) are checked
against the CRDs in shared/schemas/crds with jsonschema *and* a strict walker that rejects any
field the CRD does not declare (CRD schemas rarely say additionalProperties: false, and the API
server silently prunes unknown fields, so a typo would otherwise pass). Core objects (Job, PVC,
Namespace, Service, ServiceAccount, Role, RoleBinding, and every embedded pod template as a
PodTemplate) go through kubernetes-validate's strict schemas, which it ships (no network).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from functools import lru_cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from dtrain.backends.kubernetes import KubernetesConfig, render_job, render_restore, render_snapshot
from dtrain.backends.kubernetes.render import cpu_quantity, packing, render_workload, scale_quantity
from dtrain.backends.kubernetes.render_storage import (
    render_gpu_quota,
    render_namespace,
    render_snapshot_class,
    render_snapshot_rbac,
    render_success_snapshot,
    render_volume,
)
from dtrain.errors import SpecError
from dtrain.spec import JobSpec, notebook_spec, parse_pvc


def _shared() -> Path:
    from conftest import shared_dir  # $DTRAIN_SHARED, ../shared beside the repo, or /work/shared

    return shared_dir() or Path(__file__).resolve().parents[2] / "shared"


CRD_DIR = _shared() / "schemas" / "crds"
pytestmark = pytest.mark.skipif(not CRD_DIR.is_dir(), reason=f"CRD schemas not found at {CRD_DIR} "
                                                              f"(set DTRAIN_SHARED to the shared/ folder)")
CRD_FILES = {
    "PyTorchJob": "kubeflow.org_pytorchjobs.yaml", "MPIJob": "kubeflow.org_mpijobs.yaml",
    "TrainJob": "trainer.kubeflow.org_trainjobs.yaml",
    "VolumeSnapshot": "snapshot.storage.k8s.io_volumesnapshots.yaml",
    "VolumeSnapshotClass": "snapshot.storage.k8s.io_volumesnapshotclasses.yaml",
    "Notebook": "kubeflow.org_notebooks.yaml",
}
K8S_VERSIONS = ("1.30", kubernetes_validate.latest_version())  # oldest we claim, newest it ships
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # a Service name, at most 63 characters
# resource.ParseQuantity's grammar (the schemas say only int-or-string): no 'K', no '+' needed, and
# no exponent beside a suffix ('1.2e+06Mi' is refused).
QUANTITY = re.compile(r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][-+]?[0-9]+)?$")
MAX_ANNOTATIONS = 256 * 1024  # bytes of keys and values (apimachinery's TotalAnnotationSizeLimitB)

# CEL rules (x-kubernetes-validations) on fields we set, as Python. Rules that compare with
# oldSelf only run on updates. An unknown rule fails the test: add its check here.
CEL = {
    "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')":
        lambda s: re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", s["metadata"]["name"]) is not None,
    "size(self.metadata.name) <= 63": lambda s: len(s["metadata"]["name"]) <= 63,
    "size(self) > 0": lambda s: len(s) > 0,
    "self >= 1": lambda s: s >= 1,
    "(has(self.volumeSnapshotContentName) && !has(self.persistentVolumeClaimName)) || "
    "(!has(self.volumeSnapshotContentName) && has(self.persistentVolumeClaimName))":
        lambda s: ("volumeSnapshotContentName" in s) != ("persistentVolumeClaimName" in s),
}


# ------------------------------------------------------------------------- schema machinery


@lru_cache(maxsize=None)
def crd_schema(kind: str, version: str) -> dict:
    crd = yaml.load((CRD_DIR / CRD_FILES[kind]).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    assert crd["spec"]["names"]["kind"] == kind
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            assert v["served"], f"{kind} {version} is not served by this CRD"
            return v["schema"]["openAPIV3Schema"]
    raise AssertionError(f"CRD {CRD_FILES[kind]} has no version {version}")


def strict_errors(value, schema: dict, path: str = "", rules: list | None = None) -> list[str]:
    """Fields set in `value` that `schema` does not declare, walking the whole tree."""
    errors: list[str] = []
    for rule in schema.get("x-kubernetes-validations") or []:
        if rules is not None:
            rules.append((path or "<root>", rule["rule"], value))
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            errors.append(f"{path}: int-or-string expected, got {value!r}")
        return errors
    preserve = schema.get("x-kubernetes-preserve-unknown-fields", False)
    for key in ("allOf",):
        for sub in schema.get(key) or []:
            errors += strict_errors(value, sub, path, rules)
    for key in ("anyOf", "oneOf"):
        subs = schema.get(key) or []
        if subs and isinstance(value, (dict, list)) and all(strict_errors(value, s, path) for s in subs):
            errors.append(f"{path}: matches none of {key}")
    if isinstance(value, dict):
        props, extra = schema.get("properties") or {}, schema.get("additionalProperties")
        embedded = schema.get("x-kubernetes-embedded-resource", False)
        for key, sub in value.items():
            where = f"{path}.{key}"
            if path == "" and key == "metadata":
                continue  # ObjectMeta: the CRD says only 'object'; check_metadata uses the core schema
            if key in props:
                errors += strict_errors(sub, props[key], where, rules)
            elif isinstance(extra, dict):
                errors += strict_errors(sub, extra, where, rules)
            elif extra is True or preserve or (embedded and key in ("apiVersion", "kind", "metadata")):
                continue
            else:
                errors.append(f"{where}: not in the schema (the API server would drop it)")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            errors += strict_errors(item, schema["items"], f"{path}[{i}]", rules)
    return errors


def check_cel(rules: list) -> None:
    for path, rule, value in rules:
        if "oldSelf" in rule:
            continue
        assert rule in CEL, f"{path}: unknown CEL rule {rule!r}: add a Python check for it to CEL"
        assert CEL[rule](value), f"{path}: CEL rule {rule!r} fails for {value!r}"


def check_metadata(obj: dict) -> None:
    """ObjectMeta against the core schema (as a ConfigMap's), plus label and name syntax."""
    meta = obj["metadata"]
    as_configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    kubernetes_validate.validate(as_configmap, K8S_VERSIONS[0], strict=True)
    assert DNS_SUBDOMAIN.match(meta["name"]) and len(meta["name"]) <= 253, meta["name"]
    if obj["kind"] == "Service":
        assert DNS_1035.match(meta["name"]) and len(meta["name"]) <= 63, f"bad Service name {meta['name']!r}"
    annotations = meta.get("annotations") or {}
    assert sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items()) <= MAX_ANNOTATIONS
    for labels in _all_labels(obj):
        for key, value in labels.items():
            assert LABEL_KEY.match(key) and len(key.rpartition("/")[2]) <= 63, f"bad label key {key!r}"
            assert LABEL_VALUE.match(value), f"bad label value {key}={value!r}"


def _all_labels(node):
    if isinstance(node, dict):
        if isinstance(node.get("metadata"), dict) and isinstance(node["metadata"].get("labels"), dict):
            yield node["metadata"]["labels"]
        for value in node.values():
            yield from _all_labels(value)
    elif isinstance(node, list):
        for value in node:
            yield from _all_labels(value)


def pod_templates(obj: dict) -> list[dict]:
    spec = obj.get("spec") or {}
    if obj["kind"] in ("Job", "Notebook"):
        return [spec["template"]]
    replicas = spec.get("pytorchReplicaSpecs") or spec.get("mpiReplicaSpecs") or {}
    return [r["template"] for r in replicas.values()]


def quantities(node):
    """Every quantity in an object: resource limits and requests (a PVC's storage), quota, sizeLimit."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("limits", "requests", "hard") and isinstance(value, dict):
                yield from value.values()
            elif key == "sizeLimit":
                yield value
            else:
                yield from quantities(value)
    elif isinstance(node, list):
        for value in node:
            yield from quantities(value)


def check_pod(template: dict) -> None:
    """What the API server's pod validation refuses and the OpenAPI schemas cannot say."""
    pod = template["spec"]
    names = [v["name"] for v in pod.get("volumes") or []]
    assert len(set(names)) == len(names), f"volume names repeat: {names}"
    for c in pod["containers"]:
        paths = [m["mountPath"] for m in c.get("volumeMounts") or []]
        assert len(set(paths)) == len(paths), f"mountPaths repeat: {paths}"
        assert c["image"] == c["image"].strip() and c["image"], f"bad image {c['image']!r}"


def validate(obj: dict) -> None:
    """The one check every rendered object passes."""
    check_metadata(obj)
    for q in quantities(obj):
        assert isinstance(q, str) and QUANTITY.match(q), f"Kubernetes refuses the quantity {q!r}"
    group, _, version = obj["apiVersion"].rpartition("/")
    if obj["kind"] in CRD_FILES:
        schema = crd_schema(obj["kind"], version)
        jsonschema.Draft7Validator(schema).validate(obj)
        rules: list = []
        errors = strict_errors(obj, schema, rules=rules)
        assert not errors, "\n".join(errors)
        check_cel(rules)
    else:
        for k8s in K8S_VERSIONS:
            kubernetes_validate.validate(obj, k8s, strict=True)
    for template in pod_templates(obj):
        check_pod(template)
        as_core = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
        for k8s in K8S_VERSIONS:
            kubernetes_validate.validate(as_core, k8s, strict=True)


# ------------------------------------------------------------------------- the matrix

BASE = dict(image="ghcr.io/example/lanes:1", project="lanes")


def _spec(**kw) -> JobSpec:
    return JobSpec(**{"name": "train", "command": ("python", "train.py", "--epochs", "2"), **BASE, **kw})


MATRIX = {
    "one-cpu": (_spec(), KubernetesConfig()),
    "one-gpu-volumes": (_spec(gpu=1, cpu=4, memory="16Gi", large_shm=True, working_dir="/mnt", max_restarts=2,
                              env={"BATCH_SIZE": "33"}, volumes=(parse_pvc("tusimple:/data:ro"),
                                                                 parse_pvc("fast:100Gi:/mnt")),
                              image_pull_policy="Always", image_pull_secrets=("regcred",),
                              snapshot_on_success="pvc-train-0"),
                        KubernetesConfig(ttl_seconds_after_finished=3600, shm_size="8Gi")),
    "torchrun-cpu": (_spec(launcher="torchrun", processes=4, cpu=2, memory="4Gi"), KubernetesConfig()),
    "torchrun-1": (_spec(launcher="torchrun", processes=1), KubernetesConfig()),
    "torchrun-gpu-packed": (_spec(launcher="torchrun", processes=8, gpu=1, large_shm=True,
                                  volumes=(parse_pvc("tusimple:/data:ro"), parse_pvc("fast:10Gi:/out"))),
                            KubernetesConfig(gpus_per_node=4, clean_pod_policy="Running", scheduler_name="volcano")),
    "torchrun-elastic": (_spec(launcher="torchrun", processes=2, gpu=1, max_restarts=3),
                         KubernetesConfig(elastic_min_replicas=1, elastic_max_replicas=4)),
    "mpi-cpu": (_spec(launcher="mpi", processes=4, cpu=1, working_dir="/work"), KubernetesConfig()),
    "mpi-gpu-packed-snapshot": (_spec(launcher="mpi", processes=8, gpu=2, memory="32Gi",
                                      volumes=(parse_pvc("fast:100Gi:/mnt"),), snapshot_on_success="pvc-train-0"),
                                KubernetesConfig(gpus_per_node=8, ttl_seconds_after_finished=60)),
    "trainjob-gpu": (_spec(launcher="torchrun", processes=4, gpu=1, cpu=8, memory="32Gi", large_shm=True,
                           working_dir="/mnt", volumes=(parse_pvc("tusimple:/data:ro"), parse_pvc("fast:1Ti:/mnt")),
                           image_pull_secrets=("regcred",)),
                     KubernetesConfig(trainer="v2", gpus_per_node=2)),
    "trainjob-cpu": (_spec(launcher="torchrun", processes=1), KubernetesConfig(trainer="v2")),
    "notebook-gpu": (notebook_spec("nb", volumes=("work:/home/jovyan/work", "tusimple:/data:ro"), gpu=1, cpu=2,
                                   memory="8Gi", **BASE), KubernetesConfig(scheduler_name="volcano")),
    "notebook-new-volume": (notebook_spec("nb", volumes=("fast:20Gi:/home/jovyan/work",), **BASE),
                            KubernetesConfig()),
}


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_every_rendered_object_validates(case):
    spec, config = MATRIX[case]
    objects = render_job(spec, config, with_namespace=True)
    assert objects[0]["kind"] == "Namespace"
    for obj in objects:
        validate(obj)
    assert yaml.safe_load_all(yaml.safe_dump_all(objects))  # --dry-run prints these as YAML


def test_storage_objects_validate():
    config = KubernetesConfig(snapshot_driver="hostpath.csi.k8s.io")
    objects = [render_namespace("dtrain-lanes", "lanes", config), render_snapshot_class(config),
               render_volume("tusimple", project="lanes", size="100Gi", storage_class="fast", config=config),
               render_snapshot("tusimple-v1", "tusimple", project="lanes", config=config, job="prep",
                               source_size="100Gi", source_class="fast"),
               render_restore("tusimple-v1", "tusimple-copy", project="lanes", size="100Gi", storage_class="fast",
                              config=config),
               render_gpu_quota("lanes", 8, config), *render_snapshot_rbac("dtrain-lanes", "lanes", config)]
    for obj in objects:
        validate(obj)


def test_the_checks_reject_what_the_api_would_drop_or_refuse():
    spec, config = MATRIX["torchrun-gpu-packed"]
    job = render_workload(spec, config)
    typo = json.loads(json.dumps(job))
    typo["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    with pytest.raises(AssertionError, match="imagePullPolcy: not in the schema"):
        validate(typo)
    wrong_type = json.loads(json.dumps(job))
    wrong_type["spec"]["nprocPerNode"] = 4  # the CRD wants a string
    with pytest.raises(jsonschema.ValidationError):
        validate(wrong_type)
    bad_label = json.loads(json.dumps(job))
    bad_label["metadata"]["labels"]["dtrain.io/job"] = "no spaces allowed"
    with pytest.raises(AssertionError, match="bad label value"):
        validate(bad_label)
    core = render_job(*MATRIX["one-cpu"])[-1]
    core["spec"]["template"]["spec"]["containers"][0]["bogus"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(core)
    trainjob = render_workload(*MATRIX["trainjob-cpu"])
    trainjob["metadata"]["name"] = "9lives"  # passes ObjectMeta, fails the TrainJob's CEL name rule
    with pytest.raises(AssertionError, match="CEL rule"):
        validate(trainjob)
    for quantity in ("1.23457e+06Mi", "100K", "+1Gi"):  # what the renderer once wrote
        bad_quantity = json.loads(json.dumps(job))
        bad_quantity["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = \
            {"limits": {"memory": quantity}}
        with pytest.raises(AssertionError, match="refuses the quantity"):
            validate(bad_quantity)
    two_shm = json.loads(json.dumps(job))
    mounts = two_shm["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["volumeMounts"]
    mounts[0]["mountPath"] = "/dev/shm"
    with pytest.raises(AssertionError, match="mountPaths repeat"):
        validate(two_shm)
    service = render_job(*MATRIX["mpi-cpu"])[-1]
    service["metadata"]["name"] = "1abc-mpi-master"
    with pytest.raises(AssertionError, match="bad Service name"):
        validate(service)


def test_kubernetes_validate_needs_no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("kubernetes-validate tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    job = render_job(*MATRIX["one-gpu-volumes"])
    for obj in job:
        if obj["kind"] not in CRD_FILES:
            for k8s in K8S_VERSIONS:
                assert kubernetes_validate.validate(obj, k8s, strict=True)


# ------------------------------------------------------------------------- what the manifests say


def _container(template: dict) -> dict:
    return template["spec"]["containers"][0]


def test_single_process_is_a_batch_job_with_restarts_ttl_and_resources():
    spec, config = MATRIX["one-gpu-volumes"]
    job = render_workload(spec, config)
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert job["spec"]["backoffLimit"] == 2 and job["spec"]["ttlSecondsAfterFinished"] == 3600
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["imagePullSecrets"] == [{"name": "regcred"}]
    c = pod["containers"][0]
    assert c["command"] == ["python", "train.py", "--epochs", "2"] and c["workingDir"] == "/mnt"
    assert c["image"] == "ghcr.io/example/lanes:1" and c["imagePullPolicy"] == "Always"
    assert c["resources"] == {"limits": {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"},
                              "requests": {"cpu": "4", "memory": "16Gi"}}
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["OMP_NUM_THREADS"] == "4" and env["BATCH_SIZE"] == "33"
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert volumes[mounts["/data"]["name"]]["persistentVolumeClaim"] == {"claimName": "tusimple", "readOnly": True}
    assert mounts["/data"]["readOnly"] is True and "readOnly" not in mounts["/mnt"]
    assert volumes[mounts["/mnt"]["name"]]["persistentVolumeClaim"] == {"claimName": "pvc-train-0"}
    assert volumes[mounts["/dev/shm"]["name"]]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}


def test_new_volumes_are_rwx_pvcs_created_before_the_job():
    spec, config = MATRIX["one-gpu-volumes"]
    objects = render_job(spec, config)
    kinds = [o["kind"] for o in objects]
    pvc = objects[0]
    assert kinds.index("PersistentVolumeClaim") < kinds.index("Job")
    assert pvc["metadata"]["name"] == "pvc-train-0" and pvc["metadata"]["namespace"] == "dtrain-lanes"
    assert pvc["spec"] == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "100Gi"}},
                           "storageClassName": "fast"}
    assert not any(o["kind"] == "PersistentVolumeClaim" and o["metadata"]["name"] == "tusimple" for o in objects)


def test_every_object_carries_the_job_and_project_labels():
    spec, config = MATRIX["mpi-gpu-packed-snapshot"]
    for obj in render_job(spec, config, with_namespace=True):
        labels = obj["metadata"]["labels"]
        assert labels["dtrain.io/project"] == "lanes" and labels["app.kubernetes.io/managed-by"] == "dtrain"
        assert labels["runai/queue"] == "lanes"
        if obj["kind"] not in ("Namespace", "ServiceAccount", "Role", "RoleBinding"):
            assert labels["dtrain.io/job"] == "train", obj["kind"]
    plain = render_workload(spec, KubernetesConfig(runai_labels=False))
    assert "runai/queue" not in plain["metadata"]["labels"]


@pytest.mark.parametrize("processes,gpu,per_node,expected", [
    (8, 1, 4, (2, 4)), (6, 1, 4, (2, 3)), (5, 1, 4, (5, 1)), (4, 3, 4, (4, 1)), (4, 2, 8, (1, 4)),
    (4, 1, None, (4, 1)), (4, 0, 8, (4, 1)), (3, 1, 8, (1, 3))])
def test_packing_rule(processes, gpu, per_node, expected):
    spec = _spec(launcher="torchrun", processes=processes, gpu=gpu)
    assert packing(spec, KubernetesConfig(gpus_per_node=per_node)) == expected


def test_packing_refuses_a_process_larger_than_a_node():
    with pytest.raises(SpecError, match="--gpu 5"):
        packing(_spec(launcher="torchrun", processes=2, gpu=5), KubernetesConfig(gpus_per_node=4))


def test_pytorchjob_master_workers_and_packed_torchrun():
    spec, config = MATRIX["torchrun-gpu-packed"]
    job = render_workload(spec, config)
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    s = job["spec"]
    assert s["nprocPerNode"] == "4" and s["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 0}
    master, worker = s["pytorchReplicaSpecs"]["Master"], s["pytorchReplicaSpecs"]["Worker"]
    assert (master["replicas"], worker["replicas"]) == (1, 1) and master["restartPolicy"] == "Never"
    c = _container(worker["template"])
    assert c["name"] == "pytorch" and c["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert c["command"][:2] == ["torchrun", "--nnodes=2"] and "--nproc-per-node=4" in c["command"]
    assert "--node-rank=$(RANK)" in c["command"] and c["command"][-4:] == ["python", "train.py", "--epochs", "2"]
    assert worker["template"]["spec"]["schedulerName"] == "volcano"
    assert job["metadata"]["annotations"]["dtrain.io/procs-per-pod"] == "4"
    assert JobSpec.from_dict(json.loads(job["metadata"]["annotations"]["dtrain.io/spec"])) == spec


def test_unpacked_pytorchjob_runs_the_command_directly():
    spec, config = MATRIX["torchrun-cpu"]
    s = render_workload(spec, config)["spec"]
    assert s["nprocPerNode"] == "1" and s["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    c = _container(s["pytorchReplicaSpecs"]["Master"]["template"])
    assert c["command"] == list(spec.command)
    assert c["resources"] == {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "2", "memory": "4Gi"}}
    one = render_workload(*MATRIX["torchrun-1"])["spec"]["pytorchReplicaSpecs"]
    assert list(one) == ["Master"]


def test_elastic_pytorchjob_is_workers_with_an_elastic_policy():
    spec, config = MATRIX["torchrun-elastic"]
    s = render_workload(spec, config)["spec"]
    assert list(s["pytorchReplicaSpecs"]) == ["Worker"] and s["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert s["elasticPolicy"] == {"minReplicas": 1, "maxReplicas": 4, "rdzvBackend": "c10d", "maxRestarts": 3}
    assert s["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "OnFailure" and s["runPolicy"]["backoffLimit"] == 3
    with pytest.raises(SpecError, match="elastic range"):
        render_workload(_spec(launcher="torchrun", processes=8), KubernetesConfig(elastic_min_replicas=1,
                                                                                  elastic_max_replicas=4))


def test_mpijob_launcher_runs_mpirun_and_workers_hold_the_slots():
    spec, config = MATRIX["mpi-gpu-packed-snapshot"]
    objects = render_job(spec, config)
    job = next(o for o in objects if o["kind"] == "MPIJob")
    s = job["spec"]
    assert s["slotsPerWorker"] == 4 and s["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    assert s["runPolicy"]["ttlSecondsAfterFinished"] == 60
    launcher = _container(s["mpiReplicaSpecs"]["Launcher"]["template"])
    assert launcher["command"][:3] == ["mpirun", "-np", "8"] and "--tag-output" in launcher["command"]
    assert launcher["command"][-4:] == list(spec.command) and "resources" not in launcher
    env = {e["name"]: e["value"] for e in launcher["env"]}
    assert env["MASTER_ADDR"] == "train-mpi-master" and env["MASTER_PORT"] == "29500"
    worker = _container(s["mpiReplicaSpecs"]["Worker"]["template"])
    assert "command" not in worker and worker["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert worker["resources"]["limits"]["memory"] == "128Gi"
    service = next(o for o in objects if o["kind"] == "Service")
    assert service["metadata"]["name"] == "train-mpi-master" and service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"]["training.kubeflow.org/replica-index"] == "0"
    cpu = render_workload(*MATRIX["mpi-cpu"])["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    command = _container(cpu)["command"]
    assert command[command.index("-wdir") + 1] == "/work"


def test_trainjob_refers_to_the_runtime_and_patches_volumes():
    spec, config = MATRIX["trainjob-gpu"]
    job = render_workload(spec, config)
    assert (job["apiVersion"], job["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    s = job["spec"]
    assert s["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                               "name": "torch-distributed"}
    t = s["trainer"]
    assert (t["numNodes"], t["numProcPerNode"]) == (2, 2)
    assert t["resourcesPerNode"]["limits"] == {"nvidia.com/gpu": "2", "cpu": "16", "memory": "64Gi"}
    assert t["command"][:3] == ["sh", "-c", 'cd "$0" && exec "$@"'] and t["command"][3] == "/mnt"
    pod = s["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    assert pod["name"] == "node"
    pod_spec = pod["template"]["spec"]["template"]["spec"]
    assert {v["name"] for v in pod_spec["volumes"]} == {"vol-0", "vol-1", "dshm"}
    assert pod_spec["containers"][0]["name"] == "node" and pod_spec["imagePullSecrets"] == [{"name": "regcred"}]


def test_trainjob_refusals():
    v2 = KubernetesConfig(trainer="v2")
    with pytest.raises(SpecError, match="must start with a letter"):
        render_workload(_spec(name="1st", launcher="torchrun", processes=2), v2)
    with pytest.raises(SpecError, match="torchrun only"):
        render_workload(_spec(launcher="mpi", processes=2), v2)
    with pytest.raises(SpecError, match="image-pull-policy"):
        render_workload(_spec(launcher="torchrun", processes=2, image_pull_policy="Always"), v2)
    assert render_workload(_spec(), v2)["kind"] == "Job"  # one process needs no Trainer


def test_image_is_required_and_config_supplies_a_default():
    bare = JobSpec(name="train", command=("python", "t.py"))
    with pytest.raises(SpecError, match="--image"):
        render_job(bare, KubernetesConfig())
    job = render_workload(bare, KubernetesConfig(image="registry/default:1", image_pull_policy="IfNotPresent"))
    c = _container(job["spec"]["template"])
    assert c["image"] == "registry/default:1" and c["imagePullPolicy"] == "IfNotPresent"


def test_user_text_is_kept_literal_under_kubernetes_expansion():
    spec = _spec(command=("sh", "-c", "echo $(hostname) $HOME"), env={"GREETING": "$(not-a-var)"})
    c = _container(render_workload(spec, KubernetesConfig())["spec"]["template"])
    assert c["command"][2] == "echo $$(hostname) $HOME"
    assert {e["name"]: e["value"] for e in c["env"]}["GREETING"] == "$$(not-a-var)"


def test_quantities():
    assert [cpu_quantity(x) for x in (2, 0.5, 1.25, 8.0)] == ["2", "500m", "1250m", "8"]
    assert [scale_quantity(q, k) for q, k in (("4Gi", 2), ("1.5G", 2), ("512Mi", 3), ("100", 2))] == \
           ["8Gi", "3G", "1536Mi", "200"]


def test_namespace_follows_the_project_unless_fixed():
    spec = _spec(project="vision")
    assert render_workload(spec, KubernetesConfig())["metadata"]["namespace"] == "dtrain-vision"
    assert render_workload(spec, KubernetesConfig(namespace="runai-team"))["metadata"]["namespace"] == "runai-team"
    ns = render_job(spec, KubernetesConfig(), with_namespace=True)[0]
    assert ns["metadata"]["name"] == "dtrain-vision" and "namespace" not in ns["metadata"]


def test_snapshot_and_restore_point_at_each_other():
    config = KubernetesConfig(snapshot_class="trident-snapshots")
    snap = render_snapshot("lanes-v1", "tusimple", project="lanes", config=config, job="prep",
                           source_size="100Gi", source_class="fast")
    assert snap["spec"] == {"volumeSnapshotClassName": "trident-snapshots",
                            "source": {"persistentVolumeClaimName": "tusimple"}}
    assert snap["metadata"]["labels"]["dtrain.io/job"] == "prep"
    assert snap["metadata"]["labels"]["dtrain.io/volume"] == "tusimple"
    pvc = render_restore("lanes-v1", "tusimple-2", project="lanes", size="100Gi", storage_class="fast", config=config)
    assert pvc["spec"]["dataSource"] == {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot",
                                         "name": "lanes-v1"}
    assert pvc["metadata"]["labels"]["dtrain.io/source-snapshot"] == "lanes-v1"
    cls = render_snapshot_class(KubernetesConfig(snapshot_class="x", snapshot_driver="hostpath.csi.k8s.io"))
    assert (cls["metadata"]["name"], cls["driver"], cls["deletionPolicy"]) == ("x", "hostpath.csi.k8s.io", "Delete")


# ------------------------------------------------------------------------- the snapshot watcher, run


def _expand(text: str) -> str:
    """What Kubernetes hands the container for a command with no $(VAR) references: $$ -> $."""
    return text.replace("$$", "$")


def _watcher_script(case: str) -> tuple[str, dict, JobSpec]:
    spec, config = MATRIX[case]
    objects = render_job(spec, config)
    watcher = next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == "train-snap")
    pod = watcher["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "dtrain-snapshotter" and watcher["metadata"]["labels"]["dtrain.io/role"] == \
        "snapshotter"
    command = pod["containers"][0]["command"]
    assert command[:2] == ["/bin/sh", "-c"]
    return _expand(command[2]), render_success_snapshot(spec, config, job_uid="0123456789-uid"), spec


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
@pytest.mark.parametrize("case,conditions,created", [
    ("mpi-gpu-packed-snapshot", ["Created", "Running", "Succeeded"], True),
    ("mpi-gpu-packed-snapshot", ["Created", "Running", "Failed"], False),
    ("one-gpu-volumes", ["", "Complete"], True),
    ("one-gpu-volumes", ["NOTFOUND"], False)])
def test_watcher_script_snapshots_only_after_success(tmp_path, case, conditions, created):
    """Runs the watcher's shell script with a stub kubectl that replays the job's conditions."""
    script, snapshot, spec = _watcher_script(case)
    states = tmp_path / "states"
    states.write_text("\n".join(conditions) + "\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text(f"""#!/bin/sh
echo "$@" >> {tmp_path}/calls
if [ "$1" = create ]; then cat > {tmp_path}/created.json; exit 0; fi
case "$*" in *metadata.uid*) printf 0123456789-uid; exit 0;; esac  # a dry run's watcher reads the job's uid
if [ "$2" = volumesnapshot ]; then echo 'Error from server (NotFound): not found' >&2; exit 1; fi
state=$(head -n 1 {states}); sed -i 1d {states}
if [ "$state" = NOTFOUND ]; then echo 'Error from server (NotFound): not found' >&2; exit 1; fi
echo "$state "
""")
    (bin_dir / "sleep").write_text("#!/bin/sh\nexit 0\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    kind = "mpijobs.kubeflow.org" if spec.launcher == "mpi" else "jobs.batch"
    assert calls[0].startswith(f"get {kind} train -n dtrain-lanes")
    assert (tmp_path / "created.json").exists() == created
    if created:
        assert json.loads((tmp_path / "created.json").read_text()) == snapshot
        assert snapshot["metadata"]["name"] == "train-success"
        assert snapshot["spec"]["source"]["persistentVolumeClaimName"] == "pvc-train-0"
    # the snapshot taken is recorded on the job (describe says it deleted once it is), none otherwise
    recorded = f"annotate --overwrite {kind} train -n dtrain-lanes dtrain.io/success-snapshot=train-success"
    assert (calls[-1] == recorded) == created and sum("annotate" in c for c in calls) == created


def test_the_watchers_role_may_read_and_patch_the_job_kinds_and_nothing_more():
    """The watcher records its snapshot on the job (kubectl annotate: get, then a merge patch); its Role
    grants that on the job kinds it watches, and only get/create on VolumeSnapshots."""
    config = KubernetesConfig()
    role = next(o for o in render_snapshot_rbac("dtrain-lanes", "lanes", config) if o["kind"] == "Role")
    validate(role)
    granted = {(g, r): sorted(rule["verbs"]) for rule in role["rules"]
               for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted == {("batch", "jobs"): ["get", "patch"], ("kubeflow.org", "pytorchjobs"): ["get", "patch"],
                       ("kubeflow.org", "mpijobs"): ["get", "patch"],
                       ("trainer.kubeflow.org", "trainjobs"): ["get", "patch"],
                       ("snapshot.storage.k8s.io", "volumesnapshots"): ["create", "get"]}
    watched = set()  # every kind a watcher watches is one the Role may patch
    for spec, cfg in MATRIX.values():
        for w in (o for o in render_job(spec, cfg) if o["metadata"]["name"].endswith("-snap")):
            script = w["spec"]["template"]["spec"]["containers"][0]["command"][2]
            kind = re.search(r"annotate --overwrite (\S+) ", script)
            plural, _, group = kind.group(1).partition(".")
            watched.add((group, plural))
    assert watched >= {("batch", "jobs"), ("kubeflow.org", "mpijobs")}
    assert all("patch" in granted[k] for k in watched)


def test_notebook_is_a_kubeflow_notebook_on_the_claim():
    spec, config = MATRIX["notebook-gpu"]
    objects = render_job(spec, config)
    assert [o["kind"] for o in objects] == ["Notebook"]
    nb = objects[0]
    assert nb["apiVersion"] == "kubeflow.org/v1" and nb["metadata"]["namespace"] == "dtrain-lanes"
    assert nb["metadata"]["labels"]["dtrain.io/job"] == "nb"  # the controller copies these to the pod
    assert JobSpec.from_dict(json.loads(nb["metadata"]["annotations"]["dtrain.io/spec"])) == spec
    pod = nb["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["name"] == "nb" and "command" not in container  # the image starts Jupyter
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "1", "cpu": "2", "memory": "8Gi"},
                                      "requests": {"cpu": "2", "memory": "8Gi"}}
    claims = {v["persistentVolumeClaim"]["claimName"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts[claims["work"]["name"]]["mountPath"] == "/home/jovyan/work"
    # The image's Jupyter is rooted at HOME: the workspace volume, as Kubeflow mounts it at /home/jovyan
    assert {"name": "HOME", "value": "/home/jovyan/work"} in container["env"]
    assert container["workingDir"] == "/home/jovyan/work"
    assert mounts[claims["tusimple"]["name"]] == {"name": claims["tusimple"]["name"], "mountPath": "/data",
                                                  "readOnly": True}
    new = render_job(*MATRIX["notebook-new-volume"])
    assert [o["kind"] for o in new] == ["PersistentVolumeClaim", "Notebook"]


def test_the_notebook_check_rejects_a_field_its_crd_lacks():
    nb = render_job(*MATRIX["notebook-gpu"])[0]
    nb["spec"]["template"]["metadata"] = {"labels": {"a": "b"}}  # the Notebook CRD's template has no metadata
    with pytest.raises(AssertionError, match="template.metadata: not in the schema"):
        validate(nb)
