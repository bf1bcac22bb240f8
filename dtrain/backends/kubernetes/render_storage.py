"""Pure rendering of namespaces, volumes (PVCs), snapshots (VolumeSnapshots) and the snapshot watcher.

`--snapshot-on-success` on a cluster: two mechanisms that agree on one snapshot name
(`<job>-success`, or `<job>-success-<uid8>` where an earlier run of the job's name left that one:
success_snapshot_name), so whichever acts first wins and the other sees 409 AlreadyExists:

1. the backend: whenever `get`/`list`/`wait` sees the job Succeeded, it creates the snapshot;
2. a watcher Job `<job>-snap` in the job's namespace (config.snapshot_watcher, default on) that
   polls the job with kubectl and creates the snapshot when the job succeeds, so the snapshot is
   taken even when nobody runs dtrain. It runs as ServiceAccount `dtrain-snapshotter`, whose Role
   may only read and patch the job kinds and create/read VolumeSnapshots in that namespace.

Whichever takes the snapshot records its name on the job object (ANN_SUCCESS_SNAPSHOT), so that a
look after the snapshot was deleted says so rather than taking another of what the volume holds by
then. The watcher records it with `kubectl annotate`; where its Role predates the `patch` right (a
submit adds what it lacks: lacking_rules; an account that may not update Roles is told), it says so
and the backend's next look records it instead.
"""

from __future__ import annotations

import json
from typing import Any

from dtrain.names import kubernetes_quantity
from dtrain.spec import JobSpec, NewVolume

from .config import KubernetesConfig
from .objects import (
    ANN_JOB_UID,
    ANN_SOURCE_CLASS,
    ANN_SOURCE_SIZE,
    ANN_SPEC,
    ANN_SUCCESS_SNAPSHOT,
    LABEL_JOB,
    LABEL_SOURCE_SNAPSHOT,
    LABEL_VOLUME,
    ROLE_SNAPSHOTTER,
    SNAPSHOTTER_ACCOUNT,
    VOLUME_SNAPSHOT,
    VOLUME_SNAPSHOT_CLASS,
    Resource,
    escape_dollars,
    job_labels,
    metadata,
    project_labels,
    success_snapshot_name,
    watcher_name,
)

WATCH_POLL_SECONDS = 10


def render_namespace(name: str, project: str, config: KubernetesConfig) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata(name, None, project_labels(project, config))}


QUOTA_NAME = "dtrain-quota"


def render_gpu_quota(project: str, gpu_quota: int, config: KubernetesConfig) -> dict:
    """A project's GPU quota: a ResourceQuota on the GPUs its pods may request at once."""
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": metadata(QUOTA_NAME, config.namespace_of(project), project_labels(project, config)),
            "spec": {"hard": {"requests.nvidia.com/gpu": str(gpu_quota)}}}


