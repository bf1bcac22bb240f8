"""A job's environment (pure): `-e KEY=VALUE`, the variables dtrain owns (OWNED_ENV), and the Run:AI
seed's ENABLE_SNAPSHOT / PVC_NAME request."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Mapping

from dtrain.errors import SpecError, Worded
from dtrain.names import shown
from dtrain.spec.fields import _STORED, _keys, _python_text, _text


ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")  # as the workloads read them: empty is false
# The Run:AI seed's `-e ENABLE_SNAPSHOT=true -e PVC_NAME=VOL` is owned here, by the platform: it is
# the same request as --snapshot-on-success VOL, and `JobSpec.snapshot_volume` is the one place
# that reads it; backends act on snapshot_volume alone. Workloads may only record the variables.
SNAPSHOT_ENV, SNAPSHOT_VOLUME_ENV = "ENABLE_SNAPSHOT", "PVC_NAME"


def parse_env(items) -> dict[str, str]:
    """Parse repeated ``-e KEY=VALUE`` into a dict; the last value of a key wins."""
    env: dict[str, str] = {}
    # a string's characters would each be read as one -e; a number or a Path is no list (a TypeError in the loop)
    if isinstance(items, (str, bytes)) or (items is not None and not isinstance(items, Iterable)):
        raise SpecError(f"invalid -e list {shown(items)}: give a list of KEY=VALUE strings, e.g. ['BATCH_SIZE=33']")
    for item in items or ():
        key, sep, value = _text(item, "-e").partition("=")
        if not sep or not ENV_KEY_RE.match(key):
            raise SpecError(f"invalid -e {shown(item)}: use KEY=VALUE with KEY made of letters, digits "
                            f"and '_', not starting with a digit (e.g. -e BATCH_SIZE=33)")
        env[key] = value
    return env


# Variables dtrain sets in every process from the job's own fields: what it was granted (the local
# runtime enforces --memory and pins --cpu and --gpu from them: `-e DTRAIN_MEMORY=1Ei` lifted a 64Mi
# limit, `-e DTRAIN_RANK_DEVICES=0,1` handed a job without --gpu two GPUs the scheduler gave others;
# `-e CUDA_VISIBLE_DEVICES=1` was replaced by the rank's own GPUs locally, and kept in a pod),
# who it is, and the rank contract the launchers (torchrun, mpirun, the Kubeflow operators) set. A
# user's value would win on one backend and lose on another, so none is taken from env.
OWNED_ENV = {"DTRAIN_MEMORY": "--memory", "DTRAIN_CPU": "--cpu", "DTRAIN_RANK_CPUS": "--cpu",
             "DTRAIN_RANK_DEVICES": "--gpu", "CUDA_VISIBLE_DEVICES": "--gpu (each process sees its own GPUs)",
             "DTRAIN_ATTEMPT": "the restart count", "DTRAIN_JOB_NAME": "the job name",
             "DTRAIN_PROJECT": "the project (-p)",
             # the job folder's metrics.jsonl, which the dashboard and /metrics read: a user's value (as a Run:AI
             # or Kubeflow platform's own variables, not the workload's) was kept locally and the curves went
             # unseen; a run's own file is its MetricsWriter(PATH)
             "DTRAIN_METRICS_FILE": "the job's folder (its metrics.jsonl, the copy the dashboard reads; "
                                    "MetricsWriter(PATH) writes the run's own file where you choose)",
             **dict.fromkeys(
                 ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"),
                 "the launcher and --processes")}


def _bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _env(env) -> dict[str, str]:
    """The spec's env: NAME -> value, each NAME as `-e` takes it (so `{"A=B": "x"}` is refused,
    not set as A="B=x"), each value a string."""
    if not isinstance(env, Mapping):
        raise SpecError(f"invalid env {shown(env)}: must be a mapping of NAME: value, e.g. {{SEED: '1'}}")
    out = {}
    for key, value in dict(env).items():
        if not isinstance(key, str) or not (ENV_KEY_RE.match(key) or _STORED.get() and key):
            raise SpecError(f"invalid env name {shown(key)}: use letters, digits and '_', not starting with a "
                            f"digit (e.g. BATCH_SIZE), as -e BATCH_SIZE=33 takes it")
        if key in OWNED_ENV and not _STORED.get():
            raise SpecError(f"invalid env name {key}: every process gets it from {OWNED_ENV[key]}; "
                            f"drop it from -e / env:")
        if value is None:  # a Python caller's None: unset, or empty?
            raise Worded(lambda door, key=key: f"invalid env {key} None: must be a string (quote it in YAML)"
                         if door in ("cli", "http") else f"invalid env {key} None: must be a string, e.g. "
                         f"env={{{key!r}: ''}} for an empty value, or leave {key} out")
        out[key] = _python_text(value, f"env {_keys([key])}", lambda text, key=key: f"env={{{key!r}: {text}}}",
                                yaml=" (quote it in YAML)")
    return out
