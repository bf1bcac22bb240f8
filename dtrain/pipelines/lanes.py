"""The lane-detection pipeline: the demo's walk-through as KFP steps.

    prepare (data job, new volume) -> snapshot '<prefix>-prepared' -> lanes_job -> train (snapshot on
    success) -> evaluate (TuSimple accuracy, FP, FN as a Metrics artifact)
    -> If accuracy >= threshold: restore the training snapshot into `candidate_volume`

An empty job_prefix (the default) is the run's own: lanes-<the run's id>, made by the prepare step (whose
`prefix` output the later steps name after), or by `dtrain pipeline run` before its checks. An empty
candidate_volume (the default) is <prefix>-candidate, so a run after one that kept its model names a new one.
"""

from typing import Callable

from kfp import dsl

from dtrain.errors import SpecError
from dtrain.names import MAX_NAME, NAME_RE, shown
from dtrain.pipelines import steps
from dtrain.pipelines.components import DEFAULT_IMAGE, RUN, evaluate, lanes_job, prepare, restore, snapshot, train
from dtrain.pipelines.hybrid import PLAN_RUN_ID, _step

NAME = "lane-detection"
BACKEND_PARAM = "backend"  # the dtrain backend its steps use (`dtrain --backend` sets it)


@dsl.pipeline(name=NAME, description="TuSimple data job, SCNN DDP training with a snapshot on success, "
                                     "evaluation, and the model kept as a candidate volume when accurate enough")
def lane_detection(urls: str, sha256: str = "", backend: str = "local", job_prefix: str = "",
                   recipe: str = "tiny", processes: int = 2, max_steps: int = 0, batch_size: int = 0,
                   threshold: float = 0.5, candidate_volume: str = "", storage_class: str = "local",
                   size: str = "10Gi", job_image: str = "", image: str = DEFAULT_IMAGE):
    """Lane detection from the TuSimple archives to a candidate volume (the parameters as a KFP run form shows them).

    Args:
        urls: the TuSimple archives, comma-separated URLs or paths (required).
        sha256: their sha256 digests in the same order, comma-separated (empty: not checked).
        backend: the dtrain backend every step uses: local or kubernetes.
        job_prefix: names the run's jobs, data volume and snapshot (PREFIX-data, PREFIX-train, ...); empty:
            lanes-<the run's id>, a new one per run; one given must be new.
        recipe: the training recipe: tiny, demo or paper.
        processes: DDP processes (ranks) of the training job.
        max_steps: stop training after this many steps (0: the recipe's).
        batch_size: images per step per process (0: the recipe's).
        threshold: the test accuracy (0 to 1) at or above which the model is kept as candidate_volume.
        candidate_volume: the volume the trained snapshot is restored into when accurate enough (empty:
            <prefix>-candidate, a new one per run); one given must be new.
        storage_class: the storage class of the new data volume.
        size: the data volume's size, e.g. 10Gi.
        job_image: the jobs' image on kubernetes (empty: the backend's configured image).
        image: the component image every step runs in on a KFP server.
    """
    data = _step(prepare(backend=backend, job_prefix=job_prefix, urls=urls, sha256=sha256,
                         storage_class=storage_class, size=size, job_image=job_image, **RUN), image)
    prefix = data.outputs["prefix"]  # job_prefix, or the run's own where empty
    frozen = _step(snapshot(backend=backend, volume=data.outputs["volume"], name=f"{prefix}-prepared",
                            job=data.outputs["job"]), image)
    spec = _step(lanes_job(job_prefix=prefix, volume=data.outputs["volume"], recipe=recipe, processes=processes,
                           max_steps=max_steps, batch_size=batch_size, job_image=job_image), image).after(frozen)
    trained = _step(train(backend=backend, spec=spec.output, **RUN), image)
    scored = _step(evaluate(backend=backend, job_prefix=prefix, volume=data.outputs["volume"],
                            train_job=trained.outputs["job"], job_image=job_image, **RUN), image)
    with dsl.If(scored.outputs["Output"] >= threshold, name="accurate-enough"):
        _step(restore(backend=backend, snapshot=trained.outputs["model"], to=candidate_volume,
                      default_to=f"{prefix}-candidate"), image)  # steps.lanes_candidate's name


