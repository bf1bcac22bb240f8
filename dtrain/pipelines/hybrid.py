"""The hybrid CIFAR10 pipeline (the reference): one DDP job, run where `training_runtime` says.

    check_condition(training_runtime) -> cifar10_job -> If local:      train(backend=local)
                                                        Elif kubernetes: train(backend=kubernetes)  a PyTorchJob
                                                        Elif sagemaker:  train(backend=sagemaker)   a training job

`backend` is the torch.distributed process-group backend (gloo on CPU, nccl on GPU), as in the
reference's hyperparameters; the dtrain backend is the branch's. `data_volume` holds the data on
the local and Kubernetes branches; `data_uri` (s3://...) is the SageMaker branch's `training` channel,
and the `sagemaker_*` parameters its backend settings (a step pod has no config.yaml).
"""

from typing import Callable

from kfp import dsl

from dtrain.pipelines import steps
from dtrain.pipelines.components import DEFAULT_IMAGE, RUN, check_condition, cifar10_job, train

NAME = "hybrid-cifar10"
BACKEND_PARAM = "training_runtime"  # the dtrain backend its steps use (`dtrain --backend` sets it)
# the run id the checks before a run stand in with (KFP makes the run's when it starts): as long as a server's
# run id is used of (steps.RUN_ID_HEX), so that the names made of it are as long as a run's own
PLAN_RUN_ID = "plan".ljust(steps.RUN_ID_HEX, "0")


def _step(task, image):
    """Every step runs in the component image and is never served from KFP's cache (it trains)."""
    return task.set_container_image(image).set_caching_options(False)


@dsl.pipeline(name=NAME, description="CIFAR10 DDP training on the local machine, Kubernetes (PyTorchJob) or "
                                     "SageMaker, picked by training_runtime")
def hybrid_cifar10(training_runtime: str = "local", processes: int = 2, epochs: int = 1, batch_size: int = 16,
                   lr: float = 0.001, backend: str = "gloo", data_volume: str = "cifar10", max_steps: int = 0,
                   job_name: str = "", job_image: str = "", data_uri: str = "",
                   sagemaker_role_arn: str = "", sagemaker_bucket: str = "", sagemaker_region: str = "",
                   sagemaker_instance_type: str = "", image: str = DEFAULT_IMAGE):
    """CIFAR10 DDP training where training_runtime says (the parameters as a KFP run form shows them).

    Args:
        training_runtime: where the job runs: local, kubernetes (a PyTorchJob) or sagemaker (a training job).
        processes: DDP processes (ranks) of the job.
        epochs: passes over the training set.
        batch_size: images per step per process (the global batch is processes x batch_size).
        lr: SGD learning rate.
        backend: the torch.distributed process-group backend, gloo or nccl (nccl: SageMaker GPU types only).
        data_volume: local/kubernetes: the volume holding the CIFAR10 batches, mounted at /mnt.
        max_steps: stop after this many steps (0: all epochs).
        job_name: the dtrain job's name (empty: cifar10-<the run's id>, a new one per run); a name given must be
            new (a job checkpoints and resumes under its name).
        job_image: the training image on kubernetes/sagemaker (empty: the backend's configured image).
        data_uri: sagemaker only, required there: s3://BUCKET/PREFIX holding the CIFAR10 batches.
        sagemaker_role_arn: sagemaker only: the execution role ARN (empty: config.yaml's).
        sagemaker_bucket: sagemaker only: the S3 bucket's name for code and model (empty: config.yaml's).
        sagemaker_region: sagemaker only: the AWS region (empty: config.yaml's, else $AWS_REGION).
        sagemaker_instance_type: sagemaker only: the instance type (empty: config.yaml's, else ml.m5.xlarge).
        image: the component image every step runs in on a KFP server.
    """
    runtime = _step(check_condition(training_runtime=training_runtime), image)
    job = _step(cifar10_job(training_runtime=runtime.output, job_name=job_name, processes=processes, epochs=epochs,
                            batch_size=batch_size, lr=lr, backend=backend, data_volume=data_volume,
                            max_steps=max_steps, job_image=job_image, data_uri=data_uri,
                            run_id=RUN["run_id"]), image)
    # a step pod has no config.yaml: the SageMaker branch gets its settings as inputs (empty: config.yaml's)
    sagemaker = {"sagemaker_role_arn": sagemaker_role_arn, "sagemaker_bucket": sagemaker_bucket,
                 "sagemaker_region": sagemaker_region, "sagemaker_instance_type": sagemaker_instance_type}
    for condition, name in ((dsl.If, "local"), (dsl.Elif, "kubernetes"), (dsl.Elif, "sagemaker")):
        with condition(runtime.output == name, name=f"runtime-{name}"):
            _step(train(backend=name, spec=job.outputs["spec"], model=job.outputs["model"], **RUN,
                        **(sagemaker if name == "sagemaker" else {})), image).set_display_name(f"train-{name}")


