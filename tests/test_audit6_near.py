"""A name that does not exist names the near one (did you mean 'train-1'?) on every backend: the
base verbs add it from the names the backend lists cheaply (audit 6, near names)."""

from __future__ import annotations

import pytest

from dtrain.backends.base import Backend
from dtrain.errors import NotFoundError
from dtrain.names import near_name, with_near

from test_k8s_backend import NS, cluster, make_backend, spec  # noqa: F401 (fixtures)


def test_the_helper_picks_the_near_name_of_the_first_group_that_has_one():
    assert near_name("train1", ["train-1", "eval"]) == "train-1"
    assert near_name("train1", ["eval"], ["train-1"]) == "train-1"  # a Deleted job, when no live one is near
    assert near_name("train1", ["train-2"], ["train-1"]) == "train-2"
    assert near_name("zzzzzz", ["train-1"]) is None and near_name("", ["a"]) is None
    assert near_name("x" * 300, ["x" * 300 + "y"]) is None  # no name is that long
    assert with_near("no job named 's'; see 'dtrain list jobs'", "s", "s1") == \
        "no job named 's' (did you mean 's1'?); see 'dtrain list jobs'"
    assert with_near("job 'other' has no previous attempt", "s", "s1") == "job 'other' has no previous attempt"


def test_no_backend_overrides_the_verbs_that_suggest():
    from dtrain.backends.kubernetes import KubernetesBackend
    from dtrain.backends.local.backend import LocalBackend
    from dtrain.backends.sagemaker.backend import SageMakerBackend
    for cls in (KubernetesBackend, LocalBackend, SageMakerBackend):
        for verb in ("get", "delete", "logs", "wait", "get_volume", "get_snapshot", "_named", "_volumes_named"):
            assert getattr(cls, verb) is getattr(Backend, verb), (cls, verb)


# ------------------------------------------------------------------------- local (the CLI)

def test_local_volumes_and_snapshots_name_the_near_one(dt):
    dt("volume", "create", "data", "--size", "1Mi")
    dt("snapshot", "create", "data", "--name", "data-s1")
    for args, line in ((("volume", "describe", "dat"), "no volume named 'dat' (did you mean 'data'?)"),
                       (("volume", "delete", "dat"), "no volume named 'dat' (did you mean 'data'?)"),
                       (("snapshot", "create", "dat"), "no volume named 'dat' (did you mean 'data'?)"),
                       (("snapshot", "describe", "data-s"), "no snapshot named 'data-s' (did you mean 'data-s1'?)"),
                       (("snapshot", "restore", "data-s", "--to", "copy"), "(did you mean 'data-s1'?)"),
                       (("snapshot", "delete", "data-s"), "(did you mean 'data-s1'?)")):
        proc = dt(*args, check=False)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1 and line in proc.stderr, (args, proc.stderr)
    far = dt("volume", "describe", "zzzzzz", check=False)
    assert far.returncode == 2 and "did you mean" not in far.stderr


# ------------------------------------------------------------------------- Kubernetes (the fake API server)

def test_kubernetes_names_the_near_job_volume_and_snapshot(make_backend, cluster):  # noqa: F811
    backend = make_backend()
    backend.submit(spec(name="train-1"))
    for verb in (backend.get, backend.delete, backend.wait, backend.suspend, lambda n: list(backend.logs(n))):
        with pytest.raises(NotFoundError) as err:
            verb("train1")
        assert str(err.value).startswith("job 'train1' (did you mean 'train-1'?) not found in namespace " + NS)
    with pytest.raises(NotFoundError) as err:
        backend.get("zzzzzz")
    assert "did you mean" not in str(err.value)
    backend.create_volume("data", size="1Gi")
    backend.create_snapshot("data", name="data-v1")
    with pytest.raises(NotFoundError, match=r"^volume 'dat' \(did you mean 'data'\?\) not found"):
        backend.get_volume("dat")
    with pytest.raises(NotFoundError, match=r"^volume 'dat' \(did you mean 'data'\?\)"):
        backend.create_snapshot("dat")
    with pytest.raises(NotFoundError, match=r"^snapshot 'data-v' \(did you mean 'data-v1'\?\) not found"):
        backend.get_snapshot("data-v")
    # the names come from one list per job kind: no pod is read for them
    cluster.requests.clear()
    with pytest.raises(NotFoundError):
        backend.get("train1")
    assert not any("/pods" in path for method, path in cluster.requests if method == "GET" and "train1" not in path)


# ------------------------------------------------------------------------- SageMaker (--local)

def test_sagemaker_names_the_near_local_job_and_remembered_aws_ones(tmp_path):
    from dtrain.backends.sagemaker.backend import SageMakerBackend
    from dtrain.backends.sagemaker.config import SageMakerConfig

    home = tmp_path / "home"
    be = SageMakerBackend(SageMakerConfig(), home=home)
    (be.local.sagemaker.job_dir("train-1")).mkdir(parents=True)
    (be.local.sagemaker.job_dir("train-1") / "state.json").write_text("{}")  # a --local job, as its folder holds it
    with pytest.raises(NotFoundError) as err:
        be.get("train1")
    assert str(err.value).startswith("SageMaker job 'train1' (did you mean 'train-1'?) not found among --local jobs")
    assert len(str(err.value).splitlines()) == 1
    be.facts.put("arn:aws:sagemaker:us-east-1:123456789012:training-job/lanes-big", 1.0, spec=None)  # an AWS job `list` or `describe` read before
    with pytest.raises(NotFoundError, match=r"'lanes-bi' \(did you mean 'lanes-big'\?\)"):
        SageMakerBackend(SageMakerConfig(), home=home).get("lanes-bi")  # remembered on disk, not asked of AWS
    with pytest.raises(NotFoundError) as err:
        be.get("zzzzzz")
    assert "did you mean" not in str(err.value)