def check(params: dict) -> None:
    """Refuse bad parameters before anything runs (the same rules the steps apply; the component
    image only here: on a KFP server no step runs before it is pulled)."""
    steps.check_image(params["image"], "image", required=True)
    steps.check_volume_backend(params["backend"])
    _check_prefix(params["job_prefix"])
    _jobs(params)
    steps.check_urls(params["urls"], here=params["backend"] == "local")  # a local data job reads paths here
    steps.check_threshold(params["threshold"])
    if params["candidate_volume"]:
        steps.check_name(params["candidate_volume"], "volume")


# What the pipeline names after job_prefix P: its three jobs, the data job's volume, the snapshot (and, with
# candidate_volume empty, P-candidate, shorter than pvc-P-data-0: no tighter bound on P).
_MADE = ("{p}-data", "{p}-train", "{p}-eval", "pvc-{p}-data-0", "{p}-prepared")


def _check_prefix(prefix: str) -> None:
    """job_prefix itself, with the room the names made from it leave: a refusal that names the
    parameter the user gave, not a job or volume name they never typed. Empty: the run's own."""
    if prefix == "":
        return
    most = MAX_NAME - max(len(made.format(p="")) for made in _MADE)
    if not isinstance(prefix, str) or len(prefix) > most or not NAME_RE.fullmatch(prefix):
        raise SpecError(f"invalid --param job_prefix={shown(prefix)}: use 1-{most} lower-case letters, digits or '-', "
                        f"starting and ending with a letter or digit (the pipeline names "
                        f"{', '.join(made.format(p='<prefix>') for made in _MADE)} after it)")


def fill(params: dict, new_id: Callable[[], str] = steps.new_run_id) -> dict:
    """An empty job_prefix as `dtrain pipeline run` makes it: lanes-<NEW_ID's id>, chosen before the run so that
    its checks and an interruption name what it makes (on a KFP server the prepare step makes it of the run's
    id); an empty candidate_volume then <prefix>-candidate, as the restore step names it."""
    prefix = steps.lanes_prefix(params["job_prefix"], new_id=new_id)
    candidate = steps.lanes_candidate(params["candidate_volume"], prefix)
    if (prefix, candidate) == (params["job_prefix"], params["candidate_volume"]):
        return params
    return {**params, "job_prefix": prefix, "candidate_volume": candidate}


def plan(params: dict) -> steps.Plan:
    """The three jobs, the data job's new volume, the named snapshot and the candidate volume (`dtrain pipeline
    run` fills an empty job_prefix first; else lanes-plan000000000000 stands in for the run's own, as in check)."""
    prefix = steps.lanes_prefix(params["job_prefix"], PLAN_RUN_ID)
    jobs, volume = _jobs(params)
    names = tuple(steps.Named("job", f"{prefix}-{step}", "job_prefix") for step in ("data", "train", "eval"))
    candidate = steps.lanes_candidate(params["candidate_volume"], prefix)
    return steps.Plan(backend=params["backend"], makes=(
        *names, steps.Named("volume", volume, "job_prefix"), steps.Named("snapshot", f"{prefix}-prepared", "job_prefix"),
        steps.Named("volume", candidate, "candidate_volume")), jobs=jobs)


def _jobs(params: dict) -> tuple[tuple[dict, ...], str]:
    """The JobSpec dicts the prepare, lanes-job and evaluate steps make, and the data job's new volume."""
    prefix, image = steps.lanes_prefix(params["job_prefix"], PLAN_RUN_ID), params["job_image"]
    data, volume = steps.lanes_prepare_spec(job_name=f"{prefix}-data", urls=params["urls"], sha256=params["sha256"],
                                            storage_class=params["storage_class"], size=params["size"], image=image)
    train = steps.lanes_train_spec(job_name=f"{prefix}-train", volume=volume, recipe=params["recipe"],
                                   processes=params["processes"], max_steps=params["max_steps"],
                                   batch_size=params["batch_size"], image=image)
    evaluate = steps.lanes_evaluate_spec(job_name=f"{prefix}-eval", volume=volume, train_job=f"{prefix}-train",
                                         image=image)
    return (data, train, evaluate), volume