def check(params: dict) -> None:
    """Refuse bad parameters before anything runs (the same rules the steps apply; the component
    image only here: on a KFP server no step runs before it is pulled)."""
    steps.check_image(params["image"], "image", required=True)
    _job(params)
    _sagemaker(params)
    if params["training_runtime"] == "sagemaker":
        steps.check_sagemaker_gpu(params["backend"], params["sagemaker_instance_type"])


def fill(params: dict, new_id: Callable[[], str] = steps.new_run_id) -> dict:
    """An empty job_name as `dtrain pipeline run` makes it: cifar10-<NEW_ID's id>, chosen before the run so that
    its checks and an interruption name the job (on a KFP server the step makes it of the run's id)."""
    return params if params["job_name"] else {**params, "job_name": steps.run_job_name("cifar10", new_id=new_id)}


def plan(params: dict) -> steps.Plan:
    """The job the chosen branch submits, and the volume it mounts (SageMaker reads data_uri instead)."""
    runtime = params["training_runtime"]
    mounts = () if runtime == "sagemaker" else (steps.Named("volume", params["data_volume"], "data_volume"),)
    # the job checkpoints into /mnt/models/<job_name>, and a new run must not resume an old one's; an empty
    # job_name is the run's own (made of its id in the step), not known here and new by construction
    named = bool(params["job_name"])
    fresh = () if runtime == "sagemaker" or not named else (
        steps.Fresh(params["data_volume"], f"models/{params['job_name']}", "job_name"),)
    sagemaker = _sagemaker(params) if runtime == "sagemaker" else None
    unread = [] if runtime == "sagemaker" else [k for k in ("data_uri", *steps.SM_PARAMS) if params[k]]
    notices = (f"--param {', '.join(unread)} {'is' if len(unread) == 1 else 'are'} read only with "
               f"training_runtime=sagemaker: this {runtime} run ignores {'it' if len(unread) == 1 else 'them'} "
               f"(its data is the volume data_volume={params['data_volume']!r})",) if unread else ()
    makes = (steps.Named("job", params["job_name"], "job_name"),) if named else ()
    return steps.Plan(backend=runtime, makes=makes, mounts=mounts,
                      jobs=(_job(params),), fresh=fresh, sagemaker=sagemaker, notices=notices)


def _sagemaker(params: dict) -> dict:
    """The SageMaker settings given as parameters, checked (the train step's `sagemaker_*` inputs)."""
    return steps.sagemaker_settings(**{k: params[k] for k in steps.SM_PARAMS})


def _job(params: dict) -> dict:
    """The JobSpec dict the cifar10-job step makes of these parameters."""
    spec, _model = steps.cifar10_spec(
        runtime=params["training_runtime"], job_name=params["job_name"], processes=params["processes"],
        epochs=params["epochs"], batch_size=params["batch_size"], lr=params["lr"], backend=params["backend"],
        data_volume=params["data_volume"], max_steps=params["max_steps"], image=params["job_image"],
        data_uri=params["data_uri"], run_id=PLAN_RUN_ID)
    return spec