def render_pvc(name: str, namespace: str, *, size: str, storage_class: str | None, config: KubernetesConfig,
               labels: dict[str, str], data_source: dict | None = None) -> dict:
    """A PersistentVolumeClaim; storage_class None leaves the cluster's default class to choose."""
    storage = kubernetes_quantity(size, what="volume size")  # '100K' is not Kubernetes': '100k'
    spec: dict[str, Any] = {"accessModes": list(config.access_modes), "resources": {"requests": {"storage": storage}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    if data_source:
        spec["dataSource"] = data_source
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": metadata(name, namespace, labels), "spec": spec}


def render_new_volume(spec: JobSpec, name: str, volume: NewVolume, config: KubernetesConfig) -> dict:
    """The PVC `name` (JobSpec.new_volumes) of a `--pvc CLASS:SIZE:MOUNT` flag; it outlives the job."""
    return render_pvc(name, config.namespace_of(spec.project), size=volume.size,
                      storage_class=volume.storage_class, config=config, labels=job_labels(spec, config))


def render_volume(name: str, *, project: str, size: str, storage_class: str | None,
                  config: KubernetesConfig) -> dict:
    """The PVC of `dtrain volume create`."""
    return render_pvc(name, config.namespace_of(project), size=size,
                      storage_class=storage_class or config.storage_class, config=config,
                      labels=project_labels(project, config))


def render_volume_class_patch(volume_attributes_class: str) -> list[dict]:
    """`volume update --class C`: a JSON Patch (RFC 6902) setting the PVC's
    spec.volumeAttributesClassName, so the CSI driver changes the volume's performance tier
    (a NetApp service level, an EFS throughput mode) in place, without moving data. The field
    exists from Kubernetes 1.29 (beta 1.31, GA 1.34). A JSON Patch because the official client
    sends a PVC patch as application/json-patch+json; 'add' sets the field whether or not it is set."""
    return [{"op": "add", "path": "/spec/volumeAttributesClassName", "value": volume_attributes_class}]


MAX_LABEL_VALUE = 63


def _origin_label(key: str, name: str) -> dict[str, str]:
    """A label naming where an object came from, left off when the name (of an object dtrain did not
    make: a name may have 253 characters) is too long for a label value, which the API server would
    refuse; the spec (source.persistentVolumeClaimName, dataSource.name) names it all the same."""
    return {key: name} if len(name) <= MAX_LABEL_VALUE else {}


def render_snapshot(name: str, volume: str, *, project: str, config: KubernetesConfig, job: str | None = None,
                    source_size: str | None = None, source_class: str | None = None,
                    job_spec: JobSpec | None = None, job_uid: str | None = None) -> dict:
    """A VolumeSnapshot of PVC `volume`; labels and annotations say where it came from (`job_spec`:
    the job whose results it holds, kept as its job object keeps it, for the lineage once the job is gone;
    `job_uid`: that job object's metadata.uid, where known)."""
    labels = {**_origin_label(LABEL_VOLUME, volume), **project_labels(project, config)}
    if job:
        labels[LABEL_JOB] = job
    annotations = {}
    if source_size:
        annotations[ANN_SOURCE_SIZE] = source_size
    if source_class:
        annotations[ANN_SOURCE_CLASS] = source_class
    if job_spec is not None:
        annotations[ANN_SPEC] = json.dumps(job_spec.to_dict(), sort_keys=True)
    if job and job_uid:
        annotations[ANN_JOB_UID] = job_uid
    return {"apiVersion": VOLUME_SNAPSHOT.api_version, "kind": VOLUME_SNAPSHOT.kind,
            "metadata": metadata(name, config.namespace_of(project), labels, annotations),
            "spec": {"volumeSnapshotClassName": config.snapshot_class,
                     "source": {"persistentVolumeClaimName": volume}}}


def render_snapshot_class(config: KubernetesConfig) -> dict:
    """The VolumeSnapshotClass every snapshot names (an admin creates it once per cluster)."""
    return {"apiVersion": VOLUME_SNAPSHOT_CLASS.api_version, "kind": VOLUME_SNAPSHOT_CLASS.kind,
            "metadata": metadata(config.snapshot_class, None, {"app.kubernetes.io/managed-by": "dtrain"}),
            "driver": config.snapshot_driver, "deletionPolicy": config.snapshot_deletion_policy}


def render_restore(snapshot: str, to: str, *, project: str, size: str, storage_class: str | None,
                   config: KubernetesConfig) -> dict:
    """A new PVC `to` provisioned from VolumeSnapshot `snapshot` (dataSource)."""
    labels = {**_origin_label(LABEL_SOURCE_SNAPSHOT, snapshot), **project_labels(project, config)}
    source = {"apiGroup": VOLUME_SNAPSHOT.group, "kind": VOLUME_SNAPSHOT.kind, "name": snapshot}
    return render_pvc(to, config.namespace_of(project), size=size, storage_class=storage_class, config=config,
                      labels=labels, data_source=source)


def render_success_snapshot(spec: JobSpec, config: KubernetesConfig, source: dict | None = None,
                            job_uid: str | None = None, name: str | None = None) -> dict:
    """The snapshot `--snapshot-on-success` takes of spec.snapshot_volume (`name`: success_snapshot_name's
    for this run, `<job>-success` if not given). Its source's size and class are recorded (as
    `snapshot create` does) so that a restore knows them before the snapshot is ready: from the job's
    own new volume, else from `source`, the existing PVC as read."""
    volume, name = spec.snapshot_volume, name or success_snapshot_name(spec.name)
    size = storage_class = None
    if source is not None:
        pvc = source.get("spec") or {}
        size = ((pvc.get("resources") or {}).get("requests") or {}).get("storage")
        storage_class = pvc.get("storageClassName")
    for new, v in spec.new_volumes():
        if new == volume:
            size, storage_class = v.size, v.storage_class
    return render_snapshot(name, volume, project=spec.project, config=config,
                           job=spec.name, source_size=size, source_class=storage_class, job_spec=spec,
                           job_uid=job_uid)


def render_snapshot_rbac(namespace: str, project: str, config: KubernetesConfig) -> list[dict]:
    """ServiceAccount, Role and RoleBinding of the snapshot watcher (one set per namespace)."""
    labels = project_labels(project, config)
    rules = [
        # get: the job's conditions; patch: the annotation naming the snapshot taken (_RECORD)
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "patch"]},
        {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs", "mpijobs"], "verbs": ["get", "patch"]},
        {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["get", "patch"]},
        {"apiGroups": [VOLUME_SNAPSHOT.group], "resources": [VOLUME_SNAPSHOT.plural], "verbs": ["get", "create"]},
    ]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(SNAPSHOTTER_ACCOUNT, namespace, labels)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": metadata(SNAPSHOTTER_ACCOUNT, namespace, labels), "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": metadata(SNAPSHOTTER_ACCOUNT, namespace, labels),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SNAPSHOTTER_ACCOUNT},
         "subjects": [{"kind": "ServiceAccount", "name": SNAPSHOTTER_ACCOUNT, "namespace": namespace}]},
    ]


