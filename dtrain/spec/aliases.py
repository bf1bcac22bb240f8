"""What another tool's user writes where a job file or JobSpec takes dtrain's fields: a Kubeflow, Run:AI
or SageMaker field name (FIELD_ALIASES, the field meant) and another tool's whole file (a Kubernetes
manifest, a SageMaker request), each named in job.py's refusals."""

from __future__ import annotations

from typing import Any, Mapping

from dtrain.names import shown


# What a Kubeflow, Run:AI or SageMaker user writes for a job field (a PyTorchJob's replicas, a
# SageMaker estimator's instance_count, a pod's args and workingDir): the field it is here.
FIELD_ALIASES = {"gpus": "gpu", "replicas": "processes", "workers": "processes", "nproc": "processes",
                 "nproc_per_node": "processes", "instance_count": "processes (or sagemaker.instance_count)",
                 "args": "command", "cmd": "command", "entrypoint": "command", "environment": "env",
                 "envs": "env", "pvcs": "volumes", "namespace": "project", "workdir": "working_dir",
                 "workingdir": "working_dir", "cpus": "cpu", "mem": "memory", "backoff_limit": "max_restarts",
                 "backofflimit": "max_restarts", "instance_type": "sagemaker.instance_type",
                 "nodeselector": "node_selector", "nodetype": "node_selector"}


def _other_tools(data: Mapping[str, Any]) -> str | None:
    """What a job file given to `submit -f` is when it is another tool's: a Kubernetes manifest (a Kubeflow
    PyTorchJob, kubectl's YAML) or a SageMaker CreateTrainingJob request; None for a job file."""
    if "apiVersion" in data and "kind" in data:
        return f"a Kubernetes manifest (kind: {shown(data['kind'])}) is no job file (kubectl apply -f takes it)"
    if "TrainingJobName" in data or "AlgorithmSpecification" in data:
        return "a SageMaker CreateTrainingJob request is no job file (its settings go in the sagemaker: field)"
    return None


def _did_you_mean(key, known) -> str:
    """' (did you mean 'gpu'?)' for a field name a user wrote for one of `known`, or ''."""
    import difflib

    if not isinstance(key, str):
        return ""
    folded = key.lower().replace("-", "_")
    near = FIELD_ALIASES.get(folded.replace("_", "")) or FIELD_ALIASES.get(folded)
    if near is None:
        near = next(iter(difflib.get_close_matches(folded, sorted(known), n=1)), None)
    return f" (did you mean '{near}'?)" if near else ""
