"""`volume update --class` on Kubernetes: a JSON Patch of the PVC's volumeAttributesClassName,
validated against the Kubernetes OpenAPI (kubernetes-validate, strict) and sent by the official
client to the shipped fake API server."""

from __future__ import annotations

import kubernetes_validate
import pytest

from dtrain.backends.kubernetes import KubernetesConfig
from dtrain.backends.kubernetes.patches import apply_patch
from dtrain.backends.kubernetes.render_storage import render_volume, render_volume_class_patch
from dtrain.errors import NotFoundError, SpecError
from test_k8s_backend import NS, backend, cluster, make_backend  # noqa: F401 (fixtures)

FIELD_SINCE = "1.29"  # spec.volumeAttributesClassName: alpha 1.29, beta 1.31, GA 1.34


def test_patched_claim_validates_where_the_field_exists():
    pvc = render_volume("work", project="lanes", size="100Gi", storage_class="ontap-nas", config=KubernetesConfig())
    patch = render_volume_class_patch("premium")
    assert patch == [{"op": "add", "path": "/spec/volumeAttributesClassName", "value": "premium"}]
    patched = apply_patch(pvc, patch)
    assert patched["spec"]["volumeAttributesClassName"] == "premium"
    assert patched["spec"]["storageClassName"] == "ontap-nas"  # the StorageClass stays: no data moves
    for version in (FIELD_SINCE, "1.31", kubernetes_validate.latest_version()):
        kubernetes_validate.validate(patched, version, strict=True)
    with pytest.raises(kubernetes_validate.ValidationError):  # the check can fail: 1.28 has no such field
        kubernetes_validate.validate(patched, "1.28", strict=True)
    again = apply_patch(patched, render_volume_class_patch("standard"))  # 'add' also replaces
    assert again["spec"]["volumeAttributesClassName"] == "standard"


def test_update_patches_the_claim_through_the_client(backend, cluster):
    backend.create_volume("work", size="5Gi", storage_class="ontap-nas")
    vol = backend.update_volume("work", storage_class="premium")
    assert vol.extra["volume_attributes_class"] == "premium" and vol.storage_class == "ontap-nas"
    stored = cluster.get("", "persistentvolumeclaims", NS, "work")
    assert stored["spec"]["volumeAttributesClassName"] == "premium"
    assert ("PATCH", f"/api/v1/namespaces/{NS}/persistentvolumeclaims/work") in cluster.requests
    with pytest.raises(NotFoundError, match="'nope' not found"):
        backend.update_volume("nope", storage_class="premium")
    with pytest.raises(SpecError, match="invalid storage class"):
        backend.update_volume("work", storage_class="Premium Tier")


def test_dry_run_renders_the_patch_and_sends_nothing(backend, cluster, tmp_path):
    from dtrain.client import Client

    backend.create_volume("work", size="5Gi")
    client = Client(home=tmp_path, backend="kubernetes", backends={"kubernetes": backend})
    before = len(cluster.requests)
    assert client.render_volume_update("work", storage_class="premium") == render_volume_class_patch("premium")
    assert cluster.requests[before:] == []  # rendering is pure: no call to the cluster
    assert "volumeAttributesClassName" not in cluster.get("", "persistentvolumeclaims", NS, "work")["spec"]
