"""Day two with notebooks: scripting them (`--json`, `--dry-run`), what they hold (`notebook list`),
and the Kubeflow Notebook a Kubernetes one is."""

from __future__ import annotations

import pytest
import yaml

from conftest import Dtrain, assert_usage_error
from test_k8s_backend import cluster, make_backend  # noqa: F401 (fixtures)

pytest.importorskip("jupyter_server", reason="notebooks need jupyter-server: pip install 'dtrain[notebook]'")

IMAGE = "kubeflownotebookswg/jupyter-pytorch-full:v1.9.2"


def _no_cluster(dt: Dtrain, tmp_path) -> None:
    dt.env["KUBECONFIG"] = str(tmp_path / "no-kubeconfig")  # a dry run still renders; nothing is asked of a cluster
    dt.env.pop("KUBERNETES_SERVICE_HOST", None)


@pytest.mark.slow
def test_notebook_dry_run_prints_the_kubeflow_notebook_with_its_resources_and_starts_nothing(dt: Dtrain, tmp_path):
    """`dtrain notebook NAME --dry-run` was 'unrecognized arguments', where `dtrain submit` prints its YAML."""
    _no_cluster(dt, tmp_path)
    out = dt("notebook", "nb", "--pvc", "team:/home/jovyan", "--cpu", "0.5", "--memory", "2Gi",
             "--backend", "kubernetes", "-i", IMAGE, "--dry-run").stdout
    (notebook,) = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Notebook"]
    (container,) = notebook["spec"]["template"]["spec"]["containers"]
    assert (container["image"], container["resources"]["limits"], container["volumeMounts"][0]["mountPath"]) == (
        IMAGE, {"cpu": "500m", "memory": "2Gi"}, "/home/jovyan")
    local = yaml.safe_load(dt("notebook", "lab", "--cpu", "1", "--dry-run").stdout)  # the spec as it would be stored
    assert (local["name"], local["notebook"], local["cpu"], local["project"]) == ("lab", True, 1, "default")
    assert dt.json("list", "-A", "--show-deleted") == []  # neither was started nor recorded


@pytest.mark.slow
def test_a_kubernetes_notebook_without_an_image_is_told_a_notebook_server_image(dt: Dtrain, tmp_path):
    """The hint named pytorch/pytorch, a training image: a Notebook running it never serves Jupyter."""
    _no_cluster(dt, tmp_path)
    assert_usage_error(dt("notebook", "nb", "--backend", "kubernetes", check=False),
                       "needs a container image on Kubernetes", f"--image {IMAGE}")
    job = dt("submit", "train", "--backend", "kubernetes", "--dry-run", "--", "python", "t.py", check=False)
    assert_usage_error(job, "needs a container image on Kubernetes", "--image pytorch/pytorch:")


def test_json_goes_after_the_notebook_name(dt: Dtrain):
    assert_usage_error(dt("notebook", "--json", "nb", check=False), "put --json after the notebook's name")


@pytest.mark.slow
def test_notebook_start_json_is_the_record_and_list_shows_what_each_holds(dt: Dtrain):
    """`--json` was refused (scripts parsed the sentence); `notebook list` showed GPUs but not the
    --cpu and --memory a notebook holds."""
    dt("volume", "create", "team")
    try:
        started = dt.json("notebook", "alice", "--pvc", "team:/home/jovyan", "--cpu", "0.5", "--memory", "512Mi")
        assert (started["name"], started["status"], started["spec"]["cpu"], started["spec"]["memory"]) == (
            "alice", "Running", 0.5, "512Mi")
        dt("notebook", "bob", "--pvc", "team:/home/jovyan")  # a teammate's, on the same volume, unbounded
        header, *rows = dt("notebook", "list").stdout.splitlines()
        assert header.split() == ["NAME", "STATUS", "AGE", "PROJECT", "VOLUMES", "GPUs", "CPUs", "MEMORY"]
        assert [r.split()[:2] + r.split()[-4:] for r in rows] == [
            ["alice", "Running", "team:/home/jovyan", "0", "0.5", "512Mi"],
            ["bob", "Running", "team:/home/jovyan", "0", "-", "-"]]
    finally:
        for name in ("alice", "bob"):
            dt("delete", name, check=False)


@pytest.mark.parametrize("status, again", [
    ("Running", " (or open it: 'dtrain notebook open lab -p team')"),
    ("Suspended", " (or go on with it: 'dtrain resume lab -p team')"),
    ("Failed", "")])
def test_starting_a_notebook_that_exists_names_the_way_back_to_it(store, tmp_path, status, again):
    """`dtrain notebook lab` run again the next day said only 'a job named ... pick another name or
    delete it', where the notebook is there to open."""
    from dtrain.errors import ConflictError
    from dtrain.spec import notebook_spec

    store.insert_job(notebook_spec("lab", project="team"), cwd=str(tmp_path), node="vm")
    assert store.set_status("lab", "Running")
    if status != "Running":
        assert store.set_status("lab", status)
    cmd = lambda words, project: f"dtrain {words} -p {project}"  # noqa: E731 - the backend's, with -p
    with pytest.raises(ConflictError) as refused:
        store.check_free("lab", cmd)
    assert str(refused.value) == (f"a notebook named 'lab' already exists ({status}); pick another name or remove "
                                  f"it first with 'dtrain delete lab -p team'{again}")


def test_starting_a_kubeflow_notebook_that_exists_names_notebook_open(make_backend, cluster):
    """As locally: the Notebook of that name is there to open, not only to delete."""
    from dtrain.backends.kubernetes import KubernetesConfig
    from dtrain.errors import ConflictError
    from dtrain.spec import notebook_spec
    from test_k8s_backend import IMAGE

    backend = make_backend(KubernetesConfig(project="lanes", notebook_image=IMAGE))
    backend.submit(notebook_spec("nb", project="lanes", backend="kubernetes"))
    with pytest.raises(ConflictError, match=r"already exists in namespace dtrain-lanes \(Notebook\): .*, or open it "
                                            r"with 'dtrain notebook open nb"):
        backend.submit(notebook_spec("nb", project="lanes", backend="kubernetes"))
