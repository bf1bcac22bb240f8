"""The payloads of notebooks: a notebook started (its fields checked as a job's) and where to open it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, create_model
from pydantic.fields import FieldInfo

from dtrain.server.wire.common import _In
from dtrain.server.wire.jobs import SpecIn


def _as_for_jobs(field: str, description: str | None = None) -> tuple[Any, FieldInfo]:
    """SpecIn's `field` (its type, bounds and default): a notebook takes it as a job does."""
    info = SpecIn.model_fields[field]
    return info.annotation, FieldInfo.merge_field_infos(info, description=description) if description else info


# `dtrain notebook NAME`: the fields its flags set, each checked as a job's (the route builds the spec
# with dtrain.spec.notebook_spec, as the CLI and Client.notebook do: one spec, its defaults there)
NotebookIn = create_model(
    "NotebookIn", __base__=_In,
    __doc__="A notebook, as `dtrain notebook start` takes it: JupyterLab as a job on the first volume.",
    name=_as_for_jobs("name", "notebook name: lower-case letters, digits, '-'"),
    volumes=_as_for_jobs("volumes", "--pvc values: VOLUME:MOUNT[:ro|:rw] or CLASS:SIZE:MOUNT[:rw]; the first is Jupyter's "
                                    "root folder (e.g. data:/home/jovyan); none: a folder of the notebook's "
                                    "own (local backend)"),
    gpu=_as_for_jobs("gpu", "whole GPUs"), cpu=_as_for_jobs("cpu", "CPU threads"),
    memory=_as_for_jobs("memory", "memory, e.g. 8Gi"),
    image=_as_for_jobs("image", "notebook image (Kubernetes), e.g. a Kubeflow notebook-servers image"),
    idle_timeout=_as_for_jobs("idle_timeout", "seconds without kernel or terminal activity (requests do not "
                                              "count) before the notebook is suspended, its GPUs freed (null: "
                                              "never; local backend)"),
    node_selector=_as_for_jobs("node_selector"), tolerations=_as_for_jobs("tolerations"),
    project=_as_for_jobs("project"),
    backend=(Literal["local", "kubernetes"] | None, Field(None, description="default: the project's configured one")))


class NotebookUrl(BaseModel):
    name: str
    url: str = Field(description="where to open it, with its token where it has one (`dtrain notebook open`)")
