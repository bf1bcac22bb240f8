"""The runner's typed records (runner.py re-exports every name here): a pipeline's parameters and
description, a loaded pipeline with a shipped one's rules, a run's result, its interruption, and the
refusal of a shipped pipeline's backend parameter.
Their own module so that run_params.py and runner.py both take them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from dtrain.errors import SpecError


@dataclass(frozen=True, kw_only=True)
class Param:
    name: str
    type: str  # KFP's type name: String, Integer, Float, Boolean, ...
    default: Any = None  # None with required=True
    required: bool = False
    description: str = ""  # the pipeline docstring's Args line (KFP puts it in the IR for the run form)


@dataclass(frozen=True, kw_only=True)
class PipelineInfo:
    name: str  # the name `pipeline run` takes (or the @dsl.pipeline name of a --module)
    description: str
    params: tuple[Param, ...]


@dataclass(frozen=True, kw_only=True)
class Pipeline:
    info: PipelineInfo
    func: Any  # the kfp GraphComponent
    check: Callable[[dict], None] | None = None  # parameter rules of a shipped pipeline
    plan: Callable[[dict], Any] | None = None  # a shipped pipeline's steps.Plan: the names a run takes
    # a shipped pipeline's parameters with the names a run makes for itself filled in (hybrid's empty job_name),
    # so that the checks before the run and an interruption's message know them
    fill: Callable[[dict, Callable[[], str]], dict] | None = None
    # the parameter that names the dtrain backend a shipped pipeline's steps use (`dtrain --backend` sets it)
    backend_param: str | None = None


@dataclass(frozen=True, kw_only=True)
class TaskResult:
    name: str  # the task's name in the run
    outputs: dict[str, Any]  # its output parameters, and artifact metadata under the artifact's name


@dataclass(frozen=True, kw_only=True)
class RunResult:
    pipeline: str
    run_dir: Path  # KFP's local pipeline root for this run (each task's outputs)
    tasks: tuple[TaskResult, ...]  # the tasks that ran; a skipped branch has none

    def task(self, name: str) -> TaskResult | None:
        return next((t for t in self.tasks if t.name == name), None)


class BackendRefused(SpecError):
    """A shipped pipeline's backend parameter refused by its own rules (step_specs.check_runtime,
    check_volume_backend): `value` is the backend it named, so that a caller which set the parameter
    itself (from a saved default backend) can say where that value came from."""

    def __init__(self, message: str, *, value: str | None = None):
        super().__init__(message)
        self.value = value


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped `run` once its steps began; the message names the jobs that go on."""
