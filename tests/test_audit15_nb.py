"""Day two with notebooks: scripting them (`--json`, `--dry-run`), what they hold (`notebook list`),
and the Kubeflow Notebook a Kubernetes one is."""

from __future__ import annotations

import pytest
import yaml

from conftest import Dtrain, assert_usage_error

pytest.importorskip("jupyter_server", reason="notebooks need jupyter-server: pip install 'dtrain[notebook]'")

IMAGE = "kubeflownotebookswg/jupyter-pytorch-full:v1.9.2"


def _no_cluster(dt: Dtrain, tmp_path) -> None:
    dt.env["KUBECONFIG"] = str(tmp_path / "no-kubeconfig")  # a dry run still renders; nothing is asked of a cluster
    dt.env.pop("KUBERNETES_SERVICE_HOST", None)


@pytest.mark.slow
def test_a_kubernetes_notebook_without_an_image_is_told_a_notebook_server_image(dt: Dtrain, tmp_path):
    """The hint named pytorch/pytorch, a training image: a Notebook running it never serves Jupyter."""
    _no_cluster(dt, tmp_path)
    assert_usage_error(dt("notebook", "nb", "--backend", "kubernetes", check=False),
                       "needs a container image on Kubernetes", f"--image {IMAGE}")
    job = dt("submit", "train", "--backend", "kubernetes", "--dry-run", "--", "python", "t.py", check=False)
    assert_usage_error(job, "needs a container image on Kubernetes", "--image pytorch/pytorch:")

