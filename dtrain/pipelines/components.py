"""KFP v2 lightweight components: each one a thin call into dtrain.pipelines.steps.

KFP ships a component as its function's source alone, run by `python -m kfp.dsl.executor_main`
inside the component image (or, under `kfp.local.SubprocessRunner`, in this machine's Python),
so every body imports what it needs. The image must have dtrain installed with its `pipelines`
extra; KFP is not pip-installed at run time (install_kfp_package=False), so a step starts
without network access. The `backend` parameter names the dtrain backend a step talks to; the
state folder and backend settings come from $DTRAIN_HOME (config.yaml) as for the CLI.
"""


from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Metrics, Output

DEFAULT_IMAGE = "ghcr.io/dtrain/dtrain:0.1.0"  # an image with `pip install dtrain[pipelines]`; a parameter
_OPTS = {"base_image": DEFAULT_IMAGE, "install_kfp_package": False}
# The run a job-submitting step is part of, as KFP fills it in (a server or the local runner): its jobs carry it
RUN = {"run_name": dsl.PIPELINE_JOB_NAME_PLACEHOLDER, "run_id": dsl.PIPELINE_JOB_ID_PLACEHOLDER}


@dsl.component(**_OPTS)
def check_condition(training_runtime: str) -> str:
    """The reference's first step: the runtime the branches below compare against."""
    from dtrain.pipelines import steps

    return steps.check_runtime(training_runtime)


@dsl.component(**_OPTS)
def cifar10_job(training_runtime: str, job_name: str, processes: int, epochs: int, batch_size: int, lr: float,
                backend: str, data_volume: str, max_steps: int, job_image: str,
                data_uri: str = "", run_id: str = "") -> NamedTuple("Cifar10Job", [("spec", dict), ("model", str)]):
    """The reference's CIFAR10 DDP job as a dtrain JobSpec for the chosen runtime; an empty job_name is made
    of `run_id` (dsl.PIPELINE_JOB_ID_PLACEHOLDER), a new name per run."""
    from dtrain.pipelines import steps

    return steps.cifar10_spec(runtime=training_runtime, job_name=job_name, processes=processes, epochs=epochs,
                              batch_size=batch_size, lr=lr, backend=backend, data_volume=data_volume,
                              max_steps=max_steps, image=job_image, data_uri=data_uri, run_id=run_id)


@dsl.component(**_OPTS)
def train(backend: str, spec: dict, model: str = "", run_name: str = "", run_id: str = "",
          sagemaker_role_arn: str = "", sagemaker_bucket: str = "", sagemaker_region: str = "",
          sagemaker_instance_type: str = "") -> NamedTuple("TrainOutputs", [("job", str), ("status", str), ("model", str)]):
    """Submit `spec` to the dtrain backend `backend`, stream its logs here, wait; fail if the job fails.
    `run_name` and `run_id` (dsl.PIPELINE_JOB_NAME_PLACEHOLDER, dsl.PIPELINE_JOB_ID_PLACEHOLDER) label the job.
    The `sagemaker_*` inputs (empty: config.yaml's; the region then $AWS_REGION) configure the SageMaker backend."""
    from dtrain.pipelines import steps

    sagemaker = steps.sagemaker_settings(
        sagemaker_role_arn=sagemaker_role_arn, sagemaker_bucket=sagemaker_bucket, sagemaker_region=sagemaker_region,
        sagemaker_instance_type=sagemaker_instance_type)
    result = steps.train(spec, backend=backend, model=model, labels=steps.run_labels(run_name, run_id),
                         sagemaker=sagemaker)
    return result.job, result.status, result.model


@dsl.component(**_OPTS)
def prepare(backend: str, job_prefix: str, urls: str, sha256: str, storage_class: str, size: str,
            job_image: str, run_name: str = "",
            run_id: str = "") -> NamedTuple("PrepareOutputs", [("job", str), ("status", str), ("volume", str),
                                                               ("prefix", str)]):
    """The TuSimple data job: download, verify, extract, masks, lists, on a new volume. `prefix`: the run's
    job_prefix, made of `run_id` where empty (lanes-<id>, a new one per run), which the later steps name after."""
    from dtrain.pipelines import steps

    prefix = steps.lanes_prefix(job_prefix, run_id)
    spec, volume = steps.lanes_prepare_spec(job_name=f"{prefix}-data", urls=urls, sha256=sha256,
                                            storage_class=storage_class, size=size, image=job_image)
    result = steps.train(spec, backend=backend, model=volume, labels=steps.run_labels(run_name, run_id))
    return result.job, result.status, volume, prefix


@dsl.component(**_OPTS)
def snapshot(backend: str, volume: str, name: str, job: str) -> str:
    """Snapshot a volume under `name`, linked to `job`."""
    from dtrain.pipelines import steps

    return steps.snapshot(volume, name=name, job=job, backend=backend)


@dsl.component(**_OPTS)
def lanes_job(job_prefix: str, volume: str, recipe: str, processes: int, max_steps: int, batch_size: int,
              job_image: str) -> dict:
    """SCNN training on the prepared volume as a dtrain JobSpec, snapshot on success."""
    from dtrain.pipelines import steps

    return steps.lanes_train_spec(job_name=f"{job_prefix}-train", volume=volume, recipe=recipe, processes=processes,
                                  max_steps=max_steps, batch_size=batch_size, image=job_image)


@dsl.component(**_OPTS)
def evaluate(backend: str, job_prefix: str, volume: str, train_job: str, job_image: str,
             metrics: Output[Metrics], run_name: str = "", run_id: str = "") -> float:
    """Predict the test split, score it with the TuSimple metric; returns the accuracy."""
    import json

    from dtrain.pipelines import steps

    spec = steps.lanes_evaluate_spec(job_name=f"{job_prefix}-eval", volume=volume, train_job=train_job,
                                     image=job_image)
    result = steps.evaluate(spec, backend=backend, labels=steps.run_labels(run_name, run_id))
    for key in ("accuracy", "fp", "fn", "frames"):
        metrics.log_metric(key, result[key])
    with open(metrics.path, "w") as f:  # the artifact's content too, for readers without KFP's metadata
        json.dump(result, f)
    return float(result["accuracy"])


@dsl.component(**_OPTS)
def restore(backend: str, snapshot: str, to: str, default_to: str = "") -> str:
    """Restore `snapshot` into a new volume `to` (empty: `default_to`, a name the pipeline makes per run)."""
    from dtrain.pipelines import steps

    return steps.restore(snapshot, to=to or default_to, backend=backend)