def binding_lacks(found: dict, want: dict) -> tuple[str, str] | None:
    """What a RoleBinding as read lacks of `want`, the watcher's (its Role bound to its ServiceAccount),
    in words, and the kubectl command that makes it bind them (pure); None where it binds them."""
    meta, ref, account = want["metadata"], want["roleRef"], want["subjects"][0]
    name, namespace = meta["name"], meta["namespace"]
    has = found.get("subjects") or []
    if not any(s.get("kind") == account["kind"] and s.get("name") == account["name"]
               and (s.get("namespace") or namespace) == account["namespace"] for s in has):
        lacks = f"does not bind ServiceAccount {account['name']}"
        ops = [{"op": "add", "path": "/subjects/-", "value": account}] if has else \
            [{"op": "add", "path": "/subjects", "value": [account]}]
        fix = f"kubectl patch rolebinding {name} -n {namespace} --type=json -p '{json.dumps(ops, separators=(',', ':'))}'"
    else:
        lacks, fix = "", ""
    got = found.get("roleRef") or {}
    if (got.get("kind"), got.get("name")) != (ref["kind"], ref["name"]):  # a roleRef cannot change: made anew
        lacks = f"binds {got.get('kind') or '?'} {got.get('name') or '?'}, not Role {ref['name']}"
        fix = (f"kubectl delete rolebinding {name} -n {namespace}, then kubectl create rolebinding {name} -n "
               f"{namespace} --role={ref['name']} --serviceaccount={namespace}:{account['name']}")
    return (lacks, fix) if lacks else None


def lacking_rules(have: list[dict], want: list[dict]) -> list[dict]:
    """The grants of `want` (its rules' verbs on each group's resources) that no rule of `have` makes, as
    rules of one group and resource each, with only the verbs lacking (pure). As RBAC reads a rule: '*'
    in apiGroups, resources or verbs stands for every one, and a rule naming resourceNames grants those
    objects only, not the kind."""
    def granted(group: str, resource: str, verb: str) -> bool:
        return any(not rule.get("resourceNames") and {group, "*"} & set(rule.get("apiGroups") or ())
                   and {resource, "*"} & set(rule.get("resources") or ()) and {verb, "*"} & set(rule.get("verbs") or ())
                   for rule in have)

    lacking: dict[tuple[str, str], list[str]] = {}
    for rule in want:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    if not granted(group, resource, verb) and verb not in lacking.get((group, resource), []):
                        lacking.setdefault((group, resource), []).append(verb)
    return [{"apiGroups": [group], "resources": [resource], "verbs": verbs}
            for (group, resource), verbs in lacking.items()]


_WATCH_SCRIPT = """set -u
while :; do
  if ! out=$(kubectl get @KIND@ @JOB@ -n @NS@ -o 'jsonpath=@PATH@' 2>&1); then
    echo "$out"
    case "$out" in *NotFound*|*"not found"*) echo "job @JOB@ is gone: no snapshot"; exit 0;; esac
  fi
  case " $out " in
    *" @OK@ "*) break;;
    *" Failed "*) echo "job @JOB@ failed: no snapshot"; exit 0;;
  esac
  sleep @POLL@
done
kubectl create -f - <<'EOF' || kubectl get volumesnapshot @SNAP@ -n @NS@ || exit 1
@MANIFEST@
EOF
"""

# After the snapshot is taken (by this watcher or the backend): its name recorded on the job, where
# the Role allows it; @TAKEN@ is the name, or "$name" where the script chose it (@SAID@: in a message).
# A refusal (a Role made before this record) is said, not failed: the snapshot is what matters, and
# the backend's next look records it.
_RECORD = """kubectl annotate --overwrite @KIND@ @JOB@ -n @NS@ @ANN@=@TAKEN@ || echo "snapshot @SAID@ taken \\
but not recorded on @KIND@ @JOB@: dtrain's next look at the job records it (for this watcher to record it, \\
grant Role @ACCOUNT@ patch on @KIND@ in namespace @NS@)"
"""

