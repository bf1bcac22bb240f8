"""The backend interface holds for every backend: typed records, one type per field, verbs that
a backend lacks refused with one clear error, and the CLI printing what the records say."""

from __future__ import annotations

import os
import time
from dataclasses import fields

import pytest

from conftest import Dtrain
from dtrain.backends.base import Backend, FreedInfo, SnapshotInfo, VolumeInfo
from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig
from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer
from dtrain.backends.local.backend import LocalBackend
from dtrain.errors import NotSupportedError, SpecError
from dtrain.spec import JobSpec


@pytest.fixture
def kube():
    server = FakeKubeServer(FakeCluster()).start()
    client = server.api_client()
    yield KubernetesBackend(KubernetesConfig(project="lanes", image="img:1"), api_client=client), server.cluster
    client.close()
    server.close()


@pytest.fixture
def local(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(f"storage_classes: {{fast: {tmp_path / 'fast'}}}\n")  # a local class
    return LocalBackend(home)


def test_created_has_one_type_across_backends(local, kube):
    backend_k, cluster = kube
    before = time.time()
    for backend in (local, backend_k):
        vol = backend.create_volume("data", size="1Gi", storage_class="fast")
        snap = backend.create_snapshot("data", name="data-v1")
        restored = backend.restore_snapshot("data-v1", to="copy")
        records = [vol, snap, restored, backend.get_volume("data"), backend.get_snapshot("data-v1"),
                   *backend.list_volumes(), *backend.list_snapshots()]
        for r in records:
            assert isinstance(r, (VolumeInfo, SnapshotInfo)) and r.backend == backend.name
            # unix seconds, as JobInfo.created: whole seconds on Kubernetes (creationTimestamp)
            assert type(r.created) is float and before - 1 <= r.created <= time.time() + 1, (backend.name, r)
        assert vol.size_bytes == 2**30 and vol.storage_class == "fast"
        assert restored.origin_snapshot == "data-v1"


def test_records_carry_the_same_fields_whatever_the_backend(local, kube):
    backend_k, _ = kube
    names = {f.name for f in fields(VolumeInfo)}
    for backend in (local, backend_k):
        v = backend.create_volume("data")
        assert set(v.to_dict()) == names  # nothing backend-specific outside `extra`
    assert "path" in local.get_volume("data").extra and "namespace" in backend_k.get_volume("data").extra


def test_delete_snapshot_reports_what_it_freed(local, kube):
    backend_k, _ = kube
    vol = local.create_volume("data")
    (local.storage.volume_path("data") / "weights.bin").write_bytes(os.urandom(300_000))
    local.create_snapshot(vol.name, name="only")
    freed = local.delete_snapshot("only")
    assert freed == FreedInfo(snapshot="only", backend="local", bytes=300_000, pending=False,
                              extra={"objects": 1})
    backend_k.create_volume("data")
    backend_k.create_snapshot("data", name="k")
    freed = backend_k.delete_snapshot("k")
    assert isinstance(freed, FreedInfo) and freed.bytes is None  # the storage system frees it later


def test_the_cli_prints_the_freed_figure(dt: Dtrain):
    dt("volume", "create", "data")
    path = dt.json("volume", "describe", "data")["extra"]["path"]
    with open(os.path.join(path, "weights.bin"), "wb") as f:
        f.write(os.urandom(3 * 2**20))  # 3 MiB of content no other snapshot shares
    dt("snapshot", "create", "data", "--name", "v1")
    out = dt("snapshot", "delete", "v1").stdout
    assert out.strip() == "snapshot 'v1' deleted, 3Mi freed"


def test_verbs_a_backend_lacks_say_so(kube):
    backend_k, _ = kube
    with pytest.raises(NotSupportedError, match="kubernetes backend does not support 'snapshot verify'"):
        backend_k.verify_snapshot()
    with pytest.raises(NotSupportedError, match="'snapshot diff'"):
        backend_k.diff_snapshots("a", "b")

    class Minimal(Backend):  # only the required hooks, as a new backend starts
        name = "minimal"
    for hook in Backend.__abstractmethods__:
        setattr(Minimal, hook, lambda self, *a, **kw: None)
    Minimal.__abstractmethods__ = frozenset()
    bare = Minimal()
    spec = JobSpec(name="j", command=("true",))
    for call in (lambda: bare.render(spec), lambda: bare.list_projects(), lambda: bare.create_project("p"),
                 lambda: bare.update_volume("v", storage_class="fast"),
                 lambda: bare.render_volume_update("v", storage_class="fast")):
        with pytest.raises(NotSupportedError, match="minimal backend does not support"):
            call()


def test_shared_checks_run_before_any_hook(local):
    for bad in (lambda: local.create_volume("Bad_Name"), lambda: local.create_volume("v", size="huge"),
                lambda: local.create_volume("v", storage_class="Not A Class"),
                lambda: local.restore_snapshot("s"), lambda: local.restore_snapshot("s", to="x", in_place=True),
                lambda: local.create_project("p", gpu_quota=-1), lambda: local.create_snapshot("v", name="A")):
        with pytest.raises(SpecError):
            bad()
    assert local.list_volumes() == []


@pytest.mark.parametrize("since", [float("nan"), float("inf"), -float("inf"), "10m", True])
def test_a_since_that_is_no_time_is_one_line_on_every_backend(local, kube, since):
    """The SDK's `logs(since=...)`: Kubernetes turned NaN or infinity into sinceSeconds (a traceback)."""
    backend, _cluster = kube
    for be, project in ((local, "default"), (backend, "lanes")):
        be.submit(JobSpec(name="j", command=("true",), project=project))
        with pytest.raises(SpecError, match=r"^invalid since .*: use a unix time in seconds"):
            list(be.logs("j", since=since))
        be.delete("j")


def test_no_backend_overrides_a_public_verb():
    public = {n for n in vars(Backend) if not n.startswith("_")} - {"name", "keeps_projects"}  # settings, no verbs
    assert {"create_volume", "delete_snapshot", "render", "list_projects", "verify_snapshot"} <= public
    from dtrain.backends.sagemaker.backend import SageMakerBackend
    for cls in (LocalBackend, KubernetesBackend, SageMakerBackend):
        mro = [c for c in cls.__mro__ if c not in (Backend, object)]
        assert not {n for c in mro for n in vars(c)} & public, cls
