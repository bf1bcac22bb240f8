"""Notebooks whose home is one shared volume (teammates on the team's volume): each keeps its own
JupyterLab layout and Jupyter runtime files; the rest of ~/ stays shared."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import Dtrain
from test_notebook_local import _opened, _request, _wait_serving

IMAGE = "kubeflownotebookswg/jupyter-pytorch-full:v1.9.2"


def test_a_local_notebook_keeps_its_layout_in_a_folder_of_its_own_on_its_home(tmp_path):
    """Both notebooks wrote ~/.jupyter/lab/workspaces/default-*.jupyterlab-workspace: the last saved won."""
    from dtrain.backends.local.launch import Mount, inherited_env, plan
    from dtrain.spec import notebook_spec

    def env(spec):
        return plan(spec, job_dir=tmp_path / "jobs" / spec.name, cwd="/home/jovyan", devices=[[]], master_port=1,
                    mounts=[Mount(source=tmp_path / "team", target="/home/jovyan")], notebook_token="t").env

    alice, bob = (env(notebook_spec(n, volumes=["team:/home/jovyan"])) for n in ("alice", "bob"))
    assert (alice["JUPYTERLAB_WORKSPACES_DIR"], bob["JUPYTERLAB_WORKSPACES_DIR"]) == (
        "/home/jovyan/.jupyter/lab/workspaces/alice", "/home/jovyan/.jupyter/lab/workspaces/bob")
    assert (alice["JUPYTER_RUNTIME_DIR"], bob["JUPYTER_RUNTIME_DIR"]) == (
        str(tmp_path / "jobs" / "alice" / "jupyter"), str(tmp_path / "jobs" / "bob" / "jupyter"))
    mine = env(notebook_spec("nb", volumes=["team:/home/jovyan"], env={"JUPYTERLAB_WORKSPACES_DIR": "/home/jovyan/w"}))
    assert mine["JUPYTERLAB_WORKSPACES_DIR"] == "/home/jovyan/w"  # -e as given
    # a notebook started from alice's terminal gets a folder of its own, not alice's
    assert "JUPYTERLAB_WORKSPACES_DIR" not in inherited_env(alice)


def test_a_kubeflow_notebook_on_a_volume_keeps_its_layout_and_runtime_files_apart():
    from dtrain.backends.kubernetes.config import KubernetesConfig
    from dtrain.backends.kubernetes.render import render_workload
    from dtrain.spec import notebook_spec

    def env(spec):
        (container,) = render_workload(spec, KubernetesConfig())["spec"]["template"]["spec"]["containers"]
        return {e["name"]: e["value"] for e in container["env"]}

    alice = env(notebook_spec("alice", volumes=["team:/home/jovyan"], image=IMAGE))
    assert (alice["HOME"], alice["JUPYTERLAB_WORKSPACES_DIR"], alice["JUPYTER_RUNTIME_DIR"]) == (
        "/home/jovyan", "/home/jovyan/.jupyter/lab/workspaces/alice", "/tmp/jupyter-runtime")
    alone = env(notebook_spec("solo", image=IMAGE))  # the image's own home, in its pod only: left as it is
    assert "JUPYTERLAB_WORKSPACES_DIR" not in alone and "JUPYTER_RUNTIME_DIR" not in alone
    mine = env(notebook_spec("nb", volumes=["team:/home/jovyan"], image=IMAGE, env={"JUPYTER_RUNTIME_DIR": "/r"}))
    assert mine["JUPYTER_RUNTIME_DIR"] == "/r"


@pytest.mark.slow
def test_two_notebooks_on_one_volume_keep_their_own_jupyterlab_layouts(dt: Dtrain):
    """Alice's layout was overwritten by Bob's (one ~/.jupyter/lab/workspaces on the team volume)."""
    pytest.importorskip("jupyterlab_server", reason="notebooks need JupyterLab: pip install 'dtrain[notebook]'")
    dt("volume", "create", "team")
    volume = Path(dt.json("volume", "describe", "team")["extra"]["path"])
    (volume / ".jupyter").mkdir()
    (volume / ".jupyter" / "shared.txt").write_text("team\n")  # ~/.jupyter itself stays the team's
    try:
        saved = {}
        for name in ("alice", "bob"):
            dt("notebook", name, "--pvc", "team:/home/jovyan")
            dt.wait_for(name, {"Running"})
            saved[name] = _opened(dt, name)
            _wait_serving(*saved[name], dt, name)
            status, _ = _request(f"{saved[name][0]}/lab/api/workspaces/lab", method="PUT", token=saved[name][1],
                                 body={"data": {"owner": name}, "metadata": {"id": "lab"}})
            assert status == 204
        for name, (base, token) in saved.items():
            status, workspace = _request(f"{base}/lab/api/workspaces/lab", token=token)
            assert (status, workspace["data"]) == (200, {"owner": name})
        assert sorted(p.name for p in (volume / ".jupyter" / "lab" / "workspaces").iterdir()) == ["alice", "bob"]
        assert (volume / ".jupyter" / "shared.txt").read_text() == "team\n"
    finally:
        for name in ("alice", "bob"):
            dt("delete", name, check=False)


# ---- a notebook's image on Kubernetes ----------------------------------------------------------


def test_a_kubeflow_notebook_without_an_image_runs_the_notebook_image_never_the_jobs_training_image():
    """A notebook without --image ran `config kubernetes --image`, a training image: its pod never served."""
    from dtrain.backends.kubernetes.config import KubernetesConfig
    from dtrain.backends.kubernetes.render import image_of
    from dtrain.errors import SpecError
    from dtrain.spec import JobSpec, notebook_spec

    training = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
    job, nb = JobSpec(name="j", command=("python", "t.py")), notebook_spec("nb")
    with pytest.raises(SpecError, match=f"dtrain config kubernetes --notebook-image {IMAGE}"):
        image_of(nb, KubernetesConfig(image=training))
    both = KubernetesConfig(image=training, notebook_image=IMAGE)
    assert (image_of(job, both), image_of(nb, both)) == (training, IMAGE)  # jobs keep theirs
    assert image_of(notebook_spec("nb", image="mine/lab:1"), both) == "mine/lab:1"  # --image wins
    with pytest.raises(SpecError, match="invalid Kubernetes notebook_image"):
        KubernetesConfig(notebook_image="Bad Image")


@pytest.mark.slow
def test_config_kubernetes_notebook_image_is_saved_beside_image_and_used_by_notebooks(dt: Dtrain, tmp_path):
    import yaml

    from test_audit15_nb import _no_cluster

    _no_cluster(dt, tmp_path)
    dt("config", "kubernetes", "--image", "pytorch/pytorch:2.5.1", "--notebook-image", IMAGE)
    assert yaml.safe_load((dt.home / "config.yaml").read_text())["kubernetes"] == {
        "image": "pytorch/pytorch:2.5.1", "notebook_image": IMAGE}
    out = dt("notebook", "nb", "--backend", "kubernetes", "--dry-run").stdout
    (notebook,) = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Notebook"]
    assert notebook["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE
    out = dt("submit", "t", "--backend", "kubernetes", "--dry-run", "--", "python", "t.py").stdout
    (job,) = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Job"]
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "pytorch/pytorch:2.5.1"
    dt("config", "kubernetes", "--unset", "notebook-image")
    refused = dt("notebook", "nb", "--backend", "kubernetes", "--dry-run", check=False)
    assert refused.returncode == 2 and "--notebook-image" in refused.stderr and len(refused.stderr.splitlines()) == 1


def test_a_local_notebook_given_the_configured_notebook_image_is_not_warned(tmp_path):
    """As a job given the configured `image` is not: it is the image it runs on Kubernetes."""
    from dtrain.client import Client
    from dtrain.spec import notebook_spec

    (tmp_path / "config.yaml").write_text(f"kubernetes: {{image: 'team/train:1', notebook_image: '{IMAGE}'}}\n")
    client = Client(home=tmp_path)
    assert client.submit_notices(notebook_spec("nb", image=IMAGE, backend="local")) == ()
    (notice,) = client.submit_notices(notebook_spec("nb", image="team/train:1", backend="local"))
    assert notice.code == "image-unused"