# The end of a watcher rendered before its job existed (a dry run's, applied by hand): the job's uid
# is read from its object, and the name chosen as success_snapshot_name does, here in the cluster.
_UNKNOWN_UID = "@JOB_UID@"
_WATCH_END_UNKNOWN_UID = """uid=$(kubectl get @KIND@ @JOB@ -n @NS@ -o 'jsonpath={.metadata.uid}')
# the snapshot: @SNAP@, or @SNAP@-<the first 8 characters of the job's uid> where an earlier run of @JOB@ left @SNAP@
name=@SNAP@
if [ -n "$uid" ] && other=$(kubectl get volumesnapshot @SNAP@ -n @NS@ \\
    -o 'jsonpath={.metadata.annotations.dtrain\\.io/job-uid}' 2>/dev/null) && [ "$other" != "$uid" ]; then
  name=@SNAP@-$(printf %s "$uid" | cut -c1-8)
fi
sed -e "s/@JOB_UID@/$uid/" -e "s/\\"name\\": \\"@SNAP@\\"/\\"name\\": \\"$name\\"/" <<'EOF' | kubectl create -f - \\
  || kubectl get volumesnapshot "$name" -n @NS@ || exit 1
@MANIFEST@
EOF
"""


def render_snapshot_watcher(spec: JobSpec, config: KubernetesConfig, resource: Resource,
                            source: dict | None = None, job_uid: str | None = None,
                            snapshot_name: str | None = None) -> dict:
    """A small Job that snapshots spec.snapshot_volume once the training job succeeds.

    The backend renders it again after creating the training job, with that job's uid (recorded on
    the snapshot) and the snapshot's name for this run (success_snapshot_name), and adds an
    ownerReference to the job, so deleting the job deletes its watcher (a dry-run rendering has none).
    """
    namespace = config.namespace_of(spec.project)
    snapshot = render_success_snapshot(spec, config, source, job_uid=job_uid or _UNKNOWN_UID, name=snapshot_name)
    words = {"@KIND@": resource.full_name, "@JOB@": spec.name, "@NS@": namespace, "@OK@": resource.success,
             "@PATH@": '{range .status.conditions[?(@.status=="True")]}{.type}{" "}{end}',
             "@POLL@": str(WATCH_POLL_SECONDS), "@SNAP@": snapshot["metadata"]["name"],
             "@ANN@": ANN_SUCCESS_SNAPSHOT, "@ACCOUNT@": SNAPSHOTTER_ACCOUNT,
             "@MANIFEST@": json.dumps(snapshot, indent=1)}
    script, taken = _WATCH_SCRIPT, "@SNAP@"
    if job_uid is None:
        script, taken = script[:script.index("kubectl create")] + _WATCH_END_UNKNOWN_UID, '"$name"'
    script += _RECORD.replace("@TAKEN@", taken).replace("@SAID@", taken.strip('"'))
    for word, value in words.items():
        script = script.replace(word, value)
    labels = job_labels(spec, config, ROLE_SNAPSHOTTER)
    container = {"name": "snapshot", "image": config.watcher_image,
                 "command": ["/bin/sh", "-c", *escape_dollars([script])],
                 "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}}
    job_spec: dict[str, Any] = {"backoffLimit": 3, "template": {"metadata": {"labels": labels}, "spec": {
        "serviceAccountName": SNAPSHOTTER_ACCOUNT, "restartPolicy": "OnFailure", "containers": [container]}}}
    if config.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = config.ttl_seconds_after_finished
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": metadata(watcher_name(spec.name), namespace, labels), "spec": job_spec}


def repaired_binding(found: dict, want: dict) -> dict:
    """The watcher's RoleBinding `found` put right (pure): `want`'s roleRef, `found`'s subjects with the
    watcher's account added, its labels and annotations kept with dtrain's labels; no server fields."""
    meta, subjects = found["metadata"], list(found.get("subjects") or [])
    if binding_lacks({**want, "subjects": subjects}, want) is not None:
        subjects.append(want["subjects"][0])
    kept = {k: meta[k] for k in ("annotations",) if meta.get(k)}
    return {"apiVersion": want["apiVersion"], "kind": want["kind"], "roleRef": want["roleRef"], "subjects": subjects,
            "metadata": {**want["metadata"], **kept,
                         "labels": {**(meta.get("labels") or {}), **(want["metadata"].get("labels") or {})}}}
